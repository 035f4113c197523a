"""The run page: its owner sees the graph, every visit with its turns, and costs; answers a human
step with a button; nobody else learns the run exists."""

import re

import pytest
from django.test import Client

from core.caller import Caller
from runs import engine, selectors
from runs.graph import layers, layout
from runs.models import NodeRun, Run, Turn
from tests.conftest import Member, hidden_inputs
from workflows.scoping import Scope
from workflows.services import workflow_save

pytestmark = pytest.mark.django_db

REVIEW = """
name: Review loop
start: check
nodes:
  check:
    type: condition
    if: context.go == true
    transitions: {true: draft, false: done}
  draft:
    type: ai_agent
    label: Draft the text
    prompt: "Write about {{ context.topic }}"
    transitions: {done: review}
  review:
    type: human
    prompt: "Publish {{ draft.output }}?"
    transitions: {publish: done, redo: draft}
  done: {type: end, output: "{{ draft.output || 'nothing' }}"}
"""

PARENT = """
name: Release
start: notes
nodes:
  notes:
    type: subworkflow
    workflow: review
    context: {go: true, topic: release notes}
    transitions: {completed: shipped, failed: stopped}
  shipped: {type: end}
  stopped: {type: end, status: failed}
"""


def save(member: Member, workflow_id: str, config: str) -> None:
    caller = Caller.trusted(member.user, via="command")
    workflow_save(caller=caller, scope=Scope(owner=member.user, project=None), workflow_id=workflow_id,
                  source="global", config=config, overwrite=False)


def start(member: Member, workflow_id: str = "review", context: dict | None = None) -> Run:
    return engine.run_start(caller=Caller.trusted(member.user, via="command"),
                            scope=Scope(owner=member.user, project=None), workflow_id=workflow_id, source=None,
                            context=context if context is not None else {"go": True, "topic": "otters"}, host=None,
                            caps=engine.Caps())


def step_id(run: Run) -> str:
    """The stepId of the run's pending step, as the page and the tools show it."""
    step, _ = selectors.pending_step(Run.objects.get(pk=run.pk))
    return step["stepId"]


def draft(run: Run, response: str = "Otters hold hands.") -> Run:
    return engine.run_answer(caller=Caller.trusted(run.owner, via="command"),
                             scope=Scope(owner=run.owner, project=None), run_id=run.pk, tool="advance_run",
                             payload={"response": response, "usage": None, "thinking": "Keep it short."},
                             step_id=step_id(run))


@pytest.fixture
def review(alice) -> Run:
    """Alice's run, answered up to its human step."""
    save(alice, "review", REVIEW)
    return draft(start(alice))


