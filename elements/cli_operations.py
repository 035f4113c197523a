"""The MCP-AQL operations of CLI permissions: permission_prompt and its approvals.

The decision itself is elements.cli_permissions.permission_decide, which the top-level
permission_prompt tool (elements.mcp) calls too; these handlers only read the params and shape
the answers. approve_cli_permission goes through elements.approvals.cli_approval_decide.
"""

from __future__ import annotations

from typing import Any

from core.errors import InvalidInput
from elements import approvals, cli_permissions, selectors
from elements.gatekeeper import Level, Policy
from elements.mcpaql import Call, Endpoint, Param, operation
from elements.models import CliApproval

TOOL_NAME = Param("tool_name", "string", True, "Tool requesting permission (e.g., Bash, Edit)")
STAGES = ("rate limit (per MCP session) > input validation > static blocked (deny; nothing overrides it) > element "
          "denyPatterns (deny; unlike the original, this can block a statically safe tool such as Read) > static "
          "dangerous (deny) > this session's existing decision (an approval allows; a denial denies once) > element "
          "confirmPatterns (deny, with a pending approval request) > element allowPatterns (allow) > static safe "
          "(allow) > allowPatterns defined but unmatched (deny) > approvalPolicy.requireApproval (deny, with a "
          "pending approval request) > default (allow)")


def _agent_identity(call: Call) -> str:
    identity = call.text("agent_identity") or ""
    if len(identity) > cli_permissions.MAX_TOOL_NAME:
        raise InvalidInput(f"Parameter 'agent_identity' is at most {cli_permissions.MAX_TOOL_NAME} characters.",
                           code="invalid_parameter")
    return identity


@operation("permission_prompt", Endpoint.READ,
           "Evaluate CLI-level permission prompts for non-interactive sessions (used with `--permission-prompt-tool`; "
           "Atrium also serves this as the top-level tool permission_prompt, which takes Claude Code's flat "
           "arguments). Answers {behavior: allow, updatedInput} or {behavior: deny, message}, with classification "
           "{riskLevel: safe|moderate|dangerous|blocked, reason, stage}, approvalRequest {requestId, toolName, "
           "riskLevel, reason, expiresAt, url, message} when a person must approve first (on their approvals page), "
           "and policyContext {evaluatedElements, matchedList, matchedPattern, matchedTarget, source}. The first "
           f"stage that decides wins: {STAGES}. Patterns of an element's gatekeeper.externalRestrictions target "
           "ToolName or Tool:<argument> globs (Bash:git status*, Edit:/etc/*, Read:*); a compound command (a && b, "
           "a; b, a | b) is as risky as its riskiest part, any part matching a deny or confirm pattern decides, and "
           "an allow pattern must match every part. Element operation policies never apply to this operation.",
           params=(TOOL_NAME, Param("input", "object", True, "Tool input parameters to evaluate"),
                   Param("agent_identity", "string", False, "Identity of the sub-agent making the request")),
           returns="{behavior, updatedInput?, message?, classification, approvalRequest?, approvalContext?, "
                   "policyContext?}",
           examples=('{"operation": "permission_prompt", "params": {"tool_name": "Bash", "input": {"command": '
                     '"git status"}}}',),
           level=Level.AUTO_APPROVE, can_be_elevated=False, gated=False, writes=True)
def permission_prompt(call: Call) -> dict[str, Any]:
    tool_name = call.text("tool_name", required=True)
    tool_input = call.obj("input", required=True)
    return cli_permissions.permission_decide(caller=call.caller, tool_name=tool_name, tool_input=tool_input,
                                             agent_identity=_agent_identity(call))


def _element_policy(policy: Policy) -> dict[str, Any]:
    external = policy.external
    entry: dict[str, Any] = {"type": policy.element_type, "name": policy.element_name,
                             "description": external.description or None, "allowPatterns": list(external.allow),
                             "confirmPatterns": list(external.confirm), "denyPatterns": list(external.deny)}
    if external.require_approval or external.ttl_seconds:
        entry["approvalPolicy"] = {"requireApproval": list(external.require_approval),
                                   "ttlSeconds": external.ttl_seconds}
    return entry


