"""DollhouseMCP's five MCP-AQL tools, each handing what the client sent to elements.mcpaql, and the
permission_prompt tool Claude Code calls with flat arguments (elements.cli_permissions)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp import types
from pydantic import Field, WithJsonSchema

import elements.operations  # noqa: F401  (fills the route table)
from core.errors import DomainError
from core.output_schemas import ANY, BOOLEAN, INTEGER, OBJECT, TEXT, array_of, enum, obj, one_of
from core.tools import Toolset, error_payload_result, success_result, tool
from elements import cli_permissions
from elements.cli_permissions import MAX_TOOL_NAME
from elements.mcpaql import ROUTES, Endpoint, run

# The arguments are typed Any for validation and keep their documented types in the schema: a
# wrong type then reaches elements.mcpaql, which answers it in MCP-AQL's own {success: false, error}
# instead of a generic argument error.
_TEXT = {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
Operation = Annotated[Any, WithJsonSchema(_TEXT), Field(description="The operation to run, e.g. list_elements. "
                                                                    "Omit it when sending a batch in operations.")]
ElementTypeArg = Annotated[Any, WithJsonSchema(_TEXT), Field(
    description="persona, skill, template, agent, memory or ensemble (singular or plural). May also go inside "
                "params.")]
ElementTypeLegacy = Annotated[Any, WithJsonSchema(_TEXT), Field(description="The same as element_type (older "
                                                                            "spelling).")]
Params = Annotated[Any, WithJsonSchema({"anyOf": [{"type": "object", "additionalProperties": True},
                                                  {"type": "null"}], "default": None}),
                   Field(description='The operation\'s parameters. introspect lists them: {"operation": '
                                     '"introspect", "params": {"query": "operations", "name": "<operation>"}}.')]
Operations = Annotated[Any, WithJsonSchema({"anyOf": [{"type": "array", "items": {"type": "object",
                                                                                    "additionalProperties": True}},
                                                      {"type": "null"}], "default": None}),
                       Field(description="A batch: up to 50 {operation, element_type?, params?}, run in order and "
                                         "each gated on its own.")]

# What an MCP-AQL tool answers when it is not an error: one operation's {success: true, data}, or a
# batch's results, each of which carries its own success (a failed one its error).
OPERATION_OUTPUT = obj({"success": {"const": True}, "data": ANY}, description="One operation's answer.")
BATCH_OUTPUT = obj({
    "success": {"const": True},
    # "operation" is what the item named, whatever it was.
    "results": array_of(obj({"index": INTEGER, "operation": ANY,
                             "result": obj({"success": BOOLEAN}, {"data": ANY, "error": TEXT})})),
    "summary": obj({"total": INTEGER, "succeeded": INTEGER, "failed": INTEGER}),
}, description="A batch's answer: each operation's outcome in order, and the counts.")
MCPAQL_OUTPUT = one_of(OPERATION_OUTPUT, BATCH_OUTPUT)
# Claude Code's decision, with what led to it.
PERMISSION_OUTPUT = obj(
    {"behavior": enum("allow", "deny"),
     "classification": obj({"riskLevel": TEXT, "reason": TEXT, "stage": TEXT})},
    {"updatedInput": OBJECT, "message": TEXT, "approvalContext": OBJECT, "approvalRequest": OBJECT,
     "policyContext": OBJECT},
)

_SEMANTICS = {
    Endpoint.CREATE: "Additive, non-destructive operations: create elements, add memory entries, import, record "
                     "agent execution steps.",
    Endpoint.READ: "Read operations: list, get, search, activate, introspect, validate, render, export. Atrium "
                   "extension: list_elements and query_elements answer pagination.nextCursor when another page "
                   "follows; send it back as params.cursor, with the same filters and sort, for that page, read "
                   "by keyset however deep.",
    Endpoint.UPDATE: "Modify existing elements.",
    Endpoint.DELETE: "Remove elements or clear memory entries (a backup revision is kept).",
    Endpoint.EXECUTE: "Runtime lifecycle: run agents (execute, continue, complete, abort, hand off) and confirm "
                      "operations the gatekeeper asked about.",
}


def describe(endpoint: Endpoint) -> str:
    """A tool's description, generated from the route table."""
    names = sorted(r.name for r in ROUTES.values() if r.endpoint is endpoint)
    examples = [e for r in ROUTES.values() if r.endpoint is endpoint for e in r.examples][:2]
    text = (f"{_SEMANTICS[endpoint]} Operations: {', '.join(names)}. Input: {{operation, element_type?, params?}} "
            "or a batch {operations: [...]}. Answers {success: true, data} or {success: false, error}; when the "
            "gatekeeper needs the user's confirmation the error says so and names confirm_operation.")
    writing = writing_operations(endpoint)
    if writing:
        text += (f" Not read-only: {', '.join(writing)} change this session's active elements, your settings or "
                 "sign-in, or record an approval request.")
    if examples:
        text += " Example: " + examples[0]
    return text


def writing_operations(endpoint: Endpoint) -> list[str]:
    """The operations of a READ endpoint that write (Route.writes), in name order."""
    return sorted(r.name for r in ROUTES.values() if r.endpoint is endpoint and r.writes)


def answer(result: dict[str, Any]) -> types.CallToolResult:
    if result.get("success"):
        return success_result(result)
    text = json.dumps(result, ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=True)


