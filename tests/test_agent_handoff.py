"""Handoff blocks: the format, the round trip prepare_handoff -> resume_from_handoff, and every way a
block is refused (markers, payload, size, gzip bombs, nesting, integrity, agent) without a change."""

import base64
import gzip
import json
import time

import pytest

from core.errors import InvalidInput
from elements import handoff
from elements.models import Activation, AgentExecution, ExecutionStep
from tests.agent_helpers import EXECUTE, READ, execute, make_agent, step

STATE = {"version": "1.0.0", "agentName": "triager", "goalId": "goal_1", "preparedAt": "2026-01-01T00:00:00+00:00",
         "goalProgress": {"description": "Triage issue 42\nin atrium", "status": "in_progress", "stepsCompleted": 2,
                          "successCriteria": ["Labelled"], "parameters": {"issue": "42"}},
         "gatheredDataSummary": {"totalEntries": 1, "recentEntries": [{"findings": "A crash"}],
                                 "summary": {"averageConfidence": 0.75}},
         "decisionHistory": [], "activeElements": {"agents": ["triager"]}, "continuationInstructions": "Go on."}


def block_of(state: dict, next_steps: list[str] | None = None) -> str:
    return handoff.encode(handoff.sealed(state), next_steps or ["Label it"])


def payload_of(block: str) -> str:
    return "".join(block.split(handoff.START)[1].split(handoff.END)[0].split())


def with_payload(block: str, payload: str) -> str:
    return block.split(handoff.START)[0] + handoff.START + "\n" + payload + "\n" + handoff.END


def raw_block(data: bytes) -> str:
    return f"{handoff.START}\n{base64.b64encode(data).decode()}\n{handoff.END}"


def refused(block: object) -> str:
    with pytest.raises(InvalidInput) as error:
        handoff.decode(block)
    return error.value.message


# --- the format ------------------------------------------------------------------------------

def test_a_block_is_a_box_header_then_the_payload_between_markers():
    lines = block_of(STATE, [f"step {i}" for i in range(8)]).splitlines()

    assert lines[0] == "╔" + "═" * 60 + "╗"
    assert lines[1:6] == ["║ AGENT HANDOFF — triager", "║ Goal: Triage issue 42 in atrium",
                          "║ Status: in_progress | Steps: 2 | Confidence: 0.75", "║", "║ Next Steps:"]
    assert lines[6:11] == [f"║   step {i}" for i in range(5)]
    assert lines[11] == "╚" + "═" * 60 + "╝"
    assert lines[12] == handoff.START and lines[-1] == handoff.END


def test_the_goal_in_the_header_is_cut_at_eighty_characters():
    header = block_of({**STATE, "goalProgress": {**STATE["goalProgress"], "description": "g" * 200}})

    assert "║ Goal: " + "g" * 79 + "…\n" in header


def test_the_payload_is_base64_of_gzip_of_the_canonical_json():
    block = block_of(STATE)

    state = json.loads(gzip.decompress(base64.b64decode(payload_of(block))))

    assert state == handoff.sealed(STATE)
    assert handoff.decode(block) == state


def test_the_checksum_covers_nested_fields_too():
    changed = {**STATE, "goalProgress": {**STATE["goalProgress"], "stepsCompleted": 3}}

    assert handoff.checksum(changed) != handoff.checksum(STATE)
    assert handoff.checksum({**STATE, "checksum": "ignored"}) == handoff.checksum(STATE)


# --- refusals --------------------------------------------------------------------------------

def test_a_block_without_markers_or_payload_is_refused():
    payload = payload_of(block_of(STATE))

    assert refused("just text") == "Invalid handoff block: missing payload markers"
    assert refused(f"{handoff.START}\n{payload}") == "Invalid handoff block: missing payload markers"
    assert refused(f"{handoff.START}\n \n{handoff.END}") == "Invalid handoff block: empty payload"
    assert refused(42) == "Invalid handoff block: handoffBlock must be the block's text."


def test_a_payload_that_is_not_base64_gzip_json_could_not_be_restored():
    for block in (with_payload(block_of(STATE), "not*base64"), raw_block(b"plain bytes"),
                  raw_block(gzip.compress(b"not json", mtime=0)), raw_block(gzip.compress(b"[1, 2]", mtime=0)),
                  raw_block(gzip.compress(json.dumps(STATE).encode(), mtime=0)[:-8])):
        assert refused(block).startswith("Invalid handoff block: payload could not be restored")


