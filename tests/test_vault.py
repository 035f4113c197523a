"""The vault: connecting and disconnecting integrations, credentials sealed at rest and checked
against each scheme's fields, first-party confirmation, the connect page, key rotation, and
Charlie never seeing or using Alice's connections."""

import json
import uuid
from datetime import timedelta
from io import StringIO
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection as db_connection
from django.test import Client
from django.utils import timezone

from accounts.models import AuditEvent, GitHubAuth
from core.caller import Caller
from core.errors import DomainError, InvalidInput, NotFound
from elements.models import VerificationChallenge
from integrations import vault
from integrations.crypto import SealBroken, new_key, seal, unseal
from integrations.models import Connection, ConnectRequest, Integration, Skill
from tests.conftest import Member, hidden_inputs
from tests.playbook_helpers import playbook_make
from tests.test_element_concurrency import THREADS, in_threads
from workflows.models import Trigger

pytestmark = pytest.mark.django_db

SECRET = "sk-live-7f3a9c1e5b2d8f4a6c0e"
STATUS_KEYS = {"integrationId", "name", "authScheme", "firstParty", "connectionRequired", "connected", "state",
               "connectedAt", "lastUsedAt", "expiresAt"}


@pytest.fixture
def catalogue(db) -> dict[str, Integration]:
    rows = [
        Integration(id="weather_tools", name="Weather", auth_scheme="api_key", auth_config={"in": "header",
                                                                                             "name": "X-Key"}),
        Integration(id="tracker_tools", name="Tracker", auth_scheme="bearer"),
        Integration(id="legacy_tools", name="Legacy", auth_scheme="basic"),
        Integration(id="webhook_tools", name="Webhooks", auth_scheme="api_key"),
        Integration(id="mail_tools", name="Mail", auth_scheme="none", first_party=True),
        Integration(id="http_tools", name="HTTP", auth_scheme="none", connection_required=False),
        Integration(id="github_tools", name="GitHub", auth_scheme="oauth2",
                    auth_config={"authorizationUrl": "http://127.0.0.1:9/authorize",
                                 "tokenUrl": "http://127.0.0.1:9/token", "clientId": "atrium", "scopes": ["repo"]}),
        Integration(id="retired_tools", name="Retired", auth_scheme="api_key", enabled=False),
    ]
    Integration.objects.bulk_create(rows)
    return {row.id: row for row in rows}


def caller_of(member: Member) -> Caller:
    return Caller.trusted(member.user, via="mcp")


def connect(member: Member, integration_id: str, **kwargs) -> dict:
    return vault.vault_connect(caller=caller_of(member), integration_id=integration_id, **kwargs)


def raw_sealed(table: str, column: str, pk: object) -> str:
    with db_connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE {'token' if table.endswith('request') else 'id'} = %s",
                       [pk])
        return cursor.fetchone()[0]


def no_part_of(secret: str, text: str) -> bool:
    """No eight characters of the secret in a row appear in text."""
    return all(secret[i:i + 8] not in text for i in range(len(secret) - 7))


# Sealed at rest.

def test_credentials_are_stored_sealed_and_the_raw_column_holds_no_part_of_them(alice, catalogue):
    answer = connect(alice, "weather_tools", credentials={"apiKey": SECRET})

    assert answer == {"status": "connected", "integrationId": "weather_tools"}
    row = Connection.objects.get(user=alice.user, integration_id="weather_tools")
    raw = raw_sealed("integrations_connection", "sealed_credentials", row.pk)
    assert raw and no_part_of(SECRET, raw)
    assert unseal(raw) == {"apiKey": SECRET}


def test_a_secret_sealed_under_a_key_that_is_gone_cannot_be_opened_and_says_why(alice, catalogue, settings):
    connect(alice, "weather_tools", credentials={"apiKey": SECRET})
    settings.ATRIUM_VAULT_KEYS = [new_key()]

    with pytest.raises(SealBroken) as broken:
        vault.connection_credentials(caller=caller_of(alice), integration=catalogue["weather_tools"])

    assert broken.value.code == "vault_key_mismatch"
    assert "ATRIUM_VAULT_KEYS" in broken.value.message and SECRET not in broken.value.message


