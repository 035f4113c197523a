"""Answers carry the step's identity: an answer meant for one step never lands on the next, even
when the next is of the same type (AI step after AI step, a loop through one node), whether it is a
second answer, a retry, a stale session's, or one of many racing answers."""

import json
import threading
from typing import Any

import pytest
from django.db import connection

from core.caller import Caller
from runs import engine, selectors
from runs.models import NodeRun, Run, StepShown, Turn
from tests.conftest import Api, McpClient, Member, make_member
from workflows.scoping import Scope
from workflows.services import workflow_save

G = {"global": True}

# Two AI steps of one type in a row, then a human step: the shapes where a stray answer used to land.
TWICE = """\
name: Twice
start: first
nodes:
  first: {type: ai_agent, prompt: "First", transitions: {done: second}}
  second: {type: ai_agent, prompt: "Second", transitions: {done: ask}}
  ask: {type: human, prompt: "Keep it?", transitions: {keep: done}}
  done: {type: end}
"""

# One node visited again and again: every visit is the same node, of the same type.
LOOP = """\
name: Loop
start: write
nodes:
  write: {type: ai_agent, prompt: "Write", maxIterations: 5, transitions: {done: check}}
  check: {type: condition, if: "len(write.output) > 100", transitions: {true: done, false: write}}
  done: {type: end}
"""


class Session:
    """One MCP session of a member, calling the run tools in the global namespace."""

    def __init__(self, member: Member) -> None:
        self.client = McpClient(member.token)
        self.client.initialize()

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = self.client.call(tool, {**arguments, **G})
        assert result["isError"] is False, result
        return json.loads(result["content"][0]["text"])

    def refused(self, tool: str, **arguments: Any) -> str:
        payload = self.call(tool, **arguments)
        assert set(payload) == {"error", "code"}, payload
        return payload["code"]


@pytest.fixture
def alice_with_flows(alice) -> Member:
    scope = Scope(owner=alice.user, project=None)
    caller = Caller.trusted(alice.user, via="command")
    for workflow_id, text in (("twice", TWICE), ("loop", LOOP)):
        workflow_save(caller=caller, scope=scope, workflow_id=workflow_id, source="global", config=text,
                      overwrite=False)
    return alice


def turns(run_id: str, node_id: str) -> list[str]:
    return list(Turn.objects.filter(node_run__run_id=run_id, node_run__node_id=node_id).values_list(
        "response", flat=True))


def test_the_pending_step_names_itself_and_the_name_changes_with_every_step(alice_with_flows):
    session = Session(alice_with_flows)
    started = session.call("start_workflow", workflow_id="loop")
    first = started["pendingStep"]["stepId"]
    node_run = NodeRun.objects.get(run_id=started["runId"], node_id="write")
    assert first == f"{node_run.pk}.1"
    assert session.call("get_run_status", run_id=started["runId"])["pendingStep"]["stepId"] == first

    again = session.call("advance_run", run_id=started["runId"], response="short", step_id=first)

    assert again["pendingStep"]["nodeId"] == "write" and again["pendingStep"]["stepId"] != first


def test_a_second_answer_to_a_step_is_refused_when_the_next_step_has_the_same_type(alice_with_flows):
    session = Session(alice_with_flows)
    started = session.call("start_workflow", workflow_id="twice")
    step_one = started["pendingStep"]["stepId"]
    moved = session.call("advance_run", run_id=started["runId"], response="one", step_id=step_one)
    assert moved["pendingStep"]["nodeId"] == "second"

    assert session.refused("advance_run", run_id=started["runId"], response="another one", step_id=step_one) == \
        "not_waiting"

    run = Run.objects.get(pk=started["runId"])
    assert (run.status, run.current_node) == ("paused", "second")
    assert turns(run.pk, "first") == ["one"] and turns(run.pk, "second") == []


def test_a_plain_retry_without_a_step_id_is_not_applied_to_the_next_step(alice_with_flows):
    session = Session(alice_with_flows)
    run_id = session.call("start_workflow", workflow_id="twice")["runId"]
    session.call("advance_run", run_id=run_id, response="one")

    assert session.refused("advance_run", run_id=run_id, response="one") == "not_waiting"

    assert turns(run_id, "first") == ["one"] and turns(run_id, "second") == []
    # Having looked at the run, the session may give the same answer to the new step on purpose.
    assert session.call("get_run_status", run_id=run_id)["pendingStep"]["nodeId"] == "second"
    assert session.call("advance_run", run_id=run_id, response="one")["pendingStep"]["nodeId"] == "ask"
    assert turns(run_id, "second") == ["one"]


