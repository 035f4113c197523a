"""The run engine through the run tools over /mcp: every basic node type, human pause and resume,
subworkflows, maxIterations, spending caps, cancel, and cross-scope isolation."""

import json
from typing import Any

import pytest
from django.db import IntegrityError, transaction

from accounts.models import AuditEvent
from core.caller import Caller
from runs.models import NodeRun, Run, ScriptSettings, Turn
from tests.conftest import McpClient, Member, make_member
from workflows.services import project_register

G = {"global": True}

REVIEW = """\
name: Review loop
description: Draft, judge, revise
start: draft
context:
  type: object
  properties: {topic: {type: string}}
  required: [topic]
nodes:
  draft:
    type: ai_agent
    label: Draft the text
    prompt: "Write about {{ context.topic }}. Earlier feedback: {{ review.reasoning || 'none' }}"
    transitions: {done: review}
  review:
    type: ai_judge
    prompt: "Judge this draft: {{ draft.output }}"
    verdicts: [approve, revise]
    maxIterations: 2
    transitions: {approve: gate, revise: draft}
  gate:
    type: condition
    if: len(draft.output) > 5 and review.verdict == "approve"
    transitions: {true: ask, false: done}
  ask:
    type: human
    label: Publish?
    prompt: "Publish this? {{ draft.output }}"
    transitions: {publish: done, discard: dropped}
  done: {type: end, output: {text: "{{ draft.output }}", verdict: "{{ review.verdict }}"}}
  dropped: {type: end, status: failed}
"""

APPROVE = '{"verdict": "approve", "reasoning": "Clear and short."}'
REVISE = '{"verdict": "revise", "reasoning": "Too vague."}'


class Runs:
    def __init__(self, member: Member) -> None:
        self.member = member
        self.client = McpClient(member.token)
        self.client.initialize()

    def call(self, tool: str, **arguments: Any) -> tuple[bool, Any]:
        """Calls without a cwd go to the global namespace."""
        if "cwd" not in arguments:
            arguments.setdefault("global", True)
        result = self.client.call(tool, arguments)
        return result["isError"], json.loads(result["content"][0]["text"])

    def ok(self, tool: str, **arguments: Any) -> Any:
        is_error, payload = self.call(tool, **arguments)
        assert is_error is False and not (isinstance(payload, dict) and "code" in payload), payload
        return payload

    def err(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """A user error, as the reference has it: `{error, code}` in a result that is not isError."""
        is_error, payload = self.call(tool, **arguments)
        assert is_error is False and set(payload) >= {"error", "code"}, payload
        return payload

    def workflow(self, workflow_id: str, config: str, **scope: Any) -> None:
        self.ok("create_workflow", id=workflow_id, config=config, **(scope or G))


@pytest.fixture
def tools(db) -> Runs:
    runs = Runs(make_member("alice"))
    runs.workflow("review", REVIEW)
    return runs


def test_start_pauses_at_the_first_ai_node_with_a_rendered_prompt(tools):
    started = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"}, **G)
    run_id = started["runId"]
    assert run_id.isalnum()
    assert started["status"] == "paused"
    assert started["url"] == f"http://127.0.0.1:8000/open/runs/{run_id}?project=global"
    assert started["workflow"] == {"id": "review", "name": "Review loop", "description": "Draft, judge, revise"}
    assert started["url"] in started["narration"] and "Review loop" in started["narration"]
    assert started["pendingStep"] == {
        "runId": run_id, "stepId": f"{NodeRun.objects.get(run_id=run_id).pk}.1", "nodeId": "draft",
        "nodeType": "ai_agent", "model": "claude-sonnet-4-5",
        "prompt": "Write about owls. Earlier feedback: none", "validTransitions": ["done"],
        "label": "Draft the text", "transitions": [{"event": "done", "target": "review"}]}
    assert {k: started[k] for k in ("totalCostUsd", "inputTokens", "billingMode")} == {
        "totalCostUsd": 0.0, "inputTokens": 0, "billingMode": "subscription"}
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.current_node, run.workflow_key) == ("paused", "draft", "review")
    assert run.revision.yaml_text == REVIEW


def test_a_context_that_breaks_the_schema_is_refused_and_starts_nothing(tools):
    error = tools.err("start_workflow", workflow_id="review", context={"topic": 3}, **G)
    assert error["code"] == "invalid_context" and "topic" in error["error"]
    assert not Run.objects.exists()
    assert tools.err("start_workflow", workflow_id="nope", **G)["code"] == "not_found"


