"""Curating workflows, projects and models in admin: workflow saves, deletes and restores go through
the services, as the curator, in the owner's store; the YAML is edited in a code editor and checked
as it is typed in that store; the change form draws the saved workflow's graph; workflows export."""

import html
import io
import re
import zipfile
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone
from django_ace import AceWidget

from accounts.models import AuditEvent, User
from core.caller import Caller
from tests.conftest import Member, hidden_inputs
from workflows.models import ConfiguredModel, Project, ProjectRoot, Workflow, WorkflowAsset, WorkflowRevision
from workflows.scoping import Scope
from workflows.services import Asset, workflow_save, workflow_update

pytestmark = pytest.mark.django_db

WORKFLOWS = "/admin/workflows/workflow/"
CHECK = "/admin/workflows/workflow/check/"
REVISIONS = "/admin/workflows/workflowrevision/"
PROJECTS = "/admin/workflows/project/"
MODELS = "/admin/workflows/configuredmodel/"

REVIEW = """\
# Reviewed by the team every sprint.
name: review
description: Writes a draft.
start: draft
nodes:
  draft:
    type: ai_agent
    prompt: "Write the draft."  # the host answers this
    transitions: {done: done}
  done: {type: end}
"""


@pytest.fixture
def curator(db, client: Client) -> User:
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


def stored(member: Member, workflow_id: str = "review", text: str = REVIEW, project: Project | None = None,
           assets: list[Asset] | None = None) -> Workflow:
    return workflow_save(caller=Caller.trusted(member.user, via="command"),
                         scope=Scope(owner=member.user, project=project), workflow_id=workflow_id, source=None,
                         config=text, overwrite=False, assets=assets)


def add_data(owner: User, **overrides: Any) -> dict[str, Any]:
    return {"owner": owner.pk, "project": "", "workflow_id": "review", "yaml_text": REVIEW, **overrides}


def change_data(client: Client, workflow: Workflow, yaml_text: str) -> dict[str, Any]:
    """What the change form posts: its hidden fields (the bundled files' formset) and the YAML."""
    page = client.get(f"{WORKFLOWS}{workflow.pk}/change/")
    assert page.status_code == 200
    return {**hidden_inputs(page.content.decode()), "yaml_text": yaml_text.replace("\n", "\r\n")}


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def page_text(response: Any) -> str:
    return html.unescape(response.content.decode())


# --- the list --------------------------------------------------------------------------------------

def test_the_changelist_filters_by_source_project_and_owner_and_searches(curator, alice, bob, client):
    shop = Project.objects.create(owner=alice.user, project_id="shop")
    stored(alice)
    stored(alice, "deploy", REVIEW.replace("name: review", "name: Ship it"), project=shop)
    stored(bob, "bobs")

    def listed(query: str) -> set[str]:
        response = client.get(f"{WORKFLOWS}?{query}")
        assert response.status_code == 200, query
        return {w.workflow_id for w in response.context["cl"].result_list}

    assert listed("") == {"review", "deploy", "bobs"}
    assert listed("source=global") == {"review", "bobs"}
    assert listed("source=repo") == {"deploy"}
    assert listed(f"project__id__exact={shop.pk}") == {"deploy"}
    assert listed(f"owner__id__exact={bob.user.pk}") == {"bobs"}
    assert listed("q=ship") == {"deploy"}  # the name
    assert listed("q=bobs") == {"bobs"}  # the id


# --- adding ----------------------------------------------------------------------------------------

def test_adding_valid_yaml_saves_it_with_its_comments_and_a_revision(curator, alice, client):
    assert "type: ai_agent" in client.get(f"{WORKFLOWS}add/").content.decode()  # starts from the template

    response = client.post(f"{WORKFLOWS}add/", add_data(alice.user, yaml_text=REVIEW.replace("\n", "\r\n")))

    assert response.status_code == 302, response.context["adminform"].form.errors
    workflow = Workflow.objects.get(workflow_id="review")
    assert (workflow.owner, workflow.project, workflow.name) == (alice.user, None, "review")
    assert workflow.yaml_text == REVIEW
    assert "# Reviewed by the team every sprint." in workflow.yaml_text
    revision = WorkflowRevision.objects.get(workflow=workflow)
    assert (revision.action, revision.owner, revision.yaml_text) == ("create", alice.user, REVIEW)
    event = AuditEvent.objects.get(action="workflow.create")
    assert (event.via, event.actor) == ("admin", curator)


