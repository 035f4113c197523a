"""The approvals pages, as their signed-in owner and as everyone else sees them: blocked agents,
verifications and pending CLI requests, the decision buttons, the challenge page that alone shows
a code, "New code", and admin's read-only views of the same rows."""

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from accounts.services import mcp_session_open
from core.caller import Caller
from elements import approvals, dangerzone
from elements.models import AgentBlock, AgentExecution, CliApproval, ExecutionStep, VerificationChallenge
from integrations.crypto import unseal
from tests.conftest import hidden_inputs

pytestmark = pytest.mark.django_db

INDEX = "/approvals/"
CREATE = "mcp_aql_create"


def signed_in(member: Any) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(member.user)
    return client


def post(client: Client, path: str, page: str = INDEX, **data: str):
    """A form post as a browser makes it: with the CSRF token of the page it was on."""
    token = hidden_inputs(client.get(page).content.decode())["csrfmiddlewaretoken"]
    return client.post(path, {"csrfmiddlewaretoken": token, **data})


def caller_with_session(member: Any, client_name: str = "Claude Code") -> Caller:
    caller = Caller.trusted(member.user, via="mcp")
    return caller.with_session(mcp_session_open(caller=caller, transport="http", client_name=client_name))


def cli_request(member: Any, tool_input: Any = None, **kwargs: Any) -> CliApproval:
    return approvals.cli_approval_request(
        caller=caller_with_session(member), tool_name="Bash",
        tool_input=tool_input if tool_input is not None else {"command": "npm publish"},
        classification={"riskLevel": "high", "reason": "Publishing needs approval", "stage": "approval_policy"},
        reason="Publishing needs approval", **kwargs)


def block(member: Any, agent_name: str = "night-shift") -> VerificationChallenge:
    return dangerzone.agent_block(caller=Caller.trusted(member.user, via="mcp"), agent_name=agent_name,
                                  reason="Step 3 wants to delete the production bucket")


def without_csrf_token(response) -> str:
    """A page's text without its CSRF token, which is masked anew for every response."""
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", response.content.decode())


def challenge_path(challenge: VerificationChallenge) -> str:
    return reverse("approvals:challenge", args=[challenge.pk])


def code_of(challenge: VerificationChallenge) -> str:
    return unseal(challenge.sealed_code)


def test_signed_out_visitors_are_sent_to_sign_in(alice):
    challenge = block(alice)

    for path in (INDEX, challenge_path(challenge)):
        response = Client().get(path)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_an_empty_page_says_what_appears_here_and_why(alice):
    response = signed_in(alice).get(INDEX)

    page = response.content.decode()
    assert response.status_code == 200 and "Nothing is waiting for you" in page
    assert "Blocked agents." in page and "CLI permission requests." in page and "verify_challenge" in page
    assert "no-store" in response["Cache-Control"]
    assert f'href="{INDEX}">Approvals</a>' in page  # the nav links here


def test_the_page_lists_blocked_agents_verifications_and_cli_requests(alice):
    challenge = block(alice)
    execution = AgentExecution.objects.create(id="goal_0a1b", owner=alice.user, agent_name="careful", goal="Ship")
    verification = dangerzone.challenge_issue(caller=Caller.trusted(alice.user, via="mcp"), kind="verification",
                                              agent_name="careful", reason="Step 2 asks to be verified",
                                              execution=execution)
    request = cli_request(alice, {"command": "echo '<script>alert(1)</script>'"}, agent_identity="builder")

    response = signed_in(alice).get(INDEX)

    page = response.content.decode()
    assert response.status_code == 200 and "Nothing is waiting" not in page
    assert "night-shift" in page and "Step 3 wants to delete the production bucket" in page
    assert challenge_path(challenge) in page and "code waiting" in page
    assert "careful" in page and "Step 2 asks to be verified" in page and challenge_path(verification) in page
    assert "Bash" in page and "high risk" in page and "Publishing needs approval" in page
    assert "Claude Code" in page and "builder" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
    assert reverse("approvals:decide", args=[request.pk]) in page
    assert code_of(challenge) not in page and code_of(verification) not in page  # codes only on their own page


def test_another_user_sees_nothing_of_alices(alice, charlie):
    block(alice)
    cli_request(alice)

    page = signed_in(charlie).get(INDEX).content.decode()

    assert "Nothing is waiting for you" in page and "night-shift" not in page and "npm publish" not in page


@pytest.mark.parametrize(("button", "status", "scope"), [
    ("single", "approved", "single"), ("tool_session", "approved", "tool_session"), ("deny", "denied", "")])