@operation("get_effective_cli_policies", Endpoint.READ,
           "Get effective CLI permission policies across all active elements: each element's externalRestrictions "
           "with its source, and the patterns combined. With tool_name, also the evaluation permission_prompt would "
           "make now; it counts against no rate limit, spends no approval and makes no approval request.", params=(
               Param("tool_name", "string", False, "Evaluate a specific tool"),
               Param("tool_input", "object", False, "Tool input to evaluate"),
           ), returns="{activeElementCount, elements, combinedAllowPatterns, combinedConfirmPatterns, "
                      "combinedDenyPatterns, hasAllowlist, evaluation?}")
def get_effective_cli_policies(call: Call) -> dict[str, Any]:
    tool_name = call.text("tool_name")
    tool_input = call.obj("tool_input") or {}
    restricting = sorted((p for p in selectors.session_policies(caller=call.caller) if p.external is not None),
                         key=lambda p: (p.element_type, p.element_name))
    elements = [_element_policy(p) for p in restricting]
    active = [e for e in selectors.active_elements(caller=call.caller) if e.element_type in selectors.POLICY_TYPES]
    data: dict[str, Any] = {
        "activeElementCount": len(active), "elements": elements,
        **{f"combined{key[0].upper()}{key[1:]}": [p for e in elements for p in e[key]]
           for key in ("allowPatterns", "confirmPatterns", "denyPatterns")},
        "hasAllowlist": any(e["allowPatterns"] for e in elements),
    }
    if tool_name:
        decision = cli_permissions.permission_preview(caller=call.caller, tool_name=tool_name, tool_input=tool_input)
        data["evaluation"] = {"tool_name": tool_name, "tool_input": tool_input or None,
                              "finalBehavior": decision["behavior"], "decision": decision}
    return data


def _pending(approval: CliApproval) -> dict[str, Any]:
    return {"requestId": approval.pk, "toolName": approval.tool_name, "input": approval.tool_input,
            "classification": approval.classification, "reason": approval.reason,
            "agentIdentity": approval.agent_identity or None, "createdAt": approval.created_at.isoformat(),
            "expiresAt": approval.expires_at.isoformat(), "url": approvals.approvals_url()}


@operation("get_pending_cli_approvals", Endpoint.READ,
           "Get pending CLI tool approval requests for this session, oldest first: requestId, toolName, input, "
           "classification, createdAt, expiresAt and the url of the approvals page where the user answers them.",
           returns="{pending: [{requestId, toolName, input, classification, reason, agentIdentity, createdAt, "
                   "expiresAt, url}], count}")
def get_pending_cli_approvals(call: Call) -> dict[str, Any]:
    pending = [_pending(a) for a in approvals.cli_approvals_pending(caller=call.caller).order_by("created_at", "pk")]
    return {"pending": pending, "count": len(pending)}


@operation("approve_cli_permission", Endpoint.EXECUTE,
           "Approve a pending CLI tool permission request. Used by bridges to relay human approval. scope single "
           "(default) lets the identical request through once; tool_session lets every later use of the tool "
           "through for the rest of the requesting MCP session (never another session). Atrium's rule beyond the "
           "reference: a session cannot approve its own request, since the model asking would be approving itself. "
           "The user approves it on their approvals page, or a bridge relays their approval from another MCP "
           "session of the same user.", params=(
               Param("request_id", "string", True, "Approval request ID from permission_prompt deny response "
                                                   "(format: cli-<UUID>)"),
               Param("scope", "string", False, "single (default) or tool_session", "single"),
           ), returns="{approved: true, requestId, toolName, scope, message}",
           examples=('{"operation": "approve_cli_permission", "params": {"request_id": "cli-…", "scope": '
                     '"tool_session"}}',),
           level=Level.AUTO_APPROVE, can_be_elevated=False, gated=False)
def approve_cli_permission(call: Call) -> dict[str, Any]:
    request_id = call.text("request_id", required=True).strip()
    if not request_id.startswith("cli-") or len(request_id) > CliApproval._meta.get_field("id").max_length:
        raise InvalidInput("request_id must be the cli-<UUID> id from a permission_prompt deny response.",
                           code="invalid_parameter")
    scope = call.text("scope") or CliApproval.Scope.SINGLE
    approval = approvals.cli_approval_decide(caller=call.caller, request_id=request_id, approve=True, scope=scope)
    message = (f"Approved for all uses of '{approval.tool_name}' for the rest of the requesting session."
               if approval.scope == CliApproval.Scope.TOOL_SESSION
               else f"Approved single use of '{approval.tool_name}'. The requesting session may retry the tool call "
                    "now.")
    return {"approved": True, "requestId": approval.pk, "toolName": approval.tool_name, "scope": approval.scope,
            "message": message}
