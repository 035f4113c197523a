"""Runs through the REST API: /api/runs/... calls the same engine and selectors as the run tools, with
the same scopes, shapes and codes; another user's or another project's run is 404 "Run not found."."""

from decimal import Decimal
from typing import Any

import pytest

from accounts.services import token_create
from core.caller import Caller
from runs.models import NodeRun, Run, Turn
from tests.conftest import Api, Member
from workflows.scoping import Scope
from workflows.services import project_register, workflow_save

pytestmark = pytest.mark.django_db

RUNS = "/api/runs/"
G = {"global": True}

REVIEW = """\
name: Review
description: Draft, then judge.
start: draft
nodes:
  draft:
    type: ai_agent
    prompt: "Write about {{ context.topic }}."
    transitions: {done: review}
  review:
    type: ai_judge
    prompt: "Judge: {{ draft.output }}"
    verdicts: [approve, reject]
    transitions: {approve: sign_off, reject: rejected}
  sign_off:
    type: human
    prompt: "Publish?"
    transitions: {publish: done, stop: rejected}
  done:
    type: end
    output: {text: "{{ draft.output }}"}
  rejected: {type: end, status: failed}
"""

VOTE = """\
name: Vote
start: gate
nodes:
  gate:
    type: consensus
    prompt: Ship it?
    agents: 3
    verdicts: [ship, hold]
    transitions: {ship: each, hold: held, no_consensus: held}
  each:
    type: map
    items: [apple, pear]
    prompt: "Describe {{ item }}"
    transitions: {done: rank, failed: held}
  rank:
    type: round_robin
    candidates: [red, blue]
    criterion: Which is warmer?
    transitions: {done: done}
  done: {type: end}
  held: {type: end, status: failed}
"""


def store(member: Member, workflow_id: str, text: str, project=None) -> None:
    workflow_save(caller=Caller.trusted(member.user, via="command"), scope=Scope(owner=member.user, project=project),
                  workflow_id=workflow_id, source=None, config=text, overwrite=False)


def start(api: Api, workflow_id: str = "review", **fields: Any) -> dict[str, Any]:
    response = api.post(RUNS, {"workflow_id": workflow_id, "context": {"topic": "otters"}, **G, **fields})
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def alice_api(alice) -> Api:
    store(alice, "review", REVIEW)
    return Api(alice)


def test_start_advance_resume_and_history_round_trip(alice, alice_api):
    started = start(alice_api)
    assert started["status"] == "paused"
    assert started["workflow"] == {"id": "review", "name": "Review", "description": "Draft, then judge."}
    assert started["narration"].startswith("Started the workflow \u201cReview\u201d")
    assert started["url"].endswith(f"/runs/{started['runId']}?project=global")
    step = started["pendingStep"]
    assert step["nodeId"] == "draft" and step["prompt"] == "Write about otters."
    run_id = started["runId"]

    advanced = alice_api.post(f"{RUNS}{run_id}/advance/", {"response": "Otters are great.", **G})
    assert advanced.status_code == 200, advanced.content
    assert advanced.json()["pendingStep"]["nodeId"] == "review"
    judged = alice_api.post(f"{RUNS}{run_id}/advance/",
                            {"response": '{"verdict": "approve", "reasoning": "fine"}', **G})
    assert judged.json()["pendingStep"]["nodeType"] == "human"
    resumed = alice_api.post(f"{RUNS}{run_id}/resume/?global=true", {"transition": "publish"})
    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["status"] == "completed"
    assert resumed.json()["output"] == {"text": "Otters are great."}

    status = alice_api.get(f"{RUNS}{run_id}/", G)
    assert status.status_code == 200 and status.json()["status"] == "completed"
    history = alice_api.get(f"{RUNS}{run_id}/history/", G).json()
    assert [n["nodeId"] for n in history["nodes"]] == ["draft", "review", "sign_off", "done"]
    assert history["nodes"][0]["turns"][0]["response"] == "Otters are great."
    assert [r["id"] for r in alice_api.get(RUNS, {**G, "status": "completed"}).json()] == [run_id]

    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.COMPLETED and run.owner == alice.user and run.kind == Run.Kind.REAL
    assert Turn.objects.filter(node_run__run=run).count() == 3


