"""Approving what permission_prompt asked about: approve_cli_permission from another MCP session,
single approvals that let one identical request through, tool_session approvals that last for the
requesting session only, expiry, the rule that a session cannot approve itself, and races."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import elements.operations  # noqa: F401  (fills the route table)
from accounts.services import mcp_session_open
from core.caller import Caller
from elements import approvals, services
from elements.mcpaql import Endpoint, run
from elements.models import CliApproval
from elements.types import ElementType
from tests.conftest import in_threads

DEPLOY = {"command": "make deploy prod"}
GUARD = {"externalRestrictions": {"description": "Deploys need a person", "confirmPatterns": ["Bash:make deploy*"]}}


def guarded_session(member, portfolio):
    """An MCP session of `member` with a persona active whose policy asks before every deploy."""
    aql = portfolio(member)
    if not aql.call("mcp_aql_read", "get_element", "persona", element_name="guard")["success"]:
        aql.ok("mcp_aql_create", "create_element", "persona", element_name="guard", description="Guards.",
               instructions="You ARE careful.", gatekeeper=GUARD)
    aql.ok("mcp_aql_read", "activate_element", "persona", element_name="guard")
    return aql


def prompt(aql, tool_input=DEPLOY) -> dict[str, Any]:
    return aql.ok("mcp_aql_read", "permission_prompt", tool_name="Bash", input=tool_input)


def approve(aql, request_id: str, **params: Any) -> dict[str, Any]:
    return aql.call("mcp_aql_execute", "approve_cli_permission", request_id=request_id, **params)


@pytest.fixture
def requested(alice, portfolio):
    """Alice's guarded session, the pending request it made, and a second session of hers (a bridge)."""
    session = guarded_session(alice, portfolio)
    request_id = prompt(session)["approvalRequest"]["requestId"]
    return session, request_id, portfolio(alice)


@pytest.mark.django_db
def test_a_single_approval_lets_exactly_one_identical_request_through(requested):
    session, request_id, bridge = requested

    approved = approve(bridge, request_id)
    retried, again = prompt(session), prompt(session)

    assert approved == {"success": True, "data": {
        "approved": True, "requestId": request_id, "toolName": "Bash", "scope": "single",
        "message": "Approved single use of 'Bash'. The requesting session may retry the tool call now."}}
    assert retried["behavior"] == "allow" and retried["updatedInput"] == DEPLOY
    assert retried["classification"]["stage"] == "cli_approval"
    assert retried["approvalContext"] == {"requestId": request_id, "scope": "single", "status": "used"}
    assert again["behavior"] == "deny" and again["approvalRequest"]["requestId"] != request_id
    assert CliApproval.objects.get(pk=request_id).status == "used"
    assert CliApproval.objects.filter(status="pending").count() == 1


@pytest.mark.django_db
def test_a_single_approval_covers_only_the_exact_input(requested):
    session, request_id, bridge = requested
    approve(bridge, request_id)

    other = prompt(session, {"command": "make deploy staging"})

    assert other["behavior"] == "deny" and "approvalRequest" in other
    assert CliApproval.objects.get(pk=request_id).status == "approved"


@pytest.mark.django_db
def test_a_tool_session_approval_lasts_for_that_session_only(requested, alice, portfolio):
    session, request_id, bridge = requested

    approved = approve(bridge, request_id, scope="tool_session")
    uses = [prompt(session, {"command": f"make deploy {target}"}) for target in ("prod", "staging", "prod")]
    elsewhere = prompt(guarded_session(alice, portfolio))

    assert approved["data"]["scope"] == "tool_session"
    assert approved["data"]["message"] == "Approved for all uses of 'Bash' for the rest of the requesting session."
    assert [u["behavior"] for u in uses] == ["allow"] * 3
    assert {u["classification"]["stage"] for u in uses} == {"cli_approval"}
    assert elsewhere["behavior"] == "deny" and elsewhere["approvalRequest"]["requestId"] != request_id
    assert CliApproval.objects.get(pk=request_id).status == "approved"


@pytest.mark.django_db
def test_a_tool_session_approval_never_lets_a_dangerous_command_through(requested):
    session, request_id, bridge = requested
    approve(bridge, request_id, scope="tool_session")

    answer = prompt(session, {"command": "make deploy && rm -rf /"})

    assert answer["behavior"] == "deny" and answer["classification"]["riskLevel"] == "dangerous"


@pytest.mark.django_db
def test_a_session_cannot_approve_its_own_request(requested):
    session, request_id, _ = requested

    refused = approve(session, request_id)

    assert refused["success"] is False
    assert "made by this MCP session, which cannot approve its own request" in refused["error"]
    assert CliApproval.objects.get(pk=request_id).status == "pending"
    assert prompt(session)["behavior"] == "deny"


