"""Curating playbook templates in admin: the form checks a curator's template the way a sync checks a
shipped file and shows each problem on its field; a shipped template's content is the sync's and is
read-only; duplicating one makes an editable copy; enabling and disabling switch what callers see;
the JSON fields are JSON editors. Playbooks, triggers and firings are read-only, and a trigger's
secrets never show."""

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django_ace import AceWidget

from accounts.models import AuditEvent, User
from workflows import templates
from workflows.models import Playbook, PlaybookTemplate, Trigger, TriggerFiring

pytestmark = pytest.mark.django_db

ADMIN = "/admin/workflows"
SEALED = "gAAAAABsealed-signing-secret-9c1e5b2d8f4a"
DIGEST = "5f2b" * 16
PLAN = {
    "input": {"type": "object", "properties": {"channel": {"type": "string"}}, "required": ["channel"]},
    "steps": [
        {"id": "write", "title": "Write the note", "kind": "ai", "prompt": "Write a standup note."},
        {"id": "post", "title": "Post it", "kind": "capability", "capability": "slack_tools.chat_postMessage",
         "input": {"body": {"channel": "{{ context.channel }}", "text": "{{ write.output }}"}}},
    ],
    "output": {"value": "{{ write.output }}"},
}


@pytest.fixture
def curator(db, client: Client) -> User:
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


@pytest.fixture
def synced(db) -> None:
    templates.templates_sync()


def form_data(**changes: Any) -> dict[str, str]:
    data = {"id": "team-standup", "name": "Team standup", "description": "Posts a standup note to Slack.",
            "category": "reporting", "integrations": json.dumps(["slack_tools"]), "plan": json.dumps(PLAN),
            "example_input": json.dumps({"channel": "C0123456789"}),
            "triggers": json.dumps([{"type": "schedule", "preset": "every weekday at 9"}]), "enabled": "on"}
    data.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in changes.items()})
    return data


def errors_of(page: Any) -> dict[str, list[str]]:
    form = page.context["adminform"].form
    return {field: list(errors) for field, errors in form.errors.items()}


@pytest.fixture
def catalogue(db) -> None:
    call_command("sync_catalogue", stdout=StringIO())


def test_a_curator_adds_a_valid_template_which_is_their_own(catalogue, curator, client):
    page = client.post(f"{ADMIN}/playbooktemplate/add/", form_data())

    assert page.status_code == 302, errors_of(page)
    row = PlaybookTemplate.objects.get(pk="team-standup")
    assert (row.shipped, row.enabled, row.category) == (False, True, "reporting")
    assert row.plan == PLAN and row.triggers == [{"type": "schedule", "preset": "every weekday at 9"}]
    assert AuditEvent.objects.filter(action="playbooktemplate.create").exists()


def test_the_form_shows_the_plans_problems_and_writes_nothing(curator, client):
    steps = [{"id": "done", "title": "", "kind": "ai"}]
    page = client.post(f"{ADMIN}/playbooktemplate/add/", form_data(plan={"steps": steps}))

    assert page.status_code == 200
    errors = errors_of(page)["plan"]
    assert any("'done' is reserved" in e for e in errors)
    assert any("steps[0].title" in e for e in errors)
    assert any("needs a prompt" in e for e in errors)
    assert not PlaybookTemplate.objects.exists()


def test_the_form_checks_triggers_integrations_and_the_example_input(curator, client):
    page = client.post(f"{ADMIN}/playbooktemplate/add/", form_data(
        integrations=[], example_input={"channel": 5},
        triggers=[{"type": "schedule", "preset": "every hour", "cron": "0 * * * *"}, {"type": "sometimes"},
                  {"type": "event"}]))

    assert page.status_code == 200
    errors = errors_of(page)
    assert errors["integrations"] == ["must list every integration the plan's steps use; missing: slack_tools."]
    assert errors["example_input"] == ["channel: 5 is not of type 'string'"]
    assert errors["triggers"] == [
        "[0]: a schedule trigger has exactly one of preset (e.g. 'every weekday at 9') or cron (e.g. '0 9 * * 1-5').",
        "[1].type: must be one of schedule, event, webhook (got 'sometimes').",
        "[2].event: must name an event, e.g. run.failed or element.changed."]
    assert not PlaybookTemplate.objects.exists()


