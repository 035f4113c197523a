"""How Atrium declares MCP tools, and the one place that lists and calls them.

Each app's mcp.py defines `Toolset` subclasses whose public methods are declared with `@tool`:
name, title, the scope the tool needs (or None), and all four behaviour hints, set on purpose.
`tool_list` and `tool_call` decide, for a caller, which tools exist and whether a call may run;
the protocol layer (core.protocol) calls them for every transport, so HTTP and stdio behave the
same. django-mcp-server discovers the toolsets and hands each one the SDK's tool manager, which
builds a tool's input schema and argument model from its signature; the tools it returns are kept
here, so nothing reads the SDK's or the package's private state.

Each MCP server has its own tools: the main one (django-mcp-server's global server, at /mcp) and
DollhouseMCP's discrete one (elements.discrete, at /mcp/discrete), which its toolset names as its
`mcp_server`. One name can so be a different tool on each, and neither lists the other's tools.
"""

from __future__ import annotations

import functools
import inspect
import json
import keyword
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.serializers.json import DjangoJSONEncoder
from jsonschema import Draft202012Validator
from mcp import types
from mcp.shared.exceptions import McpError
from mcp_server import MCPToolset
from mcp_server.djangomcp import DjangoMCP, global_mcp_server
from pydantic import ValidationError

from core.caller import Caller
from core.errors import DomainError, Forbidden, InvalidInput
from core.input_bounds import MAX_JSON_DEPTH, MAX_TEXT_CHARS, first_text_problem, json_depth

logger = logging.getLogger(__name__)
# What an operation name looks like; anything else the caller sent is not recorded as one (it could
# be any text: a lone surrogate or a NUL that the database refuses, or 100 KB of it).
OPERATION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    # The scope the tool needs, or several of which any one will do (a tool whose actions need
    # different scopes, like vault, then checks the action's own scope itself).
    scope: str | tuple[str, ...] | None
    annotations: types.ToolAnnotations
    # JSON Schema of the structuredContent of every answer that is not an error (core.output_schemas).
    output_schema: dict[str, Any]
    description: str | None = None


# Tool name -> spec, for every tool registered on the main server. A tool missing here is never
# listed and never called (deny by default).
TOOLS: dict[str, ToolSpec] = {}
# Tool name -> the Toolset class and method name that implement it.
TARGETS: dict[str, tuple[type[Toolset], str]] = {}
# Every server's TOOLS and TARGETS; the main server's are the two above.
_REGISTRIES: dict[DjangoMCP, tuple[dict[str, ToolSpec], dict[str, tuple[type[Toolset], str]]]] = {
    global_mcp_server: (TOOLS, TARGETS),
}


# Server -> the short name its tool calls are recorded under ("mcp", "discrete").
_LABELS: dict[DjangoMCP, str] = {}
# Server -> tool name -> the SDK's registered tool: its input schema and argument model.
_REGISTERED: dict[DjangoMCP, dict[str, Any]] = {}


def registered_tools(server: DjangoMCP) -> dict[str, Any]:
    """Tool name -> the SDK's registered tool, for every tool of `server`."""
    return _REGISTERED.get(server, {})


def registered_tool(server: DjangoMCP, name: str) -> Any:
    """The SDK's tool `name` of `server` (mcp.server.fastmcp.tools.Tool): parameters, fn_metadata."""
    return _REGISTERED[server][name]


def tools_of(server: DjangoMCP) -> dict[str, ToolSpec]:
    """Tool name -> spec for every tool registered on `server`."""
    return _REGISTRIES.setdefault(server, ({}, {}))[0]


def _targets_of(server: DjangoMCP) -> dict[str, tuple[type[Toolset], str]]:
    return _REGISTRIES.setdefault(server, ({}, {}))[1]


def scopes_of_tools() -> set[str]:
    """Every scope some tool of some server needs (any one of a tool's several counts)."""
    found: set[str] = set()
    for tools, _ in _REGISTRIES.values():
        for spec in tools.values():
            if spec.scope is not None:
                found.update((spec.scope,) if isinstance(spec.scope, str) else spec.scope)
    return found


def json_text(payload: Any) -> str:
    return json.dumps(payload, cls=DjangoJSONEncoder, ensure_ascii=False)


def success_result(payload: Any) -> types.CallToolResult:
    """JSON in a text block for every client, mirrored into structuredContent."""
    text = json_text(payload)
    structured = json.loads(text)
    if not isinstance(structured, dict):
        structured = {"result": structured}
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structuredContent=structured, isError=False)