@pytest.mark.django_db
def test_an_expired_request_cannot_be_approved_and_a_retry_asks_again(requested):
    session, request_id, bridge = requested
    CliApproval.objects.filter(pk=request_id).update(expires_at=timezone.now() - timedelta(seconds=1))

    refused = approve(bridge, request_id)
    pending = session.ok("mcp_aql_read", "get_pending_cli_approvals")
    retried = prompt(session)

    assert refused["success"] is False and f"'{request_id}' expired at" in refused["error"]
    assert pending == {"pending": [], "count": 0}
    assert retried["approvalRequest"]["requestId"] != request_id


@pytest.mark.django_db
def test_a_decided_request_cannot_be_approved_twice(requested):
    _, request_id, bridge = requested
    approve(bridge, request_id)

    again = approve(bridge, request_id, scope="tool_session")

    assert again == {"success": False, "error": f"CLI approval request '{request_id}' was already approved."}


@pytest.mark.django_db
def test_a_denial_answers_the_next_identical_request_once(requested, alice):
    session, request_id, _ = requested
    # The approvals page denies through the same service, from a signed-in browser (no MCP session).
    approvals.cli_approval_decide(caller=Caller.trusted(alice.user, via="web"), request_id=request_id,
                                  approve=False)

    denied, again = prompt(session), prompt(session)

    assert denied["behavior"] == "deny" and denied["classification"]["stage"] == "cli_approval"
    assert f"The user denied this request ({request_id})" in denied["message"]
    assert again["classification"]["stage"] == "approval_required"


@pytest.mark.django_db
def test_pending_requests_are_listed_for_their_session(requested):
    session, request_id, bridge = requested

    listed = session.ok("mcp_aql_read", "get_pending_cli_approvals")
    elsewhere = bridge.ok("mcp_aql_read", "get_pending_cli_approvals")

    [entry] = listed["pending"]
    assert listed["count"] == 1 and elsewhere == {"pending": [], "count": 0}
    assert entry["requestId"] == request_id and entry["toolName"] == "Bash" and entry["input"] == DEPLOY
    assert entry["classification"]["stage"] == "approval_required" and entry["url"].endswith("/approvals/")
    assert entry["createdAt"] < entry["expiresAt"]


@pytest.mark.django_db
def test_charlie_can_neither_see_nor_approve_alices_request(requested, charlie, portfolio):
    _, request_id, _ = requested
    theirs = portfolio(charlie)

    refused = approve(theirs, request_id)

    assert refused == {"success": False, "error": f"No CLI approval request '{request_id}'."}
    assert theirs.ok("mcp_aql_read", "get_pending_cli_approvals")["count"] == 0
    assert CliApproval.objects.get(pk=request_id).status == "pending"


@pytest.mark.django_db
def test_approve_refuses_a_malformed_request_id_or_scope(requested):
    _, request_id, bridge = requested

    assert "cli-<UUID>" in approve(bridge, "x" * 100)["error"]
    assert approve(bridge, request_id, scope="forever")["error"] == "scope must be single or tool_session."
    assert CliApproval.objects.get(pk=request_id).status == "pending"


# --- races -----------------------------------------------------------------------------------------

def guarded_caller(member) -> Caller:
    session = mcp_session_open(caller=Caller.trusted(member.user, via="mcp"), transport="http")
    caller = Caller.trusted(member.user, via="mcp", session=session)
    guard = services.element_create(caller=caller, element_type=ElementType.PERSONA, name="guard",
                                    params={"description": "Guards.", "instructions": "You ARE careful.",
                                            "gatekeeper": GUARD})
    services.activation_set(caller=caller, elements=[guard])
    return caller


def prompt_as(caller: Caller) -> dict[str, Any]:
    answer = run(Endpoint.READ, {"operation": "permission_prompt", "params": {"tool_name": "Bash", "input": DEPLOY}},
                 caller)
    assert answer["success"], answer
    return answer["data"]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_identical_prompts_at_once_make_exactly_one_pending_request(alice):
    caller = guarded_caller(alice)

    answers = in_threads(lambda index: prompt_as(caller))

    assert {a["behavior"] for a in answers} == {"deny"}
    assert len({a["approvalRequest"]["requestId"] for a in answers}) == 1
    assert CliApproval.objects.filter(session=caller.session, status="pending").count() == 1


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_retries_at_once_after_a_single_approval_let_exactly_one_through(alice):
    caller = guarded_caller(alice)
    request_id = prompt_as(caller)["approvalRequest"]["requestId"]
    approvals.cli_approval_decide(caller=Caller.trusted(alice.user, via="web"), request_id=request_id, approve=True)

    answers = in_threads(lambda index: prompt_as(caller))

    assert sum(a["behavior"] == "allow" for a in answers) == 1, answers
    assert len({a["approvalRequest"]["requestId"] for a in answers if a["behavior"] == "deny"}) == 1
    assert CliApproval.objects.get(pk=request_id).status == "used"
    assert CliApproval.objects.filter(session=caller.session, status="pending").count() == 1