def test_no_answer_or_audit_row_carries_any_part_of_a_secret(alice, catalogue):
    connect(alice, "legacy_tools", credentials={"username": "alice@corp", "password": SECRET})
    status = vault.vault_status(caller=caller_of(alice))
    gone = vault.vault_disconnect(caller=caller_of(alice), integration_id="legacy_tools")

    for text in (json.dumps(status), json.dumps(gone),
                 json.dumps(list(AuditEvent.objects.values("action", "target", "detail")))):
        assert no_part_of(SECRET, text)
    assert AuditEvent.objects.get(action="vault.connect").detail == {
        "integrationId": "legacy_tools", "authScheme": "basic", "fields": ["password", "username"],
        "confirmedUsage": False}
    assert AuditEvent.objects.filter(action="vault.disconnect", target="legacy_tools", actor=alice.user).exists()


# Status.

def test_status_lists_every_enabled_integration_and_the_callers_state_of_each(alice, catalogue):
    connect(alice, "tracker_tools", credentials={"token": SECRET})

    rows = vault.vault_status(caller=caller_of(alice))["integrations"]

    assert [r["integrationId"] for r in rows] == sorted(i for i in catalogue if i != "retired_tools")
    assert all(set(r) == STATUS_KEYS for r in rows)
    tracker = next(r for r in rows if r["integrationId"] == "tracker_tools")
    assert tracker["connected"] is True and tracker["state"] == "connected"
    assert tracker["connectedAt"] == Connection.objects.get(user=alice.user).connected_at.isoformat()
    assert tracker["lastUsedAt"] is None and tracker["expiresAt"] is None
    mail = next(r for r in rows if r["integrationId"] == "mail_tools")
    assert mail == {"integrationId": "mail_tools", "name": "Mail", "authScheme": "none", "firstParty": True,
                    "connectionRequired": True, "connected": False, "state": "not_connected", "connectedAt": None,
                    "lastUsedAt": None, "expiresAt": None}


def test_status_of_one_integration_answers_that_one(alice, catalogue):
    rows = vault.vault_status(caller=caller_of(alice), integration_id="http_tools")["integrations"]

    assert [(r["integrationId"], r["connectionRequired"], r["state"]) for r in rows] == [
        ("http_tools", False, "not_connected")]


def test_an_unknown_or_disabled_integration_is_not_found_with_close_ids_suggested(alice, catalogue):
    with pytest.raises(NotFound) as missing:
        vault.vault_status(caller=caller_of(alice), integration_id="weathr_tools")
    assert missing.value.code == "integration_not_found"
    assert "weather_tools" in missing.value.message
    assert missing.value.extra == {"suggestions": ["weather_tools"]}

    with pytest.raises(NotFound):
        connect(alice, "retired_tools", credentials={"apiKey": SECRET})
    assert not Connection.objects.exists()


def test_an_oauth_connection_past_expiry_with_nothing_to_refresh_it_shows_as_expired(alice, catalogue):
    Connection.objects.create(user=alice.user, integration=catalogue["github_tools"],
                              sealed_credentials=seal({"accessToken": "a", "refreshToken": "", "tokenType": "Bearer"}),
                              expires_at=timezone.now() - timedelta(minutes=1))

    row, = vault.vault_status(caller=caller_of(alice), integration_id="github_tools")["integrations"]

    assert (row["connected"], row["state"]) == (False, "expired")


# Connecting with credentials, and each scheme's fields.

@pytest.mark.parametrize(("integration_id", "credentials", "stored"), [
    ("weather_tools", {"apiKey": SECRET}, {"apiKey": SECRET}),
    ("tracker_tools", {"token": SECRET}, {"token": SECRET}),
    ("legacy_tools", {"username": "alice", "password": SECRET}, {"username": "alice", "password": SECRET}),
    ("webhook_tools", {"secret": SECRET}, {"secret": SECRET}),
    ("webhook_tools", {"apiKey": SECRET}, {"secret": SECRET}),
])
def test_each_scheme_takes_its_own_fields(alice, catalogue, integration_id, credentials, stored):
    assert connect(alice, integration_id, credentials=credentials)["status"] == "connected"

    row = Connection.objects.get(user=alice.user, integration_id=integration_id)
    assert (row.state, unseal(row.sealed_credentials)) == ("connected", stored)
    assert vault.connection_credentials(caller=caller_of(alice), integration=catalogue[integration_id]) == stored


