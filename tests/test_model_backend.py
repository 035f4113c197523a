"""The model backend answers the AI steps of runs a trigger started, which have no host present:
through the engine's own answer path (with the step's identity), with its usage costed and capped,
retrying answers the engine refuses and a backend that is down, and leaving the step to a host,
who is told why, when it cannot answer. Every other run waits for its host, as before."""

import json
import socket
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.forms.models import model_to_dict

from core.caller import Caller
from runs import answerers, engine, selectors, tasks
from runs.models import NodeRun, Run, Turn
from tests.conftest import McpClient, Member
from workflows.models import ConfiguredModel, Playbook, Trigger
from workflows.scoping import Scope
from workflows.services import workflow_save

DIGEST = """\
name: Nightly digest
start: draft
nodes:
  draft: {type: ai_agent, prompt: "Summarise {{ context.topic }}.", transitions: {done: review}}
  review:
    type: ai_judge
    prompt: "Judge this summary: {{ draft.output }}"
    verdicts: [approve, revise]
    transitions: {approve: done, revise: dropped}
  done: {type: end, output: {text: "{{ draft.output }}", verdict: "{{ review.verdict }}"}}
  dropped: {type: end, status: failed}
"""

POLISH = """\
name: Polish
start: polish
nodes:
  polish: {type: ai_agent, prompt: "Polish: {{ context.text }}", transitions: {done: end}}
  end: {type: end, output: "{{ polish.output }}"}
"""

PARENT = """\
name: Parent
start: child
nodes:
  child:
    type: subworkflow
    workflow: polish
    context: {text: "{{ context.topic }}"}
    transitions: {completed: title, failed: broken}
  title: {type: ai_agent, prompt: "Title for: {{ child }}", transitions: {done: done}}
  done: {type: end, output: {text: "{{ child }}", title: "{{ title.output }}"}}
  broken: {type: end, status: failed}
"""

SUMMARY = "Owls hunt at night and sleep by day."
APPROVE = '{"verdict": "approve", "reasoning": "Short and right."}'
KEY = "sk-test-backend-key-0123456789"
NO_CAPS = engine.Caps()


@pytest.fixture
def priced(db) -> ConfiguredModel:
    # $1 per million input tokens and $2 per million output tokens.
    return ConfiguredModel.objects.create(model_id="fake-model", input_usd_per_mtok=Decimal("1"),
                                          output_usd_per_mtok=Decimal("2"))


def workflow(member: Member, workflow_id: str, text: str) -> Any:
    return workflow_save(caller=Caller.trusted(member.user, via="command"),
                         scope=Scope(owner=member.user, project=None), workflow_id=workflow_id, source="global",
                         config=text, overwrite=False)


def start(member: Member, *, triggered: bool = True, workflow_id: str = "digest", text: str = DIGEST,
          caps: engine.Caps = NO_CAPS) -> Run:
    """A run of the workflow as a webhook trigger of its playbook starts it (or, not `triggered`, as
    a host does)."""
    stored = workflow(member, workflow_id, text)
    playbook = trigger = None
    if triggered:
        playbook = Playbook.objects.create(owner=member.user, name="Digest", plan={}, workflow=stored)
        trigger = Trigger.objects.create(playbook=playbook, owner=member.user, kind=Trigger.Kind.WEBHOOK,
                                         enabled=True)
    run = engine.run_create(caller=Caller.trusted(member.user, via="task"),
                            scope=Scope(owner=member.user, project=None), definition=stored.config,
                            context={"topic": "owls"}, workflow=stored, workflow_key=workflow_id,
                            source=stored.source, caps=caps, playbook=playbook, trigger=trigger)
    engine.drive(run.pk)
    return Run.objects.get(pk=run.pk)


def status(run: Run) -> dict[str, Any]:
    return selectors.advance_result(Run.objects.get(pk=run.pk))


def host_answers(run: Run, response: str) -> Run:
    """What advance_run with the pending step's stepId does."""
    step = status(run)["pendingStep"]
    return engine.run_answer(caller=Caller.trusted(run.owner, via="mcp"), scope=Scope(owner=run.owner, project=None),
                             run_id=run.pk, tool="advance_run", payload={"response": response, "usage": None},
                             step_id=step["stepId"])


