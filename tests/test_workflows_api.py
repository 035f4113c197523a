"""Workflows and projects through the REST API: /api/workflows/... and /api/projects/, the same
services, scopes and error codes as the workflow tools."""

import json

import pytest

from accounts.services import token_create
from core.caller import Caller
from tests.conftest import Api, Member, served_path
from workflows.models import Project, ProjectRoot, Workflow, WorkflowRevision

pytestmark = pytest.mark.django_db

WORKFLOWS = "/api/workflows/"
ROOT = "/home/alice/code/shop"

REVIEW = """\
# Draft, then stop.
name: review
description: Writes a draft.
start: draft
nodes:
  draft:
    type: ai_agent
    prompt: "Write the draft."   # the host answers this
    transitions: {done: done}
  done: {type: end}
"""

PARENT = """\
name: parent
start: child
nodes:
  child:
    type: subworkflow
    workflow: review
    transitions: {completed: done, failed: done}
  done: {type: end}
"""

DANGLING = """\
name: dangling
start: draft
nodes:
  draft:
    type: ai_agent
    prompt: "Write."
    transitions: {done: nowhere}
  done: {type: end}
"""


def create(api: Api, workflow_id: str, config: object = None, **fields) -> dict:
    body = {"id": workflow_id, "global": True, **fields}
    if config is not None:
        body["config"] = config
    response = api.post(WORKFLOWS, body)
    assert response.status_code == 201, response.content
    return response.json()


def register(api: Api, path: str = ROOT, **fields) -> dict:
    response = api.post("/api/projects/", {"path": path, **fields})
    assert response.status_code == 201, response.content
    return response.json()


def limited_token(member: Member, scopes: list[str]) -> str:
    _, raw = token_create(caller=Caller.trusted(member.user, via="command"), user=member.user, label="limited",
                          scopes=scopes)
    return raw


# --- CRUD ------------------------------------------------------------------------------------------

def test_alice_creates_reads_updates_lists_and_deletes_a_workflow(alice):
    api = Api(alice)

    created = api.post(WORKFLOWS, {"id": "review", "config": REVIEW, "global": True})
    assert created.status_code == 201, created.content
    assert created.json() == {"id": "review", "source": "global", "path": served_path("review", **{"global": "true"})}
    row = Workflow.objects.get(owner=alice.user, workflow_id="review")
    assert (row.project, row.name, row.yaml_text) == (None, "review", REVIEW)

    got = api.get(f"{WORKFLOWS}review/", {"global": "true"})
    assert got.status_code == 200
    data = got.json()
    assert {k: data[k] for k in ("id", "source", "path", "name", "description", "yaml", "assets")} == {
        "id": "review", "source": "global", "path": served_path("review", **{"global": "true"}), "name": "review",
        "description": "Writes a draft.", "yaml": REVIEW, "assets": []}
    assert data["config"]["nodes"]["draft"]["type"] == "ai_agent"
    assert data["created"].endswith("+00:00")

    changed = REVIEW.replace("Writes a draft.", "Writes a better draft.")
    updated = api.put(f"{WORKFLOWS}review/", {"config": changed, "global": True})
    assert updated.status_code == 200, updated.content
    assert updated.json() == {"ok": True, "source": "global", "path": served_path("review", **{"global": "true"})}
    row.refresh_from_db()
    assert (row.description, row.yaml_text) == ("Writes a better draft.", changed)

    listed = api.get(WORKFLOWS, {"global": "true"})
    assert listed.json() == [{"id": "review", "name": "review", "description": "Writes a better draft.",
                              "source": "global", "shadowed": False}]


