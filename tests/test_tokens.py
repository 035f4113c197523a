"""Personal access tokens: made, listed and revoked through the service, the API, admin and a command."""

import hashlib
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from accounts.models import AuditEvent, PersonalToken, User
from accounts.services import token_create
from core.caller import Caller
from core.errors import Forbidden, InvalidInput

pytestmark = pytest.mark.django_db


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_only_the_digest_of_a_token_is_stored(alice):
    row = PersonalToken.objects.get(user=alice.user)

    assert alice.token.startswith("atr_")
    assert row.digest == hashlib.sha256(alice.token.encode()).hexdigest()
    assert row.prefix == alice.token[:12]
    assert alice.token not in {str(v) for v in PersonalToken.objects.values_list(flat=False).get(pk=row.pk)}


def test_no_scopes_means_every_scope_the_maker_holds(alice):
    from accounts.scopes import ALL_SCOPES

    assert {s.name for s in PersonalToken.objects.get(user=alice.user).scopes.all()} == ALL_SCOPES


def test_a_token_cannot_grant_more_than_its_maker_holds(alice):
    limited = Caller(user=alice.user, scopes=frozenset({"docs:read"}), via="api")

    with pytest.raises(Forbidden) as refused:
        token_create(caller=limited, user=alice.user, label="x", scopes=["docs:read", "elements:write"])

    assert "elements:write" in refused.value.message
    assert PersonalToken.objects.filter(user=alice.user).count() == 1


def test_unknown_scopes_are_named(alice):
    with pytest.raises(InvalidInput) as refused:
        token_create(caller=Caller.trusted(alice.user, via="api"), user=alice.user, label="x", scopes=["elements:rule"])

    assert refused.value.code == "unknown_scope"
    assert "elements:rule" in refused.value.message


def test_nobody_makes_tokens_for_someone_else_outside_admin(alice, bob):
    with pytest.raises(Forbidden):
        token_create(caller=Caller.trusted(alice.user, via="api"), user=bob.user, label="x")


def test_the_api_makes_a_token_and_shows_it_once(alice, client):
    response = client.post("/api/tokens", {"label": "ci bot", "scopes": ["runs:read"]},
                           content_type="application/json", **bearer(alice.token))

    assert response.status_code == 201
    body = response.json()
    assert body["token"].startswith("atr_")
    assert body["scopes"] == ["runs:read"]
    row = PersonalToken.objects.get(pk=body["id"])
    assert row.digest == hashlib.sha256(body["token"].encode()).hexdigest()
    listed = client.get("/api/tokens", **bearer(alice.token)).json()
    assert {t["label"] for t in listed} == {"tests", "ci bot"}
    assert all("token" not in t for t in listed)


def test_the_api_rejects_bad_input_and_changes_nothing(alice, client):
    response = client.post("/api/tokens", {"label": "", "scopes": ["nope"]}, content_type="application/json",
                           **bearer(alice.token))

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input"
    assert PersonalToken.objects.filter(user=alice.user).count() == 1


def test_the_api_revokes_only_your_own_tokens(alice, charlie, client):
    alices = PersonalToken.objects.get(user=alice.user)

    assert client.delete(f"/api/tokens/{alices.pk}", **bearer(charlie.token)).status_code == 404
    alices.refresh_from_db()
    assert alices.revoked_at is None

    assert client.delete(f"/api/tokens/{alices.pk}", **bearer(alice.token)).status_code == 204
    alices.refresh_from_db()
    assert alices.revoked_at is not None


@pytest.mark.parametrize("token_id", ["abc", "1.5", "\u0661", "9" * 30])
@pytest.mark.parametrize("method", ["get", "delete"])
def test_an_id_that_is_not_a_token_number_is_a_json_404(alice, client, method, token_id):
    response = getattr(client, method)(f"/api/tokens/{token_id}", **bearer(alice.token))

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "token_not_found"
    assert PersonalToken.objects.get(user=alice.user).revoked_at is None


def test_the_api_lists_only_your_own_tokens(alice, charlie, client):
    labels = [t["id"] for t in client.get("/api/tokens", **bearer(charlie.token)).json()]

    assert labels == [PersonalToken.objects.get(user=charlie.user).pk]


def test_issue_token_prints_the_raw_token_last(alice, capsys):
    call_command("issue_token", "alice", "--label", "laptop", "--scope", "docs:read", "--scope", "runs:read")

    raw = capsys.readouterr().out.strip().splitlines()[-1]
    row = PersonalToken.objects.get(digest=hashlib.sha256(raw.encode()).hexdigest())
    assert (row.label, row.user) == ("laptop", alice.user)
    assert {s.name for s in row.scopes.all()} == {"docs:read", "runs:read"}
    assert AuditEvent.objects.filter(action="token.create", via="command", actor=alice.user).exists()


def test_issue_token_can_create_the_user(db, capsys):
    call_command("issue_token", "ci-bot", "--create-user", "--scope", "playbooks:execute")

    raw = capsys.readouterr().out.strip().splitlines()[-1]
    bot = User.objects.get(username="ci-bot")
    assert not bot.has_usable_password()
    assert PersonalToken.objects.get(user=bot).digest == hashlib.sha256(raw.encode()).hexdigest()


def test_issue_token_refuses_an_unknown_user_or_scope(alice):
    with pytest.raises(CommandError, match="--create-user"):
        call_command("issue_token", "nobody")
    with pytest.raises(CommandError, match="Unknown scope"):
        call_command("issue_token", "alice", "--scope", "everything")
    assert not User.objects.filter(username="nobody").exists()


@pytest.fixture
def curator(db, client):
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


def test_admin_makes_a_token_and_shows_it_once(curator, alice, client):
    response = client.post("/admin/accounts/personaltoken/add/", {"user": alice.user.pk, "label": "from admin"},
                           follow=True)

    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    raw = shown[0].rsplit(" ", 1)[-1]
    row = PersonalToken.objects.get(label="from admin")
    assert row.user == alice.user
    assert row.digest == hashlib.sha256(raw.encode()).hexdigest()
    event = AuditEvent.objects.get(action="token.create", via="admin")
    assert event.actor == curator


def test_admin_revokes_tokens_with_an_action(curator, alice, client):
    token = PersonalToken.objects.get(user=alice.user)

    client.post("/admin/accounts/personaltoken/", {"action": "revoke", "_selected_action": [token.pk]})

    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="token.revoke", via="admin", actor=curator).exists()


def test_admin_lists_tokens_users_scopes_and_oauth_applications(curator, alice, client):
    for url in ["/admin/accounts/personaltoken/?q=tests", "/admin/accounts/user/?q=alice",
                "/admin/accounts/scope/?q=elements", "/admin/oauth2_provider/application/",
                "/admin/accounts/auditevent/", "/admin/accounts/mcpsession/"]:
        assert client.get(url).status_code == 200, url


def test_admin_edits_are_audited(curator, alice, client):
    scope_url = "/admin/accounts/scope/"
    from accounts.models import Scope

    scope = Scope.objects.get(name="docs:read")
    client.post(f"{scope_url}{scope.pk}/change/", {"description": "Read the handbook"})

    scope.refresh_from_db()
    assert scope.description == "Read the handbook"
    event = AuditEvent.objects.get(action="scope.update")
    assert (event.actor, event.via) == (curator, "admin")


def test_an_expiry_in_the_past_is_refused(alice):
    with pytest.raises(InvalidInput):
        token_create(caller=Caller.trusted(alice.user, via="api"), user=alice.user, label="x",
                     expires_at=timezone.now() - timedelta(minutes=1))
