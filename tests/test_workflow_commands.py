"""The workflow commands: register_project, and sync_workflows pulling a folder into a store and
pushing a store into a folder."""

import os
import stat
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.models import AuditEvent
from core.caller import Caller
from tests.conftest import Member
from workflows.models import Project, ProjectRoot, Workflow, WorkflowAsset, WorkflowRevision
from workflows.scoping import Scope
from workflows.services import Asset, workflow_save

pytestmark = pytest.mark.django_db

REVIEW = """\
# Draft, then stop.
name: review
start: draft
nodes:
  draft:
    type: ai_agent
    prompt: "Write the draft."
    transitions: {done: done}
  done: {type: end}
"""

# "parent" sorts before "review": it can only be imported after it.
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


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def sync(folder: Path, member: Member, *args: str) -> str:
    return run("sync_workflows", str(folder), "--user", member.user.username, *args)


def folder_with(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "workflows"
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return folder


def stored(member: Member, workflow_id: str, text: str, project: Project | None = None,
           assets: list[Asset] | None = None) -> Workflow:
    return workflow_save(caller=Caller.trusted(member.user, via="command"),
                         scope=Scope(owner=member.user, project=project), workflow_id=workflow_id, source=None,
                         config=text, overwrite=False, assets=assets)


def store_state() -> tuple[int, ...]:
    return (Workflow.objects.count(), WorkflowRevision.objects.count(), WorkflowAsset.objects.count(),
            Project.objects.count(), AuditEvent.objects.count())


# --- register_project ------------------------------------------------------------------------------

def test_register_project_registers_the_root_and_prints_it(alice):
    out = run("register_project", "/home/alice/code/shop/", "--user", "alice", "--project-id", "github.com/a/shop")

    assert out.splitlines() == ["Project github.com/a/shop of alice", "  root  /home/alice/code/shop"]
    root = ProjectRoot.objects.get()
    assert (root.project.project_id, root.owner, root.path) == ("github.com/a/shop", alice.user,
                                                                "/home/alice/code/shop")
    assert AuditEvent.objects.get(action="project.register").via == "command"


def test_register_project_derives_the_id_from_the_folder_name(alice):
    out = run("register_project", "/home/alice/code/shop", "--user", "alice")

    assert out.startswith("Project shop of alice")


def test_register_project_refuses_an_unknown_user_and_a_bad_path(alice):
    with pytest.raises(CommandError, match="No user 'nobody'"):
        run("register_project", "/home/x", "--user", "nobody")
    with pytest.raises(CommandError, match=r"not an absolute path.*NOT_ABSOLUTE"):
        run("register_project", "code/shop", "--user", "alice")
    with pytest.raises(CommandError, match=r"protected system directory.*PROTECTED_PATH"):
        run("register_project", "/etc", "--user", "alice")
    assert not ProjectRoot.objects.exists()


# --- sync_workflows pull ---------------------------------------------------------------------------

def test_pull_creates_workflows_with_their_bundled_files_referenced_ones_first(alice, tmp_path):
    folder = folder_with(tmp_path, {"parent.yaml": PARENT, "review.yml": REVIEW,
                                    "review/scripts/run.sh": "#!/bin/sh\necho hi\n", "review/notes.md": "# Notes\n"})
    os.chmod(folder / "review/scripts/run.sh", 0o755)

    out = sync(folder, alice, "--global")

    assert out.splitlines() == ["created  parent", "created  review",
                                f"Pulled {folder} into alice's global store: 2 created, 0 updated, 0 unchanged, "
                                "0 invalid, 0 only in the store"]
    review = Workflow.objects.get(owner=alice.user, workflow_id="review", project=None)
    assert review.yaml_text == REVIEW  # comments kept
    assert list(review.assets.values_list("path", "executable", "content")) == [
        ("notes.md", False, "# Notes\n"), ("scripts/run.sh", True, "#!/bin/sh\necho hi\n")]
    assert Workflow.objects.get(workflow_id="parent").config["nodes"]["child"]["workflow"] == "review"
    assert set(WorkflowRevision.objects.values_list("action", flat=True)) == {"import"}


def test_pull_reports_updated_unchanged_and_only_in_the_store_and_deletes_nothing(alice, tmp_path):
    stored(alice, "legacy", REVIEW.replace("name: review", "name: legacy"))
    folder = folder_with(tmp_path, {"review.yaml": REVIEW, "parent.yaml": PARENT})
    sync(folder, alice, "--global")
    (folder / "review.yaml").write_text(REVIEW.replace("Write the draft.", "Write it."))

    out = sync(folder, alice, "--global")

    assert out.splitlines() == ["unchanged  parent", "updated  review", "only in the store  legacy",
                                f"Pulled {folder} into alice's global store: 0 created, 1 updated, 1 unchanged, "
                                "0 invalid, 1 only in the store"]
    assert "Write it." in Workflow.objects.get(workflow_id="review").yaml_text
    assert Workflow.objects.filter(workflow_id="legacy").exists()
    assert list(WorkflowRevision.objects.filter(workflow_key="review").values_list("action", flat=True)) == [
        "update", "import"]


def test_pull_into_a_project_creates_it_and_keeps_other_stores_apart(alice, bob, tmp_path):
    stored(alice, "review", REVIEW)  # the global one stays as it is
    folder = folder_with(tmp_path, {"review.yaml": REVIEW.replace("Write the draft.", "Repo draft.")})

    out = sync(folder, alice, "--project", "github.com/alice/shop")

    assert out.splitlines()[0] == "created  review"
    assert "into alice's project github.com/alice/shop" in out
    project = Project.objects.get(owner=alice.user, project_id="github.com/alice/shop")
    assert not project.roots.exists()
    assert "Repo draft." in Workflow.objects.get(workflow_id="review", project=project).yaml_text
    assert Workflow.objects.get(workflow_id="review", project=None).yaml_text == REVIEW
    assert not Workflow.objects.filter(owner=bob.user).exists()


def test_an_invalid_file_aborts_the_pull_and_nothing_is_written(alice, tmp_path):
    stored(alice, "review", REVIEW)
    folder = folder_with(tmp_path, {
        "review.yaml": REVIEW.replace("Write the draft.", "Changed."),
        "good.yaml": REVIEW.replace("name: review", "name: good"),
        "broken.yaml": "name: broken\nnodes:\n  a: {type: teleport}\n",
        "dangling.yaml": REVIEW.replace("{done: done}", "{done: nowhere}"),
        "bad id.yaml": REVIEW,
    })
    before = store_state()
    out = StringIO()

    with pytest.raises(CommandError, match="3 invalid file"):
        call_command("sync_workflows", str(folder), "--user", "alice", "--project", "shop", stdout=out)

    report = out.getvalue()
    assert "invalid  broken" in report
    assert "    broken.yaml: " in report and "teleport" in report
    assert "invalid  dangling" in report and "nowhere" in report
    assert "invalid  bad id" in report and "(invalid_id)" in report
    assert "would be created  good" in report
    assert store_state() == before
    assert "Changed." not in Workflow.objects.get(workflow_id="review").yaml_text
    assert not Project.objects.filter(project_id="shop").exists()


def test_pull_validates_references_against_the_other_files_of_the_run(alice, tmp_path):
    grandparent = PARENT.replace("name: parent", "name: top").replace("workflow: review", "workflow: parent")
    folder = folder_with(tmp_path, {"a-top.yaml": grandparent, "parent.yaml": PARENT, "review.yaml": REVIEW,
                                    "orphan.yaml": PARENT.replace("workflow: review", "workflow: missing")})

    with pytest.raises(CommandError, match="1 invalid file"):
        sync(folder, alice, "--global")
    assert not Workflow.objects.exists()

    (folder / "orphan.yaml").unlink()
    out = sync(folder, alice, "--global")

    assert "3 created" in out
    assert set(Workflow.objects.values_list("workflow_id", flat=True)) == {"a-top", "parent", "review"}


def test_a_cycle_across_files_is_refused(alice, tmp_path):
    ping = PARENT.replace("name: parent", "name: ping").replace("workflow: review", "workflow: pong")
    pong = PARENT.replace("name: parent", "name: pong").replace("workflow: review", "workflow: ping")
    folder = folder_with(tmp_path, {"ping.yaml": ping, "pong.yaml": pong})

    out = StringIO()
    with pytest.raises(CommandError, match="2 invalid file"):
        call_command("sync_workflows", str(folder), "--user", "alice", "--global", stdout=out)

    report = out.getvalue()
    assert "    ping.yaml: subworkflows form a cycle: ping -> pong -> ping" in report
    assert "    pong.yaml: subworkflows form a cycle: ping -> pong -> ping" in report
    assert not Workflow.objects.exists()


def test_pull_dry_run_reports_and_writes_nothing(alice, tmp_path):
    folder = folder_with(tmp_path, {"review.yaml": REVIEW, "parent.yaml": PARENT})
    before = store_state()

    out = sync(folder, alice, "--project", "shop", "--dry-run")

    assert out.splitlines()[:2] == ["would be created  parent", "would be created  review"]
    assert "2 would be created, 0 would be updated" in out
    assert out.rstrip().endswith("(dry run: nothing was written)")
    assert store_state() == before


def test_a_pull_that_writes_nothing_never_reports_updated(alice, tmp_path):
    folder = folder_with(tmp_path, {"review.yaml": REVIEW})
    sync(folder, alice, "--global")
    (folder / "review.yaml").write_text(REVIEW.replace("Write the draft.", "Write it."))
    (folder / "broken.yaml").write_text("name: broken\nnodes:\n  a: {type: teleport}\n")
    before = store_state()
    out = StringIO()

    with pytest.raises(CommandError, match="1 invalid file"):
        call_command("sync_workflows", str(folder), "--user", "alice", "--global", stdout=out)

    lines = out.getvalue().splitlines()
    assert "would be updated  review" in lines and "updated  review" not in lines
    assert "0 would be created, 1 would be updated, 0 unchanged, 1 invalid" in out.getvalue()
    assert store_state() == before
    assert "Write it." not in Workflow.objects.get(workflow_id="review").yaml_text


def test_pull_refuses_a_missing_folder_an_unknown_user_and_a_missing_store(alice, tmp_path):
    with pytest.raises(CommandError, match="is not a folder"):
        sync(tmp_path / "nope", alice, "--global")
    with pytest.raises(CommandError, match="No user"):
        run("sync_workflows", str(tmp_path), "--user", "nobody", "--global")
    with pytest.raises(CommandError):
        sync(tmp_path, alice)  # neither --project nor --global


# --- sync_workflows push ---------------------------------------------------------------------------

def test_push_writes_files_and_bundles_then_reports_them_unchanged(alice, tmp_path):
    stored(alice, "review", REVIEW, assets=[Asset("scripts/run.sh", "echo hi\n", executable=True)])
    stored(alice, "parent", PARENT)
    folder = tmp_path / "out"

    first = sync(folder, alice, "--global", "--direction", "push")

    assert first.splitlines() == ["written  parent", "written  review",
                                  f"Pushed alice's global store to {folder}: 2 written, 0 unchanged, 0 skipped"]
    assert (folder / "review.yaml").read_text() == REVIEW
    assert (folder / "parent.yaml").read_text() == PARENT
    script = folder / "review" / "scripts" / "run.sh"
    assert script.read_text() == "echo hi\n"
    assert script.stat().st_mode & stat.S_IXUSR

    second = sync(folder, alice, "--global", "--direction", "push")

    assert second.splitlines()[:2] == ["unchanged  parent", "unchanged  review"]


def test_push_then_pull_is_a_round_trip(alice, bob, tmp_path):
    stored(alice, "review", REVIEW, assets=[Asset("scripts/run.sh", "echo hi\n", executable=True)])
    sync(tmp_path, alice, "--global", "--direction", "push")

    assert "unchanged  review" in sync(tmp_path, alice, "--global")
    assert "created  review" in sync(tmp_path, bob, "--global")
    copy = Workflow.objects.get(owner=bob.user, workflow_id="review")
    assert list(copy.assets.values_list("path", "executable")) == [("scripts/run.sh", True)]


def test_push_rewrites_a_changed_file_and_never_deletes_one(alice, tmp_path):
    stored(alice, "review", REVIEW)
    (tmp_path / "review.yaml").write_text("stale\n")
    (tmp_path / "mine.yaml").write_text("kept\n")

    out = sync(tmp_path, alice, "--global", "--direction", "push")

    assert "written  review" in out
    assert (tmp_path / "review.yaml").read_text() == REVIEW
    assert (tmp_path / "mine.yaml").read_text() == "kept\n"


def test_push_dry_run_writes_nothing(alice, tmp_path):
    stored(alice, "review", REVIEW)
    folder = tmp_path / "out"

    out = sync(folder, alice, "--global", "--direction", "push", "--dry-run")

    assert out.splitlines()[0] == "written  review"
    assert "(dry run: nothing was written)" in out
    assert not folder.exists()


def test_push_from_a_project_that_does_not_exist_is_refused(alice, tmp_path):
    with pytest.raises(CommandError, match="no project 'shop'"):
        sync(tmp_path, alice, "--project", "shop", "--direction", "push")
    assert not Project.objects.exists()