def test_a_run_goes_through_judge_condition_and_human_to_its_end(tools):
    run_id = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"}, **G)["runId"]
    judged = tools.ok("advance_run", run_id=run_id, response="Owls hunt at night.", thinking="Keep it short.")
    step = judged["pendingStep"]
    assert (step["nodeId"], step["prompt"]) == ("review", "Judge this draft: Owls hunt at night.")
    assert step["validTransitions"] == ["approve", "revise"]
    asked = tools.ok("advance_run", run_id=run_id, response=APPROVE)
    assert asked["pendingStep"]["nodeType"] == "human"
    assert asked["pendingStep"]["validTransitions"] == ["publish", "discard"]
    assert asked["pendingStep"]["prompt"] == "Publish this? Owls hunt at night."
    done = tools.ok("resume_run", run_id=run_id, transition="publish")
    assert done["status"] == "completed" and "pendingStep" not in done
    assert done["output"] == {"text": "Owls hunt at night.", "verdict": "approve"}
    nodes = list(NodeRun.objects.filter(run_id=run_id).values_list("node_id", "status", "event"))
    assert nodes == [("draft", "completed", "done"), ("review", "completed", "approve"),
                     ("gate", "completed", "true"), ("ask", "completed", "publish"), ("done", "completed", "")]
    assert Turn.objects.get(node_run__node_id="draft").thinking == "Keep it short."
    assert done["totalCostUsd"] > 0 and done["inputTokens"] > 0


def test_a_bad_judge_answer_fails_and_leaves_the_run_where_it_was(tools):
    run_id = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"}, **G)["runId"]
    tools.ok("advance_run", run_id=run_id, response="A draft.")
    for bad in ("approve", '{"verdict": "maybe"}', "[]"):
        error = tools.err("advance_run", run_id=run_id, response=bad)
        assert error["code"] == "answer_rejected"
    status = tools.ok("get_run_status", run_id=run_id, **G)
    assert status["pendingStep"]["nodeId"] == "review"
    assert not Turn.objects.filter(node_run__node_id="review").exists()


def test_only_resume_run_passes_a_human_node_and_only_with_a_valid_choice(tools):
    run_id = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"}, **G)["runId"]
    tools.ok("advance_run", run_id=run_id, response="Owls hunt at night.")
    tools.ok("advance_run", run_id=run_id, response=APPROVE)
    assert tools.err("advance_run", run_id=run_id, response="publish")["code"] == "wrong_tool"
    assert tools.err("resume_run", run_id=run_id, transition="maybe")["code"] == "answer_rejected"
    failed = tools.ok("resume_run", run_id=run_id, transition="discard")
    assert failed["status"] == "failed" and failed["stop_reason"] == "failed_end"
    assert tools.err("resume_run", run_id=run_id, transition="publish")["code"] == "run_terminal"


def test_max_iterations_stops_the_run_with_a_clear_reason(tools):
    run_id = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"}, **G)["runId"]
    for _ in range(2):
        tools.ok("advance_run", run_id=run_id, response="Draft")
        result = tools.ok("advance_run", run_id=run_id, response=REVISE)
    assert result["pendingStep"]["prompt"] == "Write about owls. Earlier feedback: Too vague."
    stopped = tools.ok("advance_run", run_id=run_id, response="Draft 3")
    assert stopped["status"] == "failed"
    assert stopped["stop_reason"] == "max_iterations_exceeded"
    assert "maxIterations is 2" in stopped["error"]
    history = tools.ok("get_run_history", run_id=run_id, **G)
    assert history["run"]["stop_reason"] == "max_iterations_exceeded"
    assert [n["attempts"] for n in history["nodes"] if n["nodeId"] == "review"] == [1, 2]


def test_the_dollar_cap_stops_the_run(tools):
    run_id = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"}, spending_cap_usd=0.01,
                      **G)["runId"]
    stopped = tools.ok("advance_run", run_id=run_id, response="Draft", usage={"costUsd": 0.02})
    assert stopped["status"] == "failed" and stopped["stop_reason"] == "spending_cap_exceeded"
    assert stopped["totalCostUsd"] == 0.02
    assert Run.objects.get(pk=run_id).stop_reason == "spending_cap_exceeded"


def test_the_token_cap_stops_the_run(tools):
    run_id = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"}, spending_cap_tokens=1000,
                      **G)["runId"]
    going = tools.ok("advance_run", run_id=run_id, response="Draft", usage={"inputTokens": 400, "outputTokens": 100})
    assert going["status"] == "paused" and going["inputTokens"] == 400
    stopped = tools.ok("advance_run", run_id=run_id, response=APPROVE,
                       usage={"inputTokens": 400, "outputTokens": 200})
    assert stopped["stop_reason"] == "spending_cap_exceeded"
    assert stopped["inputTokens"] + stopped["outputTokens"] == 1100


