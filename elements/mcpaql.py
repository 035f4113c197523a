"""MCP-AQL: DollhouseMCP's five CRUDE endpoints over one route table.

ROUTES (filled by `operation` in elements.operations) is the single source for routing, the
gatekeeper's default levels, the tools' descriptions and introspection. `run` takes what a
client sent to one endpoint and answers exactly `{success: true, data}` or
`{success: false, error}` (a batch: `{success, results, summary}`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from django.db import transaction

from core.caller import Caller
from core.errors import DomainError, InvalidInput, RefusalWithRecord
from elements import selectors, services
from elements.gatekeeper import Level, decide
from elements.types import (
    MAX_BATCH_OPERATIONS,
    MAX_NAME_LENGTH,
    MAX_SEARCH_QUERY,
    ElementType,
    element_type_parse,
)


class Endpoint(Enum):
    CREATE = ("create", Level.CONFIRM_SESSION, "additive, non-destructive nature")
    READ = ("read", Level.AUTO_APPROVE, "read-only, safe nature")
    UPDATE = ("update", Level.CONFIRM_SINGLE_USE, "data modification capabilities")
    DELETE = ("delete", Level.CONFIRM_SINGLE_USE, "destructive potential")
    EXECUTE = ("execute", Level.CONFIRM_SINGLE_USE, "runtime execution lifecycle (stateful, non-idempotent)")

    def __init__(self, slug: str, default_level: Level, reason: str) -> None:
        self.slug = slug
        self.default_level = default_level
        self.reason = reason

    @property
    def tool(self) -> str:
        return f"mcp_aql_{self.slug}"


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    required: bool
    description: str
    default: Any = None


@dataclass(frozen=True)
class Route:
    name: str
    endpoint: Endpoint
    handler: Callable[[Call], Any]
    description: str
    params: tuple[Param, ...] = ()
    returns: str = ""
    examples: tuple[str, ...] = ()
    level: Level | None = None  # None: the endpoint's default
    can_be_elevated: bool = True  # False: an element's allow policy cannot waive its confirmation
    # False: element policies and confirmations do not apply (confirm_operation itself, and
    # deactivate_element, so a user can always lift the policy of an element they activated).
    gated: bool = True
    # For operations some of whose calls change who may do what (a gatekeeper policy, the user's
    # settings): given a call's params, why it needs an explicit single-use confirmation, or "".
    explicit: Callable[[dict[str, Any]], str] | None = None
    # A READ operation that changes something of the caller's (the session's active elements, their
    # settings, a pending approval, a sign-in it completes): its tool cannot be hinted read-only.
    writes: bool = False

    @property
    def default_level(self) -> Level:
        return self.level if self.level is not None else self.endpoint.default_level


ROUTES: dict[str, Route] = {}


@dataclass
class Call:
    """One operation as the handler sees it."""

    caller: Caller
    operation: str
    params: dict[str, Any]
    element_type: ElementType | None
    warnings: list[str] = field(default_factory=list)

    def type_required(self) -> ElementType:
        if self.element_type is None:
            raise InvalidInput(f"{self.operation} needs element_type (persona, skill, template, agent, memory or "
                               "ensemble).", code="element_type_required")
        return self.element_type

    def text(self, key: str, *, required: bool = False, aliases: tuple[str, ...] = ()) -> str | None:
        for name in (key, *aliases):
            value = self.params.get(name)
            if value is not None:
                if not isinstance(value, str):
                    raise InvalidInput(f"Parameter '{key}' must be a string.", code="invalid_parameter")
                return value
        if required:
            raise InvalidInput(f"Missing required parameter '{key}' for {self.operation}.",
                               code="missing_parameter")
        return None

    def name(self) -> str:
        name = self.text("element_name", required=True, aliases=("name",)).strip()
        if len(name) > MAX_NAME_LENGTH:
            # No element has a longer name; refusing it here keeps it out of the error text too.
            raise InvalidInput(f"Parameter 'element_name' is at most {MAX_NAME_LENGTH} characters (got "
                               f"{len(name):,}).", code="invalid_parameter")
        return name

    def filter_text(self, key: str, source: dict[str, Any], limit: int = MAX_SEARCH_QUERY) -> str:
        """A text filter (nameContains, author...): a string under `limit` characters."""
        value = source.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise InvalidInput(f"Parameter '{key}' must be a string.", code="invalid_parameter")
        if len(value) >= limit:
            raise InvalidInput(f"Parameter '{key}' must be under {limit} characters (got "
                               f"{len(value):,}).", code="invalid_parameter")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.params.get(key, default)
        if not isinstance(value, bool):
            raise InvalidInput(f"Parameter '{key}' must be true or false.", code="invalid_parameter")
        return value

    def number(self, key: str, default: int | None = None, *, low: int, high: int,
               container: dict[str, Any] | None = None) -> int | None:
        """A whole number from low to high; `default` when the key is absent. An explicit null is
        refused like any other non-number, so a client learns its paging was not applied."""
        source = container if container is not None else self.params
        if key not in source:
            return default
        value = source[key]
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or (isinstance(value, float) and not value.is_integer())):
            raise InvalidInput(f"Parameter '{key}' must be a whole number (got {_kind(value)}).",
                               code="invalid_parameter")
        if not low <= value <= high:
            raise InvalidInput(f"Parameter '{key}' must be between {low:,} and {high:,}.", code="invalid_parameter")
        return int(value)

    def obj(self, key: str, *, required: bool = False) -> dict[str, Any] | None:
        value = self.params.get(key)
        if value is None and required:
            raise InvalidInput(f"Missing required parameter '{key}' for {self.operation}.", code="missing_parameter")
        if value is not None and not isinstance(value, dict):
            raise InvalidInput(f"Parameter '{key}' must be an object.", code="invalid_parameter")
        return value

    def strings(self, key: str, source: dict[str, Any] | None = None) -> tuple[str, ...]:
        value = (source if source is not None else self.params).get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidInput(f"Parameter '{key}' must be a list of strings.", code="invalid_parameter")
        return tuple(value)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    return f"{value!r}" if isinstance(value, int | float) else f"a {type(value).__name__}"


def operation(
    name: str, endpoint: Endpoint, description: str, *, params: tuple[Param, ...] = (), returns: str = "",
    examples: tuple[str, ...] = (), level: Level | None = None, can_be_elevated: bool = True, gated: bool = True,
    explicit: Callable[[dict[str, Any]], str] | None = None, writes: bool = False,
) -> Callable[[Callable[[Call], Any]], Callable[[Call], Any]]:
    """Register a handler in the route table."""

    def register(handler: Callable[[Call], Any]) -> Callable[[Call], Any]:
        if name in ROUTES:
            raise RuntimeError(f"Operation {name} is registered twice.")
        ROUTES[name] = Route(name, endpoint, handler, description, params, returns, examples, level,
                             can_be_elevated, gated, explicit, writes)
        return handler

    return register


def failure(error: str, **extra: Any) -> dict[str, Any]:
    return {"success": False, "error": error, **extra}


def _element_type(payload: dict[str, Any], params: dict[str, Any]) -> ElementType | None:
    for source in (payload, params):
        for key in ("element_type", "elementType"):
            if source.get(key) not in (None, ""):
                return element_type_parse(source[key])
    return None


def _route_for(endpoint: Endpoint, name: object) -> Route:
    route = ROUTES.get(name) if isinstance(name, str) else None
    if route is None:
        raise InvalidInput(f'Unknown operation: "{name}". Use introspect (mcp_aql_read with '
                           '{"operation": "introspect", "params": {"query": "operations"}}) to list the operations '
                           "of each endpoint.", code="unknown_operation")
    if route.endpoint is not endpoint:
        raise InvalidInput(
            f'Security violation: Operation "{name}" must be called via {route.endpoint.tool} endpoint, not '
            f"{endpoint.tool}. This operation is classified as {route.endpoint.name} due to its "
            f"{route.endpoint.reason}.", code="wrong_endpoint")
    return route


def _gate(route: Route, call: Call) -> dict[str, Any] | None:
    """None if the call may run now; else the failure that says why not."""
    if not route.gated:
        return None
    type_name = call.element_type.value if call.element_type else None
    policies = selectors.session_policies(caller=call.caller)
    explicit = route.explicit(call.params) if route.explicit is not None else ""
    if route.default_level is Level.AUTO_APPROVE and not policies and not explicit:
        return None  # the common read: nothing to look up beyond the active policies
    confirmations = selectors.session_confirmations(caller=call.caller)
    decision = decide(
        operation=route.name, element_type=type_name, default=route.default_level,
        can_be_elevated=route.can_be_elevated, policies=policies, held=[held for _, held in confirmations],
        explicit=explicit,
        auto_confirm=selectors.user_settings(user=call.caller.user)["gatekeeper.auto_confirm"],
    )
    if decision.level is Level.DENY:
        return failure(decision.reason)
    if decision.allowed:
        if decision.satisfied_by is not None and decision.satisfied_by.level == "single_use":
            # Consumed inside the call's transaction: if the operation then fails, the rollback
            # gives the confirmation back. Losing the claim to a concurrent call means the
            # confirmation is spent: decide again on what the session still holds.
            spent = next(pk for pk, held in confirmations if held is decision.satisfied_by)
            if not services.confirmation_consume(confirmation_id=spent):
                return _gate(route, call)
        return None
    level = decision.level.confirmation
    services.confirmation_request(caller=call.caller, operation=route.name, element_type=type_name or "",
                                  level=level)
    confirmation = {"operation": route.name, "level": level}
    if type_name:
        confirmation["element_type"] = type_name
    how = ("once per session" if level == "session" else "each time")
    why = f" {decision.reason}" if decision.reason else ""
    return failure(
        f'Operation "{route.name}" requires confirmation {how}.{why} Ask the user, then call '
        f'mcp_aql_execute with {{"operation": "confirm_operation", "params": {{"operation": "{route.name}"'
        + (f', "element_type": "{type_name}"' if type_name else "") + "}} and retry.",
        confirmation=confirmation,
    )


def run_one(endpoint: Endpoint, payload: object, caller: Caller) -> dict[str, Any]:
    """One operation sent to `endpoint`, answered as `{success, data}` or `{success: false, error}`."""
    if not isinstance(payload, dict) or not isinstance(payload.get("operation"), str):
        return failure('Invalid input: expected OperationInput with "operation" and optional "params". '
                       'Example: {"operation": "list_elements", "element_type": "persona"}.')
    params = payload.get("params") if payload.get("params") is not None else {}
    if not isinstance(params, dict):
        return failure('Invalid input: "params" must be an object.')
    try:
        route = _route_for(endpoint, payload["operation"])
        call = Call(caller=caller, operation=route.name, params=params, element_type=_element_type(payload, params))
        # Writes run in one transaction with their gate, so a failed write gives back a consumed
        # confirmation; so do the read endpoint's writes (a settings change). Reads skip it: on
        # SQLite every transaction takes the write lock.
        writes = route.endpoint is not Endpoint.READ or bool(route.explicit and route.explicit(params))
        with transaction.atomic() if writes else nullcontext():
            refused = _gate(route, call)
            if refused is not None:
                return refused
            try:
                data = route.handler(call)
            except RefusalWithRecord as exc:
                return failure(exc.message)  # leaving the block normally commits what it recorded
    except DomainError as exc:
        return failure(exc.message)
    if call.warnings and isinstance(data, dict):
        data = {**data, "warnings": [*data.get("warnings", []), *call.warnings]}
    return {"success": True, "data": data}


def run(endpoint: Endpoint, payload: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """What one of the five tools answers: a single operation or a batch of them."""
    operations = payload.get("operations")
    if operations is None:
        return run_one(endpoint, payload, caller)
    if not isinstance(operations, list):
        return failure('Invalid input: "operations" must be a list of {operation, element_type?, params?}.')
    summary = {"total": len(operations), "succeeded": 0, "failed": 0}
    if len(operations) > MAX_BATCH_OPERATIONS:
        return failure(f"Batch size {len(operations)} exceeds maximum of {MAX_BATCH_OPERATIONS} operations",
                       results=[], summary=summary)
    results = []
    for index, item in enumerate(operations):
        outcome = run_one(endpoint, item, caller)
        summary["succeeded" if outcome["success"] else "failed"] += 1
        results.append({"index": index, "operation": item.get("operation") if isinstance(item, dict) else None,
                        "result": outcome})
    # The batch ran: each result carries its own success; the summary counts the failures.
    return {"success": True, "results": results, "summary": summary}