def turns(run: Run) -> list[Turn]:
    return list(Turn.objects.filter(node_run__run=run).order_by("id"))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_model_answers_every_ai_step_of_a_triggered_run_to_its_end(alice, model_backend, priced):
    model_backend.says(SUMMARY, prompt_tokens=100, completion_tokens=20)
    model_backend.says(APPROVE, prompt_tokens=80, completion_tokens=10)

    run = start(alice)

    assert run.status == "completed", (run.error, status(run))
    assert run.output == {"text": SUMMARY, "verdict": "approve"}
    draft, review = turns(run)
    assert (draft.model, draft.prompt, draft.response) == ("fake-model", "Summarise owls.", SUMMARY)
    assert (draft.input_tokens, draft.output_tokens, draft.estimated) == (100, 20, False)
    assert draft.cost_usd == Decimal("0.000140")
    assert (review.response, review.input_tokens, review.output_tokens) == (APPROVE, 80, 10)
    assert (run.input_tokens, run.output_tokens, run.total_cost_usd) == (180, 30, Decimal("0.000240"))
    first, second = model_backend.bodies()
    assert first["model"] == "fake-model"
    assert first["messages"][-1] == {"role": "user", "content": "Summarise owls."}
    assert "approve, revise" in second["messages"][0]["content"] and '"verdict"' in second["messages"][0]["content"]
    assert second["messages"][-1]["content"] == f"Judge this summary: {SUMMARY}"
    assert status(run)["waitingFor"] is None


def test_a_judge_answer_that_is_not_the_envelope_is_sent_back_and_the_next_is_applied(alice, model_backend):
    model_backend.says(SUMMARY)
    model_backend.says("I approve of this summary.", prompt_tokens=50, completion_tokens=7)
    model_backend.says(APPROVE, prompt_tokens=70, completion_tokens=9)

    run = start(alice)

    assert run.status == "completed" and run.output["verdict"] == "approve"
    retry = model_backend.bodies()[2]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "I approve of this summary."}
    assert retry[-1]["content"].startswith("That answer was refused: The answer must be JSON")
    # One turn for the step, carrying what both of its attempts cost.
    review = Turn.objects.get(node_run__run=run, node_run__node_id="review")
    assert (review.response, review.input_tokens, review.output_tokens) == (APPROVE, 120, 16)


def test_a_judge_refused_three_times_is_left_to_a_host_who_is_told_why(alice, model_backend):
    model_backend.says(SUMMARY)
    for verdict in ("maybe", "perhaps", "unsure"):
        model_backend.says(json.dumps({"verdict": verdict, "reasoning": "?"}))

    run = start(alice)

    assert run.status == "paused" and len(model_backend.requests) == 4
    waiting = status(run)["waitingFor"]
    assert waiting["who"] == "host"
    assert "refused 3 times" in waiting["message"] and "'unsure' is not one of: approve, revise" in waiting["message"]
    assert "advance_run" in waiting["message"]
    done = host_answers(run, APPROVE)
    assert done.status == "completed" and len(model_backend.requests) == 4


def test_a_backend_that_is_down_is_retried_then_the_step_waits_for_a_host(alice, model_backend):
    model_backend.fails(503, times=8, body="upstream overloaded")

    run = start(alice)

    # The first try and three retries, then the step is the host's.
    assert run.status == "paused" and len(model_backend.requests) == 4
    waiting = status(run)["waitingFor"]
    assert waiting["who"] == "host"
    assert "the model backend could not answer it (it answered HTTP 503" in waiting["message"]
    assert "upstream overloaded" in waiting["message"] and "get_run_status and advance_run" in waiting["message"]
    node_run = NodeRun.objects.get(run=run, node_id="draft")
    assert node_run.status == "paused" and node_run.state["answerer"]["who"] == "host"

    # A host answers; the backend, still down, is tried on the next step and gives that up too.
    after_draft = host_answers(run, SUMMARY)
    assert after_draft.status == "paused" and len(model_backend.requests) == 8
    assert status(after_draft)["pendingStep"]["nodeId"] == "review"
    done = host_answers(after_draft, APPROVE)
    assert done.status == "completed" and done.output == {"text": SUMMARY, "verdict": "approve"}
    assert [t.response for t in turns(done)] == [SUMMARY, APPROVE]


def test_a_backend_that_cannot_be_reached_leaves_the_step_to_a_host(alice, model_backend, settings):
    settings.ATRIUM_MODEL_BACKEND_URL = f"http://127.0.0.1:{closed_port()}/v1"

    run = start(alice)

    waiting = status(run)["waitingFor"]
    assert run.status == "paused" and waiting["who"] == "host"
    assert "it could not be reached: ConnectError" in waiting["message"]


def test_a_refused_key_is_not_retried_and_never_shown(alice, model_backend):
    model_backend.fails(401, body=f"Incorrect API key provided: {KEY}")

    run = start(alice)

    waiting = status(run)["waitingFor"]
    assert len(model_backend.requests) == 1 and waiting["who"] == "host"
    assert "HTTP 401" in waiting["message"] and KEY not in json.dumps(status(run))
    assert KEY not in json.dumps(NodeRun.objects.get(run=run, node_id="draft").state)


