"""The /mcp endpoint over HTTP: handshake, sessions, methods, origins and authentication."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import McpSession, PersonalToken

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_it_negotiates_both_protocol_versions(alice, mcp_client, version):
    client = mcp_client(alice)

    result = client.initialize(version).json()["result"]

    assert result["protocolVersion"] == version
    assert result["serverInfo"]["name"] == "Atrium"
    session = McpSession.objects.get(pk=client.session_id)
    assert (session.user, session.protocol_version, session.client_name) == (alice.user, version, "pytest")


def test_it_serves_tools_in_a_session(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    assert client.post("notifications/initialized", notification=True).status_code == 202
    assert {"auth_status", "auth_logout", "mcp_aql_read", "mcp_aql_create"} <= client.tool_names()


def test_it_requires_a_session_after_initialize(alice, mcp_client):
    client = mcp_client(alice)

    response = client.post("tools/list")

    assert response.status_code == 400
    assert "initialize" in response.json()["error"]["message"]


def test_it_refuses_an_unknown_session(alice, mcp_client):
    client = mcp_client(alice)
    client.session_id = "no-such-session"

    assert client.post("tools/list").status_code == 404


def test_it_refuses_another_users_session(alice, bob, mcp_client):
    alices = mcp_client(alice)
    alices.initialize()
    bobs = mcp_client(bob)
    bobs.session_id = alices.session_id

    assert bobs.post("tools/list").status_code == 404


def test_it_refuses_an_idle_session(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()
    McpSession.objects.filter(pk=client.session_id).update(last_seen_at=timezone.now() - timedelta(days=30))

    assert client.post("tools/list").status_code == 404


def test_delete_ends_the_session(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    response = client.http.delete("/mcp", **client.headers())

    assert response.status_code == 204
    assert McpSession.objects.get(pk=client.session_id).closed_at is not None
    assert client.post("tools/list").status_code == 404


def test_get_answers_405_without_opening_a_stream(alice, mcp_client):
    client = mcp_client(alice)

    response = client.http.get("/mcp", HTTP_ACCEPT="text/event-stream", HTTP_AUTHORIZATION=f"Bearer {alice.token}")

    assert response.status_code == 405
    assert response["Allow"] == "POST, DELETE"


def test_it_needs_a_token(db, mcp_client):
    response = mcp_client(None).post("initialize", {})

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith('Bearer resource_metadata="')
    assert response["WWW-Authenticate"].endswith('/.well-known/oauth-protected-resource/mcp"')


@pytest.mark.parametrize("token", ["atr_not-a-real-token", "an-oauth-token-that-does-not-exist"])
def test_it_refuses_an_unknown_token(db, mcp_client, token):
    response = mcp_client(token).post("initialize", {})

    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"


def test_it_refuses_a_revoked_token(alice, mcp_client):
    PersonalToken.objects.filter(user=alice.user).update(revoked_at=timezone.now())

    assert mcp_client(alice).post("initialize", {}).status_code == 401


def test_it_refuses_an_expired_token(alice, mcp_client):
    PersonalToken.objects.filter(user=alice.user).update(expires_at=timezone.now())

    response = mcp_client(alice).post("initialize", {})

    assert response.status_code == 401
    assert response.json()["error"] == "Token expired."


def test_it_refuses_the_token_of_a_deactivated_user(alice, mcp_client):
    alice.user.is_active = False
    alice.user.save()

    assert mcp_client(alice).post("initialize", {}).status_code == 401


def test_it_refuses_a_foreign_browser_origin(alice, mcp_client):
    client = mcp_client(alice, origin="https://evil.example")

    response = client.post("initialize", {})

    assert response.status_code == 403
    assert response.json()["code"] == "origin_not_allowed"
    assert not McpSession.objects.exists()


def test_it_allows_a_local_browser_origin_with_cors(alice, mcp_client):
    client = mcp_client(alice, origin="http://localhost:6274")

    response = client.initialize()

    assert response["Access-Control-Allow-Origin"] == "http://localhost:6274"
    assert "Mcp-Session-Id" in response["Access-Control-Expose-Headers"]


def test_it_answers_a_cors_preflight_without_a_token(db, mcp_client):
    client = mcp_client(None, origin="http://127.0.0.1:6274")

    response = client.http.options("/mcp", **client.headers())

    assert response.status_code == 204
    assert "Authorization" in response["Access-Control-Allow-Headers"]


def test_it_records_last_use_of_a_token(alice, mcp_client):
    mcp_client(alice).initialize()

    assert PersonalToken.objects.get(user=alice.user).last_used_at is not None


def test_the_initialize_response_is_json(alice, mcp_client):
    response = mcp_client(alice).initialize()

    assert response["Content-Type"].startswith("application/json")
    assert json.loads(response.content)["jsonrpc"] == "2.0"


def test_ping_answers_an_empty_result(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    assert client.post("ping").json()["result"] == {}


def test_it_refuses_an_unsupported_protocol_version_header(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    response = client.http.post("/mcp", data='{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}',
                                content_type="application/json", HTTP_MCP_PROTOCOL_VERSION="1999-01-01",
                                **client.headers())

    assert response.status_code == 400
    assert "Unsupported protocol version: 1999-01-01" in response.json()["error"]["message"]


def test_it_needs_a_client_that_accepts_json(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()
    headers = {**client.headers(), "HTTP_ACCEPT": "text/html"}

    response = client.http.post("/mcp", data='{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}',
                                content_type="application/json", **headers)

    assert response.status_code == 406


def test_malformed_request_parameters_are_a_jsonrpc_error(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    response = client.post("tools/call", {"arguments": {}})

    assert response.json()["error"]["code"] == -32602


def test_arguments_that_are_not_an_object_are_a_jsonrpc_error(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    response = client.post("tools/call", {"name": "auth_status", "arguments": "not an object"})

    assert response.json()["error"]["code"] == -32602
