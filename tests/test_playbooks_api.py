"""The playbook, execution and dashboard endpoints under /api/: the tools' operations over HTTP with the
same scopes, plus writing plans with ETags; nothing of Alice's is visible to Charlie."""

import pytest

from core.caller import Caller
from elements.services import element_create
from elements.types import ElementType
from integrations.services import catalogue_sync
from runs.models import Run
from tests.conftest import Api, make_member
from workflows.models import Playbook, Workflow

PLAN = {
    "input": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
    "steps": [{"id": "remember", "title": "Remember", "kind": "capability",
               "capability": "atrium_tools.add_memory_entry",
               "input": {"memory": "log", "content": "{{ context.note }}"}}],
    "output": {"value": "{{ remember.entryId }}"},
}


@pytest.fixture
def atrium(db, alice):
    catalogue_sync(documents=[])
    element_create(caller=Caller.trusted(alice.user, via="command"), element_type=ElementType.MEMORY, name="log",
                   params={"description": "Log"})


def test_create_read_execute_and_follow_an_execution(atrium, alice):
    api = Api(alice)
    created = api.post("/api/playbooks/", {"name": "Logger", "goal": "Log notes", "plan": PLAN})
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["workflowId"] == f"playbook-{body['playbookId']}" and body["status"] == "Not Ready"
    assert created["ETag"] == f'"{body["version"]}"'

    started = api.post(f"/api/playbooks/{body['playbookId']}/execute/", {"input": {"note": "hello"}})
    assert started.status_code == 202, started.content
    execution_id = started.json()["executionId"]
    detail = api.get(f"/api/executions/{execution_id}/").json()
    assert detail["status"] == "completed" and detail["playbookId"] == body["playbookId"]
    assert Run.objects.get(pk=execution_id).output == detail["result"]
    assert api.get("/api/executions/").json()["total"] == 1
    assert api.get(f"/api/executions/{execution_id}/messages/").json()["done"] is True
    assert api.get(f"/api/playbooks/{body['playbookId']}/history/").json()["executions"][0]["executionId"] == \
        execution_id


def test_a_plan_is_changed_only_at_the_version_read(atrium, alice):
    api = Api(alice)
    body = api.post("/api/playbooks/", {"name": "Logger", "plan": PLAN}).json()
    path = f"/api/playbooks/{body['playbookId']}/"
    first = api.http.patch(path, '{"goal": "v2"}', content_type="application/json",
                           HTTP_IF_MATCH=f'"{body["version"]}"', **api.extra)
    assert first.status_code == 200 and first.json()["goal"] == "v2"
    stale = api.http.patch(path, '{"goal": "v3"}', content_type="application/json",
                           HTTP_IF_MATCH=f'"{body["version"]}"', **api.extra)
    assert stale.status_code == 412 and stale.json()["code"] == "version_conflict"
    assert Playbook.objects.get(pk=body["playbookId"]).goal == "v2"


def test_a_bad_plan_is_refused_with_its_problems_and_nothing_is_made(atrium, alice):
    refused = Api(alice).post("/api/playbooks/", {"name": "Bad", "plan": {"steps": [{"id": "a", "kind": "nope"}]}})
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_plan"
    assert refused.json()["problems"]
    assert not Playbook.objects.exists()


def test_scopes_guard_each_operation(atrium, alice):
    reader = make_member("reader", scopes=["playbooks:read"])
    api = Api(reader)
    assert api.get("/api/playbooks/").status_code == 200
    assert api.post("/api/playbooks/", {"name": "x", "plan": PLAN}).status_code == 403
    assert api.get("/api/executions/").status_code == 403
    assert api.get("/api/dashboard/").status_code == 403


def test_charlie_sees_nothing_of_alices(atrium, alice, charlie):
    body = Api(alice).post("/api/playbooks/", {"name": "Logger", "plan": PLAN}).json()
    execution = Api(alice).post(f"/api/playbooks/{body['playbookId']}/execute/", {"input": {"note": "x"}}).json()
    api = Api(charlie)
    for path in (f"/api/playbooks/{body['playbookId']}/", f"/api/playbooks/{body['playbookId']}/history/",
                 f"/api/playbooks/{body['playbookId']}/firings/", f"/api/playbooks/{body['playbookId']}/triggers/",
                 f"/api/executions/{execution['executionId']}/",
                 f"/api/executions/{execution['executionId']}/messages/"):
        assert api.get(path).status_code == 404, path
    assert api.post(f"/api/playbooks/{body['playbookId']}/execute/", {"input": {"note": "x"}}).status_code == 404
    assert api.delete(f"/api/playbooks/{body['playbookId']}/").status_code == 404
    assert api.get("/api/playbooks/").json()["total"] == 0
    assert api.get("/api/dashboard/").json()["playbooks"] == []
    assert Run.objects.filter(owner=charlie.user).count() == 0 and Playbook.objects.count() == 1


def test_deleting_a_playbook_keeps_its_executions(atrium, alice):
    api = Api(alice)
    body = api.post("/api/playbooks/", {"name": "Logger", "plan": PLAN}).json()
    execution = api.post(f"/api/playbooks/{body['playbookId']}/execute/", {"input": {"note": "x"}}).json()
    assert api.delete(f"/api/playbooks/{body['playbookId']}/").status_code == 204
    assert not Playbook.objects.exists()
    assert Run.objects.get(pk=execution["executionId"]).status == "completed"


def test_a_plan_may_only_do_what_its_authors_token_may(atrium, alice):
    # The step writes a memory entry: it runs as Alice every time, whoever starts the playbook.
    creator = make_member("creator", scopes=["playbooks:create", "playbooks:read"])
    refused = Api(creator).post("/api/playbooks/", {"name": "Logger", "plan": PLAN})
    assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope"
    assert refused.json()["scopes"] == ["capabilities:execute", "elements:write"]
    executor = make_member("executor", scopes=["playbooks:create", "capabilities:execute"])
    assert Api(executor).post("/api/playbooks/", {"name": "Logger", "plan": PLAN}).json()["scopes"] == \
        ["elements:write"]
    assert not Playbook.objects.exists()


def test_a_workflow_with_a_capability_step_needs_the_scopes_to_execute_it(atrium, alice, mcp_client):
    writer = make_member("writer", scopes=["workflows:write", "workflows:read", "runs:execute"])
    client = mcp_client(writer)
    client.initialize()
    config = {"name": "Note", "start": "note", "nodes": {
        "note": {"type": "script", "capability": "atrium_tools.add_memory_entry",
                 "input": {"memory": "log", "content": "x"}, "transitions": {"success": "done", "failure": "done"}},
        "done": {"type": "end"}}}
    refused = client.call_expecting_error("create_workflow", {"id": "note", "config": config, "global": True})
    assert refused["code"] == "insufficient_scope"
    assert not Workflow.objects.filter(workflow_id="note").exists()