def test_a_loop_visit_is_never_answered_by_an_answer_meant_for_the_visit_before(alice_with_flows):
    session = Session(alice_with_flows)
    started = session.call("start_workflow", workflow_id="loop")
    run_id, visit_one = started["runId"], started["pendingStep"]["stepId"]
    session.call("advance_run", run_id=run_id, response="draft", step_id=visit_one)

    assert session.refused("advance_run", run_id=run_id, response="draft again", step_id=visit_one) == "not_waiting"

    assert turns(run_id, "write") == ["draft"]
    assert NodeRun.objects.filter(run_id=run_id, node_id="write").count() == 2


def test_a_session_that_was_not_shown_the_step_cannot_answer_it(alice_with_flows):
    mine, other = Session(alice_with_flows), Session(alice_with_flows)
    run_id = mine.call("start_workflow", workflow_id="twice")["runId"]
    assert other.call("get_run_status", run_id=run_id)["pendingStep"]["nodeId"] == "first"
    mine.call("advance_run", run_id=run_id, response="mine")

    # The other session saw step one; its answer for it must not become step two's.
    assert other.refused("advance_run", run_id=run_id, response="theirs") == "not_waiting"
    assert Session(alice_with_flows).refused("advance_run", run_id=run_id, response="never shown") == "not_waiting"

    assert turns(run_id, "first") == ["mine"] and turns(run_id, "second") == []


def test_a_step_id_that_is_not_the_pending_one_is_refused_before_the_tool_is_checked(alice_with_flows):
    session = Session(alice_with_flows)
    started = session.call("start_workflow", workflow_id="twice")
    run_id, step_one = started["runId"], started["pendingStep"]["stepId"]
    step_two = session.call("advance_run", run_id=run_id, response="one", step_id=step_one)["pendingStep"]["stepId"]
    session.call("advance_run", run_id=run_id, response="two", step_id=step_two)

    # The run now waits at a human step: a stale answer is "not waiting", not "wrong tool".
    assert session.refused("advance_run", run_id=run_id, response="late", step_id=step_two) == "not_waiting"
    assert session.refused("resume_run", run_id=run_id, transition="keep", step_id=step_two) == "not_waiting"
    assert Run.objects.get(pk=run_id).current_node == "ask"
    asked = session.call("get_run_status", run_id=run_id)["pendingStep"]["stepId"]
    assert session.call("resume_run", run_id=run_id, transition="keep", step_id=asked)["status"] == "completed"
    # A second answer to the step that ended the run is told its step is gone, like any loser.
    assert session.refused("resume_run", run_id=run_id, transition="keep", step_id=asked) == "not_waiting"
    assert session.refused("resume_run", run_id=run_id, transition="keep") == "run_terminal"
    assert turns(run_id, "ask") == ["keep"]


def test_the_rest_api_takes_the_step_id_and_refuses_a_stale_one(alice_with_flows):
    api = Api(alice_with_flows)
    started = api.post("/api/runs/", {"workflow_id": "twice", **G}).json()
    step_one = started["pendingStep"]["stepId"]
    moved = api.post(f"/api/runs/{started['runId']}/advance/", {"response": "one", "step_id": step_one, **G})
    assert moved.status_code == 200 and moved.json()["pendingStep"]["nodeId"] == "second"

    stale = api.post(f"/api/runs/{started['runId']}/advance/", {"response": "again", "step_id": step_one, **G})
    retry = api.post(f"/api/runs/{started['runId']}/advance/", {"response": "one", **G})

    assert stale.status_code == 400 and stale.json()["code"] == "not_waiting"
    assert retry.status_code == 400 and retry.json()["code"] == "not_waiting"
    assert turns(started["runId"], "second") == []


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_of_twenty_racing_answers_to_one_step_exactly_one_is_applied():
    member = make_member("alice")
    caller = Caller.trusted(member.user, via="command")
    scope = Scope(owner=member.user, project=None)
    workflow_save(caller=caller, scope=scope, workflow_id="twice", source="global", config=TWICE, overwrite=False)
    run = engine.run_start(caller=caller, scope=scope, workflow_id="twice", source=None, context=None, host=None,
                           caps=engine.Caps())
    result = selectors.advance_result(run)
    engine.steps_shown_record(caller=caller, result=result)
    step_one = result["pendingStep"]["stepId"]
    go = threading.Barrier(20, timeout=30)
    outcomes: list[str] = []

    def answer(index: int) -> None:
        try:
            go.wait()
            # Half name the step; half rely on the step the run showed them.
            engine.run_answer(caller=caller, scope=scope, run_id=run.pk, tool="advance_run",
                              payload={"response": f"answer {index}"}, step_id=step_one if index % 2 else None)
            outcomes.append("applied")
        except engine.RunError as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=answer, args=(index,)) for index in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(outcomes) == ["applied"] + ["not_waiting"] * 19
    assert len(turns(run.pk, "first")) == 1 and turns(run.pk, "second") == []
    assert NodeRun.objects.filter(run=run, node_id="second").count() == 1
    run.refresh_from_db()
    assert (run.status, run.current_node) == ("paused", "second")
    assert StepShown.objects.get(run=run).answered_step_id == step_one