@pytest.mark.parametrize("position", [0, 10, 40, 100, -10, -3, -1])
def test_any_changed_byte_of_the_payload_is_refused(position):
    block = block_of(STATE)
    payload = payload_of(block)
    index = position % len(payload)
    replacement = "A" if payload[index] != "A" else "B"
    tampered = payload[:index] + replacement + payload[index + 1:]

    assert refused(with_payload(block, tampered)).startswith("Invalid handoff block: ")


def test_a_changed_gzip_header_that_decompresses_the_same_is_refused():
    block = block_of(STATE)
    raw = bytearray(base64.b64decode(payload_of(block)))
    raw[4:8] = b"\x01\x02\x03\x04"  # the header's timestamp: the same content inflates from it

    assert refused(with_payload(block, base64.b64encode(bytes(raw)).decode())) == \
        "Invalid handoff block: integrity check failed"


def test_an_edited_state_with_its_old_or_a_forged_checksum_fails_the_integrity_check():
    sealed = handoff.sealed(STATE)
    edited = {**sealed, "goalProgress": {**sealed["goalProgress"], "stepsCompleted": 99}}
    forged = {**edited, "checksum": "0" * 64}
    non_ascii = {**edited, "checksum": "é" * 64}

    for state in (edited, forged, non_ascii):
        text = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert refused(raw_block(gzip.compress(text.encode(), 9, mtime=0))) == \
            "Invalid handoff block: integrity check failed"


def test_a_block_over_a_megabyte_is_refused_before_it_is_read():
    assert refused("x" * 1_000_001) == "Invalid handoff block: it is longer than 1,000,000 characters."


def test_a_gzip_bomb_is_refused_without_inflating_it_whole():
    bomb = gzip.compress(b"[" + b" " * 50_000_000 + b"]", 9, mtime=0)
    assert len(bomb) < 100_000

    assert refused(raw_block(bomb)) == (
        "Invalid handoff block: payload could not be restored (it inflates past 1,000,000 bytes).")


def test_json_nested_past_twenty_levels_is_refused_before_it_is_parsed():
    deep = '{"a": ' * 21 + "1" + "}" * 21

    assert refused(raw_block(gzip.compress(deep.encode(), mtime=0))) == (
        "Invalid handoff block: payload could not be restored (it nests past 20 levels).")


def test_hostile_text_is_scanned_in_linear_time():
    escaped_quotes = ('"' + '\\"' * 450_000).encode()
    started = time.perf_counter()

    error = refused(raw_block(gzip.compress(escaped_quotes, 9, mtime=0)))

    assert error == "Invalid handoff block: payload could not be restored (it is not JSON)."
    assert time.perf_counter() - started < 2


def test_a_state_with_text_the_database_cannot_hold_is_refused():
    state = handoff.sealed({**STATE, "continuationInstructions": "a\u0000b"})
    text = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    assert "contains a NUL character" in refused(raw_block(gzip.compress(text.encode(), 9, mtime=0)))


def test_non_finite_numbers_are_refused():
    text = '{"checksum":"x","n":1e999}'

    assert refused(raw_block(gzip.compress(text.encode(), mtime=0))) == (
        "Invalid handoff block: payload could not be restored (it is not JSON).")


# --- through MCP-AQL -----------------------------------------------------------------------------

