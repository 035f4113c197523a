"""Looking at runs in admin, and cancelling them through the engine in each run's own scope."""

import pytest
from django.test import Client

from accounts.models import AuditEvent, User
from core.caller import Caller
from runs import engine, selectors
from runs.models import NodeRun, Run, ScriptSettings
from tests.conftest import Member
from workflows.scoping import Scope
from workflows.services import project_register, workflow_save

pytestmark = pytest.mark.django_db

RUNS = "/admin/runs/run/"
SCRIPT_SETTINGS = "/admin/runs/scriptsettings/"

DRAFT = """\
name: Draft
start: draft
nodes:
  draft:
    type: ai_agent
    prompt: "Write the draft."
    transitions: {done: done}
  done: {type: end}
"""


@pytest.fixture
def curator(db, client: Client) -> User:
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


def started(member: Member, project=None) -> Run:
    caller = Caller.trusted(member.user, via="command")
    scope = Scope(owner=member.user, project=project)
    workflow_save(caller=caller, scope=scope, workflow_id="draft", source=None, config=DRAFT, overwrite=True)
    return engine.run_start(caller=caller, scope=scope, workflow_id="draft", source=None, context=None, host=None,
                            caps=engine.Caps())


def test_the_cancel_action_cancels_a_paused_run_in_its_own_scope(curator, client, alice):
    project = project_register(caller=Caller.trusted(alice.user, via="command"), path="/home/alice/shop",
                               project_id="shop")
    paused = started(alice, project)
    done = started(alice)
    engine.run_answer(caller=Caller.trusted(alice.user, via="command"), scope=Scope(owner=alice.user, project=None),
                      run_id=done.pk, tool="advance_run",
                      payload={"response": "Done."}, step_id=selectors.pending_step(done)[0]["stepId"])
    response = client.post(RUNS, {"action": "cancel_runs", "_selected_action": [paused.pk, done.pk]}, follow=True)
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    assert "Cancelled 1 run(s)." in shown
    assert f"Already finished, left as they were: {done.pk} (completed)." in shown
    paused.refresh_from_db()
    assert paused.status == Run.Status.CANCELLED and paused.stop_reason == "cancelled"
    assert paused.nodes.get(node_id="draft").status == NodeRun.Status.CANCELLED
    assert Run.objects.get(pk=done.pk).status == Run.Status.COMPLETED


def test_the_changelist_and_change_pages_render(curator, client, alice):
    run = started(alice)
    changelist = client.get(RUNS)
    assert changelist.status_code == 200
    assert run.pk in changelist.content.decode()
    assert client.get(RUNS, {"q": "draft", "status__exact": "paused", "kind__exact": "real"}).status_code == 200
    page = client.get(f"{RUNS}{run.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert engine.public_url(run).replace("&", "&amp;") in html
    assert "ai_agent" in html  # the node visit, in the inline
    node_run = run.nodes.get()
    assert client.get(f"/admin/runs/noderun/{node_run.pk}/change/").status_code == 200
    assert client.get("/admin/runs/turn/").status_code == 200
    assert client.get(f"{RUNS}add/").status_code == 403


def test_script_settings_are_edited_for_the_site_and_for_one_user(curator, client, alice):
    page = client.get(f"{SCRIPT_SETTINGS}add/")
    assert "Turn script nodes off for the whole site or one user" in page.content.decode()
    response = client.post(f"{SCRIPT_SETTINGS}add/", {"user": "", "memory_mb": 256})
    assert response.status_code == 302
    site = ScriptSettings.objects.get(user__isnull=True)
    assert site.scripts_enabled is False and site.memory_mb == 256
    client.post(f"{SCRIPT_SETTINGS}add/", {"user": alice.user.pk, "scripts_enabled": "on", "memory_mb": 512})
    assert ScriptSettings.objects.get(user=alice.user).scripts_enabled is True
    again = client.post(f"{SCRIPT_SETTINGS}add/", {"user": "", "scripts_enabled": "on", "memory_mb": 512})
    assert again.status_code == 200
    assert "The whole site already has its row" in again.content.decode()
    assert ScriptSettings.objects.filter(user__isnull=True).count() == 1
    listing = client.get(SCRIPT_SETTINGS).content.decode()
    assert "the whole site" in listing and "alice" in listing
    assert AuditEvent.objects.filter(action="scriptsettings.create").count() == 2