def test_each_button_decides_the_request(alice, button, status, scope):
    request = cli_request(alice)
    client = signed_in(alice)

    response = post(client, reverse("approvals:decide", args=[request.pk]), decision=button)

    assert response.status_code == 302 and response["Location"] == INDEX
    row = CliApproval.objects.get(pk=request.pk)
    assert (row.status, row.scope, row.decided_via) == (status, scope, "web") and row.decided_at is not None
    page = client.get(INDEX).content.decode()
    assert ("Denied Bash." if button == "deny" else "Approved Bash") in page and "npm publish" not in page


def test_an_expired_request_shows_the_error_and_stays_pending(alice):
    request = cli_request(alice)
    CliApproval.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = post(signed_in(alice), reverse("approvals:decide", args=[request.pk]), decision="single")

    assert response.status_code == 400
    assert f"CLI approval request &#x27;{request.pk}&#x27; expired" in response.content.decode()
    assert CliApproval.objects.get(pk=request.pk).status == "pending"


def test_an_unknown_button_is_refused(alice):
    request = cli_request(alice)

    response = post(signed_in(alice), reverse("approvals:decide", args=[request.pk]), decision="always")

    assert response.status_code == 400 and "Choose Approve once" in response.content.decode()
    assert CliApproval.objects.get(pk=request.pk).status == "pending"


def test_a_decision_without_the_csrf_token_is_refused(alice):
    request = cli_request(alice)

    response = signed_in(alice).post(reverse("approvals:decide", args=[request.pk]), {"decision": "single"})

    assert response.status_code == 403 and CliApproval.objects.get(pk=request.pk).status == "pending"


def test_another_user_cannot_decide_alices_request(alice, charlie):
    request = cli_request(alice)

    response = post(signed_in(charlie), reverse("approvals:decide", args=[request.pk]), decision="single")

    assert response.status_code == 404
    assert CliApproval.objects.get(pk=request.pk).status == "pending"


def test_the_challenge_page_shows_its_owner_the_code_and_the_call_to_make(alice):
    challenge = block(alice)

    response = signed_in(alice).get(challenge_path(challenge))

    page = response.content.decode()
    code = code_of(challenge)
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    assert f'id="challenge-code" class="code" aria-label="Verification code">{code}</output>' in page
    call = {"operation": "verify_challenge", "params": {"challenge_id": str(challenge.pk), "code": code}}
    assert json.dumps(call).replace('"', "&quot;") in page
    assert "night-shift" in page and "Step 3 wants to delete the production bucket" in page
    assert "New code" not in page


def test_someone_elses_challenge_gets_the_same_404_as_none(alice, charlie):
    challenge = block(alice)
    client = signed_in(charlie)

    hers = client.get(challenge_path(challenge))
    none = client.get(reverse("approvals:challenge", args=["7d6f4f3e-2a51-4c8e-9b0e-5f1d2c3b4a59"]))
    renew = post(client, reverse("approvals:renew", args=[challenge.pk]))

    assert hers.status_code == none.status_code == renew.status_code == 404
    assert without_csrf_token(hers) == without_csrf_token(none)
    assert code_of(challenge) not in hers.content.decode()
    assert VerificationChallenge.objects.count() == 1


def test_a_verified_challenge_says_so_and_shows_no_code(alice, portfolio):
    challenge = block(alice)
    code = code_of(challenge)
    portfolio(alice).ok(CREATE, "verify_challenge", challenge_id=str(challenge.pk), code=code)

    page = signed_in(alice).get(challenge_path(challenge)).content.decode()

    assert "Verified" in page and "is unblocked and may continue" in page
    assert code not in page and "New code" not in page