def signed_in(member: Member, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(member.user)
    return client


def graph_node(html: str, node_id: str) -> str:
    match = re.search(rf'<a href="#node-{node_id}" class="node[^>]*>', html)
    assert match, f"no graph node {node_id}"
    return match.group(0)


def page_url(run: Run) -> str:
    return f"/open/runs/{run.pk}?project=global"


def test_the_owner_sees_the_graph_with_the_current_node_marked(alice, review):
    response = signed_in(alice).get(page_url(review))

    assert response.status_code == 200
    html = response.content.decode()
    assert "<svg" in html and "Review loop" in html
    for node_id in ("check", "draft", "review", "done"):
        graph_node(html, node_id)
        assert f'id="node-{node_id}"' in html  # every box links to a section of the page
    assert html.count('aria-current="step"') == 1
    assert 'aria-current="step"' in graph_node(html, "review")
    assert "status-completed" in graph_node(html, "draft")
    assert "status-not-reached" in graph_node(html, "done")
    for event in ("publish", "redo", "true", "false"):
        assert f">{event}</text>" in html  # arrows are labelled with their events
    assert "runs/run.js" in html  # a live run polls


def test_the_owner_sees_turns_and_costs(alice, review):
    html = signed_in(alice).get(page_url(review)).content.decode()

    assert "Write about otters" in html
    assert "Otters hold hands." in html
    assert re.search(r"<details><summary>Thinking</summary><pre[^>]*>Keep it short.</pre></details>", html)
    assert "estimated</abbr>" in html
    turn = Turn.objects.get(node_run__run=review, node_run__node_id="draft")
    assert f"<code>{turn.model}</code>" in html
    assert f"${review.total_cost_usd:.6f}" in html
    assert f"<dt>Input tokens</dt><dd>{review.input_tokens}</dd>" in html
    assert f"<dt>Billing mode</dt><dd>{review.billing_mode}</dd>" in html
    assert "Publish Otters hold hands.?" in html  # the human step's rendered prompt


def test_another_user_gets_not_found(bob, review):
    client = signed_in(bob)

    page = client.get(page_url(review))
    state = client.get(f"/runs/{review.pk}/state.json")
    resume = client.post(f"/runs/{review.pk}/resume", {"transition": "publish"})

    assert page.status_code == 404 and b"Run not found." in page.content
    assert review.workflow_name.encode() not in page.content
    assert state.status_code == 404 and state.json() == {"error": "Run not found."}
    assert resume.status_code == 404
    assert Run.objects.get(pk=review.pk).status == Run.Status.PAUSED


def test_anonymous_is_sent_to_sign_in(review):
    response = Client().get(page_url(review))

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/open/runs/")


def test_a_button_resumes_the_human_step(alice, review):
    client = signed_in(alice)
    page = client.get(page_url(review))
    assert re.search(r'<button type="submit" name="transition" value="publish">publish</button>', page.content.decode())

    response = client.post(f"/open/runs/{review.pk}/resume",
                           {**hidden_inputs(page.content.decode()), "transition": "publish"})

    assert response.status_code == 302 and response["Location"] == page_url(review)
    run = Run.objects.get(pk=review.pk)
    assert run.status == Run.Status.COMPLETED and run.output == "Otters hold hands."
    turn = Turn.objects.get(node_run__run=run, node_run__node_id="review")
    assert turn.response == "publish" and turn.phase == "human"
    html = client.get(response["Location"]).content.decode()
    assert "the run goes on" in html
    assert 'aria-current="step"' not in html and "runs/run.js" not in html  # an ended run does not poll
    assert 'name="transition"' not in html


def test_a_bad_choice_shows_the_error_and_changes_nothing(alice, review):
    client = signed_in(alice)
    before = (NodeRun.objects.filter(run=review).count(), Turn.objects.filter(node_run__run=review).count())

    response = client.post(f"/open/runs/{review.pk}/resume", {"transition": "shred", "step_id": step_id(review)},
                           follow=True)

    assert response.status_code == 200
    assert "&#x27;shred&#x27; is not a choice here; choose one of: publish, redo." in response.content.decode()
    run = Run.objects.get(pk=review.pk)
    assert (run.status, run.current_node) == (Run.Status.PAUSED, "review")
    assert (NodeRun.objects.filter(run=run).count(), Turn.objects.filter(node_run__run=run).count()) == before


def test_state_json_changes_version_after_an_answer(alice, review):
    client = signed_in(alice)
    before = client.get(f"/runs/{review.pk}/state.json").json()

    client.post(f"/open/runs/{review.pk}/resume", {"transition": "redo", "step_id": step_id(review)})
    after = client.get(f"/runs/{review.pk}/state.json").json()

    assert before["status"] == "paused" and before["currentNode"] == "review" and before["terminal"] is False
    assert after["status"] == "paused" and after["currentNode"] == "draft"
    assert after["version"] != before["version"]
    assert client.get(f"/runs/{review.pk}/state.json").json()["version"] == after["version"]


def test_a_post_without_the_csrf_token_is_refused(alice, review):
    response = signed_in(alice, enforce_csrf_checks=True).post(f"/runs/{review.pk}/resume", {"transition": "publish"})

    assert response.status_code == 403
    assert Run.objects.get(pk=review.pk).status == Run.Status.PAUSED


def test_an_ai_step_is_shown_read_only(alice):
    save(alice, "review", REVIEW)
    run = start(alice)
    client = signed_in(alice)

    html = client.get(page_url(run)).content.decode()
    refused = client.post(f"/open/runs/{run.pk}/resume", {"transition": "done", "step_id": step_id(run)},
                          follow=True).content.decode()

    assert "Waiting for your MCP client" in html and "Write about otters" in html
    assert 'name="transition"' not in html
    assert 'aria-current="step"' in graph_node(html, "draft")
    assert "which resume_run cannot answer; use advance_run." in refused
    assert Run.objects.get(pk=run.pk).current_node == "draft"


def test_a_stopped_run_shows_why_and_does_not_poll(alice, review):
    engine.run_cancel(caller=Caller.trusted(alice.user, via="command"), scope=Scope(owner=alice.user, project=None),
                      run_id=review.pk)

    html = signed_in(alice).get(page_url(review)).content.decode()

    assert '<span class="status status-cancelled">cancelled</span></h1>' in html
    assert "<dt>Stop reason</dt><dd><code>cancelled</code></dd>" in html
    assert 'data-terminal="true"' in html and "runs/run.js" not in html
    assert 'aria-current="step"' not in html and 'name="transition"' not in html


def test_a_parent_shows_its_childs_human_step_and_resumes_through_it(alice):
    save(alice, "review", REVIEW)
    save(alice, "release", PARENT)
    parent = start(alice, "release", context={})
    child = Run.objects.get(parent=parent)
    draft(child)
    client = signed_in(alice)

    page = client.get(page_url(parent)).content.decode()
    assert f'href="/open/runs/{child.pk}"' in page  # the child run link
    assert f'action="/open/runs/{child.pk}/resume"' in page
    child_page = client.get(page_url(child)).content.decode()
    assert f'href="/open/runs/{parent.pk}"' in child_page  # and back to the parent

    response = client.post(f"/open/runs/{child.pk}/resume", {**hidden_inputs(page), "transition": "publish"})

    assert response["Location"] == page_url(parent)
    assert Run.objects.get(pk=child.pk).status == Run.Status.COMPLETED
    assert Run.objects.get(pk=parent.pk).status == Run.Status.COMPLETED


def test_the_layout_puts_nodes_in_bfs_rows_and_loops_on_the_side():
    definition = {"name": "x", "start": "a", "nodes": {
        "a": {"type": "condition", "transitions": {"true": "b", "false": "c"}},
        "b": {"type": "ai_agent", "transitions": {"done": "c"}},
        "c": {"type": "human", "transitions": {"again": "a", "stop": "d"}},
        "d": {"type": "end"},
        "orphan": {"type": "end"},
    }}

    rows, order = layers(definition)
    graph = layout(definition)

    assert rows == {"a": 0, "b": 1, "c": 1, "d": 2, "orphan": 3}
    assert order == ["a", "b", "c", "d", "orphan"]
    boxes = {box.id: box for box in graph.nodes}
    assert boxes["a"].y < boxes["b"].y == boxes["c"].y < boxes["d"].y < boxes["orphan"].y
    edges = {(e.source, e.target): e for e in graph.edges}
    assert set(edges) == {("a", "b"), ("a", "c"), ("b", "c"), ("c", "a"), ("c", "d")}
    assert edges[("c", "a")].back and edges[("b", "c")].back and not edges[("a", "b")].back
    assert edges[("c", "a")].label == "again"
    assert all(box.x >= 0 and box.x + box.width <= graph.width for box in graph.nodes)
    assert all(e.label_x < graph.width for e in graph.edges)
