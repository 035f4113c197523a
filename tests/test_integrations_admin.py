"""Curating integrations in admin: the changelists of integrations, actions, skills, connections and
executions; enabling and disabling integrations; the OpenAPI import; the write-only client secret;
connections shown by state, never by credential; shared skills written through the service, their
code and JSON in code editors."""

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django import forms
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db import connection as db_connection
from django.test import Client
from django_ace import AceWidget

from accounts.models import AuditEvent, User
from core.caller import Caller
from integrations.crypto import unseal
from integrations.models import Action, Capability, Connection, Execution, Integration, Skill
from integrations.selectors import integrations_enabled
from integrations.vault import vault_connect
from tests.conftest import Member, hidden_inputs

pytestmark = pytest.mark.django_db

ADMIN = "/admin/integrations"
WEATHER = Path(__file__).resolve().parent / "fixtures" / "openapi" / "weather.yaml"
CLIENT_SECRET = "cs-9f8e7d6c5b4a3921-slack"
WEBHOOK_SECRET = "whsec-live-4b1d2e3f5a6c7d8e"
SOURCE = "def run(input, atrium):\n    return {'digest': input.get('notes', [])[:3]}\n"


@pytest.fixture
def catalogue(db) -> None:
    call_command("sync_catalogue", stdout=StringIO())


@pytest.fixture
def curator(db, client: Client) -> User:
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


def caller_of(member: Member) -> Caller:
    return Caller.trusted(member.user, via="mcp")


def listed(client: Client, model: str, **query: str) -> list[Any]:
    page = client.get(f"{ADMIN}/{model}/", query)
    assert page.status_code == 200, page.content[:500]
    assert not page.context["cl"].params.get("e"), "admin refused the filter"  # ?e=1: an invalid lookup
    return list(page.context["cl"].result_list)


def no_part_of(secret: str, text: str) -> bool:
    """No eight characters of the secret in a row appear in text."""
    return all(secret[i:i + 8] not in text for i in range(len(secret) - 7))


def change_form_data(client: Client, url: str, **changes: Any) -> dict[str, Any]:
    """What a change form posts when the curator edits only `changes`: its hidden fields (CSRF,
    inline management forms) and every field as it was loaded."""
    page = client.get(url)
    assert page.status_code == 200
    form = page.context["adminform"].form
    data: dict[str, Any] = hidden_inputs(page.content.decode())
    for name, field in form.fields.items():
        value = form.initial.get(name)
        if isinstance(field, forms.BooleanField):
            if value:
                data[name] = "on"
            continue
        if isinstance(field, forms.JSONField):
            value = json.dumps(value)
        data[name] = "" if value is None else value
    for name, value in changes.items():
        if value is False:
            data.pop(name, None)
        else:
            data[name] = value
    return data


# --- the changelists ------------------------------------------------------------------------------


def test_the_integrations_and_actions_changelists_search_and_filter(catalogue, curator, client):
    every = {i.id for i in listed(client, "integration")}
    assert every == {"atrium_tools", "email_tools", "github_tools", "http_tools", "slack_tools", "webhook_tools"}
    assert {i.id for i in listed(client, "integration", q="webhook")} == {"webhook_tools"}
    assert {i.id for i in listed(client, "integration", kind__exact="openapi")} == {"github_tools", "slack_tools"}
    assert {i.id for i in listed(client, "integration", first_party__exact="1")} == {"email_tools"}
    assert {i.id for i in listed(client, "integration", auth_scheme__exact="oauth2")} == {"slack_tools"}
    page = client.get(f"{ADMIN}/integration/")
    assert f'href="{ADMIN}/integration/import/"' in page.content.decode()

    assert {a.full_name for a in listed(client, "action", q="send_webhook")} == {"webhook_tools.send_webhook"}
    github = listed(client, "action", integration__id__exact="github_tools")
    assert len(github) == Action.objects.filter(integration_id="github_tools").count() == 15
    assert {a.executor for a in listed(client, "action", executor__exact="http.request")} == {"http.request"}
    action = Action.objects.get(integration_id="http_tools", name="request")
    assert client.get(f"{ADMIN}/action/{action.pk}/change/").status_code == 200
    assert client.get(f"{ADMIN}/integration/http_tools/change/").status_code == 200