def test_a_replace_with_a_stale_if_match_answers_412_and_changes_nothing(alice):
    api = Api(alice)
    assert api.post(WORKFLOWS, {"id": "review", "config": REVIEW, "global": True}).status_code == 201
    stale = api.get(f"{WORKFLOWS}review/", {"global": "true"})["ETag"]
    first = REVIEW.replace("Writes a draft.", "Writes a first draft.")
    fresh = api.http.put(f"{WORKFLOWS}review/", json.dumps({"config": first, "global": True}),
                         content_type="application/json", HTTP_IF_MATCH=stale, **api.extra)
    assert fresh.status_code == 200, fresh.content
    assert fresh["ETag"] == api.get(f"{WORKFLOWS}review/", {"global": "true"})["ETag"] != stale

    second = REVIEW.replace("Writes a draft.", "Writes a second draft.")
    response = api.http.put(f"{WORKFLOWS}review/", json.dumps({"config": second, "global": True}),
                            content_type="application/json", HTTP_IF_MATCH=stale, **api.extra)

    assert response.status_code == 412
    assert response.json()["code"] == "version_conflict"
    assert "changed since you read it" in response.json()["error"]
    row = Workflow.objects.get(owner=alice.user, workflow_id="review")
    assert row.yaml_text == first
    assert WorkflowRevision.objects.filter(workflow=row, action="update").count() == 1

    deleted = api.delete(f"{WORKFLOWS}review/", "global=true&confirm=true")
    assert deleted.status_code == 200, deleted.content
    assert deleted.json() == {"ok": True, "path": served_path("review", **{"global": "true"}), "source": "global"}
    assert not Workflow.objects.filter(owner=alice.user).exists()
    actions = list(WorkflowRevision.objects.filter(owner=alice.user, workflow_key="review")
                   .order_by("created_at", "pk").values_list("action", flat=True))
    assert actions == ["create", "update", "delete"]


def test_a_workflow_created_without_config_is_the_template_and_objects_become_yaml(alice):
    api = Api(alice)

    create(api, "blank")
    create(api, "as-object", {"name": "as-object", "start": "done", "nodes": {"done": {"type": "end"}}})

    assert "type: ai_agent" in Workflow.objects.get(workflow_id="blank").yaml_text
    assert Workflow.objects.get(workflow_id="as-object").yaml_text.startswith("name: as-object\n")