def test_usage_prices_the_turn_with_the_configured_model(tools):
    run_id = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"}, **G)["runId"]
    result = tools.ok("advance_run", run_id=run_id, response="Draft",
                      usage={"inputTokens": 1_000_000, "outputTokens": 100_000})
    assert result["totalCostUsd"] == 4.5  # claude-sonnet-4-5: $3 in, $15 out per million
    turn = Turn.objects.get()
    assert (turn.estimated, turn.input_tokens, turn.output_tokens) == (False, 1_000_000, 100_000)


def test_a_desktop_chat_run_is_metered(tools):
    run_id = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"}, host="desktop_chat",
                      **G)["runId"]
    result = tools.ok("advance_run", run_id=run_id, response="Draft", usage={"costUsd": 0.5})
    assert (result["billingMode"], result["meteredCostUsd"], result["subscriptionEquivCostUsd"]) == (
        "metered", 0.5, 0.0)


CHILD = """\
name: Polish
start: polish
nodes:
  polish: {type: ai_agent, prompt: "Polish: {{ context.text }}", transitions: {done: end}}
  end: {type: end, output: "{{ polish.output }}"}
"""

PARENT = """\
name: Parent
start: draft
nodes:
  draft: {type: ai_agent, prompt: Draft, transitions: {done: child}}
  child:
    type: subworkflow
    workflow: polish
    context: {text: "{{ draft.output }}"}
    transitions: {completed: done, failed: broken}
  done: {type: end, output: "{{ child }}"}
  broken: {type: end, status: failed}
"""


def test_a_subworkflow_runs_as_a_child_and_the_parent_moves_on_when_it_ends(tools):
    tools.workflow("polish", CHILD)
    tools.workflow("parent", PARENT)
    run_id = tools.ok("start_workflow", workflow_id="parent", **G)["runId"]
    waiting = tools.ok("advance_run", run_id=run_id, response="rough text")
    child_id = waiting["awaitingChild"]["childRunId"]
    assert waiting["runId"] == run_id and waiting["status"] == "paused"
    assert waiting["pendingStep"]["runId"] == child_id
    assert waiting["pendingStep"]["prompt"] == "Polish: rough text"
    finished = tools.ok("advance_run", run_id=child_id, response="polished text", usage={"costUsd": 0.25})
    assert finished["runId"] == run_id
    assert finished["status"] == "completed" and finished["output"] == "polished text"
    assert finished["totalCostUsd"] >= 0.25
    history = tools.ok("get_run_history", run_id=run_id, **G)
    assert history["run"]["childRunIds"] == [child_id]
    child_history = tools.ok("get_run_history", run_id=child_id, **G)
    assert child_history["run"]["parentRunId"] == run_id


def test_cancel_ends_the_run_its_node_and_its_children(tools):
    tools.workflow("polish", CHILD)
    tools.workflow("parent", PARENT)
    run_id = tools.ok("start_workflow", workflow_id="parent", **G)["runId"]
    child_id = tools.ok("advance_run", run_id=run_id, response="rough")["awaitingChild"]["childRunId"]
    cancelled = tools.ok("cancel_run", run_id=run_id, **G)
    assert cancelled["status"] == "cancelled"
    assert Run.objects.get(pk=child_id).status == "cancelled"
    assert NodeRun.objects.get(run_id=run_id, node_id="child").status == "cancelled"
    assert NodeRun.objects.get(run_id=child_id, node_id="polish").status == "cancelled"
    assert tools.err("cancel_run", run_id=run_id, **G)["code"] == "run_terminal"