def test_adding_into_a_project_of_the_owner_makes_a_repo_workflow(curator, alice, client):
    shop = Project.objects.create(owner=alice.user, project_id="shop")

    response = client.post(f"{WORKFLOWS}add/", add_data(alice.user, project=shop.pk))

    assert response.status_code == 302
    assert Workflow.objects.get(workflow_id="review").source == "repo"


def test_a_project_of_someone_else_is_refused(curator, alice, bob, client):
    bobs = Project.objects.create(owner=bob.user, project_id="bobs-shop")

    response = client.post(f"{WORKFLOWS}add/", add_data(alice.user, project=bobs.pk))

    assert response.status_code == 200
    assert "That project belongs to bob, not alice." in page_text(response)
    assert not Workflow.objects.exists()


def test_invalid_yaml_lists_every_error_and_saves_nothing(curator, alice, client):
    broken = "name: broken\nnodes:\n  a: {type: teleport}\n  b: {type: ai_agent}\n"

    response = client.post(f"{WORKFLOWS}add/", add_data(alice.user, workflow_id="broken", yaml_text=broken))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["yaml_text"]
    assert len(errors) >= 3
    text = page_text(response)
    assert all(error in text for error in errors)
    assert any("teleport" in error for error in errors)
    assert not Workflow.objects.exists()
    assert not WorkflowRevision.objects.exists()


def test_yaml_that_does_not_parse_and_a_broken_graph_are_form_errors(curator, alice, client):
    unparsable = client.post(f"{WORKFLOWS}add/", add_data(alice.user, yaml_text="name: [unclosed\n"))
    dangling = client.post(f"{WORKFLOWS}add/", add_data(alice.user, yaml_text=REVIEW.replace(
        "{done: done}", "{done: nowhere}")))

    assert "does not parse" in page_text(unparsable)
    assert "nowhere" in " ".join(dangling.context["adminform"].form.errors["yaml_text"])
    assert not Workflow.objects.exists()


def test_an_existing_id_is_a_form_error(curator, alice, client):
    stored(alice)

    response = client.post(f"{WORKFLOWS}add/", add_data(alice.user))

    assert response.status_code == 200
    assert "already exists" in page_text(response)
    assert Workflow.objects.count() == 1


def test_lint_warnings_are_shown_after_saving_and_on_the_change_form(curator, alice, client):
    with_model = REVIEW.replace("    type: ai_agent\n", "    type: ai_agent\n    model: gpt-nonexistent\n")

    response = client.post(f"{WORKFLOWS}add/", add_data(alice.user, yaml_text=with_model), follow=True)

    assert any(m.startswith("Lint (unknown_model):") and "gpt-nonexistent" in m for m in messages_of(response))
    workflow = Workflow.objects.get(workflow_id="review")
    page = page_text(client.get(f"{WORKFLOWS}{workflow.pk}/change/"))
    assert "unknown_model" in page
    assert "gpt-nonexistent" in page


# --- changing --------------------------------------------------------------------------------------

def test_changing_the_yaml_updates_through_the_service(curator, alice, client):
    workflow = stored(alice, assets=[Asset("scripts/run.sh", "echo hi\n", executable=True)])
    changed = REVIEW.replace("Writes a draft.", "Writes a better draft.")

    response = client.post(f"{WORKFLOWS}{workflow.pk}/change/", change_data(client, workflow, changed))

    assert response.status_code == 302, response.context["adminform"].form.errors
    workflow.refresh_from_db()
    assert (workflow.description, workflow.yaml_text) == ("Writes a better draft.", changed)
    assert list(workflow.assets.values_list("path", flat=True)) == ["scripts/run.sh"]
    assert list(WorkflowRevision.objects.filter(workflow=workflow).values_list("action", flat=True)) == [
        "update", "create"]


def test_saving_unchanged_yaml_takes_no_revision(curator, alice, client):
    workflow = stored(alice)

    response = client.post(f"{WORKFLOWS}{workflow.pk}/change/", change_data(client, workflow, REVIEW))

    assert response.status_code == 302
    assert WorkflowRevision.objects.filter(workflow=workflow).count() == 1