def test_the_scope_may_come_from_the_query_string_on_a_post(alice):
    response = Api(alice).http.post(f"{WORKFLOWS}?global=true", json.dumps({"id": "review", "config": REVIEW}),
                                    content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {alice.token}")

    assert response.status_code == 201, response.content
    assert Workflow.objects.filter(owner=alice.user, workflow_id="review", project=None).exists()


def test_bob_can_neither_see_nor_touch_alices_workflows(alice, bob):
    create(Api(alice), "review", REVIEW)
    api = Api(bob)

    assert api.get(WORKFLOWS, {"global": "true"}).json() == []
    assert api.get(f"{WORKFLOWS}review/", {"global": "true"}).status_code == 404
    updated = api.put(f"{WORKFLOWS}review/", {"config": DANGLING, "global": True})
    deleted = api.delete(f"{WORKFLOWS}review/", "global=true&confirm=true&force=true")
    renamed = api.post(f"{WORKFLOWS}review/rename/", {"new_id": "mine", "global": True})

    assert (updated.status_code, updated.json()["code"]) == (404, "not_found")
    assert (deleted.status_code, renamed.status_code) == (404, 404)
    row = Workflow.objects.get(owner=alice.user, workflow_id="review")
    assert row.yaml_text == REVIEW
    assert not Workflow.objects.filter(owner=bob.user).exists()


def test_a_token_without_workflows_write_may_read_but_not_create(alice):
    api = Api(token=limited_token(alice, ["workflows:read"]))

    listed = api.get(WORKFLOWS, {"global": "true"})
    response = api.post(WORKFLOWS, {"id": "review", "config": REVIEW, "global": True})

    assert listed.status_code == 200
    assert response.status_code == 403
    assert response.json()["code"] == "insufficient_scope"
    assert 'scope="workflows:write"' in response["WWW-Authenticate"]
    assert not Workflow.objects.exists()


def test_a_method_a_route_does_not_have_is_not_allowed(alice):
    response = Api(alice).http.patch(f"{WORKFLOWS}review/?global=true", "{}", content_type="application/json",
                                     HTTP_AUTHORIZATION=f"Bearer {alice.token}")

    assert response.status_code == 405


def test_a_token_without_workflows_read_cannot_list(alice):
    response = Api(token=limited_token(alice, ["elements:read"])).get(WORKFLOWS, {"global": "true"})

    assert (response.status_code, response.json()["code"]) == (403, "insufficient_scope")


# --- errors ----------------------------------------------------------------------------------------

def test_neither_cwd_nor_global_is_cwd_required(alice):
    response = Api(alice).get(WORKFLOWS)

    assert response.status_code == 400
    assert response.json()["code"] == "CWD_REQUIRED"


def test_cwd_and_global_together_conflict_and_name_the_cwd(alice):
    response = Api(alice).post(WORKFLOWS, {"id": "review", "cwd": ROOT, "global": True})

    assert response.status_code == 400
    assert response.json() == {"error": "Pass either cwd or global: true, not both.", "code": "CWD_GLOBAL_CONFLICT",
                               "cwd": ROOT}
    assert not Workflow.objects.exists()


@pytest.mark.parametrize(("cwd", "code"), [("relative/path", "NOT_ABSOLUTE"), ("/etc/nginx", "PROTECTED_PATH")])
def test_a_bad_cwd_is_refused_with_its_code(alice, cwd, code):
    response = Api(alice).get(WORKFLOWS, {"cwd": cwd})

    assert response.status_code == 400
    assert (response.json()["code"], response.json()["cwd"]) == (code, cwd)


def test_an_invalid_id_is_refused(alice):
    response = Api(alice).post(WORKFLOWS, {"id": "no spaces!", "config": REVIEW, "global": True})

    assert (response.status_code, response.json()["code"]) == (400, "invalid_id")
    assert not Workflow.objects.exists()


def test_an_invalid_config_lists_every_schema_error(alice):
    broken = {"name": "broken", "nodes": {"a": {"type": "teleport"}}}

    response = Api(alice).post(WORKFLOWS, {"id": "broken", "config": broken, "global": True})

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_config"
    assert len(body["details"]) >= 2
    assert any("start" in line for line in body["details"])
    assert any("teleport" in line for line in body["details"])
    assert not Workflow.objects.exists()


def test_yaml_that_does_not_parse_is_an_invalid_config(alice):
    response = Api(alice).post(WORKFLOWS, {"id": "broken", "config": "name: [unclosed\n", "global": True})

    assert (response.status_code, response.json()["code"]) == (400, "invalid_config")


def test_a_broken_graph_is_an_integrity_error_and_nothing_is_written(alice):
    response = Api(alice).post(WORKFLOWS, {"id": "dangling", "config": DANGLING, "global": True})

    assert response.status_code == 400
    assert response.json()["code"] == "integrity_error"
    assert any("nowhere" in line for line in response.json()["details"])
    assert not Workflow.objects.exists()


def test_an_update_that_breaks_the_graph_keeps_the_stored_version(alice):
    api = Api(alice)
    create(api, "review", REVIEW)

    response = api.put(f"{WORKFLOWS}review/", {"config": DANGLING, "global": True})

    assert (response.status_code, response.json()["code"]) == (400, "integrity_error")
    assert Workflow.objects.get(workflow_id="review").yaml_text == REVIEW


def test_creating_an_existing_id_is_a_conflict_unless_overwrite(alice):
    api = Api(alice)
    create(api, "review", REVIEW)

    again = api.post(WORKFLOWS, {"id": "review", "config": REVIEW, "global": True})
    replaced = api.post(WORKFLOWS, {"id": "review", "config": REVIEW.replace("Write the draft.", "Write it."),
                                    "global": True, "overwrite": True})

    assert (again.status_code, again.json()["code"]) == (409, "conflict")
    assert replaced.status_code == 201
    assert "Write it." in Workflow.objects.get(workflow_id="review").yaml_text
    assert Workflow.objects.count() == 1


def test_the_repo_source_without_a_project_is_no_repo_source(alice):
    response = Api(alice).post(WORKFLOWS, {"id": "review", "config": REVIEW, "global": True, "source": "repo"})

    assert (response.status_code, response.json()["code"]) == (400, "no_repo_source")


@pytest.mark.parametrize("confirm", ["", "&confirm=1", "&confirm=yes", "&confirm=True", "&confirm=false"])
def test_deleting_needs_confirm_to_be_the_literal_true(alice, confirm):
    api = Api(alice)
    create(api, "review", REVIEW)

    response = api.delete(f"{WORKFLOWS}review/", f"global=true{confirm}")

    assert (response.status_code, response.json()["code"]) == (400, "confirm_required")
    assert Workflow.objects.filter(workflow_id="review").exists()


def test_deleting_a_referenced_workflow_is_refused_until_forced(alice):
    api = Api(alice)
    create(api, "review", REVIEW)
    create(api, "parent", PARENT)

    refused = api.delete(f"{WORKFLOWS}review/", "global=true&confirm=true")

    assert refused.status_code == 409
    assert refused.json()["code"] == "referenced"
    assert refused.json()["referencedBy"] == [{"workflowId": "parent", "nodeId": "child", "source": "global"}]
    assert Workflow.objects.filter(workflow_id="review").exists()

    forced = api.delete(f"{WORKFLOWS}review/", "global=true&confirm=true&force=true")

    assert forced.status_code == 200, forced.content
    assert not Workflow.objects.filter(workflow_id="review").exists()
    assert WorkflowRevision.objects.filter(workflow_key="review", action="delete").count() == 1


def test_an_unknown_workflow_is_not_found(alice):
    response = Api(alice).get(f"{WORKFLOWS}nothing/", {"global": "true"})

    assert (response.status_code, response.json()["code"]) == (404, "not_found")


# --- authoring helpers -----------------------------------------------------------------------------

def test_validate_answers_in_band_for_a_config_and_for_a_stored_workflow(alice):
    api = Api(alice)
    create(api, "review", REVIEW)

    valid = api.post(f"{WORKFLOWS}validate/", {"id": "review", "global": True})
    invalid = api.post(f"{WORKFLOWS}validate/", {"config": DANGLING, "global": True})
    both = api.post(f"{WORKFLOWS}validate/", {"config": DANGLING, "id": "review", "global": True})

    assert (valid.status_code, valid.json()) == (200, {"valid": True, "errors": []})
    assert invalid.status_code == 200
    assert (invalid.json()["valid"], invalid.json()["code"]) == (False, "integrity_error")
    assert (both.status_code, both.json()["code"]) == (400, "invalid_input")


def test_lint_warns_about_an_unknown_model(alice):
    config = REVIEW.replace("    type: ai_agent\n", "    type: ai_agent\n    model: gpt-nonexistent\n")

    response = Api(alice).post(f"{WORKFLOWS}lint/", {"config": config, "global": True})

    assert response.status_code == 200
    assert response.json()["errors"] == []
    assert [w["code"] for w in response.json()["warnings"]] == ["unknown_model"]


def test_audit_reports_the_worst_case(alice):
    response = Api(alice).post(f"{WORKFLOWS}audit/", {"config": REVIEW, "global": True})

    assert response.status_code == 200
    assert response.json()["worstCase"]["modelCalls"] == 1
    assert isinstance(response.json()["findings"], list)


def test_the_schema_needs_no_cwd(alice):
    response = Api(alice).get(f"{WORKFLOWS}schema/")

    assert response.status_code == 200
    body = response.json()
    assert body["jsonSchema"]["title"] == "Atrium workflow"
    assert "subworkflow" in {e["type"] for e in body["executors"]}
    assert body["models"]["default"] == "claude-sonnet-4-5"
    assert body["authoring"]


def test_references_move_duplicate_and_rename(alice):
    api = Api(alice)
    register(api)
    create(api, "review", REVIEW)
    create(api, "parent", PARENT)

    references = api.get(f"{WORKFLOWS}review/references/", {"global": "true"})
    assert references.json() == {"referrers": [{"workflowId": "parent", "nodeId": "child", "source": "global"}]}

    duplicated = api.post(f"{WORKFLOWS}review/duplicate/", {"to_id": "review-copy", "to_source": "global",
                                                             "global": True})
    assert duplicated.status_code == 201, duplicated.content
    assert duplicated.json() == {"id": "review-copy", "source": "global",
                                 "path": served_path("review-copy", **{"global": "true"})}
    assert Workflow.objects.get(workflow_id="review-copy").name == "review-copy"

    moved = api.post(f"{WORKFLOWS}review-copy/move/", {"to": "repo", "cwd": f"{ROOT}/src"})
    assert moved.status_code == 200, moved.content
    assert moved.json() == {"ok": True, "id": "review-copy", "from": "global", "to": "repo",
                            "path": served_path("review-copy", source="repo", cwd=f"{ROOT}/src")}
    assert Workflow.objects.get(workflow_id="review-copy").project.project_id == "shop"

    renamed = api.post(f"{WORKFLOWS}review/rename/", {"new_id": "draft-review", "global": True})
    assert renamed.status_code == 200, renamed.content
    assert renamed.json() == {"id": "draft-review", "source": "global",
                              "path": served_path("draft-review", **{"global": "true"}), "rewritten": ["global:parent"],
                              "failed": [], "rolledBack": False}
    assert Workflow.objects.get(workflow_id="parent").config["nodes"]["child"]["workflow"] == "draft-review"


def test_moving_to_a_source_that_has_the_id_is_a_conflict(alice):
    api = Api(alice)
    register(api)
    create(api, "review", REVIEW)
    create(api, "review", REVIEW, **{"global": None, "cwd": ROOT})

    response = api.post(f"{WORKFLOWS}review/move/", {"to": "repo", "cwd": ROOT})

    assert (response.status_code, response.json()["code"]) == (409, "conflict")


# --- projects --------------------------------------------------------------------------------------

def test_a_registered_root_resolves_a_cwd_inside_it_and_not_outside(alice):
    api = Api(alice)
    before = api.get(WORKFLOWS, {"cwd": f"{ROOT}/src"})
    assert (before.status_code, before.json()["code"], before.json()["cwd"]) == (400, "NOT_FOUND", f"{ROOT}/src")

    assert register(api) == {"projectId": "shop", "roots": [ROOT]}
    project = Project.objects.get(owner=alice.user, project_id="shop")
    assert list(project.roots.values_list("path", flat=True)) == [ROOT]

    created = api.post(WORKFLOWS, {"id": "review", "config": REVIEW, "cwd": f"{ROOT}/src/app"})
    assert created.status_code == 201, created.content
    assert created.json() == {"id": "review", "source": "repo",
                              "path": served_path("review", source="repo", cwd=f"{ROOT}/src/app")}
    assert Workflow.objects.get(workflow_id="review").project == project
    assert api.get(WORKFLOWS, {"cwd": ROOT}).json()[0]["source"] == "repo"

    outside = api.get(WORKFLOWS, {"cwd": "/home/alice/code/other"})
    assert (outside.status_code, outside.json()["code"]) == (400, "NOT_FOUND")


def test_projects_are_listed_with_roots_and_workflow_counts_and_only_to_their_owner(alice, bob):
    api = Api(alice)
    register(api, project_id="github.com/alice/shop")
    register(api, "/work/shop-checkout", project_id="github.com/alice/shop")
    create(api, "review", REVIEW, **{"global": None, "cwd": ROOT})

    listed = api.get("/api/projects/")

    assert listed.status_code == 200
    assert listed.json() == [{"projectId": "github.com/alice/shop", "roots": [ROOT, "/work/shop-checkout"],
                              "workflowCount": 1}]
    assert Api(bob).get("/api/projects/").json() == []
    assert bob.user.projects.count() == 0


@pytest.mark.parametrize(("path", "code"), [("code/shop", "NOT_ABSOLUTE"), ("/usr/local/src", "PROTECTED_PATH")])
def test_registering_a_bad_path_is_refused(alice, path, code):
    response = Api(alice).post("/api/projects/", {"path": path})

    assert (response.status_code, response.json()["code"]) == (400, code)
    assert not ProjectRoot.objects.exists()


def test_a_root_of_another_project_is_a_conflict(alice):
    api = Api(alice)
    register(api, project_id="shop")

    response = api.post("/api/projects/", {"path": ROOT, "project_id": "other"})

    assert (response.status_code, response.json()["code"]) == (409, "conflict")


def test_registering_needs_workflows_write(alice):
    response = Api(token=limited_token(alice, ["workflows:read"])).post("/api/projects/", {"path": ROOT})

    assert (response.status_code, response.json()["code"]) == (403, "insufficient_scope")
    assert not Project.objects.exists()


# --- schema ----------------------------------------------------------------------------------------

def test_the_openapi_schema_lists_the_workflow_and_project_paths(db, client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    assert {"/api/workflows/", "/api/workflows/{workflow_id}/", "/api/workflows/{workflow_id}/references/",
            "/api/workflows/{workflow_id}/move/", "/api/workflows/{workflow_id}/duplicate/",
            "/api/workflows/{workflow_id}/rename/", "/api/workflows/validate/", "/api/workflows/lint/",
            "/api/workflows/audit/", "/api/workflows/schema/", "/api/projects/"} <= schema["paths"].keys()
    create_op = schema["paths"]["/api/workflows/"]["post"]
    assert create_op["operationId"] == "workflow_create"
    assert {"201", "400", "409"} <= create_op["responses"].keys()
    assert {"delete", "get", "put"} <= schema["paths"]["/api/workflows/{workflow_id}/"].keys()



def test_a_cwd_longer_than_a_path_can_be_is_refused_by_name(alice):
    response = Api(alice).get(WORKFLOWS, {"cwd": "/" + "a" * 4100})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input" and "cwd" in response.json()["fields"]