@pytest.mark.parametrize(("integration_id", "credentials", "named"), [
    ("weather_tools", {"key": SECRET}, ["Unknown", "apiKey"]),
    ("weather_tools", {SECRET: "x"}, ["Unknown", "apiKey"]),
    ("weather_tools", {}, ["Missing", "apiKey"]),
    ("weather_tools", {"apiKey": ""}, ["'apiKey'", "non-empty"]),
    ("weather_tools", {"apiKey": 42}, ["'apiKey'", "string"]),
    ("weather_tools", {"apiKey": "x" * 9000}, ["'apiKey'", "8,192"]),
    ("weather_tools", {"apiKey": "a\x00b"}, ["'apiKey'", "NUL"]),
    ("legacy_tools", {"username": "alice"}, ["password", "username"]),
    ("tracker_tools", {"token": SECRET, "apiKey": SECRET}, ["Unknown", "token"]),
    ("webhook_tools", {"secret": SECRET, "apiKey": SECRET}, ["twice", "secret"]),
])
def test_credentials_that_do_not_fit_the_scheme_are_refused_naming_the_accepted_fields(alice, catalogue,
                                                                                       integration_id, credentials,
                                                                                       named):
    with pytest.raises(InvalidInput) as refused:
        connect(alice, integration_id, credentials=credentials)

    assert refused.value.code == "invalid_credentials"
    assert all(word in refused.value.message for word in named), refused.value.message
    assert no_part_of(SECRET, refused.value.message)
    assert not Connection.objects.exists()


@pytest.mark.parametrize("integration_id", ["github_tools", "http_tools"])
def test_oauth_and_no_auth_integrations_take_no_credentials(alice, catalogue, integration_id):
    with pytest.raises(InvalidInput) as refused:
        connect(alice, integration_id, credentials={"token": SECRET})

    assert refused.value.code == "credentials_not_accepted"
    assert not Connection.objects.exists()


def test_connecting_again_replaces_the_credentials_in_the_one_connection(alice, catalogue):
    connect(alice, "weather_tools", credentials={"apiKey": "first-key-0000"})
    connect(alice, "weather_tools", credentials={"apiKey": SECRET})

    row = Connection.objects.get(user=alice.user, integration_id="weather_tools")
    assert unseal(row.sealed_credentials) == {"apiKey": SECRET}


def test_an_integration_without_auth_connects_at_once(alice, catalogue):
    assert connect(alice, "http_tools") == {"status": "connected", "integrationId": "http_tools"}
    assert vault.connection_credentials(caller=caller_of(alice), integration=catalogue["http_tools"]) == {}


# First-party integrations.

def test_a_first_party_integration_asks_for_confirmation_and_stores_nothing_until_given(alice, catalogue):
    answer = connect(alice, "mail_tools")

    assert answer["status"] == "confirmation_required" and answer["integrationId"] == "mail_tools"
    assert "costs credits" in answer["message"] and "confirmed: true" in answer["message"]
    assert not Connection.objects.exists() and not ConnectRequest.objects.exists()


def test_a_confirmed_first_party_connection_records_the_confirmation(alice, catalogue):
    assert connect(alice, "mail_tools", confirmed=True) == {"status": "connected", "integrationId": "mail_tools"}

    row = Connection.objects.get(user=alice.user, integration_id="mail_tools")
    assert (row.confirmed_usage, row.sealed_credentials) == (True, "")
    assert AuditEvent.objects.get(action="vault.connect").detail["confirmedUsage"] is True


# Connect links.