@pytest.fixture
def prepared(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    goal_id = execute(aql, issue="42", repo="shop")["goalId"]
    step(aql, findings="Crash in parser", confidence=0.8, nextActionHint="label as bug")
    step(aql, stepDescription="Labelled", findings="Labelled bug", confidence=0.6)
    data = aql.ok(EXECUTE, "prepare_handoff", element_name="triager", goalId=goal_id)
    return aql, goal_id, data


@pytest.mark.django_db
def test_prepare_handoff_answers_the_state_and_its_block(prepared):
    _, goal_id, data = prepared
    state = data["handoffState"]

    assert data["_type"] == "HandoffResult"
    assert (state["version"], state["agentName"], state["goalId"]) == ("1.0.0", "triager", goal_id)
    assert state["checksum"] == handoff.checksum(state)
    assert state["goalProgress"] == {"description": "Triage issue 42 in shop", "status": "in_progress",
                                     "stepsCompleted": 2, "successCriteria": ["The issue is labelled",
                                                                              "A summary is posted"],
                                     "parameters": {"issue": "42", "repo": "shop"}}
    assert state["gatheredDataSummary"]["totalEntries"] == 2
    assert [e["findings"] for e in state["gatheredDataSummary"]["recentEntries"]] == ["Crash in parser",
                                                                                      "Labelled bug"]
    assert [d["decision"] for d in state["decisionHistory"]] == ["Read the issue", "Labelled"]
    assert state["activeElements"] == {"agents": ["triager"]}
    assert "║   Next: label as bug" in data["handoffBlock"]
    assert handoff.decode(data["handoffBlock"]) == state


@pytest.mark.django_db
def test_resume_from_handoff_goes_on_as_a_new_execution_carrying_the_gathered_data(prepared, alice, portfolio):
    _, goal_id, data = prepared
    elsewhere = portfolio(alice)

    resumed = elsewhere.ok(EXECUTE, "resume_from_handoff", element_name="triager", handoffBlock=data["handoffBlock"])

    assert resumed["_type"] == "ResumeResult"
    assert (resumed["resumedFromHandoff"], resumed["originalGoalId"]) == (True, goal_id)
    assert resumed["restoredFrom"] == {"agentName": "triager", "goalId": goal_id, "version": "1.0.0",
                                       "stepsCompleted": 2, "preparedAt": data["handoffState"]["preparedAt"]}
    assert resumed["goal"] == "Triage issue 42 in shop"
    assert resumed["gatheredDataSummary"]["summary"]["averageConfidence"] == 0.7
    execution = AgentExecution.objects.get(pk=resumed["goalId"])
    assert (execution.resumed_from, execution.session_id) == (goal_id, elsewhere.client.session_id)
    gathered = elsewhere.ok(READ, "get_gathered_data", element_name="triager", goalId=resumed["goalId"])
    assert gathered["restored"]["restoredFrom"]["goalId"] == goal_id
    assert elsewhere.ok(READ, "get_execution_state", element_name="triager")["resumedFrom"] == goal_id


@pytest.mark.django_db
def test_resume_takes_parameters_over_the_handoffs(prepared):
    aql, _, data = prepared

    resumed = aql.ok(EXECUTE, "resume_from_handoff", element_name="triager", handoffBlock=data["handoffBlock"],
                     parameters={"issue": "43"})

    assert resumed["goal"] == "Triage issue 43 in shop"


@pytest.mark.django_db
def test_a_tampered_or_foreign_block_is_refused_and_changes_nothing(prepared, alice):
    aql, _, data = prepared
    make_agent(alice, "reviewer")
    block = data["handoffBlock"]
    payload = payload_of(block)
    tampered = with_payload(block, payload[:50] + ("A" if payload[50] != "A" else "B") + payload[51:])
    aql.ok(EXECUTE, "confirm_operation", operation="resume_from_handoff")
    before = (AgentExecution.objects.count(), ExecutionStep.objects.count(), Activation.objects.count())

    errors = [aql.fails(EXECUTE, "resume_from_handoff", element_name="triager", handoffBlock=tampered),
              aql.fails(EXECUTE, "resume_from_handoff", element_name="triager", handoffBlock=block.replace(
                  handoff.END, "")),
              aql.fails(EXECUTE, "resume_from_handoff", element_name="reviewer", handoffBlock=block),
              aql.fails(EXECUTE, "resume_from_handoff", element_name="triager", handoffBlock="x" * 1_000_001)]

    assert errors[0].startswith("Invalid handoff block: ")
    assert errors[1] == "Invalid handoff block: missing payload markers"
    assert errors[2] == "Handoff agent mismatch: the handoff block was not prepared for this agent"
    assert errors[3] == "Invalid handoff block: it is longer than 1,000,000 characters."
    assert (AgentExecution.objects.count(), ExecutionStep.objects.count(), Activation.objects.count()) == before


@pytest.mark.django_db
def test_a_forged_checksum_over_edited_parameters_still_passes_the_parameter_checks(prepared):
    aql, _, data = prepared
    state = {**data["handoffState"], "goalProgress": {**data["handoffState"]["goalProgress"],
                                                      "parameters": {"issue": 42}}}
    block = handoff.encode(handoff.sealed(state), [])
    aql.ok(EXECUTE, "confirm_operation", operation="resume_from_handoff")

    error = aql.fails(EXECUTE, "resume_from_handoff", element_name="triager", handoffBlock=block)

    assert error == "Goal parameter 'issue' must be a string (got a number)."
    assert AgentExecution.objects.count() == 1