def error_result(code: str, message: str) -> types.CallToolResult:
    """A business error the model can read and recover from. No structuredContent: strict
    clients would check it against the success shape."""
    return error_payload_result({"error": message, "code": code})


def error_payload_result(payload: dict[str, Any]) -> types.CallToolResult:
    """A business error in a product's own documented shape."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=json_text(payload))], isError=True)


def unwrap_docstring(doc: str) -> str:
    """A docstring as description text: hard-wrapped lines joined, paragraphs kept."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def tool(
    *,
    name: str,
    title: str,
    scope: str | tuple[str, ...] | None,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    open_world: bool,
    output_schema: dict[str, Any],
    description: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., types.CallToolResult]]:
    """Declare a Toolset method as an MCP tool. The docstring is its description unless
    `description` is given (for descriptions generated from a table). `output_schema` is what its
    answers that are not errors hold (tools/list shows it as outputSchema)."""
    if output_schema.get("type") != "object":
        raise ImproperlyConfigured(f"Tool {name}'s output schema must describe an object.")
    Draft202012Validator.check_schema(output_schema)
    spec = ToolSpec(
        name=name,
        title=title,
        scope=scope,
        annotations=types.ToolAnnotations(
            title=title, readOnlyHint=read_only, destructiveHint=destructive,
            idempotentHint=idempotent, openWorldHint=open_world,
        ),
        output_schema=output_schema,
        description=description,
    )

    def decorate(fn: Callable[..., Any]) -> Callable[..., types.CallToolResult]:
        if not (description or fn.__doc__ or "").strip():
            raise ImproperlyConfigured(f"Tool {name} needs a docstring: it is the tool's description.")

        @functools.wraps(fn)
        def run(self: Toolset, *args: Any, **kwargs: Any) -> types.CallToolResult:
            try:
                result = fn(self, *args, **kwargs)
            except McpError:
                raise  # a protocol-level answer (URL elicitation required): the transport sends it as such
            except DomainError as exc:
                return self._error_result(exc)
            except Exception:
                logger.exception("Tool %s failed", name)
                failure = DomainError(f"{name} failed on the server; the error was logged.", code="internal_error")
                return self._error_result(failure)
            return result if isinstance(result, types.CallToolResult) else success_result(result)

        # The SDK builds the input schema from this signature (through the bound method, so
        # without `self`). The return type says "the tool builds its own result"; the output
        # schema is the spec's.
        run.__signature__ = inspect.signature(fn, eval_str=True).replace(  # type: ignore[attr-defined]
            return_annotation=types.CallToolResult
        )
        del run.__wrapped__  # type: ignore[attr-defined]
        run.__name__ = name
        run.atrium_tool = spec  # type: ignore[attr-defined]
        return run

    return decorate


class Toolset(MCPToolset):
    """Base for Atrium's toolsets. `self.caller` is who is calling."""

    @property
    def caller(self) -> Caller:
        return self.request.caller

    def _error_result(self, exc: DomainError) -> types.CallToolResult:
        """How this toolset reports a domain error; products with their own envelope override it."""
        return error_result(exc.code, exc.message)

    def _refusal_result(self, tool_name: str, exc: DomainError) -> types.CallToolResult:
        """How this toolset reports a call refused before `tool_name` ran (scope, arguments); a
        toolset whose tools differ in their error shapes overrides it."""
        return self._error_result(exc)

    def _add_tools_to(self, tool_manager: Any) -> list[Any]:
        added = []
        cls = type(self)
        for attr in sorted(dir(cls)):
            member = inspect.getattr_static(cls, attr)
            if attr.startswith("_") or not inspect.isfunction(member):
                continue
            spec: ToolSpec | None = getattr(member, "atrium_tool", None)
            if spec is None:
                raise ImproperlyConfigured(f"{cls.__name__}.{attr} is public but not declared with @tool.")
            if spec.name in tools_of(self.mcp_server):
                raise ImproperlyConfigured(f"Tool name {spec.name} is declared twice.")
            method = getattr(self, attr)
            description = spec.description or unwrap_docstring(member.__doc__)
            # Registered for its schema and metadata; tool_call runs the method itself.
            registered = tool_manager.add_tool(
                method, name=spec.name, title=spec.title, description=description, annotations=spec.annotations,
            )
            if registered.context_kwarg is not None:
                raise ImproperlyConfigured(f"Tool {spec.name} takes an MCP Context; Atrium tools use self.caller.")
            registered.parameters["additionalProperties"] = False
            for schema in registered.parameters.get("properties", {}).values():
                _cap_text(schema)
            tools_of(self.mcp_server)[spec.name] = spec
            _targets_of(self.mcp_server)[spec.name] = (cls, attr)
            _REGISTERED.setdefault(self.mcp_server, {})[spec.name] = registered
            added.append(registered)
        return added