@pytest.mark.parametrize("how", ["expired", "spent"])
def test_new_code_replaces_an_expired_or_spent_challenge_while_the_agent_is_blocked(alice, portfolio, how):
    challenge = block(alice)
    if how == "expired":
        VerificationChallenge.objects.filter(pk=challenge.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    else:
        p = portfolio(alice)
        for _ in range(3):
            p.fails(CREATE, "verify_challenge", challenge_id=str(challenge.pk), code="WRONG1")
    client = signed_in(alice)
    old_page = client.get(challenge_path(challenge)).content.decode()
    assert "New code" in old_page and code_of(challenge) not in old_page

    response = post(client, reverse("approvals:renew", args=[challenge.pk]), page=challenge_path(challenge))

    fresh = VerificationChallenge.objects.exclude(pk=challenge.pk).get()
    assert response.status_code == 302 and response["Location"] == challenge_path(fresh)
    assert fresh.block_id == challenge.block_id and fresh.used_at is None and fresh.failures == 0
    old = VerificationChallenge.objects.get(pk=challenge.pk)
    assert old.used_at is not None and old.outcome == ("renewed" if how == "expired" else "spent")
    assert code_of(fresh) in client.get(challenge_path(fresh)).content.decode()
    assert "A newer code was issued" in client.get(challenge_path(challenge)).content.decode()
    again = post(client, reverse("approvals:renew", args=[challenge.pk]), page=challenge_path(challenge))
    assert again["Location"] == challenge_path(fresh) and VerificationChallenge.objects.count() == 2
    assert portfolio(alice).ok(CREATE, "verify_challenge", challenge_id=str(fresh.pk),
                               code=code_of(fresh))["unblockedAgent"] == "night-shift"


def test_no_new_code_once_the_agent_is_unblocked(alice):
    challenge = block(alice)
    VerificationChallenge.objects.filter(pk=challenge.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    dangerzone.agent_unblock(caller=Caller.trusted(alice.user, via="mcp"), agent_name="night-shift", by="abort")
    client = signed_in(alice)

    page = client.get(challenge_path(challenge)).content.decode()
    response = post(client, reverse("approvals:renew", args=[challenge.pk]), page=challenge_path(challenge))

    assert "New code" not in page and "unblocked by another of its codes" in page
    assert response.status_code == 400 and "Nothing waits for this code any more" in response.content.decode()
    assert VerificationChallenge.objects.count() == 1


def test_the_code_is_on_the_owners_page_and_in_no_mcp_answer(alice, portfolio):
    p = portfolio(alice)
    answers = [p.call(CREATE, "beetlejuice_beetlejuice_beetlejuice")]
    challenge = VerificationChallenge.objects.get(pk=answers[0]["data"]["challenge_id"])
    code = code_of(challenge)
    page = signed_in(alice)

    assert code in page.get(challenge_path(challenge)).content.decode()
    answers.append(p.call(CREATE, "verify_challenge", challenge_id=str(challenge.pk), code="WRONG1"))
    answers.append(p.call(CREATE, "verify_challenge", challenge_id=str(challenge.pk), code=code))
    answers.append(p.call("mcp_aql_read", "query_logs", limit=50))
    answers.append(p.call("mcp_aql_read", "introspect", query="operations"))

    assert [a["success"] for a in answers] == [True, False, True, True, True]
    assert all(code not in json.dumps(answer) for answer in answers)
    assert code not in page.get(challenge_path(challenge)).content.decode()
    assert AgentBlock.objects.get(owner=alice.user).released_by == "code"


@pytest.fixture
def curator(client):
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


def test_admin_shows_challenges_without_their_sealed_code(curator, alice, client):
    challenge = block(alice)

    listing = client.get(reverse("admin:elements_verificationchallenge_changelist"))
    detail = client.get(reverse("admin:elements_verificationchallenge_change", args=[challenge.pk]))

    assert listing.status_code == detail.status_code == 200
    for response in (listing, detail):
        text = response.content.decode()
        assert challenge.sealed_code not in text and code_of(challenge) not in text and "sealed" not in text.lower()
    assert "night-shift" in detail.content.decode()
    assert client.get(reverse("admin:elements_verificationchallenge_add")).status_code == 403


def test_admin_lists_blocks_cli_requests_and_executions_with_their_steps(curator, alice, client):
    block(alice)
    request = cli_request(alice)
    execution = AgentExecution.objects.create(id="goal_0a1b", owner=alice.user, agent_name="careful", goal="Ship")
    ExecutionStep.objects.create(execution=execution, number=1, decision_id="d1", description="Read the logs",
                                 outcome="success")

    blocks = client.get(reverse("admin:elements_agentblock_changelist"))
    requests = client.get(reverse("admin:elements_cliapproval_changelist"), {"status__exact": "pending"})
    decided = client.get(reverse("admin:elements_cliapproval_changelist"), {"status__exact": "approved"})
    executions = client.get(reverse("admin:elements_agentexecution_changelist"))
    detail = client.get(reverse("admin:elements_agentexecution_change", args=[execution.pk]))

    assert "night-shift" in blocks.content.decode()
    assert "Bash" in requests.content.decode() and request.owner.username in requests.content.decode()
    assert "0 cli approvals" in decided.content.decode().lower()
    assert "goal_0a1b" in executions.content.decode()
    assert detail.status_code == 200 and "Read the logs" in detail.content.decode()
    assert client.get(reverse("admin:elements_cliapproval_add")).status_code == 403