def test_the_skills_connections_and_executions_changelists_search_and_filter(catalogue, curator, client, alice,
                                                                             bob):
    shared = Skill.objects.create(name="weekly_digest", description="A digest of the week.", source_code=SOURCE)
    shared.integrations.set(["email_tools"])
    Skill.objects.create(owner=alice.user, name="alices_notes", source_code=SOURCE)
    assert {s.name for s in listed(client, "skill")} == {"weekly_digest", "alices_notes"}
    assert {s.name for s in listed(client, "skill", q="digest")} == {"weekly_digest"}
    assert {s.name for s in listed(client, "skill", q="alice")} == {"alices_notes"}  # by owner
    assert {s.name for s in listed(client, "skill", owner__isempty="1")} == {"weekly_digest"}
    assert {s.name for s in listed(client, "skill", integrations__id__exact="email_tools")} == {"weekly_digest"}

    vault_connect(caller=caller_of(alice), integration_id="webhook_tools", credentials={"secret": WEBHOOK_SECRET})
    vault_connect(caller=caller_of(bob), integration_id="github_tools", credentials={"token": "ghp-bob-0000"})
    Connection.objects.filter(user=bob.user).update(state=Connection.State.EXPIRED)
    rows = listed(client, "connection")
    assert {(c.user.username, c.integration_id, c.state) for c in rows} == {
        ("alice", "webhook_tools", "connected"), ("bob", "github_tools", "expired")}
    assert {c.user.username for c in listed(client, "connection", q="alice")} == {"alice"}
    assert {c.user.username for c in listed(client, "connection", state__exact="expired")} == {"bob"}
    assert {c.user.username for c in listed(client, "connection", integration__id__exact="webhook_tools")} == {
        "alice"}

    Execution.objects.create(user=alice.user, name="http_tools.request", kind="action", integration_id="http_tools",
                             via="mcp", status="failed", error_code="host_not_allowed")
    Execution.objects.create(user=bob.user, name="weekly_digest", kind="skill", skill=shared, via="api",
                             status="succeeded")
    assert len(listed(client, "execution")) == 2
    assert {e.name for e in listed(client, "execution", q="bob")} == {"weekly_digest"}
    assert {e.name for e in listed(client, "execution", q="host_not_allowed")} == {"http_tools.request"}
    assert {e.name for e in listed(client, "execution", status__exact="failed")} == {"http_tools.request"}
    assert {e.name for e in listed(client, "execution", kind__exact="skill")} == {"weekly_digest"}
    assert {e.name for e in listed(client, "execution", via__exact="api")} == {"weekly_digest"}
    assert {e.name for e in listed(client, "execution", integration__id__exact="http_tools")} == {
        "http_tools.request"}
    execution = Execution.objects.get(name="weekly_digest")
    assert client.get(f"{ADMIN}/execution/{execution.pk}/change/").status_code == 200
    assert client.get(f"{ADMIN}/execution/add/").status_code == 403


def test_a_staff_member_without_permissions_sees_none_of_it(catalogue, client):
    staff = User.objects.create_user("helper", password="pw", is_staff=True)
    client.force_login(staff)
    for model in ("integration", "action", "skill", "connection", "execution"):
        assert client.get(f"{ADMIN}/{model}/").status_code == 403, model
    assert client.get(f"{ADMIN}/integration/import/").status_code == 403


# --- enabling and disabling ----------------------------------------------------------------------


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_disable_and_enable_switch_the_selected_integrations_through_the_service(catalogue, curator, client):
    chosen = {"_selected_action": ["github_tools", "slack_tools"]}

    disabled = client.post(f"{ADMIN}/integration/", {"action": "disable", **chosen}, follow=True)

    assert messages_of(disabled) == ["Disabled 2 integrations: github_tools, slack_tools."]
    assert set(Integration.objects.filter(enabled=False).values_list("id", flat=True)) == {"github_tools",
                                                                                         "slack_tools"}
    assert not integrations_enabled().filter(id__in=chosen["_selected_action"]).exists()  # gone for callers
    assert set(AuditEvent.objects.filter(action="integration.disable", via="admin", actor=curator)
               .values_list("target", flat=True)) == {"github_tools", "slack_tools"}

    again = client.post(f"{ADMIN}/integration/", {"action": "disable", "_selected_action": ["slack_tools"]},
                        follow=True)

    assert messages_of(again) == ["Already disabled, left as it was: slack_tools."]
    assert AuditEvent.objects.filter(action="integration.disable").count() == 2  # nothing changed: no record

    enabled = client.post(f"{ADMIN}/integration/", {"action": "enable", **chosen}, follow=True)

    assert messages_of(enabled) == ["Enabled 2 integrations: github_tools, slack_tools."]
    assert not Integration.objects.filter(enabled=False).exists()
    assert AuditEvent.objects.filter(action="integration.enable").count() == 2


