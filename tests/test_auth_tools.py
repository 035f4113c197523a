"""Aident's auth_status and auth_logout."""

import pytest

from accounts.models import AuditEvent, McpSession, PersonalToken
from accounts.services import token_create
from core.caller import Caller
from tests.conftest import make_member

pytestmark = pytest.mark.django_db


def test_auth_status_says_who_and_what(db, mcp_client):
    member = make_member("alice", scopes=["docs:read", "elements:read"])
    client = mcp_client(member)
    client.initialize()

    status = client.call_expecting_success("auth_status")

    token = PersonalToken.objects.get(user=member.user)
    assert status["user"]["username"] == "alice"
    assert status["scopes"] == ["docs:read", "elements:read"]
    assert status["token"] == {
        "kind": "personal", "description": f"personal token 'tests' ({token.prefix}…)", "id": token.pk,
        "label": "tests", "prefix": token.prefix, "created_at": token.created_at.isoformat(), "expires_at": None,
    }
    assert status["session"]["id"] == client.session_id
    assert status["mcp_url"].endswith("/mcp")


def test_auth_logout_revokes_the_presented_token(alice, bob, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    result = client.call_expecting_success("auth_logout")

    assert result["revoked"] == "personal"
    assert PersonalToken.objects.get(user=alice.user).revoked_at is not None
    assert PersonalToken.objects.get(user=bob.user).revoked_at is None
    assert McpSession.objects.get(pk=client.session_id).closed_at is not None
    event = AuditEvent.objects.get(action="token.revoke")
    assert (event.actor, event.via) == (alice.user, "mcp")
    assert client.post("tools/list").status_code == 401


def test_auth_logout_leaves_the_users_other_tokens_alone(alice, mcp_client):
    _, laptop = token_create(caller=Caller.trusted(alice.user, via="command"), user=alice.user, label="laptop")
    client = mcp_client(alice)
    client.initialize()

    client.call_expecting_success("auth_logout")

    assert mcp_client(laptop).initialize().status_code == 200