def test_an_invalid_change_is_refused_and_the_stored_yaml_stays(curator, alice, client):
    workflow = stored(alice)

    response = client.post(f"{WORKFLOWS}{workflow.pk}/change/", change_data(client, workflow, "start: nowhere\n"))

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["yaml_text"]
    workflow.refresh_from_db()
    assert workflow.yaml_text == REVIEW
    assert WorkflowRevision.objects.filter(workflow=workflow).count() == 1


def test_the_change_form_shows_bundled_files_and_the_revision_history(curator, alice, client):
    workflow = stored(alice, assets=[Asset("scripts/run.sh", "echo hi\n", executable=True)])
    workflow_update(caller=Caller.trusted(alice.user, via="command"), scope=Scope(owner=alice.user, project=None),
                    workflow_id="review", source=None, config=REVIEW.replace("draft.", "text."))
    revisions = list(WorkflowRevision.objects.filter(workflow=workflow))

    page = client.get(f"{WORKFLOWS}{workflow.pk}/change/").content.decode()

    assert "scripts/run.sh" in page
    for revision in revisions:
        assert f"{REVISIONS}{revision.pk}/change/" in page
    assert all(html.escape(revision.credential) in page for revision in revisions)
    assert [r.action for r in revisions] == ["update", "create"]


# --- the editor, its checks and the graph ---------------------------------------------------------

def test_the_yaml_is_edited_in_a_yaml_code_editor_that_keeps_the_text_exact(curator, alice, client):
    workflow = stored(alice)
    for url in (f"{WORKFLOWS}add/", f"{WORKFLOWS}{workflow.pk}/change/"):
        page = client.get(url)
        widget = page.context["adminform"].form.fields["yaml_text"].widget
        assert isinstance(widget, AceWidget) and (widget.mode, widget.width, widget.useworker) == ("yaml", "100%",
                                                                                                   False)
        text = page.content.decode()
        assert "/static/django_ace/widget.js" in text and "/static/workflows/yaml_checks.js" in text
        assert f'data-check-url="{CHECK}"' in text

    tabbed = REVIEW.replace("  done: {type: end}", "  done: {type: end}   # trailing\t")
    response = client.post(f"{WORKFLOWS}{workflow.pk}/change/", change_data(client, workflow, tabbed))

    assert response.status_code == 302
    workflow.refresh_from_db()
    assert workflow.yaml_text == tabbed


def test_the_check_lists_problems_with_their_line_and_writes_nothing(curator, alice, client):
    workflow = stored(alice)

    unparsable = client.post(CHECK, {"workflow": workflow.pk, "yaml_text": "name: review\n  oops: indented\n"})
    dangling = client.post(CHECK, {"workflow": workflow.pk, "yaml_text": REVIEW.replace("{done: done}",
                                                                                        "{done: nowhere}")})
    linted = client.post(CHECK, {"workflow": workflow.pk, "yaml_text": REVIEW.replace(
        "    type: ai_agent\n", "    type: ai_agent\n    model: gpt-nonexistent\n")})

    assert unparsable.status_code == 200
    [error] = unparsable.json()["errors"]
    assert "does not parse" in error and re.search(r"\bline 2\b", error)
    assert any("nowhere" in e for e in dangling.json()["errors"])
    assert linted.json()["errors"] == []
    assert [(w["code"], w.get("state")) for w in linted.json()["warnings"]] == [("unknown_model", "draft")]
    workflow.refresh_from_db()
    assert workflow.yaml_text == REVIEW
    assert WorkflowRevision.objects.filter(workflow=workflow).count() == 1


def test_the_check_looks_in_the_owners_store_as_the_save_does(curator, alice, client):
    stored(alice, "child")
    parent = "name: parent\nstart: child\nnodes:\n  child:\n    type: subworkflow\n    workflow: child\n" \
             "    transitions: {completed: done, failed: done}\n  done: {type: end}\n"
    workflow = stored(alice, "parent", parent)

    for data in ({"workflow": workflow.pk}, {"owner": alice.user.pk}):
        assert client.post(CHECK, {**data, "yaml_text": parent}).json() == {"errors": [], "warnings": []}
    # The curator's own store has no `child`: what the REST API, which checks there, would answer.
    assert "there is no workflow 'child'" in client.post(CHECK, {"yaml_text": parent}).json()["errors"][0]


