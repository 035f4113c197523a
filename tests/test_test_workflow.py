"""test_workflow over /mcp: a workflow runs end to end on the real engine (scripts in the real sandbox),
every AI and human step answered from mocks, and the test run is gone afterwards whatever happened."""

import json
from typing import Any

import pytest

from core.caller import Caller
from runs.models import NodeRun, Run, Turn
from tests.conftest import McpClient, Member, make_member
from workflows.scoping import Scope
from workflows.services import workflow_save

pytestmark = pytest.mark.django_db

G = {"global": True}

REVIEW_LOOP = """\
name: Review loop
start: draft
nodes:
  draft:
    type: ai_agent
    prompt: "Write about {{ context.topic }}. Feedback: {{ review.reasoning || \\"none\\" }}"
    transitions: {done: review}
  review:
    type: ai_judge
    prompt: "Judge this draft: {{ draft.output }}"
    verdicts: [approve, revise]
    transitions: {approve: sign_off, revise: draft}
    maxIterations: 3
  sign_off:
    type: human
    prompt: "Publish {{ draft.output }}?"
    transitions: {publish: publish, stop: stopped}
  publish:
    type: script
    script: "echo '{\\"ok\\": true}'"
    transitions: {success: done, failure: stopped}
  done:
    type: end
    output: {text: "{{ draft.output }}"}
  stopped: {type: end, status: failed}
"""

REVIEW_MOCKS = {
    "draft": ["A short draft", "A longer, better draft"],
    "review": [{"verdict": "revise", "reasoning": "Too short."}, '{"verdict": "approve", "reasoning": "Good."}'],
    "sign_off": "publish",
}