@pytest.mark.parametrize(("cap", "stored"), [(0.5, Decimal("0.5")), (2, Decimal("2")), (1e-7, Decimal("0")),
                                             (0.1234567, Decimal("0.123457")), ("3.25", Decimal("3.25"))])
def test_a_spending_cap_is_any_number_kept_to_the_micro_dollar(alice_api, cap, stored):
    run_id = start(alice_api, spending_cap_usd=cap)["runId"]

    assert Run.objects.get(pk=run_id).spending_cap_usd == stored


@pytest.mark.parametrize("cap", [-0.01, 1_000_000, "lots"])
def test_a_spending_cap_out_of_range_is_refused_and_starts_nothing(alice_api, cap):
    response = alice_api.post(RUNS, {"workflow_id": "review", **G, "spending_cap_usd": cap})

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["spending_cap_usd"]
    assert not Run.objects.exists()


def test_a_refused_answer_is_an_error_and_changes_nothing(alice_api):
    run_id = start(alice_api)["runId"]
    alice_api.post(f"{RUNS}{run_id}/advance/", {"response": "Draft", **G})
    refused = alice_api.post(f"{RUNS}{run_id}/advance/", {"response": "Looks fine", **G})
    assert refused.status_code == 400
    assert refused.json()["code"] == "answer_rejected"
    wrong = alice_api.post(f"{RUNS}{run_id}/resume/", {"transition": "publish", **G})
    assert wrong.json()["code"] == "wrong_tool"
    assert NodeRun.objects.get(run_id=run_id, node_id="review").status == NodeRun.Status.PAUSED


def test_fanout_steps_are_answered_through_their_endpoints(alice, alice_api):
    store(alice, "vote", VOTE)
    run_id = start(alice_api, "vote")["runId"]
    ship = {"raw": '{"verdict": "ship", "reasoning": "ok"}'}
    voted = alice_api.post(f"{RUNS}{run_id}/consensus/", {"results": [ship, ship, ship], **G})
    assert voted.status_code == 200, voted.content
    assert voted.json()["pendingStep"]["mapPhase"] == "map"
    mapped = alice_api.post(f"{RUNS}{run_id}/map/", {"results": [{"raw": "Crisp."}, {"raw": "Soft."}], **G})
    matchups = mapped.json()["pendingStep"]["matchups"]
    verdicts = [{"id": m["id"], "winner": "A", "margin": 70} for m in matchups]
    ranked = alice_api.post(f"{RUNS}{run_id}/round-robin/", {"verdicts": verdicts, **G})
    assert ranked.status_code == 200, ranked.content
    assert ranked.json()["status"] == "completed"
    assert Run.objects.get(pk=run_id).outputs["rank"]["winner"] == "red"


def test_another_user_gets_run_not_found(alice_api, bob):
    run_id = start(alice_api)["runId"]
    bob_api = Api(bob)
    for response in (bob_api.get(f"{RUNS}{run_id}/", G), bob_api.get(f"{RUNS}{run_id}/history/", G),
                     bob_api.post(f"{RUNS}{run_id}/advance/", {"response": "mine now", **G}),
                     bob_api.post(f"{RUNS}{run_id}/cancel/", G)):
        assert response.status_code == 404
        assert response.json() == {"error": "Run not found.", "code": "run_not_found"}
    assert bob_api.get(RUNS, G).json() == []
    assert Run.objects.get(pk=run_id).status == Run.Status.PAUSED