def test_the_check_is_a_post_for_curators_only(curator, alice, client):
    workflow = stored(alice)
    assert client.get(CHECK).status_code == 405
    assert client.post(CHECK, {"workflow": "nope", "yaml_text": REVIEW}).status_code == 400

    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.post(CHECK, {"workflow": workflow.pk, "yaml_text": REVIEW}).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="change_workflow"))
    assert client.post(CHECK, {"workflow": workflow.pk, "yaml_text": REVIEW}).status_code == 200

    client.logout()
    response = client.post(CHECK, {"workflow": workflow.pk, "yaml_text": REVIEW})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_change_form_draws_the_saved_workflows_graph_as_the_run_page_does(curator, alice, client):
    workflow = stored(alice)

    page = client.get(f"{WORKFLOWS}{workflow.pk}/change/").content.decode()

    assert '<figure class="run-graph">' in page and "/static/runs/graph.css" in page
    assert re.findall(r'data-node="([^"]+)"', page) == ["draft", "done"]
    assert 'aria-label="draft: ai_agent node draft. On done go to done."' in page
    assert "current step" not in page and "not reached" not in page  # no run: no statuses, no legend
    assert "run-graph" not in client.get(f"{WORKFLOWS}add/").content.decode()


# --- bulk actions and filters ----------------------------------------------------------------------

def test_exporting_one_workflow_downloads_its_yaml_as_written(curator, alice, client):
    workflow = stored(alice)

    response = client.post(WORKFLOWS, {"action": "export_yaml", "_selected_action": [workflow.pk]})

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="review.yaml"'
    assert response.content.decode() == REVIEW
    event = AuditEvent.objects.get(action="workflow.export")
    assert (event.via, event.actor, event.detail["workflows"]) == ("admin", curator, ["review (global) of alice"])


def test_exporting_several_downloads_a_zip_laid_out_as_sync_workflows_reads_it(curator, alice, bob, client):
    shop = Project.objects.create(owner=alice.user, project_id="shop")
    ids = [stored(alice).pk, stored(alice, "deploy", project=shop,
                                    assets=[Asset("scripts/run.sh", "echo hi\n", executable=True)]).pk,
           stored(bob, "bobs").pk]

    response = client.post(WORKFLOWS, {"action": "export_yaml", "_selected_action": ids})

    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    assert sorted(archive.namelist()) == ["alice/global/review.yaml", "alice/projects/shop/deploy.yaml",
                                          "alice/projects/shop/deploy/scripts/run.sh", "bob/global/bobs.yaml"]
    assert archive.read("alice/global/review.yaml").decode() == REVIEW
    assert archive.getinfo("alice/projects/shop/deploy/scripts/run.sh").external_attr >> 16 == 0o755
    assert AuditEvent.objects.get(action="workflow.export").target == "3 workflow(s)"
    assert WorkflowAsset.objects.count() == 1  # an export changes nothing


def test_the_changelist_filters_by_since_as_the_console_does(curator, alice, client):
    stored(alice)
    old = stored(alice, "old")
    Workflow.objects.filter(pk=old.pk).update(modified=timezone.now() - timedelta(days=3))

    def listed(query: str) -> set[str]:
        response = client.get(f"{WORKFLOWS}?{query}")
        assert response.status_code == 200, query
        return {w.workflow_id for w in response.context["cl"].result_list}

    assert listed("since=24h") == {"review"}
    assert listed("since=7d") == {"review", "old"}
    assert listed(f"since={(timezone.now() - timedelta(days=2)).isoformat()}".replace("+", "%2B")) == {"review"}
    assert client.get(f"{WORKFLOWS}?since=forever")["Location"].endswith("?e=1")  # refused, as admin refuses


# --- revisions -------------------------------------------------------------------------------------