class Tools:
    """Calls the run tools the way a client does and unpacks the JSON text block."""

    def __init__(self, member: Member) -> None:
        self.client = McpClient(member.token)
        self.client.initialize()

    def ok(self, tool: str, **arguments: Any) -> Any:
        result = self.client.call(tool, arguments)
        assert result["isError"] is False, result
        return json.loads(result["content"][0]["text"])

    def err(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = self.client.call(tool, arguments)
        assert result["isError"] is True, result
        return json.loads(result["content"][0]["text"])


@pytest.fixture
def tools(alice) -> Tools:
    return Tools(alice)


def store(member: Member, workflow_id: str, text: str) -> None:
    workflow_save(caller=Caller.trusted(member.user, via="command"), scope=Scope(owner=member.user, project=None),
                  workflow_id=workflow_id, source=None, config=text, overwrite=False)


def node_ids(trace: list[dict[str, Any]]) -> list[str]:
    return [node["nodeId"] for node in trace]


def test_it_runs_a_review_loop_to_the_end_with_mocks(alice, tools):
    store(alice, "review", REVIEW_LOOP)
    result = tools.ok("test_workflow", workflow_id="review", context={"topic": "otters"},
                      mock_responses=REVIEW_MOCKS, **G)
    assert result["ok"] is True
    assert result["finalStatus"] == "completed"
    assert isinstance(result["durationMs"], int)
    trace = result["nodeTrace"]
    assert node_ids(trace) == ["draft", "review", "draft", "review", "sign_off", "publish", "done"]
    assert trace[0]["turns"][0]["prompt"] == "Write about otters. Feedback: none"
    assert trace[2]["turns"][0]["prompt"] == "Write about otters. Feedback: Too short."
    assert [n["output"] for n in trace[:5]] == [
        {"output": "A short draft"}, {"verdict": "revise", "reasoning": "Too short."},
        {"output": "A longer, better draft"}, {"verdict": "approve", "reasoning": "Good."}, {"choice": "publish"}]
    assert trace[5]["output"] == {"ok": True} and trace[5]["event"] == "success"
    assert trace[6]["output"] == {"text": "A longer, better draft"}
    assert Run.objects.count() == 0
    assert NodeRun.objects.count() == 0 and Turn.objects.count() == 0


def test_it_tests_an_inline_config(tools):
    result = tools.ok("test_workflow", config=REVIEW_LOOP, context={"topic": "owls"}, mock_responses={
        "draft": "Owls", "review": '{"verdict": "approve", "reasoning": "ok"}', "sign_off": "stop"}, **G)
    assert result["finalStatus"] == "failed"
    assert node_ids(result["nodeTrace"]) == ["draft", "review", "sign_off", "stopped"]
    assert Run.objects.count() == 0


def test_it_fails_fast_on_a_missing_mock_naming_the_node(alice, tools):
    store(alice, "review", REVIEW_LOOP)
    error = tools.err("test_workflow", workflow_id="review", context={"topic": "otters"},
                      mock_responses={"draft": "A draft"}, **G)
    assert error["ok"] is False
    assert error["code"] == "missing_mock"
    assert error["nodeId"] == "review" and error["nodeType"] == "ai_judge"
    assert "'review'" in error["message"]
    assert error["finalStatus"] == "paused"
    assert node_ids(error["nodeTrace"]) == ["draft", "review"]
    assert Run.objects.count() == 0


def test_a_mock_list_that_runs_out_is_a_missing_mock(alice, tools):
    store(alice, "review", REVIEW_LOOP)
    error = tools.err("test_workflow", workflow_id="review", context={"topic": "otters"}, mock_responses={
        **REVIEW_MOCKS, "draft": ["Only one draft"]}, **G)
    assert error["code"] == "missing_mock"
    assert error["nodeId"] == "draft"
    assert "ran out" in error["message"]
    assert node_ids(error["nodeTrace"]) == ["draft", "review", "draft"]
    assert Run.objects.count() == 0


def test_a_judge_mock_that_is_not_an_envelope_is_a_runner_error(alice, tools):
    store(alice, "review", REVIEW_LOOP)
    error = tools.err("test_workflow", workflow_id="review", context={"topic": "otters"},
                      mock_responses={**REVIEW_MOCKS, "review": "Looks good to me"}, **G)
    assert error["code"] == "runner_error"
    assert error["nodeId"] == "review"
    assert "verdict" in error["message"]
    assert error["finalStatus"] == "paused"
    assert Run.objects.count() == 0


def test_it_stops_with_timeout_when_the_wall_clock_runs_out(tools):
    config = {"name": "Slow", "start": "wait", "nodes": {
        "wait": {"type": "script", "script": "sleep 2", "timeout": 10, "transitions": {"success": "ask"}},
        "ask": {"type": "ai_agent", "prompt": "Go on", "transitions": {"done": "done"}},
        "done": {"type": "end"}}}
    error = tools.err("test_workflow", config=config, mock_responses={"ask": "ok"}, timeout_ms=300, **G)
    assert error["code"] == "timeout"
    assert error["durationMs"] >= 300
    assert node_ids(error["nodeTrace"]) == ["wait", "ask"]
    assert Run.objects.count() == 0


def test_an_invalid_config_is_refused_with_its_errors(tools):
    config = {"name": "Broken", "start": "draft", "nodes": {
        "draft": {"type": "ai_agent", "prompt": "Write", "transitions": {"done": "nowhere"}}}}
    error = tools.err("test_workflow", config=config, **G)
    assert error["ok"] is False and error["code"] == "invalid_config"
    assert any("nowhere" in line for line in error["details"])
    assert tools.err("test_workflow", config="name: [unclosed", **G)["code"] == "invalid_config"
    assert Run.objects.count() == 0


def test_an_unknown_workflow_is_workflow_not_found(tools):
    error = tools.err("test_workflow", workflow_id="nope", **G)
    assert error["code"] == "workflow_not_found"
    assert "nope" in error["message"]


def test_the_repo_source_without_a_project_is_no_repo_source(tools):
    error = tools.err("test_workflow", workflow_id="review", source="repo", **G)
    assert error["code"] == "no_repo_source" and "needs a project" in error["message"]


@pytest.mark.parametrize("arguments", [{}, {"workflow_id": "review", "config": REVIEW_LOOP}])
def test_it_needs_exactly_one_of_workflow_id_and_config(tools, arguments):
    error = tools.err("test_workflow", **arguments, **G)
    assert error == {"ok": False, "code": "invalid_input", "message": "Pass exactly one of workflow_id or config."}


def test_a_context_that_breaks_the_schema_is_invalid_input(tools):
    config = {"name": "Typed", "start": "done", "context": {"type": "object", "required": ["topic"]},
              "nodes": {"done": {"type": "end"}}}
    error = tools.err("test_workflow", config=config, context={}, **G)
    assert error["code"] == "invalid_input"
    assert "topic" in error["message"]
    assert Run.objects.count() == 0


def test_a_consensus_node_is_answered_from_a_list_mock(tools):
    config = {"name": "Vote", "start": "gate", "nodes": {
        "gate": {"type": "consensus", "prompt": "Ship it?", "agents": 3, "verdicts": ["ship", "hold"],
                 "transitions": {"ship": "shipped", "hold": "held", "no_consensus": "held"}},
        "shipped": {"type": "end"}, "held": {"type": "end", "status": "failed"}}}
    ship, hold = '{"verdict": "ship", "reasoning": "fine"}', {"verdict": "hold", "reasoning": "wait"}
    result = tools.ok("test_workflow", config=config, mock_responses={"gate": [ship, hold, ship]}, **G)
    assert result["finalStatus"] == "completed"
    assert node_ids(result["nodeTrace"]) == ["gate", "shipped"]
    gate = result["nodeTrace"][0]
    assert gate["event"] == "ship" and gate["output"]["verdict"] == "ship"
    assert Run.objects.count() == 0


def test_a_usc_consensus_node_takes_generate_answers_then_the_aggregate(tools):
    config = {"name": "Most consistent", "start": "answer", "nodes": {
        "answer": {"type": "consensus", "mode": "usc", "prompt": "Name a colour", "agents": 3,
                   "transitions": {"done": "done", "no_consensus": "done"}},
        "done": {"type": "end"}}}
    mocks = {"answer": ["red", "blue", "red", {"reasoning": "red twice", "index": 0}]}
    result = tools.ok("test_workflow", config=config, mock_responses=mocks, **G)
    assert result["finalStatus"] == "completed"
    assert result["nodeTrace"][0]["event"] == "done"
    assert result["nodeTrace"][0]["output"]["output"] == "red"


def test_a_map_node_takes_extract_branch_and_reduce_answers_in_order(tools):
    config = {"name": "Map", "start": "each", "nodes": {
        "each": {"type": "map", "extract": "List the fruits", "prompt": "Describe {{ item }}",
                 "reduce": "Combine {{ results }}", "transitions": {"done": "done", "failed": "done"}},
        "done": {"type": "end", "output": {"summary": "{{ each.output }}"}}}}
    mocks = {"each": ['["apple", "pear"]', "Apples are red.", "Pears are green.", "Red and green."]}
    result = tools.ok("test_workflow", config=config, mock_responses=mocks, **G)
    assert result["finalStatus"] == "completed"
    each = result["nodeTrace"][0]
    assert each["event"] == "done"
    assert each["output"]["output"] == "Red and green."
    assert result["nodeTrace"][1]["output"] == {"summary": "Red and green."}


def test_a_round_robin_node_takes_the_resolve_answer_then_one_verdict_per_matchup(tools):
    config = {"name": "Pick", "start": "pick", "nodes": {
        "pick": {"type": "round_robin", "resolve": "List three colours", "criterion": "Which is warmer?",
                 "transitions": {"done": "done"}},
        "done": {"type": "end", "output": {"winner": "{{ pick.winner }}"}}}}
    # Matchups m0-1, m0-2, m1-2 over [red, blue, green].
    mocks = {"pick": ['["red", "blue", "green"]', "A", {"winner": "A", "margin": 90, "reasoning": "red is warm"},
                      {"winner": "B", "margin": 10}]}
    result = tools.ok("test_workflow", config=config, mock_responses=mocks, **G)
    assert result["finalStatus"] == "completed"
    pick = result["nodeTrace"][0]
    assert pick["output"]["ranking"] == ["red", "green", "blue"]
    assert [t["phase"] for t in pick["turns"]] == ["resolve", "first", "first", "first"]
    assert json.loads(pick["turns"][2]["response"]) == {"id": "m0-2", "winner": "A", "margin": 90,
                                                         "reasoning": "red is warm"}
    assert result["nodeTrace"][1]["output"] == {"winner": "red"}


def test_a_string_mock_answers_every_visit_of_a_loop(tools):
    config = {"name": "Retry", "start": "try", "nodes": {
        "try": {"type": "ai_agent", "prompt": "Try", "transitions": {"done": "check"}},
        "check": {"type": "ai_judge", "prompt": "Good?", "verdicts": ["yes", "no"],
                  "transitions": {"yes": "done", "no": "try"}, "maxIterations": 2},
        "done": {"type": "end"}}}
    mocks = {"try": "Attempt", "check": ['{"verdict": "no"}', '{"verdict": "yes"}']}
    result = tools.ok("test_workflow", config=config, mock_responses=mocks, **G)
    assert node_ids(result["nodeTrace"]) == ["try", "check", "try", "check", "done"]
    assert [n["output"] for n in result["nodeTrace"] if n["nodeId"] == "try"] == [{"output": "Attempt"}] * 2


def test_a_subworkflow_child_is_answered_from_the_same_mocks(alice, tools):
    store(alice, "summarize", """\
name: Summarize
start: summary
nodes:
  summary:
    type: ai_agent
    prompt: "Summarize {{ context.text }}"
    transitions: {done: done}
  done: {type: end, output: {summary: "{{ summary.output }}"}}
""")
    config = {"name": "Parent", "start": "delegate", "nodes": {
        "delegate": {"type": "subworkflow", "workflow": "summarize", "context": {"text": "the report"},
                     "transitions": {"completed": "done", "failed": "done"}},
        "done": {"type": "end", "output": {"child": "{{ delegate.summary }}"}}}}
    result = tools.ok("test_workflow", config=config, mock_responses={"summary": "In short."}, **G)
    assert result["finalStatus"] == "completed"
    delegate, done = result["nodeTrace"]
    assert delegate["nodeType"] == "subworkflow" and delegate["event"] == "completed"
    assert node_ids(delegate["children"]) == ["summary", "done"]
    assert delegate["children"][0]["turns"][0]["prompt"] == "Summarize the report"
    assert done["output"] == {"child": "In short."}
    assert Run.objects.count() == 0


def test_the_test_run_is_gone_afterwards_and_never_listed(alice, tools):
    store(alice, "review", REVIEW_LOOP)
    kept = tools.ok("start_workflow", workflow_id="review", context={"topic": "kept"}, **G)
    before = Run.objects.count()
    tools.ok("test_workflow", workflow_id="review", context={"topic": "x"}, mock_responses=REVIEW_MOCKS, **G)
    tools.err("test_workflow", workflow_id="review", context={"topic": "x"}, mock_responses={}, **G)
    assert Run.objects.count() == before == 1
    assert tools.ok("list_runs", kind="test", **G) == []
    assert [r["id"] for r in tools.ok("list_runs", kind="all", **G)] == [kept["runId"]]


def test_a_token_without_runs_execute_cannot_test(db):
    reader = Tools(make_member("reader", scopes=["runs:read"]))
    error = reader.err("test_workflow", config=REVIEW_LOOP, **G)
    assert error["code"] == "insufficient_scope"