def test_without_credentials_a_connect_link_is_answered(alice, catalogue):
    answer = connect(alice, "weather_tools")

    link = ConnectRequest.objects.get(user=alice.user)
    assert answer == {
        "status": "pending", "integrationId": "weather_tools",
        "connectUrl": f"{settings.ATRIUM_PUBLIC_URL}/vault/connect/{link.pk}/",
        "expiresAt": link.expires_at.isoformat(),
        "instructions": "Open the link, sign in as alice, and enter the API key there; never paste secrets into "
                        "the chat."}
    assert link.expires_at - link.created_at == timedelta(minutes=settings.ATRIUM_VAULT_CONNECT_MINUTES)
    assert link.used_at is None and not Connection.objects.exists()
    assert AuditEvent.objects.filter(action="vault.connect_link", target="weather_tools").exists()


def test_an_oauth_integration_without_its_settings_cannot_be_connected(alice, catalogue):
    Integration.objects.filter(pk="github_tools").update(auth_config={"tokenUrl": "http://127.0.0.1:9/token"})

    with pytest.raises(DomainError) as refused:
        connect(alice, "github_tools")

    assert refused.value.code == "integration_not_configured"
    assert "authorizationUrl" in refused.value.message and "clientId" in refused.value.message
    assert not ConnectRequest.objects.exists()


# Disconnecting.

def test_disconnecting_forgets_the_credentials_and_names_the_skills_that_need_them(alice, charlie, catalogue):
    weather = catalogue["weather_tools"]
    for owner, name in [(None, "forecast"), (alice.user, "alice_umbrella"), (charlie.user, "charlie_picnic")]:
        Skill.objects.create(owner=owner, name=name, source_code="pass").integrations.add(weather)
    Skill.objects.create(name="unrelated", source_code="pass")
    connect(alice, "weather_tools", credentials={"apiKey": SECRET})

    answer = vault.vault_disconnect(caller=caller_of(alice), integration_id="weather_tools")

    assert answer == {"status": "disconnected", "integrationId": "weather_tools",
                      "affectedSkills": ["alice_umbrella", "forecast"]}
    assert not Connection.objects.exists()
    assert vault.connection_credentials(caller=caller_of(alice), integration=weather) is None


def test_disconnecting_what_is_not_connected_says_so(alice, catalogue):
    answer = vault.vault_disconnect(caller=caller_of(alice), integration_id="weather_tools")

    assert answer["status"] == "not_connected" and answer["integrationId"] == "weather_tools"
    assert not AuditEvent.objects.filter(action="vault.disconnect").exists()


# Use.

def test_use_records_when_a_connection_was_last_used_at_most_once_a_minute(alice, catalogue):
    connect(alice, "weather_tools", credentials={"apiKey": SECRET})
    weather = catalogue["weather_tools"]

    vault.connection_credentials(caller=caller_of(alice), integration=weather)
    first = Connection.objects.get(user=alice.user).last_used_at
    vault.connection_credentials(caller=caller_of(alice), integration=weather)
    assert first is not None and Connection.objects.get(user=alice.user).last_used_at == first

    Connection.objects.update(last_used_at=timezone.now() - timedelta(minutes=2))
    vault.connection_credentials(caller=caller_of(alice), integration=weather)
    assert Connection.objects.get(user=alice.user).last_used_at > first


def test_an_expired_connection_is_refused_on_use_saying_to_connect_again(alice, catalogue):
    connect(alice, "weather_tools", credentials={"apiKey": SECRET})
    Connection.objects.update(state=Connection.State.EXPIRED)

    with pytest.raises(vault.ConnectionExpired) as expired:
        vault.connection_credentials(caller=caller_of(alice), integration=catalogue["weather_tools"])

    assert expired.value.code == "connection_expired" and "Connect again" in expired.value.message