def _cap_text(schema: dict[str, Any]) -> None:
    """State the length limit of a text argument that declares none, as tool_call enforces it."""
    for branch in (schema, *schema.get("anyOf", ())):
        if branch.get("type") == "string" and "enum" not in branch and "const" not in branch:
            branch.setdefault("maxLength", MAX_TEXT_CHARS)


def _text_limit(schema: dict[str, Any]) -> int | None:
    for branch in (schema, *schema.get("anyOf", ())):
        if branch.get("type") == "string":
            return branch.get("maxLength")
    return None


def argument_problem(server: DjangoMCP, name: str, arguments: dict[str, Any]) -> InvalidInput | None:
    """The first argument whose text is too long, holds a NUL character or is not text at all
    (a lone surrogate), at any depth; None if every one is sound."""
    properties = registered_tool(server, name).parameters.get("properties", {})
    for argument, value in arguments.items():
        if json_depth(value) > MAX_JSON_DEPTH:
            return _too_deep(name)
        found = first_text_problem(value, argument, _text_limit(properties.get(argument, {})))
        if found is not None:
            field, problem = found
            return InvalidInput(f"Invalid arguments for {name}: {field} {problem}.", code="invalid_arguments")
    return None


def _too_deep(name: str) -> InvalidInput:
    return InvalidInput(f"Invalid arguments for {name}: JSON nested more than {MAX_JSON_DEPTH} levels deep.",
                        code="invalid_arguments")


def missing_scope(server: DjangoMCP, tool_name: str, caller: Caller | None) -> str | None:
    """The scope `caller` lacks to use `tool_name` of `server` (the first of several that would do),
    or None if it may use it."""
    spec = tools_of(server)[tool_name]
    if spec.scope is None:
        return None
    accepted = (spec.scope,) if isinstance(spec.scope, str) else spec.scope
    if caller is None or not caller.scopes.intersection(accepted):
        return accepted[0]
    return None


def visible_tools(server: DjangoMCP, caller: Caller | None) -> set[str]:
    return {name for name in tools_of(server) if missing_scope(server, name, caller) is None}


def call_refusal(server: DjangoMCP, name: str, arguments: dict[str, Any], caller: Caller | None) -> DomainError | None:
    """Why this registered tool may not run with these arguments for this caller; None if it may."""
    scope = missing_scope(server, name, caller)
    if scope is not None:
        held = ", ".join(sorted(caller.scopes)) if caller and caller.scopes else "none"
        return Forbidden(f"Tool '{name}' needs the scope '{scope}', which this token does not carry "
                         f"(it carries: {held}). Use a token that has '{scope}'.", code="insufficient_scope")
    accepted = registered_tool(server, name).parameters.get("properties", {})
    unknown = sorted(set(arguments) - set(accepted))
    if unknown:
        return InvalidInput(f"Unknown argument(s) for {name}: {', '.join(unknown)}. "
                            f"Accepted: {', '.join(sorted(accepted)) or 'none'}.", code="invalid_arguments")
    return None


@functools.cache
def _wire_tools(server: DjangoMCP) -> tuple[tuple[str, dict[str, Any]], ...]:
    """Every registered tool as tools/list shows it (name, wire form), ordered by name, as the
    2026-07-28 revision asks. Tools are fixed at start-up, so this is built once."""
    wire = []
    for name, spec in sorted(tools_of(server).items()):
        info = registered_tool(server, name)
        tool = types.Tool(name=name, title=spec.title, description=info.description, inputSchema=info.parameters,
                          outputSchema=spec.output_schema, annotations=spec.annotations)
        wire.append((name, tool.model_dump(by_alias=True, mode="json", exclude_none=True)))
    return tuple(wire)


def tool_list(server: DjangoMCP, caller: Caller | None) -> list[dict[str, Any]]:
    """The tools `caller` may see on `server`, as tools/list shows them."""
    allowed = visible_tools(server, caller)
    return [wire for name, wire in _wire_tools(server) if name in allowed]


def _invalid_arguments(name: str, exc: ValidationError) -> InvalidInput:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}" for error in exc.errors()
    )
    return InvalidInput(f"Invalid arguments for {name}: {problems}.", code="invalid_arguments")


