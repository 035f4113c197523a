"""What runs an action. Each executor module declares its integration (if it is a built-in one) and
registers its executors by name; an Action row names the executor that runs it.

An executor gets an ActionCall (the caller, the action, input already checked against the input
schema, the caller's unsealed credentials for the integration) and returns the action's output, or
raises ActionFailed with the payload the caller sees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.caller import Caller
from core.errors import DomainError


@dataclass(frozen=True)
class ActionCall:
    caller: Caller
    action: Any  # integrations.models.Action
    input: dict[str, Any]
    credentials: dict[str, Any] = field(default_factory=dict)  # {} when the integration needs none


class ActionFailed(DomainError):
    """An action's own error. Its payload is the action's result, with isError set."""

    code = "action_failed"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 details: Any = None) -> None:
        extra: dict[str, Any] = {}
        if status is not None:
            extra["status"] = status
        if details is not None:
            extra["details"] = details
        super().__init__(message, code=code, extra=extra)

    def payload(self) -> dict[str, Any]:
        return {"error": self.message, "code": self.code, **self.extra}


@dataclass(frozen=True)
class ActionSpec:
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    executor: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IntegrationSpec:
    """A built-in integration as the code defines it; `manage.py sync_catalogue` writes it to the
    database (and the rows then are what curators see and search finds)."""

    id: str
    name: str
    description: str
    category: str
    agent_instructions: str
    auth_scheme: str
    actions: tuple[ActionSpec, ...]
    auth_config: dict[str, Any] = field(default_factory=dict)
    connection_required: bool = True
    first_party: bool = False


Executor = Callable[[ActionCall], Any]
EXECUTORS: dict[str, Executor] = {}


def executor(name: str) -> Callable[[Executor], Executor]:
    def register(fn: Executor) -> Executor:
        if name in EXECUTORS:
            raise ValueError(f"Executor {name} is registered twice.")
        EXECUTORS[name] = fn
        return fn

    return register