def test_a_revision_shows_its_yaml_and_diff_and_restores(curator, alice, client):
    workflow = stored(alice)
    workflow_update(caller=Caller.trusted(alice.user, via="command"), scope=Scope(owner=alice.user, project=None),
                    workflow_id="review", source=None, config=REVIEW.replace("Write the draft.", "Write it."))
    first = WorkflowRevision.objects.get(workflow=workflow, action="create")
    second = WorkflowRevision.objects.get(workflow=workflow, action="update")

    page = page_text(client.get(f"{REVISIONS}{second.pk}/change/"))
    assert '+    prompt: "Write it."  # the host answers this' in page
    assert '-    prompt: "Write the draft."  # the host answers this' in page
    assert "Restore this revision" in page

    response = client.post(f"{REVISIONS}{first.pk}/restore/")

    assert response.status_code == 302
    assert response["Location"] == f"{WORKFLOWS}{workflow.pk}/change/"
    workflow.refresh_from_db()
    assert workflow.yaml_text == REVIEW
    latest = WorkflowRevision.objects.filter(workflow=workflow).first()
    assert (latest.action, latest.yaml_text) == ("restore", REVIEW)


def test_restoring_needs_a_post(curator, alice, client):
    revision = WorkflowRevision.objects.get(workflow=stored(alice))

    assert client.get(f"{REVISIONS}{revision.pk}/restore/").status_code == 405


def test_revisions_filter_by_action(curator, alice, client):
    stored(alice)
    workflow_update(caller=Caller.trusted(alice.user, via="command"), scope=Scope(owner=alice.user, project=None),
                    workflow_id="review", source=None, config=REVIEW.replace("draft.", "text."))

    response = client.get(f"{REVISIONS}?action__exact=update")

    assert [r.action for r in response.context["cl"].result_list] == ["update"]


# --- deleting --------------------------------------------------------------------------------------

