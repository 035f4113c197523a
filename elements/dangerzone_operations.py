"""The danger zone's MCP-AQL operations: verify_challenge, which takes back a code the user read on
their approvals page, and beetlejuice_beetlejuice_beetlejuice, which blocks an agent on purpose so
the whole path can be tried. No answer carries a code: it is on the owner's signed-in page alone."""

from __future__ import annotations

from typing import Any

from elements import dangerzone
from elements.gatekeeper import Level
from elements.mcpaql import Call, Endpoint, Param, operation
from elements.types import ElementType
from elements.validation import clean_name

BEETLEJUICE_AGENT = "beetlejuice-test-agent"


@operation("verify_challenge", Endpoint.CREATE, "Submit the verification code the user read on their Atrium "
           "approvals page, to unblock an agent stopped by the danger zone (or clear a step that asked for "
           f"verification). A challenge takes {dangerzone.CHALLENGE_WRONG_CODES} wrong codes before it is consumed, "
           f"and at most {dangerzone.OWNER_WRONG_CODES} wrong codes a minute are checked for one user.", params=(
    Param("challenge_id", "string", True, "UUID challenge ID from the danger zone message"),
    Param("code", "string", True, "Verification code displayed to the user (case, spaces and dashes do not matter)"),
), returns="{verified: true, unblockedAgent?, message}",
    examples=('{"operation": "verify_challenge", "params": {"challenge_id": "0b7c…", "code": "7KQ2MX"}}',),
    level=Level.AUTO_APPROVE, can_be_elevated=False, gated=False)
def verify_challenge(call: Call) -> dict[str, Any]:
    return dangerzone.challenge_verify(caller=call.caller, challenge_id=call.text("challenge_id", required=True),
                                       code=call.text("code", required=True))


@operation("beetlejuice_beetlejuice_beetlejuice", Endpoint.CREATE, "Safe-trigger the full danger zone verification "
           "pipeline for testing purposes: the agent is blocked (it need not exist) and a verification code is shown "
           "on the user's Atrium approvals page.", params=(
    Param("agent_name", "string", False, f"Agent to block (default: {BEETLEJUICE_AGENT})", BEETLEJUICE_AGENT),
), returns="{triggered: true, challenge_id, agent_name, message}", level=Level.AUTO_APPROVE)
def beetlejuice_beetlejuice_beetlejuice(call: Call) -> dict[str, Any]:
    name = clean_name(call.text("agent_name") or BEETLEJUICE_AGENT, element_type=ElementType.AGENT)
    challenge = dangerzone.agent_block(caller=call.caller, agent_name=name,
                                       reason="beetlejuice_beetlejuice_beetlejuice was called (a safe test trigger)")
    return {"triggered": True, "challenge_id": str(challenge.pk), "agent_name": name,
            "message": f"Agent '{name}' is now blocked. A verification code has been displayed on your Atrium "
                       f"approvals page: {dangerzone.challenge_url(challenge)}. Pass it to verify_challenge."}
