"""An answer reads and writes its run, the answered visit, its turn, the next visit and what its
session was shown once each: the statements are counted as a production request runs them (no
test transaction around them), so a change that reads a row again shows here."""

import json
import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.caller import Caller
from runs.models import NodeRun, Run, StepShown, Turn
from tests.conftest import McpClient, make_member
from workflows.scoping import Scope
from workflows.services import workflow_save

REVIEW = """\
name: Review
start: draft
nodes:
  draft: {type: ai_agent, prompt: "Write about {{ context.topic }}", maxIterations: 3, transitions: {done: check}}
  check: {type: condition, if: "len(draft.output) > 0", transitions: {true: review, false: draft}}
  review: {type: ai_judge, prompt: "Judge {{ draft.output }}", verdicts: [approve, revise], maxIterations: 3,
           transitions: {approve: done, revise: draft}}
  done: {type: end, output: "{{ draft.output }}"}
"""
APPROVE = '{"verdict": "approve", "reasoning": "fine"}'
G = {"global": True}
pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)
TABLE = re.compile(r'^(SELECT .*? FROM|INSERT INTO|UPDATE|DELETE FROM) "(\w+)"')


def statements(queries: CaptureQueriesContext) -> list[str]:
    """Each statement as its verb and first table ("UPDATE runs_run"), savepoints left out."""
    found = []
    for query in queries.captured_queries:
        match = TABLE.match(query["sql"])
        if match:
            found.append(f"{match.group(1).split()[0]} {match.group(2)}")
    return found


def call(client: McpClient, tool: str, **arguments: Any) -> dict[str, Any]:
    result = client.call(tool, {**arguments, **G})
    assert result["isError"] is False, result
    return json.loads(result["content"][0]["text"])


@pytest.fixture
def session() -> McpClient:
    member = make_member("alice")
    workflow_save(caller=Caller.trusted(member.user, via="command"), scope=Scope(owner=member.user, project=None),
                  workflow_id="review", source="global", config=REVIEW, overwrite=False)
    client = McpClient(member.token)
    client.initialize()
    call(client, "list_runs")  # the token and the session are known to the process from here on
    return client


def test_an_answer_that_pauses_again_runs_eight_statements_of_its_own(session):
    run_id = call(session, "start_workflow", workflow_id="review", context={"topic": "tea"})["runId"]

    with CaptureQueriesContext(connection) as queries:
        result = call(session, "advance_run", run_id=run_id, response="A draft")

    assert result["pendingStep"]["nodeId"] == "review"
    assert [s for s in statements(queries) if "runs_" in s] == [
        "SELECT runs_run",  # the caller's run, under its row lock
        "SELECT runs_noderun",  # its paused visit
        "UPDATE runs_stepshown",  # the step this session was shown is the pending one: answered
        "INSERT runs_turn",
        "UPDATE runs_noderun",  # the answered visit, decided
        "INSERT runs_noderun",  # the condition's visit, decided at once
        "INSERT runs_noderun",  # the judge's visit, paused
        "UPDATE runs_run",
        "UPDATE runs_stepshown",  # the judge's step, shown to this session
    ]
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.current_node, run.visits) == ("paused", "review", {"draft": 1, "check": 1, "review": 1})
    assert list(NodeRun.objects.filter(run=run).values_list("node_id", "status")) == [
        ("draft", "completed"), ("check", "completed"), ("review", "paused")]
    assert StepShown.objects.get(run=run).step_id == result["pendingStep"]["stepId"]


def test_the_answer_that_ends_the_run_writes_the_end_and_shows_nothing(session):
    run_id = call(session, "start_workflow", workflow_id="review", context={"topic": "tea"})["runId"]
    call(session, "advance_run", run_id=run_id, response="A draft")

    with CaptureQueriesContext(connection) as queries:
        result = call(session, "advance_run", run_id=run_id, response=APPROVE)

    assert (result["status"], result["output"]) == ("completed", "A draft")
    assert [s for s in statements(queries) if "runs_" in s] == [
        "SELECT runs_run", "SELECT runs_noderun", "UPDATE runs_stepshown", "INSERT runs_turn",
        "UPDATE runs_noderun", "INSERT runs_noderun", "UPDATE runs_run"]
    assert Turn.objects.filter(node_run__run_id=run_id).count() == 2
    assert Run.objects.get(pk=run_id).output == "A draft"


def test_starting_a_run_writes_it_and_its_first_visit_once(session):
    with CaptureQueriesContext(connection) as queries:
        result = call(session, "start_workflow", workflow_id="review", context={"topic": "tea"})

    assert result["pendingStep"]["nodeId"] == "draft"
    assert [s for s in statements(queries) if "runs_" in s] == [
        "INSERT runs_run", "INSERT runs_noderun", "UPDATE runs_run", "INSERT runs_stepshown"]