def test_the_key_is_the_bearer_token_and_lands_on_no_turn_or_run(alice, model_backend):
    model_backend.says(SUMMARY)
    model_backend.says(APPROVE)

    run = start(alice)

    assert run.status == "completed"
    assert [r.headers["authorization"] for r in model_backend.requests] == [f"Bearer {KEY}"] * 2
    rows = [model_to_dict(run), *map(model_to_dict, NodeRun.objects.filter(run=run)),
            *map(model_to_dict, Turn.objects.filter(node_run__run=run))]
    assert rows and all(KEY not in json.dumps(row, default=str) for row in rows)
    assert KEY not in json.dumps(selectors.run_history(run), default=str)


def test_a_run_a_host_started_is_never_answered_by_the_model(alice, model_backend):
    run = start(alice, triggered=False)

    assert run.status == "paused" and model_backend.requests == []
    assert status(run)["waitingFor"] == {
        "who": "host", "message": "Waiting for your MCP client: it answers this ai_agent step with advance_run."}


def test_without_a_backend_a_triggered_run_waits_for_a_host(alice, settings):
    settings.ATRIUM_MODEL_BACKEND_URL = ""

    run = start(alice)

    assert run.status == "paused"
    assert status(run)["waitingFor"] == {
        "who": "host",
        "message": "Waiting for a host: no model backend is configured on this server; any MCP client of the owner "
                   "can answer it with get_run_status and advance_run."}


def test_an_answer_over_the_spending_cap_stops_the_run(alice, model_backend, priced):
    model_backend.says(SUMMARY, prompt_tokens=100, completion_tokens=20)  # $0.00014
    model_backend.says(APPROVE)

    run = start(alice, caps=engine.Caps(usd=Decimal("0.0001")))

    assert run.status == "failed" and run.stop_reason == "spending_cap_exceeded"
    assert "$0.0001" in run.error and len(model_backend.requests) == 1
    assert status(run)["waitingFor"] is None


def test_a_run_that_spent_its_cap_is_stopped_before_the_model_is_called_again(alice, model_backend):
    model_backend.says(SUMMARY, prompt_tokens=100, completion_tokens=20)
    model_backend.says(APPROVE)

    run = start(alice, caps=engine.Caps(tokens=120))

    # The first answer spends exactly the cap, which it may; the second would go over it.
    assert run.status == "failed" and run.stop_reason == "spending_cap_exceeded"
    assert len(model_backend.requests) == 1 and run.input_tokens + run.output_tokens == 120
    review = NodeRun.objects.get(run=run, node_id="review")
    assert (review.status, review.error) == ("failed", "Stopped by the spending cap.")


def test_the_model_answers_a_child_run_and_then_its_parent(alice, model_backend):
    workflow(alice, "polish", POLISH)
    model_backend.says("Polished owls.")
    model_backend.says("Owls")

    run = start(alice, workflow_id="parent", text=PARENT)

    assert run.status == "completed", (run.error, status(run))
    assert run.output == {"text": "Polished owls.", "title": "Owls"}
    child = Run.objects.get(parent=run)
    assert child.trigger_id == run.trigger_id and child.status == "completed"
    assert [b["messages"][-1]["content"] for b in model_backend.bodies()] == ["Polish: owls",
                                                                              "Title for: Polished owls."]


def test_a_step_a_host_answers_while_the_model_thinks_gets_the_host_answer_only(alice, model_backend, monkeypatch):
    model_backend.says("The model's summary.")
    model_backend.says(APPROVE)
    asked = answerers.completion_request

    def host_answers_meanwhile(**request: Any) -> answerers.Completion:
        completion = asked(**request)
        if len(model_backend.requests) == 1:
            host_answers(Run.objects.get(owner=alice.user), SUMMARY)
        return completion

    monkeypatch.setattr(answerers, "completion_request", host_answers_meanwhile)

    run = start(alice)

    # The model's answer named the step the host had answered: refused, and the model went on to the next.
    assert run.status == "completed" and run.output == {"text": SUMMARY, "verdict": "approve"}
    assert [t.response for t in turns(run)] == [SUMMARY, APPROVE]


def test_with_a_broker_the_step_is_sent_to_a_worker_once_the_pause_commits(alice, model_backend, monkeypatch,
                                                                           django_capture_on_commit_callbacks):
    sent: list[str] = []
    tasks.step_answer.app.conf.task_always_eager = False  # put back by the _tasks_in_process fixture
    monkeypatch.setattr(tasks.step_answer, "delay", sent.append)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = start(alice)

    assert sent == [] and model_backend.requests == []
    assert status(run)["waitingFor"]["who"] == "model"
    assert "Waiting for the model backend (fake-model)" in status(run)["waitingFor"]["message"]
    for callback in callbacks:
        callback()
    assert sent == [run.pk]