def test_runs_are_seen_only_from_their_own_scope(db):
    alice = Runs(make_member("alice"))
    caller = Caller.trusted(alice.member.user, via="command")
    project_register(caller=caller, path="/home/alice/shop", project_id="shop")
    project_register(caller=caller, path="/home/alice/blog", project_id="blog")
    shop, blog = {"cwd": "/home/alice/shop"}, {"cwd": "/home/alice/blog"}
    alice.workflow("review", REVIEW, **G)
    in_shop = alice.ok("start_workflow", workflow_id="review", context={"topic": "a"}, **shop)
    assert in_shop["url"].endswith("?project=shop")
    in_global = alice.ok("start_workflow", workflow_id="review", context={"topic": "b"}, **G)
    for scope in (blog, G):
        assert alice.err("get_run_status", run_id=in_shop["runId"], **scope) == {
            "error": "Run not found.", "code": "run_not_found"}
        assert alice.err("advance_run", run_id=in_shop["runId"], response="x", **scope)["error"] == "Run not found."
    assert alice.err("cancel_run", run_id=in_global["runId"], **shop)["error"] == "Run not found."
    assert [r["id"] for r in alice.ok("list_runs", **shop)] == [in_shop["runId"]]
    assert [r["id"] for r in alice.ok("list_runs", **G)] == [in_global["runId"]]
    assert alice.ok("list_runs", **blog) == []
    bob = Runs(make_member("bob"))
    assert bob.err("get_run_status", run_id=in_global["runId"], **G)["error"] == "Run not found."
    assert bob.ok("list_runs", **G) == []
    assert alice.ok("get_run_status", run_id=in_shop["runId"], **shop)["status"] == "paused"


def test_list_runs_filters_by_workflow_status_time_and_limit(tools):
    first = tools.ok("start_workflow", workflow_id="review", context={"topic": "a"}, **G)["runId"]
    second = tools.ok("start_workflow", workflow_id="review", context={"topic": "b"}, **G)["runId"]
    tools.ok("cancel_run", run_id=first, **G)
    rows = tools.ok("list_runs", **G)
    assert [r["id"] for r in rows] == [second, first]
    assert set(rows[0]) == {"id", "workflowId", "workflowName", "status", "startedAt", "completedAt", "source",
                            "workflowSource", "kind"}
    assert [r["id"] for r in tools.ok("list_runs", status="cancelled", **G)] == [first]
    assert [r["id"] for r in tools.ok("list_runs", limit=1, **G)] == [second]
    assert tools.ok("list_runs", workflow_id="other", **G) == []
    assert tools.ok("list_runs", since="2999-01-01T00:00:00Z", **G) == []
    # Arguments the tool's schema refuses are refused by the tool layer, before the tool runs, as the
    # user error they are.
    assert tools.call("list_runs", limit=501, **G) == (False, {
        "error": "Invalid arguments for list_runs: limit: Input should be less than or equal to 500.",
        "code": "invalid_arguments"})


def test_a_cap_that_stops_a_child_stops_the_parent_too(tools):
    tools.workflow("polish", CHILD)
    tools.workflow("parent", PARENT)
    run_id = tools.ok("start_workflow", workflow_id="parent", spending_cap_usd=1.0, **G)["runId"]
    waiting = tools.ok("advance_run", run_id=run_id, response="rough", usage={"costUsd": 0.6})
    child_id = waiting["awaitingChild"]["childRunId"]
    assert float(Run.objects.get(pk=child_id).spending_cap_usd) == 0.4  # what the parent had left
    stopped = tools.ok("advance_run", run_id=child_id, response="polished", usage={"costUsd": 0.5})
    assert stopped["runId"] == run_id
    assert (stopped["status"], stopped["stop_reason"]) == ("failed", "spending_cap_exceeded")
    assert stopped["totalCostUsd"] == 1.1
    assert Run.objects.get(pk=child_id).stop_reason == "spending_cap_exceeded"


def test_the_site_has_one_script_settings_row(db):
    ScriptSettings.objects.create(user=None, scripts_enabled=False)
    with pytest.raises(IntegrityError), transaction.atomic():
        ScriptSettings.objects.create(user=None, scripts_enabled=True)
    assert ScriptSettings.objects.count() == 1


def test_starting_a_run_a_persons_choice_and_a_cancel_are_audited(tools):
    run_id = tools.ok("start_workflow", workflow_id="review", context={"topic": "owls"})["runId"]
    tools.ok("advance_run", run_id=run_id, response="Owls hunt at night.")
    tools.ok("advance_run", run_id=run_id, response=APPROVE)
    tools.ok("resume_run", run_id=run_id, transition="publish")
    second = tools.ok("start_workflow", workflow_id="review", context={"topic": "bats"})["runId"]
    tools.ok("cancel_run", run_id=second)
    events = list(AuditEvent.objects.order_by("id").filter(action__startswith="run.").values_list(
        "action", "actor__username", "target", "detail"))
    assert [(action, actor) for action, actor, _, _ in events] == [
        ("run.start", "alice"), ("run.resume", "alice"), ("run.start", "alice"), ("run.cancel", "alice")]
    assert events[1][2] == f"run {run_id} of workflow 'review'"
    assert events[1][3] == {"project": None, "node": "ask", "choice": "publish"}