def test_json_and_code_are_edited_in_code_editors(catalogue, curator, client):
    Integration.objects.create(id="weather_tools", name="Weather", kind=Integration.Kind.OPENAPI,
                               auth_config={"header": "X-Key"})
    imported = client.get(f"{ADMIN}/integration/weather_tools/change/").context["adminform"].form
    skill_form = client.get(f"{ADMIN}/skill/add/").context["adminform"].form

    widgets = {"auth_config": imported.fields["auth_config"].widget,
               **{name: skill_form.fields[name].widget for name in ("source_code", "input_schema", "output_schema")}}
    assert {name: w.mode for name, w in widgets.items() if isinstance(w, AceWidget)} == {
        "auth_config": "json", "source_code": "python", "input_schema": "json", "output_schema": "json"}
    assert '\n  "header": "X-Key"' in imported["auth_config"].value()


# --- the import -----------------------------------------------------------------------------------


def test_the_import_view_creates_the_integration_with_its_actions(curator, client):
    page = client.get(f"{ADMIN}/integration/import/")
    assert page.status_code == 200 and "Import an OpenAPI document" in page.content.decode()

    upload = SimpleUploadedFile("weather.yaml", WEATHER.read_bytes(), content_type="application/yaml")
    done = client.post(f"{ADMIN}/integration/import/", {"document": upload, "integration_id": "",
                                                          "server_url": "http://127.0.0.1:9/v1"})

    assert done.status_code == 302 and done["Location"] == f"{ADMIN}/integration/weather_tools/change/"
    integration = Integration.objects.get(pk="weather_tools")
    assert (integration.name, integration.kind, integration.auth_scheme, integration.base_url) == (
        "Weather", "openapi", "api_key", "http://127.0.0.1:9/v1")
    assert integration.auth_config == {"in": "header", "name": "X-Api-Key"}
    assert set(integration.actions.values_list("name", flat=True)) == {"get_forecast", "create_alert"}
    # Indexed for search at once.
    assert set(Capability.objects.filter(integration=integration).values_list("name", flat=True)) == {
        "weather_tools", "weather_tools.get_forecast", "weather_tools.create_alert"}
    audit = AuditEvent.objects.get(action="integration.import")
    assert audit.actor == curator and "weather_tools" in audit.target
    shown = client.get(done["Location"])
    assert "Imported weather_tools: 2 action(s) created" in " ".join(str(m) for m in shown.context["messages"])


def test_an_import_of_a_broken_document_says_why_and_writes_nothing(curator, client):
    upload = SimpleUploadedFile("broken.yaml", b"openapi: 3.1.0\ninfo: {title: Broken}\npaths: {}\n")
    page = client.post(f"{ADMIN}/integration/import/", {"document": upload})

    assert page.status_code == 200
    assert page.context["form"].non_field_errors()
    assert not Integration.objects.exists() and not Action.objects.exists()
    assert not AuditEvent.objects.filter(action="integration.import").exists()


# --- the client secret ----------------------------------------------------------------------------


def raw_client_secret(integration_id: str) -> str:
    with db_connection.cursor() as cursor:
        cursor.execute("SELECT sealed_client_secret FROM integrations_integration WHERE id = %s", [integration_id])
        return cursor.fetchone()[0]


def test_the_client_secret_is_write_only(catalogue, curator, client):
    url = f"{ADMIN}/integration/slack_tools/change/"
    config = {**Integration.objects.get(pk="slack_tools").auth_config, "clientId": "slack-client-1"}
    saved = client.post(url, change_form_data(client, url, client_secret=CLIENT_SECRET,
                                              auth_config=json.dumps(config)))
    assert saved.status_code == 302, saved.context["adminform"].form.errors if saved.context else saved

    raw = raw_client_secret("slack_tools")
    assert raw and no_part_of(CLIENT_SECRET, raw) and unseal(raw) == CLIENT_SECRET
    assert Integration.objects.get(pk="slack_tools").auth_config["clientId"] == "slack-client-1"
    page = client.get(url).content.decode()
    assert no_part_of(CLIENT_SECRET, page) and raw not in page
    assert "set (sealed)" in page
    assert all(no_part_of(CLIENT_SECRET, json.dumps(detail)) for detail in AuditEvent.objects.values_list(
        "detail", flat=True))

    # Saved again without one, the secret stays as it was.
    assert client.post(url, change_form_data(client, url, description="Slack, curated.")).status_code == 302
    assert raw_client_secret("slack_tools") == raw
    assert Integration.objects.get(pk="slack_tools").description == "Slack, curated."