def test_charlie_never_sees_or_uses_alices_connection(alice, charlie, catalogue):
    connect(alice, "weather_tools", credentials={"apiKey": SECRET})
    weather = catalogue["weather_tools"]

    row, = vault.vault_status(caller=caller_of(charlie), integration_id="weather_tools")["integrations"]
    assert (row["connected"], row["state"], row["connectedAt"]) == (False, "not_connected", None)
    assert vault.connection_credentials(caller=caller_of(charlie), integration=weather) is None
    gone = vault.vault_disconnect(caller=caller_of(charlie), integration_id="weather_tools")
    assert gone["status"] == "not_connected"
    assert Connection.objects.filter(user=alice.user, integration=weather).exists()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_concurrent_connects_leave_one_connection_holding_one_of_their_keys(alice, catalogue):
    answers = in_threads(lambda i: connect(alice, "weather_tools", credentials={"apiKey": f"{SECRET}-{i}"}))

    assert {a["status"] for a in answers} == {"connected"}
    row = Connection.objects.get(user=alice.user, integration_id="weather_tools")
    assert unseal(row.sealed_credentials)["apiKey"] in {f"{SECRET}-{i}" for i in range(THREADS)}
    assert AuditEvent.objects.filter(action="vault.connect").count() == THREADS


# The connect page.