class ElementTools(Toolset):
    def _error_result(self, exc: DomainError) -> types.CallToolResult:
        return answer({"success": False, "error": exc.message})

    def _run(self, endpoint: Endpoint, operation: Any, element_type: Any, params: Any, operations: Any,
             element_type_legacy: Any) -> types.CallToolResult:
        payload: dict[str, Any] = {"operation": operation, "params": params}
        if element_type is not None or element_type_legacy is not None:
            payload["element_type"] = element_type if element_type is not None else element_type_legacy
        if operations is not None:
            payload = {"operations": operations}
        return answer(run(endpoint, payload, self.caller))

    @tool(name="mcp_aql_create", title="Create (MCP-AQL)", scope="elements:write", read_only=False,
          destructive=False, idempotent=False, open_world=False, description=describe(Endpoint.CREATE),
          output_schema=MCPAQL_OUTPUT)
    def create(self, operation: Operation = None, element_type: ElementTypeArg = None, params: Params = None,
               operations: Operations = None, elementType: ElementTypeLegacy = None) -> types.CallToolResult:
        return self._run(Endpoint.CREATE, operation, element_type, params, operations, elementType)

    # Hinted read-only only while none of its operations writes (DollhouseMCP puts activation, settings
    # and permission prompts among its reads).
    @tool(name="mcp_aql_read", title="Read (MCP-AQL)", scope="elements:read",
          read_only=not writing_operations(Endpoint.READ), destructive=False,
          idempotent=True, open_world=False, description=describe(Endpoint.READ),
          output_schema=MCPAQL_OUTPUT)
    def read(self, operation: Operation = None, element_type: ElementTypeArg = None, params: Params = None,
             operations: Operations = None, elementType: ElementTypeLegacy = None) -> types.CallToolResult:
        return self._run(Endpoint.READ, operation, element_type, params, operations, elementType)

    @tool(name="mcp_aql_update", title="Update (MCP-AQL)", scope="elements:write", read_only=False,
          destructive=True, idempotent=False, open_world=False, description=describe(Endpoint.UPDATE),
          output_schema=MCPAQL_OUTPUT)
    def update(self, operation: Operation = None, element_type: ElementTypeArg = None, params: Params = None,
               operations: Operations = None, elementType: ElementTypeLegacy = None) -> types.CallToolResult:
        return self._run(Endpoint.UPDATE, operation, element_type, params, operations, elementType)

    @tool(name="mcp_aql_delete", title="Delete (MCP-AQL)", scope="elements:delete", read_only=False,
          destructive=True, idempotent=True, open_world=False, description=describe(Endpoint.DELETE),
          output_schema=MCPAQL_OUTPUT)
    def delete(self, operation: Operation = None, element_type: ElementTypeArg = None, params: Params = None,
               operations: Operations = None, elementType: ElementTypeLegacy = None) -> types.CallToolResult:
        return self._run(Endpoint.DELETE, operation, element_type, params, operations, elementType)

    @tool(name="mcp_aql_execute", title="Execute (MCP-AQL)", scope="elements:execute", read_only=False,
          destructive=True, idempotent=False, open_world=False, description=describe(Endpoint.EXECUTE),
          output_schema=MCPAQL_OUTPUT)
    def execute(self, operation: Operation = None, element_type: ElementTypeArg = None, params: Params = None,
                operations: Operations = None, elementType: ElementTypeLegacy = None) -> types.CallToolResult:
        return self._run(Endpoint.EXECUTE, operation, element_type, params, operations, elementType)


ToolName = Annotated[str, Field(description="The tool Claude Code asks about, e.g. Bash, Edit, Read or "
                                            "mcp__server__tool.", min_length=1, max_length=MAX_TOOL_NAME)]
ToolInput = Annotated[dict[str, Any], Field(description="That tool's input, e.g. {\"command\": \"git status\"} "
                                                        "for Bash; returned as updatedInput when allowed.")]
ToolUseId = Annotated[str | None, Field(description="Claude Code's id of the tool call; accepted, not used in the "
                                                    "decision.", max_length=MAX_TOOL_NAME)]
AgentIdentity = Annotated[str | None, Field(description="The sub-agent making the request, kept with an approval "
                                                        "request.", max_length=MAX_TOOL_NAME)]


class CliPermissionTools(Toolset):
    def _error_result(self, exc: DomainError) -> types.CallToolResult:
        # Still a decision Claude Code can read: whatever went wrong, the tool call is denied.
        return error_payload_result({"behavior": "deny", "message": exc.message, "code": exc.code})

    @tool(name="permission_prompt", title="Permission prompt (Claude Code)", scope="elements:read",
          read_only=False, destructive=False, idempotent=False, open_world=False, output_schema=PERMISSION_OUTPUT)
    def permission_prompt(self, tool_name: ToolName, input: ToolInput, tool_use_id: ToolUseId = None,
                          agent_identity: AgentIdentity = None) -> types.CallToolResult:
        """Atrium's extension for Claude Code's --permission-prompt-tool (claude -p --permission-prompt-tool
        mcp__atrium__permission_prompt "..."): decides whether Claude Code may run one of its own tool calls,
        by static rules and the externalRestrictions of the elements active in this MCP session. The text is
        exactly the JSON Claude Code reads, {"behavior": "allow", "updatedInput": {...}} or {"behavior": "deny",
        "message": "..."}, plus classification {riskLevel, reason, stage}, approvalRequest (when the user must
        approve it first on their approvals page; retry after) and policyContext. The same evaluation as the
        MCP-AQL operation permission_prompt on mcp_aql_read."""
        return success_result(cli_permissions.permission_decide(caller=self.caller, tool_name=tool_name,
                                                                tool_input=input,
                                                                agent_identity=agent_identity or ""))


from elements import discrete  # noqa: E402,F401  (the same operations as discrete tools, on their own server)
