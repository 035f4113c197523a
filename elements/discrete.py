"""DollhouseMCP's discrete mode: every MCP-AQL operation as a tool of its own, on a server of its own.

DollhouseMCP started with MCP_INTERFACE_MODE=discrete lists one tool per operation instead of the
five CRUDE tools; clients written for it (v1.x integrations) expect that. Atrium serves those tools
at /mcp/discrete and over `manage.py mcp_stdio --discrete`, beside the CRUDE tools at /mcp.

The tools are made from the route table (elements.mcpaql.ROUTES), so there is no list of them to
drift: each is named as its operation, takes the operation's params as its arguments, carries the
scope and hints of its endpoint's CRUDE tool, and runs exactly what that tool runs for
{"operation": name, "params": arguments}: the same gatekeeper, confirmations, audit and answer.

Only DollhouseMCP's operations are listed. Roscoe's and Aident's tools, auth_status and
permission_prompt stay on /mcp: a client configured for discrete DollhouseMCP sees the surface it was
written for, and the main server's tool names (some of which are also operation names) never clash.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Annotated, Any

from django.core.exceptions import ImproperlyConfigured
from mcp import types
from mcp_server.djangomcp import DjangoMCP
from pydantic import Field, WithJsonSchema

from core.errors import DomainError
from core.tools import Toolset, server_prepare, tool
from elements.mcp import OPERATION_OUTPUT, ElementTools, answer
from elements.mcpaql import ROUTES, Endpoint, Param, Route, run_one

discrete_mcp_server = DjangoMCP(
    name="Atrium (DollhouseMCP, discrete tools)",
    instructions="Atrium's DollhouseMCP portfolio (personas, skills, templates, agents, memories, ensembles, the "
    "community collection), one tool per operation. Every tool answers {success: true, data} or {success: false, "
    "error}. Where an answer or introspect names an mcp_aql_* tool with an operation, call the tool of that "
    "operation instead: when the gatekeeper asks for confirmation, ask the user, call confirm_operation with the "
    "operation (and element_type) it names, and retry.",
    stateless=True,
)
server_prepare(discrete_mcp_server, label="discrete")

_KINDS: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "object": {"type": "object", "additionalProperties": True},
    "array": {"type": "array", "items": {"type": "string"}},
}


def param_schema(param: Param) -> dict[str, Any]:
    """A route parameter's JSON Schema: its kind ("string|array" is either), description and default."""
    kinds = param.type.split("|")
    unknown = set(kinds) - set(_KINDS)
    if unknown:
        raise ImproperlyConfigured(f"Parameter {param.name} has the unknown kind(s) {', '.join(sorted(unknown))}.")
    branches = [dict(_KINDS[kind]) for kind in kinds]
    schema = branches[0] if len(branches) == 1 else {"anyOf": branches}
    schema["description"] = param.description
    if param.default is not None:
        schema["default"] = param.default
    return schema


def _argument(param: Param) -> inspect.Parameter:
    # Text is typed str, so the SDK never reads it as JSON ("null", "[1]" stay text); the other
    # kinds are typed Any with their documented schema, so a wrong type reaches elements.mcpaql and
    # is answered in MCP-AQL's own {success: false, error}, as on the CRUDE tools.
    kind = str if param.type == "string" else Any
    schema = param_schema(param)

    def keep_own_default(field: dict[str, Any]) -> None:
        # pydantic would declare the None that stands for "not sent" as the default.
        field.pop("default", None)
        field.update({"default": schema["default"]} if "default" in schema else {})

    annotation = Annotated[kind, WithJsonSchema(schema),
                           Field(description=param.description, json_schema_extra=keep_own_default)]
    default = inspect.Parameter.empty if param.required else None
    return inspect.Parameter(param.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def title_of(operation: str) -> str:
    """"list_elements" -> "List elements", "addEntry" -> "Add entry"."""
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", operation).lower().split("_")
    return " ".join(words).capitalize()


def description_of(route: Route) -> str:
    text = (f"{route.description} The operation {route.name} of {route.endpoint.tool}: answers "
            "{success: true, data} or {success: false, error}.")
    if route.returns:
        text += f" data: {route.returns}."
    return text


def _discrete_tool(route: Route) -> Callable[..., types.CallToolResult]:
    crude = getattr(ElementTools, route.endpoint.slug).atrium_tool
    hints = crude.annotations

    def call(self: DiscreteElementTools, **arguments: Any) -> types.CallToolResult:
        return self._run(route, arguments)

    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *map(_argument, route.params)])
    # Each operation's own truth: a read that writes is not read-only; the other reads are.
    read_only = route.endpoint is Endpoint.READ and not route.writes
    return tool(name=route.name, title=title_of(route.name), scope=crude.scope, read_only=read_only,
                destructive=hints.destructiveHint, idempotent=hints.idempotentHint, open_world=hints.openWorldHint,
                output_schema=OPERATION_OUTPUT, description=description_of(route))(call)


class DiscreteElementTools(Toolset):
    """One tool per MCP-AQL operation, registered on the discrete server (methods added below)."""

    mcp_server = discrete_mcp_server

    def _error_result(self, exc: DomainError) -> types.CallToolResult:
        return answer({"success": False, "error": exc.message})

    def _run(self, route: Route, arguments: dict[str, Any]) -> types.CallToolResult:
        # An argument left at its default (None) was not sent: the operation applies its own default.
        params = {key: value for key, value in arguments.items() if value is not None}
        payload: dict[str, Any] = {"operation": route.name, "params": params}
        if "element_type" in params:
            payload["element_type"] = params["element_type"]
        return answer(run_one(route.endpoint, payload, self.caller))


for _route in ROUTES.values():
    if hasattr(DiscreteElementTools, _route.name):
        raise ImproperlyConfigured(f"Operation {_route.name} clashes with an attribute of DiscreteElementTools.")
    setattr(DiscreteElementTools, _route.name, _discrete_tool(_route))