def signed_in(member: Member, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(member.user)
    return client


def link_path(member: Member, integration_id: str) -> str:
    return urlsplit(connect(member, integration_id)["connectUrl"]).path


def test_the_connect_page_needs_a_sign_in_and_comes_back_after_it(alice, catalogue):
    path = link_path(alice, "weather_tools")

    response = Client().get(path)

    assert response.status_code == 302
    assert response["Location"].startswith(f"{settings.LOGIN_URL}?next=") and path in response["Location"]


def test_the_connect_page_asks_for_the_secret_in_a_password_field(alice, catalogue):
    response = signed_in(alice).get(link_path(alice, "weather_tools"))

    html = response.content.decode()
    assert response.status_code == 200
    assert '<input type="password" id="id_apiKey" name="apiKey" autocomplete="off"' in html
    assert "<script" not in html and "Content-Security-Policy" in response.headers
    assert "never paste a secret" in html.lower()


def test_a_basic_connect_page_asks_for_a_user_name_and_a_password(alice, catalogue):
    html = signed_in(alice).get(link_path(alice, "legacy_tools")).content.decode()

    assert 'type="text" id="id_username" name="username"' in html
    assert 'type="password" id="id_password" name="password"' in html


def test_a_submitted_connect_page_stores_the_secret_sealed_and_the_link_is_used_up(alice, catalogue):
    path = link_path(alice, "weather_tools")
    client = signed_in(alice)

    response = client.post(path, {"apiKey": SECRET})

    assert response.status_code == 200 and "You can return to your client" in response.content.decode()
    row = Connection.objects.get(user=alice.user, integration_id="weather_tools")
    assert unseal(row.sealed_credentials) == {"apiKey": SECRET}
    assert AuditEvent.objects.get(action="vault.connect").via == "web"
    assert ConnectRequest.objects.get(user=alice.user).used_at is not None

    again = client.post(path, {"apiKey": "another-key-1111"})
    assert again.status_code == 410 and "already been used" in again.content.decode()
    assert client.get(path).status_code == 410
    assert unseal(Connection.objects.get(user=alice.user).sealed_credentials) == {"apiKey": SECRET}


def test_an_empty_field_shows_the_form_again_and_keeps_the_link(alice, catalogue):
    path = link_path(alice, "legacy_tools")

    response = signed_in(alice).post(path, {"username": "alice", "password": ""})

    assert response.status_code == 400 and "password" in response.content.decode()
    assert not Connection.objects.exists()
    assert ConnectRequest.objects.get(user=alice.user).used_at is None


def test_alices_connect_link_is_not_found_for_bob(alice, bob, catalogue):
    path = link_path(alice, "weather_tools")
    client = signed_in(bob)

    assert client.get(path).status_code == 404
    assert client.post(path, {"apiKey": SECRET}).status_code == 404
    assert client.get("/vault/connect/no-such-token/").status_code == 404
    assert not Connection.objects.exists()
    assert ConnectRequest.objects.get(user=alice.user).used_at is None


def test_an_expired_connect_link_is_refused(alice, catalogue):
    path = link_path(alice, "weather_tools")
    ConnectRequest.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    client = signed_in(alice)

    assert client.get(path).status_code == 410
    response = client.post(path, {"apiKey": SECRET})
    assert response.status_code == 410 and "expired" in response.content.decode()
    assert not Connection.objects.exists()


def test_the_connect_form_needs_its_csrf_token(alice, catalogue):
    path = link_path(alice, "weather_tools")
    client = signed_in(alice, enforce_csrf_checks=True)

    assert client.post(path, {"apiKey": SECRET}).status_code == 403
    assert not Connection.objects.exists()

    fields = hidden_inputs(client.get(path).content.decode())
    assert client.post(path, {**fields, "apiKey": SECRET}).status_code == 200
    assert Connection.objects.filter(user=alice.user).exists()


# Key rotation.

def test_vault_rotate_reseals_every_sealed_column_under_the_first_key(alice, catalogue, settings):
    old, new = settings.ATRIUM_VAULT_KEYS[0], new_key()
    connect(alice, "weather_tools", credentials={"apiKey": SECRET})
    connect(alice, "tracker_tools", credentials={"token": SECRET})
    vault.integration_client_secret_set(integration=catalogue["github_tools"], secret="client-secret-9999")
    link = ConnectRequest.objects.create(user=alice.user, integration=catalogue["github_tools"],
                                         sealed_verifier=seal("verifier-1234"),
                                         expires_at=timezone.now() + timedelta(minutes=5))
    trigger = Trigger.objects.create(playbook=playbook_make(alice.user), owner=alice.user, kind="webhook",
                                     sealed_secret=seal("whsec-1234"))
    github = GitHubAuth.objects.create(user=alice.user, state="connected", sealed_token=seal("gho_token1234"),
                                       sealed_device_code=seal("device-1234"))
    challenge = VerificationChallenge.objects.create(
        id=uuid.uuid4(), owner=alice.user, kind="verification", agent_name="triager", reason="Check.",
        sealed_code=seal("ABC123"), expires_at=timezone.now() + timedelta(minutes=5))
    before = {c.pk: c.sealed_credentials for c in Connection.objects.all()}
    settings.ATRIUM_VAULT_KEYS = [new, old]

    out = StringIO()
    call_command("vault_rotate", "--batch-size", "1", stdout=out)

    assert "Resealed 2 connection credentials." in out.getvalue()
    assert "Resealed 1 PKCE verifiers." in out.getvalue()
    assert "Resealed 1 OAuth client secrets." in out.getvalue()
    settings.ATRIUM_VAULT_KEYS = [new]
    for row in Connection.objects.all():
        assert row.sealed_credentials != before[row.pk]
        assert unseal(raw_sealed("integrations_connection", "sealed_credentials", row.pk)) in (
            {"apiKey": SECRET}, {"token": SECRET})
    assert unseal(raw_sealed("integrations_connectrequest", "sealed_verifier", link.pk)) == "verifier-1234"
    assert unseal(raw_sealed("integrations_integration", "sealed_client_secret", "github_tools")) == (
        "client-secret-9999")
    for label in ("webhook signing secrets", "GitHub tokens", "GitHub device codes", "verification codes"):
        assert f"Resealed 1 {label}." in out.getvalue()
    assert unseal(raw_sealed("workflows_trigger", "sealed_secret", trigger.pk)) == "whsec-1234"
    assert unseal(raw_sealed("accounts_githubauth", "sealed_token", github.pk)) == "gho_token1234"
    assert unseal(raw_sealed("accounts_githubauth", "sealed_device_code", github.pk)) == "device-1234"
    assert unseal(raw_sealed("elements_verificationchallenge", "sealed_code", challenge.pk.hex)) == "ABC123"


def test_vault_rotate_without_the_old_key_stops_and_says_which_row(alice, catalogue, settings):
    connect(alice, "weather_tools", credentials={"apiKey": SECRET})
    settings.ATRIUM_VAULT_KEYS = [new_key()]

    with pytest.raises(CommandError) as failed:
        call_command("vault_rotate", stdout=StringIO())

    assert "Connection" in str(failed.value) and "ATRIUM_VAULT_KEYS" in str(failed.value)
