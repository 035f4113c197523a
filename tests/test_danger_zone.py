"""The danger zone over MCP-AQL: beetlejuice_beetlejuice_beetlejuice blocks an agent and answers no
code, verify_challenge takes back the code its owner read on their page, wrong codes are counted
(three spend a challenge, ten a minute stop an owner) even though the call fails, and a block is
a row that outlives the process and the session."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from accounts.services import mcp_session_open
from core.caller import Caller
from elements import dangerzone
from elements.mcpaql import Endpoint, run
from elements.models import AgentBlock, AgentExecution, VerificationChallenge, VerificationFailure
from integrations.crypto import unseal
from tests.test_element_concurrency import THREADS, in_threads

CREATE = "mcp_aql_create"
GONE = "Verification challenge not found, expired or already used."


def code_of(challenge_id: str) -> str:
    return unseal(VerificationChallenge.objects.get(pk=challenge_id).sealed_code)


def wrong(code: str) -> str:
    return ("A" if code[0] != "A" else "B") + code[1:]


def trigger(p: Any, agent_name: str | None = None) -> dict[str, Any]:
    params = {"agent_name": agent_name} if agent_name else {}
    return p.ok(CREATE, "beetlejuice_beetlejuice_beetlejuice", **params)


def test_beetlejuice_blocks_the_agent_and_answers_everything_but_the_code(alice, portfolio):
    p = portfolio(alice)

    envelope = p.call(CREATE, "beetlejuice_beetlejuice_beetlejuice")

    data = envelope["data"]
    challenge = VerificationChallenge.objects.get(pk=data["challenge_id"])
    assert data == {"triggered": True, "challenge_id": str(challenge.pk), "agent_name": "beetlejuice-test-agent",
                    "message": "Agent 'beetlejuice-test-agent' is now blocked. A verification code has been "
                               "displayed on your Atrium approvals page: "
                               f"{dangerzone.challenge_url(challenge)}. Pass it to verify_challenge."}
    code = code_of(data["challenge_id"])
    assert len(code) == 6 and set(code) <= set(dangerzone.CODE_ALPHABET)
    assert code not in json.dumps(envelope) and code not in challenge.sealed_code
    block = AgentBlock.objects.get(owner=alice.user, agent_name="beetlejuice-test-agent")
    assert block.released_at is None and challenge.block == block and challenge.kind == "danger_zone"
    assert challenge.owner == alice.user and challenge.used_at is None
    assert timedelta(minutes=4) < challenge.expires_at - timezone.now() <= timedelta(minutes=5)


def test_beetlejuice_blocks_a_name_no_agent_has_and_validates_it_like_an_element_name(alice, portfolio):
    p = portfolio(alice)

    assert trigger(p, "  night-shift  ")["agent_name"] == "night-shift"
    error = p.fails(CREATE, "beetlejuice_beetlejuice_beetlejuice", agent_name="../etc/passwd")

    assert "Name contains invalid characters" in error
    assert list(AgentBlock.objects.values_list("agent_name", flat=True)) == ["night-shift"]


def test_blocking_a_blocked_agent_keeps_its_one_block_and_adds_a_challenge(alice, portfolio):
    p = portfolio(alice)

    first, second = trigger(p), trigger(p)

    assert AgentBlock.objects.filter(owner=alice.user).count() == 1
    assert VerificationChallenge.objects.get(pk=first["challenge_id"]).block_id == \
        VerificationChallenge.objects.get(pk=second["challenge_id"]).block_id


def test_a_challenge_id_that_is_not_a_uuid_is_refused(alice, portfolio):
    error = portfolio(alice).fails(CREATE, "verify_challenge", challenge_id="challenge-1", code="ABC123")

    assert error.startswith("Invalid challenge_id format")
    assert not VerificationFailure.objects.exists()


def test_unknown_expired_used_and_someone_elses_challenges_all_get_one_text(alice, charlie, portfolio):
    p = portfolio(alice)
    unknown = "7d6f4f3e-2a51-4c8e-9b0e-5f1d2c3b4a59"
    expired, used, hers = (trigger(p, name)["challenge_id"] for name in ("expired", "used", "hers"))
    VerificationChallenge.objects.filter(pk=expired).update(expires_at=timezone.now() - timedelta(seconds=1))
    p.ok(CREATE, "verify_challenge", challenge_id=used, code=code_of(used))

    errors = [p.fails(CREATE, "verify_challenge", challenge_id=challenge_id, code=code_of(challenge_id))
              for challenge_id in (expired, used)]
    errors.append(p.fails(CREATE, "verify_challenge", challenge_id=unknown, code="ABC123"))
    errors.append(portfolio(charlie).fails(CREATE, "verify_challenge", challenge_id=hers, code=code_of(hers)))

    assert len(set(errors)) == 1 and errors[0].startswith(GONE), errors
    assert AgentBlock.objects.get(agent_name="hers").released_at is None
    assert AgentBlock.objects.get(agent_name="expired").released_at is None
    assert not VerificationFailure.objects.exists()


def test_wrong_codes_are_counted_through_mcp_aql_and_the_third_spends_the_challenge(alice, portfolio):
    p = portfolio(alice)
    challenge_id = trigger(p)["challenge_id"]
    code = code_of(challenge_id)

    first = p.call(CREATE, "verify_challenge", challenge_id=challenge_id, code=wrong(code))
    second = p.fails(CREATE, "verify_challenge", challenge_id=challenge_id, code="nope")

    assert set(first) == {"success", "error"} and first["success"] is False
    assert first["error"].startswith("Incorrect verification code. 2 more wrong codes and this challenge is consumed")
    assert second.startswith("Incorrect verification code. 1 more wrong code and this challenge is consumed")
    assert VerificationChallenge.objects.get(pk=challenge_id).failures == 2  # kept, though the calls failed
    assert VerificationFailure.objects.filter(owner=alice.user, challenge_id=challenge_id).count() == 2

    third = p.fails(CREATE, "verify_challenge", challenge_id=challenge_id, code=wrong(code))

    challenge = VerificationChallenge.objects.get(pk=challenge_id)
    assert "consumed (one-time use) after 3 wrong codes" in third and "New code" in third
    assert dangerzone.challenge_url(challenge) in third
    assert (challenge.failures, challenge.outcome, challenge.used_at is not None) == (3, "spent", True)
    assert p.fails(CREATE, "verify_challenge", challenge_id=challenge_id, code=code).startswith(GONE)
    assert AgentBlock.objects.get(owner=alice.user).released_at is None  # still blocked: a new code is needed
    assert VerificationFailure.objects.filter(owner=alice.user).count() == 3
    assert all(code not in answer for answer in (first["error"], second, third))


def test_the_right_code_unblocks_the_agent_whatever_its_case_spaces_and_dashes(alice, portfolio):
    p = portfolio(alice)
    challenge_id = trigger(p, "night-shift")["challenge_id"]
    code = code_of(challenge_id)
    typed = f" {code[:3].lower()}-{code[3:]} "

    data = p.ok(CREATE, "verify_challenge", challenge_id=challenge_id, code=typed)

    assert data == {"verified": True, "unblockedAgent": "night-shift",
                    "message": "Verification successful. Agent 'night-shift' is unblocked and may continue."}
    block = AgentBlock.objects.get(owner=alice.user, agent_name="night-shift")
    assert block.released_at is not None and block.released_by == "code"
    assert dangerzone.agent_block_open(user=alice.user, agent_name="night-shift") is None
    challenge = VerificationChallenge.objects.get(pk=challenge_id)
    assert challenge.outcome == "verified" and challenge.used_at is not None
    assert p.fails(CREATE, "verify_challenge", challenge_id=challenge_id, code=code).startswith(GONE)


def test_unblocking_spends_the_blocks_other_open_challenges(alice, portfolio):
    p = portfolio(alice)
    older, newer = trigger(p)["challenge_id"], trigger(p)["challenge_id"]

    p.ok(CREATE, "verify_challenge", challenge_id=newer, code=code_of(newer))

    assert VerificationChallenge.objects.get(pk=older).outcome == "released"
    assert p.fails(CREATE, "verify_challenge", challenge_id=older, code=code_of(older)).startswith(GONE)


def test_ten_wrong_codes_a_minute_stop_an_owners_verifications_across_challenges(alice, bob, portfolio):
    p = portfolio(alice)
    challenges = [trigger(p, f"agent-{n}")["challenge_id"] for n in range(5)]
    for challenge_id in challenges[:3]:
        for _ in range(3):
            p.fails(CREATE, "verify_challenge", challenge_id=challenge_id, code=wrong(code_of(challenge_id)))
    p.fails(CREATE, "verify_challenge", challenge_id=challenges[3], code=wrong(code_of(challenges[3])))
    assert VerificationFailure.objects.filter(owner=alice.user).count() == 10

    error = p.fails(CREATE, "verify_challenge", challenge_id=challenges[4], code=code_of(challenges[4]))

    assert error == "Too many failed verification attempts. Wait a minute and try again."
    last = VerificationChallenge.objects.get(pk=challenges[4])
    assert (last.failures, last.used_at) == (0, None)  # refused before the code was compared
    assert VerificationFailure.objects.filter(owner=alice.user).count() == 10
    bobs = trigger(portfolio(bob))["challenge_id"]
    assert portfolio(bob).ok(CREATE, "verify_challenge", challenge_id=bobs, code=code_of(bobs))["verified"]

    VerificationFailure.objects.update(at=timezone.now() - timedelta(seconds=61))
    assert p.ok(CREATE, "verify_challenge", challenge_id=challenges[4], code=code_of(challenges[4]))["verified"]


def test_a_verification_challenge_records_the_verification_and_unblocks_nothing(alice, portfolio):
    caller = Caller.trusted(alice.user, via="mcp")
    execution = AgentExecution.objects.create(id="goal_0a1b", owner=alice.user, agent_name="careful", goal="Ship")
    challenge = dangerzone.challenge_issue(caller=caller, kind="verification", agent_name="careful",
                                           reason="The step asked for verification", execution=execution)

    data = portfolio(alice).ok(CREATE, "verify_challenge", challenge_id=str(challenge.pk),
                               code=code_of(challenge.pk))

    assert data == {"verified": True, "message": "Verification successful for agent 'careful'."}
    assert VerificationChallenge.objects.get(pk=challenge.pk).outcome == "verified"
    assert not AgentBlock.objects.exists()


def test_both_operations_are_approved_without_confirmation_and_verify_ignores_element_policies(alice, portfolio):
    p = portfolio(alice)
    denied = ["verify_challenge", "beetlejuice_beetlejuice_beetlejuice"]
    p.ok(CREATE, "create_element", "persona", element_name="locked", description="Locks",
         instructions="You ARE locked.", gatekeeper={"deny": denied})
    p.ok("mcp_aql_read", "activate_element", "persona", element_name="locked")

    refused = p.call(CREATE, "beetlejuice_beetlejuice_beetlejuice")
    challenge = dangerzone.agent_block(caller=Caller.trusted(alice.user, via="mcp"), agent_name="x", reason="test")

    assert refused["success"] is False and "deny policy" in refused["error"]
    assert p.ok(CREATE, "verify_challenge", challenge_id=str(challenge.pk), code=code_of(challenge.pk))["verified"]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_block_is_a_row_that_outlives_the_process_and_the_session(alice, portfolio):
    challenge_id = trigger(portfolio(alice), "night-shift")["challenge_id"]
    connections.close_all()  # as a restarted server would: nothing is kept but the rows

    block = dangerzone.agent_block_open(user=alice.user, agent_name="night-shift")
    later = portfolio(alice)  # a new MCP session, as after a restart

    assert block is not None and "is blocked due to danger zone trigger" in dangerzone.blocked_message(block)
    assert later.ok(CREATE, "verify_challenge", challenge_id=challenge_id,
                    code=code_of(challenge_id))["unblockedAgent"] == "night-shift"


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
@pytest.mark.parametrize("right_ones", [0, THREADS // 2])
def test_twenty_concurrent_verifications_of_one_challenge_let_one_through_at_most_and_count_exactly(
        alice, right_ones):
    session = mcp_session_open(caller=Caller.trusted(alice.user, via="mcp"), transport="http")
    caller = Caller.trusted(alice.user, via="mcp", session=session)
    challenge = dangerzone.agent_block(caller=caller, agent_name="racer", reason="test")
    code = code_of(challenge.pk)

    def verify(index: int) -> dict[str, Any]:
        typed = code if index % 2 == 0 and index < 2 * right_ones else wrong(code)
        return run(Endpoint.CREATE, {"operation": "verify_challenge",
                                     "params": {"challenge_id": str(challenge.pk), "code": typed}}, caller)

    answers = in_threads(verify)

    verified = [a for a in answers if a["success"]]
    incorrect = [a for a in answers if not a["success"] and a["error"].startswith("Incorrect verification code")]
    gone = [a for a in answers if not a["success"] and a["error"].startswith(GONE)]
    assert len(verified) + len(incorrect) + len(gone) == THREADS, answers
    row = VerificationChallenge.objects.get(pk=challenge.pk)
    assert row.failures == len(incorrect) == VerificationFailure.objects.filter(challenge=row).count()
    block = AgentBlock.objects.get(owner=alice.user, agent_name="racer")
    if verified:  # a right code came before the third wrong one, and no code was taken after it
        assert len(verified) == 1 and right_ones and len(incorrect) < dangerzone.CHALLENGE_WRONG_CODES
        assert row.outcome == "verified" and block.released_at is not None
    else:
        assert len(incorrect) == dangerzone.CHALLENGE_WRONG_CODES
        assert row.outcome == "spent" and block.released_at is None