def test_a_token_without_runs_execute_gets_403_on_post(alice):
    store(alice, "review", REVIEW)
    run_id = start(Api(alice))["runId"]
    _, raw = token_create(caller=Caller.trusted(alice.user, via="command"), user=alice.user, label="read only",
                          scopes=["runs:read"])
    reader = Api(token=raw)
    assert reader.get(f"{RUNS}{run_id}/", G).status_code == 200
    for path, body in ((RUNS, {"workflow_id": "review", "context": {"topic": "x"}}),
                       (f"{RUNS}{run_id}/advance/", {"response": "x"}), (f"{RUNS}{run_id}/cancel/", {}),
                       (f"{RUNS}test/", {"workflow_id": "review"})):
        response = reader.post(path, {**body, **G})
        assert response.status_code == 403, path
        assert response.json()["code"] == "insufficient_scope"
        assert 'scope="runs:execute"' in response["WWW-Authenticate"]
    assert Run.objects.count() == 1
    assert Run.objects.get(pk=run_id).status == Run.Status.PAUSED


def test_a_run_of_one_project_is_not_found_from_another(alice):
    caller = Caller.trusted(alice.user, via="command")
    shop = project_register(caller=caller, path="/home/alice/shop", project_id="acme/shop")
    project_register(caller=caller, path="/home/alice/blog", project_id="acme/blog")
    store(alice, "review", REVIEW, project=shop)
    api = Api(alice)
    started = api.post(RUNS, {"workflow_id": "review", "context": {"topic": "x"}, "cwd": "/home/alice/shop/src"})
    assert started.status_code == 201, started.content
    run_id = started.json()["runId"]
    assert started.json()["url"].endswith("?project=acme/shop")
    assert api.get(f"{RUNS}{run_id}/", {"cwd": "/home/alice/shop"}).status_code == 200
    for response in (api.get(f"{RUNS}{run_id}/", {"cwd": "/home/alice/blog"}), api.get(f"{RUNS}{run_id}/", G),
                     api.post(f"{RUNS}{run_id}/cancel/", {"cwd": "/home/alice/blog"})):
        assert response.status_code == 404
        assert response.json()["error"] == "Run not found."
    assert api.get(RUNS, {"cwd": "/home/alice/blog"}).json() == []
    assert [r["id"] for r in api.get(RUNS, {"cwd": "/home/alice/shop"}).json()] == [run_id]
    assert Run.objects.get(pk=run_id).project == shop


def test_cancel_twice_the_second_is_an_error(alice_api):
    run_id = start(alice_api)["runId"]
    first = alice_api.post(f"{RUNS}{run_id}/cancel/", G)
    assert first.status_code == 200
    assert first.json()["status"] == "cancelled"
    second = alice_api.post(f"{RUNS}{run_id}/cancel/", G)
    assert second.status_code == 400
    assert second.json()["code"] == "run_terminal"
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.CANCELLED
    assert run.nodes.get(node_id="draft").status == NodeRun.Status.CANCELLED


def test_a_call_without_a_scope_is_refused(alice_api):
    response = alice_api.get(RUNS)
    assert response.status_code == 400
    assert response.json()["code"] == "CWD_REQUIRED"


def test_the_test_endpoint_runs_a_workflow_with_mocks_and_keeps_nothing(alice_api):
    mocks = {"draft": "Draft", "review": '{"verdict": "approve", "reasoning": "ok"}', "sign_off": "publish"}
    response = alice_api.post(f"{RUNS}test/", {"workflow_id": "review", "context": {"topic": "x"},
                                               "mock_responses": mocks, **G})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["ok"] is True and body["finalStatus"] == "completed"
    assert [n["nodeId"] for n in body["nodeTrace"]] == ["draft", "review", "sign_off", "done"]
    missing = alice_api.post(f"{RUNS}test/", {"workflow_id": "review", "context": {"topic": "x"}, **G})
    assert missing.status_code == 422
    assert missing.json()["code"] == "missing_mock" and missing.json()["ok"] is False
    assert missing.json()["error"] == missing.json()["message"]
    assert alice_api.post(f"{RUNS}test/", {"workflow_id": "nope", **G}).status_code == 404
    assert Run.objects.count() == 0