@dataclass(frozen=True)
class ToolRequest:
    """What a toolset sees of the request it serves (`self.request`): who is calling."""

    caller: Caller


def tool_call(server: DjangoMCP, name: str, arguments: dict[str, Any], caller: Caller) -> types.CallToolResult:
    """Run one tool for `caller`, and record the call (how it ended, how long it took)."""
    started = time.perf_counter()
    result = _tool_call(server, name, arguments, ToolRequest(caller))
    if settings.ATRIUM_CHECK_TOOL_OUTPUT and not result.isError:
        result = _checked_output(server, name, result)
    # A call of a tool that does not exist is not a call of anything worth a row: its name is any text.
    if name in tools_of(server):
        from accounts.services import tool_call_record

        operation = arguments.get("operation") if isinstance(arguments, dict) else None
        named = isinstance(operation, str) and OPERATION_NAME.fullmatch(operation)
        tool_call_record(caller=caller, server=server_label(server), tool=name,
                         operation=operation if named else "",
                         error_code=_error_code(result) if result.isError else None,
                         duration_ms=(time.perf_counter() - started) * 1000)
    return result


@functools.cache
def output_validator(server: DjangoMCP, name: str) -> Draft202012Validator:
    return Draft202012Validator(tools_of(server)[name].output_schema)


def output_problem(server: DjangoMCP, name: str, structured: Any) -> str | None:
    """Where `structured` departs from the output schema of `server`'s tool `name`; None if it does not."""
    error = next(iter(output_validator(server, name).iter_errors(structured)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(the result)"
    return f"{where}: {error.message[:300]}"


def _checked_output(server: DjangoMCP, name: str, result: types.CallToolResult) -> types.CallToolResult:
    """With ATRIUM_CHECK_TOOL_OUTPUT (the test suite), an answer that breaks the tool's own output
    schema is a server error: a strict client would reject it."""
    problem = "no structuredContent" if result.structuredContent is None else \
        output_problem(server, name, result.structuredContent)
    if problem is None:
        return result
    logger.error("Tool %s answered outside its output schema: %s", name, problem)
    return error_result("output_schema_violation", f"{name} answered outside its output schema: {problem}")


def _error_code(result: types.CallToolResult) -> str:
    """The code of an error answer ({error, code} and its product variants), or "error" without one."""
    text = result.content[0].text if result.content and isinstance(result.content[0], types.TextContent) else ""
    try:
        payload = json.loads(text) if len(text) < 65_536 else None
    except ValueError:
        payload = None
    code = payload.get("code") if isinstance(payload, dict) else None
    return code if isinstance(code, str) and code else "error"


def _tool_call(server: DjangoMCP, name: str, arguments: dict[str, Any], request: ToolRequest) -> types.CallToolResult:
    """Refuse the call, or validate the arguments and call the tool."""
    if name not in tools_of(server):
        return error_result("unknown_tool", f"Unknown tool: {name}.")
    toolset, attr = _targets_of(server)[name]
    # Every refusal is answered in the tool's own product's error shape, like the tool's own errors.
    refusal = call_refusal(server, name, arguments, request.caller)
    if refusal is not None:
        return toolset(context=None, request=request)._refusal_result(name, refusal)
    metadata = registered_tool(server, name).fn_metadata
    # Checked for every tool here, after the SDK has parsed arguments sent as JSON text and before
    # any service (or PostgreSQL) sees them; answered in the tool's own product's error shape.
    try:
        given = metadata.pre_parse_json(arguments)
        problem = argument_problem(server, name, given)
    except RecursionError:  # an argument sent as JSON text, nested too deeply for json.loads
        given, problem = arguments, _too_deep(name)
    if problem is not None:
        return toolset(context=None, request=request)._refusal_result(name, problem)
    try:
        parsed = metadata.arg_model.model_validate(given)
    except ValidationError as exc:
        return toolset(context=None, request=request)._refusal_result(name, _invalid_arguments(name, exc))
    # An argument named like a Python keyword (`global`) is declared as `global_` with that alias.
    kwargs = {f"{key}_" if keyword.iskeyword(key) else key: value
              for key, value in parsed.model_dump_one_level().items()}
    return getattr(toolset(context=None, request=request), attr)(**kwargs)


def server_prepare(server: DjangoMCP, *, label: str) -> None:
    """Make `server` one of Atrium's; `label` names it in the record of its calls."""
    _LABELS[server] = label


def server_label(server: DjangoMCP) -> str:
    return _LABELS.get(server, "mcp")