def test_the_form_refuses_a_reference_to_no_earlier_step_and_json_that_is_not_json(curator, client):
    plan = json.loads(json.dumps(PLAN))
    plan["steps"][1]["input"]["body"]["text"] = "{{ draft.output }}"
    page = client.post(f"{ADMIN}/playbooktemplate/add/", form_data(plan=plan, triggers="[{not json"))

    assert page.status_code == 200
    errors = errors_of(page)
    assert list(errors) == ["triggers"]  # with a field unreadable, the whole is not checked yet
    page = client.post(f"{ADMIN}/playbooktemplate/add/", form_data(plan=plan))
    assert "draft" in " ".join(errors_of(page)["plan"])
    assert not PlaybookTemplate.objects.exists()


def test_the_form_refuses_integrations_and_actions_the_catalogue_does_not_have(catalogue, curator, client):
    plan = json.loads(json.dumps(PLAN))
    plan["steps"][1]["capability"] = "slack_tools.chat_shout"
    plan["steps"].append({"id": "log", "title": "Log it", "kind": "capability", "capability": "diary_tools.write"})
    page = client.post(f"{ADMIN}/playbooktemplate/add/", form_data(plan=plan, integrations=["slack_tools",
                                                                                            "diary_tools"]))

    assert page.status_code == 200
    errors = errors_of(page)
    assert errors["integrations"] == ["the catalogue has no integration diary_tools."]
    assert errors["plan"] == ["slack_tools has no action 'chat_shout' (slack_tools.chat_shout)."]
    assert not PlaybookTemplate.objects.exists()


def test_a_curators_own_template_is_edited_and_checked_again(catalogue, curator, client):
    client.post(f"{ADMIN}/playbooktemplate/add/", form_data())
    url = f"{ADMIN}/playbooktemplate/team-standup/change/"
    data = form_data(name="Team standup (Slack)")
    del data["id"]  # the primary key is read-only once it exists

    assert client.post(url, data).status_code == 302
    assert PlaybookTemplate.objects.get(pk="team-standup").name == "Team standup (Slack)"

    page = client.post(url, {**data, "category": "fun"})
    assert page.status_code == 200 and "category" in errors_of(page)
    assert PlaybookTemplate.objects.get(pk="team-standup").category == "reporting"


def test_a_shipped_templates_content_is_read_only_with_a_note_and_only_enabled_changes(synced, curator, client):
    url = f"{ADMIN}/playbooktemplate/uptime-check/change/"
    page = client.get(url)
    assert page.status_code == 200
    assert set(page.context["adminform"].form.fields) == {"enabled"}
    assert "manage.py sync_templates rewrites its content" in page.content.decode()
    before = PlaybookTemplate.objects.get(pk="uptime-check")

    page = client.post(url, {"plan": json.dumps({"steps": []}), "name": "Hacked"})  # enabled unticked

    assert page.status_code == 302
    after = PlaybookTemplate.objects.get(pk="uptime-check")
    assert after.enabled is False
    assert (after.plan, after.name) == (before.plan, before.name)


def test_duplicate_makes_an_editable_disabled_copy(synced, curator, client):
    page = client.post(f"{ADMIN}/playbooktemplate/", {"action": "duplicate", "_selected_action": ["uptime-check"]})

    assert page.status_code == 302
    copy = PlaybookTemplate.objects.get(pk="uptime-check-copy")
    assert (copy.shipped, copy.enabled) == (False, False)
    assert copy.plan == PlaybookTemplate.objects.get(pk="uptime-check").plan
    assert "plan" in client.get(f"{ADMIN}/playbooktemplate/uptime-check-copy/change/").context[
        "adminform"].form.fields
    assert AuditEvent.objects.filter(action="playbooktemplate.duplicate", target="uptime-check-copy").exists()


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_disable_and_enable_switch_what_callers_see_through_the_service(synced, curator, client):
    chosen = ["uptime-check", "github-issues-daily-digest"]

    disabled = client.post(f"{ADMIN}/playbooktemplate/", {"action": "disable", "_selected_action": chosen},
                           follow=True)

    assert messages_of(disabled) == [
        "Disabled 2 playbook templates: github-issues-daily-digest, uptime-check."]
    assert not templates.templates_visible().filter(pk__in=chosen).exists()
    assert set(AuditEvent.objects.filter(action="playbooktemplate.disable", via="admin", actor=curator)
               .values_list("target", flat=True)) == set(chosen)

    enabled = client.post(f"{ADMIN}/playbooktemplate/", {"action": "enable", "_selected_action": chosen[:1]},
                          follow=True)

    assert messages_of(enabled) == ["Enabled 1 playbook template: uptime-check."]
    assert list(PlaybookTemplate.objects.filter(pk__in=chosen, enabled=True).values_list("pk", flat=True)) == [
        "uptime-check"]
    again = client.post(f"{ADMIN}/playbooktemplate/", {"action": "enable", "_selected_action": chosen[:1]},
                        follow=True)
    assert messages_of(again) == ["Already enabled, left as it was: uptime-check."]
    assert AuditEvent.objects.filter(action="playbooktemplate.enable").count() == 1