def test_deleting_keeps_a_snapshot_that_restores_it(curator, alice, client):
    stored(alice, "review")
    parent = "name: parent\nstart: child\nnodes:\n  child:\n    type: subworkflow\n    workflow: review\n" \
             "    transitions: {completed: done, failed: done}\n  done: {type: end}\n"
    stored(alice, "parent", parent)
    workflow = Workflow.objects.get(workflow_id="review")

    response = client.post(f"{WORKFLOWS}{workflow.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Workflow.objects.filter(workflow_id="review").exists()  # forced, although parent uses it
    snapshot = WorkflowRevision.objects.get(workflow_key="review", action="delete")
    assert (snapshot.workflow, snapshot.yaml_text) == (None, REVIEW)
    assert AuditEvent.objects.filter(action="workflow.delete", via="admin").count() == 1

    client.post(f"{REVISIONS}{snapshot.pk}/restore/")

    restored = Workflow.objects.get(workflow_id="review")
    assert (restored.owner, restored.yaml_text) == (alice.user, REVIEW)
    history = page_text(client.get(f"{WORKFLOWS}{restored.pk}/change/"))
    assert f"{REVISIONS}{snapshot.pk}/change/" in history  # the history survives the delete


def test_deleting_in_bulk_goes_through_the_service(curator, alice, bob, client):
    ids = [stored(alice).pk, stored(bob, "bobs").pk]

    response = client.post(WORKFLOWS, {"action": "delete_selected", "_selected_action": ids, "post": "yes"})

    assert response.status_code == 302
    assert not Workflow.objects.exists()
    assert set(WorkflowRevision.objects.filter(action="delete").values_list("workflow_key", flat=True)) == {
        "review", "bobs"}


# --- projects --------------------------------------------------------------------------------------

def project_data(owner: User, path: str, **overrides: Any) -> dict[str, Any]:
    return {"owner": owner.pk, "project_id": "shop", "roots-TOTAL_FORMS": "1", "roots-INITIAL_FORMS": "0",
            "roots-MIN_NUM_FORMS": "0", "roots-MAX_NUM_FORMS": "1000", "roots-0-path": path, **overrides}


def test_adding_a_project_with_a_root_normalizes_it_and_sets_the_owner(curator, alice, client):
    response = client.post(f"{PROJECTS}add/", project_data(alice.user, "/home/alice//code/shop/"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    root = ProjectRoot.objects.get()
    assert (root.project.project_id, root.owner, root.path) == ("shop", alice.user, "/home/alice/code/shop")
    assert AuditEvent.objects.filter(action="project.create", via="admin").exists()


@pytest.mark.parametrize(("path", "error"), [("code/shop", "is not an absolute path"),
                                             ("/etc/shop", "inside a protected system directory")])
def test_a_bad_root_is_refused(curator, alice, client, path, error):
    response = client.post(f"{PROJECTS}add/", project_data(alice.user, path))

    assert response.status_code == 200
    assert error in page_text(response)
    assert not Project.objects.exists()


def test_a_root_the_owner_already_registered_is_refused(curator, alice, client):
    other = Project.objects.create(owner=alice.user, project_id="other")
    ProjectRoot.objects.create(project=other, owner=alice.user, path="/home/alice/code/shop")

    response = client.post(f"{PROJECTS}add/", project_data(alice.user, "/home/alice/code/shop"))

    assert response.status_code == 200
    assert "Already a root of 'other'." in page_text(response)
    assert Project.objects.count() == 1


# --- models ----------------------------------------------------------------------------------------

def model_data(model: ConfiguredModel, **overrides: Any) -> dict[str, Any]:
    data = {"model_id": model.model_id, "label": model.label, "input_usd_per_mtok": str(model.input_usd_per_mtok),
            "output_usd_per_mtok": str(model.output_usd_per_mtok), "active": "on"}
    if model.is_default:
        data["is_default"] = "on"
    return {**data, **overrides}


def defaults() -> list[str]:
    return list(ConfiguredModel.objects.filter(is_default=True).values_list("model_id", flat=True))


def test_making_a_model_the_default_unsets_the_previous_one(curator, client):
    assert defaults() == ["claude-sonnet-4-5"]
    haiku = ConfiguredModel.objects.get(model_id="claude-haiku-4-5")

    response = client.post(f"{MODELS}{haiku.pk}/change/", model_data(haiku, is_default="on"), follow=True)

    assert response.status_code == 200
    assert defaults() == ["claude-haiku-4-5"]
    assert "claude-sonnet-4-5 is no longer the default model." in messages_of(response)
    assert AuditEvent.objects.filter(action="configuredmodel.update", target__contains="claude-sonnet-4-5").exists()


def test_the_default_can_be_switched_from_the_list(curator, client):
    models = list(ConfiguredModel.objects.order_by("model_id"))
    data = {"form-TOTAL_FORMS": str(len(models)), "form-INITIAL_FORMS": str(len(models)),
            "form-MIN_NUM_FORMS": "0", "form-MAX_NUM_FORMS": "1000", "_save": "Save"}
    for i, model in enumerate(models):
        data.update({f"form-{i}-{k}": v for k, v in model_data(model).items() if k != "model_id"})
        data[f"form-{i}-id"] = str(model.pk)
        data.pop(f"form-{i}-is_default", None)
        if model.model_id == "claude-opus-4-5":
            data[f"form-{i}-is_default"] = "on"

    response = client.post(MODELS, data)

    assert response.status_code == 302
    assert defaults() == ["claude-opus-4-5"]


def test_a_new_model_may_be_added_as_the_default(curator, client):
    response = client.post(f"{MODELS}add/", {"model_id": "claude-next", "label": "Next", "input_usd_per_mtok": "2",
                                             "output_usd_per_mtok": "10", "is_default": "on", "active": "on"})

    assert response.status_code == 302
    assert defaults() == ["claude-next"]


def test_every_workflows_admin_page_renders(curator, alice, client):
    shop = Project.objects.create(owner=alice.user, project_id="shop")
    ProjectRoot.objects.create(project=shop, owner=alice.user, path="/home/alice/code/shop")
    workflow = stored(alice, project=shop)
    revision = WorkflowRevision.objects.get(workflow=workflow)
    model = ConfiguredModel.objects.first()

    pages = [WORKFLOWS, f"{WORKFLOWS}add/", f"{WORKFLOWS}{workflow.pk}/change/", f"{WORKFLOWS}{workflow.pk}/delete/",
             REVISIONS, f"{REVISIONS}{revision.pk}/change/", PROJECTS, f"{PROJECTS}add/",
             f"{PROJECTS}{shop.pk}/change/", MODELS, f"{MODELS}{model.pk}/change/"]

    assert {page: client.get(page).status_code for page in pages} == dict.fromkeys(pages, 200)
    assert "/home/alice/code/shop" in client.get(f"{PROJECTS}{shop.pk}/change/").content.decode()