# --- connections ----------------------------------------------------------------------------------


def test_a_connection_is_shown_by_its_state_and_never_by_its_credential(catalogue, curator, client, alice):
    vault_connect(caller=caller_of(alice), integration_id="webhook_tools", credentials={"secret": WEBHOOK_SECRET})
    row = Connection.objects.get(user=alice.user)

    changelist = client.get(f"{ADMIN}/connection/").content.decode()
    page = client.get(f"{ADMIN}/connection/{row.pk}/change/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "alice" in text and str(row.integration) in text and "connected" in text
    for shown in (changelist, text):
        assert no_part_of(WEBHOOK_SECRET, shown) and row.sealed_credentials not in shown
        assert "sealed_credentials" not in shown
    # Read-only: nothing can be changed, added or deleted here.
    assert client.post(f"{ADMIN}/connection/{row.pk}/change/", {"state": "expired"}).status_code == 403
    assert client.get(f"{ADMIN}/connection/add/").status_code == 403
    assert client.post(f"{ADMIN}/connection/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Connection.objects.get(pk=row.pk).state == "connected"


# --- shared skills --------------------------------------------------------------------------------


def skill_data(**overrides: Any) -> dict[str, Any]:
    data = {"name": "weekly_digest", "description": "A digest of the week's notes.", "source_code": SOURCE,
            "input_schema": json.dumps({"type": "object", "properties": {"notes": {"type": "array"}}}),
            "output_schema": "{}", "integrations": ["email_tools"], "timeout_seconds": "30"}
    return {**data, **overrides}


def test_a_shared_skill_added_in_admin_goes_through_the_service(catalogue, curator, client):
    added = client.post(f"{ADMIN}/skill/add/", skill_data())

    assert added.status_code == 302, added.context["adminform"].form.errors if added.context else added
    skill = Skill.objects.get(name="weekly_digest")
    assert skill.owner is None and skill.source_code == SOURCE and skill.version == 1
    assert list(skill.integrations.values_list("id", flat=True)) == ["email_tools"]
    assert Capability.objects.filter(skill=skill, owner__isnull=True).exists()  # indexed, for everyone
    audit = AuditEvent.objects.get(action="skill.create")
    assert (audit.actor, audit.target, audit.detail) == (curator, "weekly_digest", {"shared": True})

    changed = client.post(f"{ADMIN}/skill/{skill.pk}/change/", skill_data(description="Three notes a week."))
    assert changed.status_code == 302
    skill.refresh_from_db()
    assert (skill.description, skill.version) == ("Three notes a week.", 2)
    assert AuditEvent.objects.filter(action="skill.update", target="weekly_digest").count() == 1


@pytest.mark.parametrize(("overrides", "said"), [
    ({"source_code": "def run(input, atrium):\n    return (\n"}, "does not compile"),
    ({"input_schema": json.dumps({"type": "object", "properties": {"a": {"pattern": "(?<=x)"}}})}, "pattern"),
    ({"timeout_seconds": "301"}, "timeout"),
])
def test_a_shared_skill_the_service_refuses_is_refused_with_its_message_and_nothing_is_saved(
        catalogue, curator, client, overrides, said):
    audits = AuditEvent.objects.count()
    page = client.post(f"{ADMIN}/skill/add/", skill_data(**overrides))

    assert page.status_code == 200
    errors = " ".join(str(e) for e in page.context["adminform"].form.errors.values())
    assert said in errors, errors
    assert not Skill.objects.exists() and not Capability.objects.filter(type="skill").exists()
    assert AuditEvent.objects.count() == audits


def test_a_shared_skill_cannot_take_a_name_the_catalogue_has(catalogue, curator, client):
    Skill.objects.create(name="weekly_digest", source_code=SOURCE)
    page = client.post(f"{ADMIN}/skill/add/", skill_data())

    assert page.status_code == 200
    assert "already exists" in " ".join(str(e) for e in page.context["adminform"].form.errors.values())
    assert Skill.objects.count() == 1


def test_a_change_the_service_refuses_leaves_the_skill_as_it_was(catalogue, curator, client):
    assert client.post(f"{ADMIN}/skill/add/", skill_data()).status_code == 302
    skill = Skill.objects.get()
    page = client.post(f"{ADMIN}/skill/{skill.pk}/change/", skill_data(source_code="def run(:\n"))

    assert page.status_code == 200
    assert "does not compile" in " ".join(str(e) for e in page.context["adminform"].form.errors.values())
    skill.refresh_from_db()
    assert (skill.source_code, skill.version) == (SOURCE, 1)