def test_a_curators_template_is_edited_in_json_editors(curator, client):
    form = client.get(f"{ADMIN}/playbooktemplate/add/").context["adminform"].form
    assert {name: form.fields[name].widget.mode for name in ("integrations", "plan", "example_input", "triggers")
            if isinstance(form.fields[name].widget, AceWidget)} == dict.fromkeys(
        ("integrations", "plan", "example_input", "triggers"), "json")


def test_the_changelist_filters_and_searches(synced, curator, client):
    PlaybookTemplate.objects.create(id="team-standup", name="Team standup", category="reporting", plan=PLAN,
                                    integrations=["slack_tools"], enabled=False)

    def listed(**query: str) -> set[str]:
        page = client.get(f"{ADMIN}/playbooktemplate/", query)
        assert page.status_code == 200
        assert not page.context["cl"].params.get("e"), "admin refused the filter"
        return {t.pk for t in page.context["cl"].result_list}

    assert len(listed()) == PlaybookTemplate.objects.count()
    assert listed(shipped__exact="0") == {"team-standup"}
    assert listed(enabled__exact="0") == {"team-standup"}
    assert listed(category="operations") == {"uptime-check", "incident-triage"}
    assert listed(integration="http_tools") == {"uptime-check"}
    assert listed(q="uptime") == {"uptime-check"}


@pytest.fixture
def fired(alice) -> TriggerFiring:
    playbook = Playbook.objects.create(owner=alice.user, name="Incident triage", plan=PLAN,
                                       template=PlaybookTemplate.objects.create(id="t", name="T", category="operations",
                                                                                plan=PLAN))
    trigger = Trigger.objects.create(playbook=playbook, owner=alice.user, kind=Trigger.Kind.WEBHOOK, enabled=True,
                                     webhook_token_digest=DIGEST, webhook_token_prefix="whk_4f2a",
                                     sealed_secret=SEALED, input={"channel": "C0123456789"})
    return TriggerFiring.objects.create(trigger=trigger, playbook=playbook, owner=alice.user,
                                        reason="webhook delivery", outcome=TriggerFiring.Outcome.REFUSED,
                                        detail="bad signature")


def test_playbooks_triggers_and_firings_are_read_only_and_a_triggers_secrets_never_show(fired, curator, client):
    pages = {
        "playbook": (fired.playbook.pk, "Incident triage"),
        "trigger": (fired.trigger.pk, "whk_4f2a"),
        "triggerfiring": (fired.pk, "bad signature"),
    }
    for model, (pk, shown) in pages.items():
        changelist = client.get(f"{ADMIN}/{model}/")
        detail = client.get(f"{ADMIN}/{model}/{pk}/change/")
        assert changelist.status_code == detail.status_code == 200, model
        text = changelist.content.decode() + detail.content.decode()
        assert shown in text, model
        assert SEALED[:20] not in text and DIGEST[:16] not in text, model
        assert client.get(f"{ADMIN}/{model}/add/").status_code == 403, model
        assert client.post(f"{ADMIN}/{model}/{pk}/change/", {"name": "x", "enabled": ""}).status_code == 403, model
    assert Trigger.objects.get(pk=fired.trigger.pk).enabled is True

    def listed(model: str, **query: str) -> int:
        page = client.get(f"{ADMIN}/{model}/", query)
        assert not page.context["cl"].params.get("e"), "admin refused the filter"
        return len(page.context["cl"].result_list)

    assert listed("trigger", kind__exact="webhook") == 1 and listed("trigger", kind__exact="schedule") == 0
    assert listed("trigger", q="whk_4f2a") == 1
    assert listed("triggerfiring", outcome__exact="refused") == 1 and listed("triggerfiring", q="signature") == 1
    assert listed("playbook", q="alice") == 1 and listed("playbook", q="nothing-like-it") == 0


def test_deleting_a_user_who_has_playbooks_is_not_blocked_by_these_admins(fired, curator, client):
    response = client.get(f"/admin/accounts/user/{fired.owner_id}/delete/")

    assert response.status_code == 200
    assert not response.context["perms_lacking"] & {"playbook", "trigger", "trigger firing"}