def test_when_the_broker_is_down_the_step_is_left_to_a_host(alice, model_backend, monkeypatch,
                                                           django_capture_on_commit_callbacks):
    def broker_down(run_id: str) -> None:
        raise ConnectionRefusedError("broker down")

    tasks.step_answer.app.conf.task_always_eager = False
    monkeypatch.setattr(tasks.step_answer, "delay", broker_down)

    with django_capture_on_commit_callbacks(execute=True):
        run = start(alice)

    waiting = status(run)["waitingFor"]
    assert waiting["who"] == "host" and "the task queue could not be reached" in waiting["message"]


def test_the_worker_answers_what_it_was_sent(alice, model_backend, monkeypatch):
    monkeypatch.setattr(answerers, "after_pause", lambda run_id: None)
    run = start(alice)
    assert run.status == "paused" and model_backend.requests == []
    monkeypatch.undo()
    model_backend.says(SUMMARY)
    model_backend.says(APPROVE)

    tasks.step_answer.apply(args=(run.pk,))

    assert Run.objects.get(pk=run.pk).status == "completed" and len(model_backend.requests) == 2


def test_the_worker_tries_a_failing_backend_three_more_times_then_leaves_the_step_to_a_host(alice, model_backend,
                                                                                              monkeypatch):
    monkeypatch.setattr(answerers, "after_pause", lambda run_id: None)
    run = start(alice)
    monkeypatch.undo()
    model_backend.fails(502, times=4)
    conf = tasks.step_answer.app.conf
    propagates = conf.task_eager_propagates
    conf.task_eager_propagates = False  # a retry is Celery's business here, as in a worker
    try:
        tasks.step_answer.apply(args=(run.pk,))
    finally:
        conf.task_eager_propagates = propagates

    assert len(model_backend.requests) == 4
    waiting = status(run)["waitingFor"]
    assert waiting["who"] == "host" and "HTTP 502" in waiting["message"]
    assert NodeRun.objects.get(run=run, node_id="draft").state["answerer"]["who"] == "host"


def test_while_the_backend_is_retried_the_step_says_so(alice, model_backend, monkeypatch):
    monkeypatch.setattr(answerers, "after_pause", lambda run_id: None)
    run = start(alice)
    monkeypatch.undo()
    model_backend.fails(503)

    with pytest.raises(answerers.BackendUnavailable):
        answerers.pending_answer(run.pk)

    waiting = status(run)["waitingFor"]
    assert waiting["who"] == "model"
    assert "Its last attempt failed (it answered HTTP 503" in waiting["message"] and "tries again" in waiting["message"]


def test_get_run_status_says_who_the_step_waits_for(alice, settings):
    settings.ATRIUM_MODEL_BACKEND_URL = ""
    run = start(alice)
    client = McpClient(alice.token)
    client.initialize()

    payload = client.call_expecting_success("get_run_status", {"run_id": run.pk, "global": True})

    assert payload["status"] == "paused" and payload["pendingStep"]["nodeId"] == "draft"
    assert payload["waitingFor"]["who"] == "host"
    assert payload["waitingFor"]["message"].startswith("Waiting for a host: no model backend is configured")


def test_the_run_page_says_who_the_step_waits_for(alice, settings):
    settings.ATRIUM_MODEL_BACKEND_URL = ""
    run = start(alice)
    client = McpClient(alice.token).http
    client.force_login(alice.user)

    html = client.get(f"/open/runs/{run.pk}?project=global").content.decode()

    assert "Waiting for a host: no model backend is configured on this server" in html


def test_a_step_whose_task_was_lost_is_sent_again_once_it_has_waited_long(alice, model_backend, monkeypatch,
                                                                         django_capture_on_commit_callbacks):
    lost: list[str] = []
    tasks.step_answer.app.conf.task_always_eager = False
    monkeypatch.setattr(tasks.step_answer, "delay", lost.append)  # taken by a worker that then died
    with django_capture_on_commit_callbacks(execute=True):
        run = start(alice)
    assert lost == [run.pk] and status(run)["waitingFor"]["who"] == "model"
    tasks.step_answer.app.conf.task_always_eager = True  # no broker: the resend answers here
    model_backend.says(SUMMARY)
    model_backend.says(APPROVE)

    soon = Run.objects.get(pk=run.pk).updated_at + timedelta(seconds=answerers.MODEL_STEP_STALE_SECONDS - 1)
    assert answerers.model_steps_resend(now=soon) == 0 and model_backend.requests == []
    later = soon + timedelta(seconds=2)
    assert answerers.model_steps_resend(now=later) == 1
    assert Run.objects.get(pk=run.pk).status == "completed"
    assert answerers.model_steps_resend(now=later + timedelta(hours=1)) == 0
