"""OAuth 2.1 for MCP clients, in-process: discovery, dynamic registration, consent with PKCE,
tokens on /mcp, refresh rotation, scope challenges, logout and audit."""

import base64
import hashlib
import json
import re
import secrets
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from accounts.models import AuditEvent, User
from accounts.scopes import SCOPES
from core import tools as mcp_registry
from tests.conftest import ACCEPT, McpClient, hidden_inputs, make_member

pytestmark = pytest.mark.django_db

REGISTERED_CALLBACK = "http://127.0.0.1:50123/callback"
# RFC 8252 section 7.3: a native client picks its loopback port when it authorizes.
CALLBACK = "http://127.0.0.1:50999/callback"
SCOPE_WORDS = dict(SCOPES)
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {},
              "clientInfo": {"name": "pytest", "version": "1"}}


def checksum(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def register(http: Client, redirect_uris: list[str], *, name: str = "pytest client"):
    body = {"redirect_uris": redirect_uris, "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
            "client_name": name}
    return http.post("/oauth/register/", data=json.dumps(body), content_type="application/json")


def register_client(http: Client) -> str:
    response = register(http, [REGISTERED_CALLBACK])
    assert response.status_code == 201, response.content
    return response.json()["client_id"]


def authorize_query(client_id: str, challenge: str | None, **overrides: str) -> dict[str, str]:
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": CALLBACK,
              "code_challenge": challenge, "code_challenge_method": "S256",
              "scope": "elements:read docs:read", "state": "state-42", "resource": settings.ATRIUM_MCP_URL}
    params.update(overrides)
    return {k: v for k, v in params.items() if v is not None}


def consent_page(browser: Client, query: dict[str, str]):
    return browser.get("/oauth/authorize/?" + urlencode(query))


def allow(browser: Client, page) -> Any:
    """Submit the consent form as the user would, by clicking Allow."""
    fields = hidden_inputs(page.content.decode())
    return browser.post("/oauth/authorize/", data={**fields, "allow": "Allow"})


def redirect_params(response, redirect_uri: str = CALLBACK) -> dict[str, str]:
    assert response.status_code == 302, response.content
    location = response["Location"]
    assert location.startswith(redirect_uri + "?"), location
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def exchange_code(http: Client, client_id: str, code: str, verifier: str, redirect_uri: str = CALLBACK):
    return http.post("/oauth/token/", data={"grant_type": "authorization_code", "code": code,
                                            "redirect_uri": redirect_uri, "client_id": client_id,
                                            "code_verifier": verifier})


def refresh(http: Client, client_id: str, refresh_token: str):
    return http.post("/oauth/token/", data={"grant_type": "refresh_token", "refresh_token": refresh_token,
                                            "client_id": client_id})


def oauth_tokens(user: User, scope: str = "elements:read docs:read") -> tuple[str, dict[str, Any]]:
    """Run the whole authorization-code flow for `user`; the client id and the token response."""
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(user)
    verifier, challenge = pkce_pair()
    page = consent_page(browser, authorize_query(client_id, challenge, scope=scope))
    assert page.status_code == 200, page.content
    code = redirect_params(allow(browser, page))["code"]
    response = exchange_code(browser, client_id, code, verifier)
    assert response.status_code == 200, response.content
    return client_id, response.json()


def mcp_post(token: str, method: str, params: dict[str, Any] | None = None):
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        body["params"] = params
    return Client().post("/mcp", data=json.dumps(body), content_type="application/json",
                         HTTP_ACCEPT=ACCEPT, HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def auth_status_needs_elements_write(monkeypatch):
    """auth_status needs no scope; pretend it needs elements:write, which no test token carries."""
    spec = mcp_registry.TOOLS["auth_status"]
    monkeypatch.setitem(mcp_registry.TOOLS, "auth_status", replace(spec, scope="elements:write"))


# Discovery


def test_it_publishes_authorization_server_metadata():
    response = Client().get("/.well-known/oauth-authorization-server")

    assert response.status_code == 200
    doc = response.json()
    assert doc["issuer"] == settings.ATRIUM_PUBLIC_URL
    assert doc["authorization_endpoint"] == f"{settings.ATRIUM_PUBLIC_URL}/oauth/authorize/"
    assert doc["token_endpoint"] == f"{settings.ATRIUM_PUBLIC_URL}/oauth/token/"
    assert doc["registration_endpoint"] == f"{settings.ATRIUM_PUBLIC_URL}/oauth/register/"
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert doc["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert doc["response_types_supported"] == ["code"]
    assert "none" in doc["token_endpoint_auth_methods_supported"]
    assert "elements:read" in doc["scopes_supported"]


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource",
                                  "/.well-known/oauth-protected-resource/mcp"])
def test_it_publishes_protected_resource_metadata(path):
    response = Client().get(path)

    assert response.status_code == 200
    doc = response.json()
    assert doc["resource"] == settings.ATRIUM_MCP_URL
    assert doc["authorization_servers"] == [settings.ATRIUM_PUBLIC_URL]
    assert {"elements:read", "docs:read", "runs:execute"} <= set(doc["scopes_supported"])
    assert doc["bearer_methods_supported"] == ["header"]


def test_it_challenges_mcp_request_without_token():
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})

    response = Client().post("/mcp", data=body, content_type="application/json", HTTP_ACCEPT=ACCEPT)

    assert response.status_code == 401
    metadata_url = f"{settings.ATRIUM_PUBLIC_URL}/.well-known/oauth-protected-resource/mcp"
    assert f'resource_metadata="{metadata_url}"' in response["WWW-Authenticate"]


# Dynamic client registration


@pytest.mark.parametrize("redirect_uri", [
    "http://127.0.0.1:61234/callback",
    "http://localhost:3334/cb",
    "https://claude.ai/api/mcp/auth_callback",
])
def test_it_registers_public_client_with_allowed_redirect(redirect_uri):
    response = register(Client(), [redirect_uri])

    assert response.status_code == 201, response.content
    registered = response.json()
    assert registered["client_id"]
    assert registered["registration_client_uri"].endswith(f"/oauth/register/{registered['client_id']}/")
    assert registered["redirect_uris"] == [redirect_uri]
    assert registered["token_endpoint_auth_method"] == "none"
    app = Application.objects.get(client_id=registered["client_id"])
    assert app.client_type == Application.CLIENT_PUBLIC
    assert app.redirect_uris.split() == [redirect_uri]
    assert app.name == "pytest client"
    assert app.user is None


@pytest.mark.parametrize("redirect_uri", [
    "http://evil.example/cb",
    "http://192.168.1.10:8080/cb",
    "https://claude.ai/cb#fragment",
])
def test_it_refuses_registration_with_redirect_outside_loopback_and_https(redirect_uri):
    response = register(Client(), ["http://127.0.0.1:5000/cb", redirect_uri])

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_redirect_uri"
    assert redirect_uri in response.json()["error_description"]
    assert not Application.objects.exists()
    assert not AuditEvent.objects.filter(action="oauth.client_register").exists()


@pytest.mark.parametrize("smuggling", [
    "http://127.0.0.1:5000/cb http://evil.example/cb",
    "https://claude.ai/api/mcp/auth_callback\nhttp://evil.example/cb",
])
def test_it_refuses_redirect_smuggled_after_whitespace(smuggling):
    response = register(Client(), [smuggling])

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_redirect_uri"
    assert not Application.objects.exists()


def test_it_names_the_registration_client_uri_from_the_public_url():
    # Behind a proxy the Host header is an internal name, or whatever the client sent.
    response = Client(HTTP_HOST="localhost").post(
        "/oauth/register/", content_type="application/json",
        data=json.dumps({"redirect_uris": [REGISTERED_CALLBACK], "token_endpoint_auth_method": "none"}))

    assert response.status_code == 201, response.content
    registered = response.json()
    expected = f"{settings.ATRIUM_PUBLIC_URL}/oauth/register/{registered['client_id']}/"
    assert registered["registration_client_uri"] == expected
    read = Client(HTTP_HOST="localhost").get(
        f"/oauth/register/{registered['client_id']}/",
        HTTP_AUTHORIZATION=f"Bearer {registered['registration_access_token']}")
    assert read.status_code == 200, read.content
    assert read.json()["registration_client_uri"] == expected


def test_it_limits_anonymous_registrations_per_address(settings):
    settings.ATRIUM_REGISTRATIONS_PER_HOUR = 2
    settings.ATRIUM_TRUSTED_PROXIES = ["127.0.0.1"]
    one_address = Client(HTTP_X_FORWARDED_FOR="198.51.100.1")
    assert [register(one_address, [REGISTERED_CALLBACK]).status_code for _ in range(2)] == [201, 201]

    response = register(one_address, [REGISTERED_CALLBACK])

    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 3600
    assert response.json()["error"] == "temporarily_unavailable"
    assert Application.objects.count() == 2
    assert register(Client(HTTP_X_FORWARDED_FOR="198.51.100.2"), [REGISTERED_CALLBACK]).status_code == 201


def test_it_audits_client_registration():
    response = register(Client(), [REGISTERED_CALLBACK], name="Claude Code")

    assert response.status_code == 201
    client_id = response.json()["client_id"]
    event = AuditEvent.objects.get(action="oauth.client_register")
    assert event.actor is None
    assert event.via == "web"
    assert event.target == f"OAuth client {client_id} 'Claude Code'"
    assert event.detail == {"redirect_uris": [REGISTERED_CALLBACK]}


# Authorization


def test_it_sends_anonymous_authorization_request_to_login():
    client_id = register_client(Client())
    query = authorize_query(client_id, pkce_pair()[1])

    response = consent_page(Client(), query)

    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert location.path == "/accounts/login/"
    assert parse_qs(location.query)["next"][0].startswith("/oauth/authorize/?")
    assert not Grant.objects.exists()


def test_it_completes_authorization_code_flow_and_serves_mcp(alice):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)
    verifier, challenge = pkce_pair()

    page = consent_page(browser, authorize_query(client_id, challenge))

    assert page.status_code == 200
    html = page.content.decode()
    assert SCOPE_WORDS["docs:read"] in html
    assert SCOPE_WORDS["elements:read"] in html
    assert SCOPE_WORDS["elements:write"] not in html
    assert "Connect pytest client to Atrium?" in html
    fields = hidden_inputs(html)
    assert fields["client_id"] == client_id
    assert fields["redirect_uri"] == CALLBACK
    assert fields["code_challenge"] == challenge
    assert fields["code_challenge_method"] == "S256"
    assert fields["resource"] == settings.ATRIUM_MCP_URL

    redirected = redirect_params(allow(browser, page))

    assert redirected["state"] == "state-42"
    assert redirected["iss"] == settings.ATRIUM_PUBLIC_URL
    grant = Grant.objects.get(application__client_id=client_id)
    assert grant.user == alice.user
    assert grant.code_challenge_method == "S256"
    assert set(grant.scope.split()) == {"elements:read", "docs:read"}

    response = exchange_code(Client(), client_id, redirected["code"], verifier)

    assert response.status_code == 200, response.content
    tokens = response.json()
    assert tokens["token_type"] == "Bearer"
    assert set(tokens["scope"].split()) == {"elements:read", "docs:read"}
    assert tokens["refresh_token"]
    access = AccessToken.objects.get(token_checksum=checksum(tokens["access_token"]))
    assert access.user == alice.user
    assert access.application.client_id == client_id
    assert access.resource == [settings.ATRIUM_MCP_URL]
    assert access.token != tokens["access_token"]  # hashed at rest
    assert RefreshToken.objects.get(access_token=access).revoked is None
    assert not Grant.objects.filter(pk=grant.pk).exists()  # a code is good once

    mcp = McpClient(tokens["access_token"])
    mcp.initialize()
    assert {"auth_status", "auth_logout"} <= mcp.tool_names()
    status = mcp.call_expecting_success("auth_status")

    assert status["user"]["username"] == "alice"
    assert status["token"]["kind"] == "oauth"
    assert status["token"]["client_id"] == client_id
    assert status["token"]["client_name"] == "pytest client"
    assert status["scopes"] == ["docs:read", "elements:read"]


def test_it_revokes_the_tokens_of_a_reused_authorization_code(alice):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)
    verifier, challenge = pkce_pair()
    page = consent_page(browser, authorize_query(client_id, challenge))
    code = redirect_params(allow(browser, page))["code"]
    first = exchange_code(Client(), client_id, code, verifier).json()
    renewed = refresh(Client(), client_id, first["refresh_token"]).json()

    response = exchange_code(Client(), client_id, code, verifier)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"
    # Someone else holds the code: everything issued from it, refreshed tokens included, is revoked.
    assert not AccessToken.objects.filter(user=alice.user).exists()
    assert not RefreshToken.objects.filter(user=alice.user, revoked__isnull=True).exists()
    assert mcp_post(renewed["access_token"], "initialize", INITIALIZE).status_code == 401
    assert refresh(Client(), client_id, renewed["refresh_token"]).status_code == 400
    event = AuditEvent.objects.get(action="oauth.code_reuse")
    assert event.target == f"OAuth client {client_id}"
    assert event.detail == {"revoked_token_families": 1}


def test_it_revokes_nothing_for_a_code_it_never_issued(alice):
    _, tokens = oauth_tokens(alice.user)
    client_id = Application.objects.get().client_id

    response = exchange_code(Client(), client_id, "made-up-code", pkce_pair()[0])

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"
    assert AccessToken.objects.filter(token_checksum=checksum(tokens["access_token"])).exists()
    assert not AuditEvent.objects.filter(action="oauth.code_reuse").exists()


def test_it_refuses_code_exchange_with_wrong_verifier(alice):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)
    _, challenge = pkce_pair()
    page = consent_page(browser, authorize_query(client_id, challenge))
    code = redirect_params(allow(browser, page))["code"]

    response = exchange_code(Client(), client_id, code, pkce_pair()[0])

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"
    assert not AccessToken.objects.filter(user=alice.user).exists()


def test_the_consent_page_groups_scopes_by_product_names_the_redirect_host_and_leaves_out_inert_ones(alice):
    from accounts.api import scopes_of_api
    from core.tools import scopes_of_tools

    gating = scopes_of_tools() | scopes_of_api()
    assert {"elements:read", "runs:read", "playbooks:read"} <= gating and "sandbox:read" not in gating
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)

    html = consent_page(browser, authorize_query(client_id, pkce_pair()[1],
                                                 scope="elements:read runs:read playbooks:read sandbox:read")
                        ).content.decode()

    headings = re.findall(r'<h3 class="product">([^<]+)</h3>', html)
    assert headings == ["Elements (DollhouseMCP)", "Workflows, runs and docs (Roscoe)",
                        "Capabilities and playbooks (Aident)"]
    assert SCOPE_WORDS["runs:read"] in html and SCOPE_WORDS["sandbox:read"] not in html
    assert "It also asked for 1 scope that no tool uses yet" in html
    assert '<strong class="mono">127.0.0.1:50999</strong>' in html
    assert html.index('value="Allow"') < html.index('<h3 class="product">')  # Allow comes before the list


@pytest.mark.parametrize("method", ["plain", None])
def test_it_refuses_plain_code_challenge_method_before_consent(alice, method):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)
    verifier = secrets.token_urlsafe(48)

    # Without a method, RFC 7636 means plain.
    response = consent_page(browser, authorize_query(client_id, verifier, code_challenge_method=method))

    params = redirect_params(response)
    assert params["error"] == "invalid_request"
    assert "S256" in params["error_description"]
    assert params["state"] == "state-42"
    assert "code" not in params
    assert not Grant.objects.exists()


def test_it_refuses_authorization_for_another_resource(alice):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)

    response = consent_page(browser, authorize_query(client_id, pkce_pair()[1],
                                                     resource="https://other.example/mcp"))

    params = redirect_params(response)
    assert params["error"] == "invalid_target"
    assert "https://other.example/mcp" in params["error_description"]
    assert params["state"] == "state-42"
    assert not Grant.objects.exists()


def test_it_refuses_a_consent_form_edited_to_another_resource(alice):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)
    page = consent_page(browser, authorize_query(client_id, pkce_pair()[1]))
    fields = {**hidden_inputs(page.content.decode()), "resource": "https://other.example/mcp"}

    response = browser.post("/oauth/authorize/", data={**fields, "allow": "Allow"})

    assert response.status_code == 400
    assert "Location" not in response
    assert not Grant.objects.exists()


def test_it_refuses_a_token_for_another_resource(alice):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)
    verifier, challenge = pkce_pair()
    # No resource at authorization: the grant is unbound, so only the token request names one.
    page = consent_page(browser, authorize_query(client_id, challenge, resource=None))
    code = redirect_params(allow(browser, page))["code"]

    response = Client().post("/oauth/token/", data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK, "client_id": client_id,
        "code_verifier": verifier, "resource": "https://other.example/mcp"})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_target"
    assert not AccessToken.objects.filter(user=alice.user).exists()
    assert Grant.objects.filter(application__client_id=client_id).exists()


def test_it_refuses_a_refresh_for_another_resource(alice):
    client_id, tokens = oauth_tokens(alice.user)

    response = Client().post("/oauth/token/", data={
        "grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": client_id,
        "resource": "https://other.example/mcp"})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_target"
    assert RefreshToken.objects.get(token_checksum=checksum(tokens["refresh_token"])).revoked is None


def test_it_refuses_authorization_without_code_challenge(alice):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)

    response = consent_page(browser, authorize_query(client_id, None, code_challenge_method=None))

    params = redirect_params(response)
    assert params["error"] == "invalid_request"
    assert params["error_description"] == "Code challenge required."
    assert "code" not in params
    assert not Grant.objects.exists()


def test_it_refuses_unregistered_redirect_uri(alice):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)

    response = consent_page(browser, authorize_query(client_id, pkce_pair()[1],
                                                     redirect_uri="https://evil.example/callback"))

    assert response.status_code == 400
    assert "evil.example" not in response.get("Location", "")
    assert 'name="allow"' not in response.content.decode()
    assert not Grant.objects.exists()


def test_it_redirects_with_access_denied_when_user_denies(alice):
    browser = Client()
    client_id = register_client(browser)
    browser.force_login(alice.user)
    page = consent_page(browser, authorize_query(client_id, pkce_pair()[1]))

    response = browser.post("/oauth/authorize/", data=hidden_inputs(page.content.decode()))

    params = redirect_params(response)
    assert params["error"] == "access_denied"
    assert "code" not in params
    assert not Grant.objects.exists()


def test_it_audits_consent_once_per_grant(alice):
    client_id, tokens = oauth_tokens(alice.user)

    events = AuditEvent.objects.filter(action="oauth.authorize")
    assert events.count() == 1
    event = events.get()
    assert event.actor == alice.user
    assert event.via == "web"
    assert event.target == f"OAuth client {client_id} 'pytest client'"
    assert sorted(event.detail["scopes"]) == ["docs:read", "elements:read"]

    assert refresh(Client(), client_id, tokens["refresh_token"]).status_code == 200
    assert AuditEvent.objects.filter(action="oauth.authorize").count() == 1


# Refresh


def test_it_rotates_refresh_token(alice):
    client_id, tokens = oauth_tokens(alice.user)

    response = refresh(Client(), client_id, tokens["refresh_token"])

    assert response.status_code == 200, response.content
    renewed = response.json()
    assert renewed["refresh_token"] != tokens["refresh_token"]
    assert renewed["access_token"] != tokens["access_token"]
    assert set(renewed["scope"].split()) == {"elements:read", "docs:read"}
    old = RefreshToken.objects.get(token_checksum=checksum(tokens["refresh_token"]))
    assert old.revoked is not None
    assert not AccessToken.objects.filter(token_checksum=checksum(tokens["access_token"])).exists()
    new_access = AccessToken.objects.get(token_checksum=checksum(renewed["access_token"]))
    assert new_access.resource == [settings.ATRIUM_MCP_URL]
    assert RefreshToken.objects.get(token_checksum=checksum(renewed["refresh_token"])).revoked is None
    assert mcp_post(renewed["access_token"], "initialize", INITIALIZE).status_code == 200


def test_it_refuses_reused_refresh_token(alice):
    client_id, tokens = oauth_tokens(alice.user)
    renewed = refresh(Client(), client_id, tokens["refresh_token"]).json()

    response = refresh(Client(), client_id, tokens["refresh_token"])

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"
    # Reuse protection: a replayed refresh token revokes the whole family it belongs to.
    assert RefreshToken.objects.get(token_checksum=checksum(renewed["refresh_token"])).revoked is not None
    assert not AccessToken.objects.filter(token_checksum=checksum(renewed["access_token"])).exists()
    assert mcp_post(renewed["access_token"], "tools/list").status_code == 401


# Scopes on /mcp


def test_it_challenges_oauth_token_missing_tool_scope_with_403(alice, auth_status_needs_elements_write):
    _, tokens = oauth_tokens(alice.user)
    mcp = McpClient(tokens["access_token"])
    mcp.initialize()

    response = mcp.post("tools/call", {"name": "auth_status", "arguments": {}})

    assert response.status_code == 403
    challenge = response["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="insufficient_scope"' in challenge
    assert 'scope="elements:write"' in challenge
    assert (f'resource_metadata="{settings.ATRIUM_PUBLIC_URL}/.well-known/oauth-protected-resource/mcp"'
            in challenge)
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] == mcp.next_id - 1
    assert body["error"]["code"] == -32001
    assert "elements:write" in body["error"]["message"]
    assert body["error"]["data"] == {"requiredScopes": ["elements:write"]}
    assert "auth_status" not in mcp.tool_names()
    assert "auth_logout" in mcp.tool_names()


def test_it_answers_personal_token_missing_tool_scope_in_band(db, auth_status_needs_elements_write):
    dora = make_member("dora", scopes=["docs:read"])
    mcp = McpClient(dora.token)
    mcp.initialize()

    error = mcp.call_expecting_error("auth_status")

    assert error["code"] == "insufficient_scope"
    assert "elements:write" in error["error"]
    assert "docs:read" in error["error"]
    assert "auth_status" not in mcp.tool_names()


def test_it_lets_oauth_token_with_the_scope_call_the_tool(alice, auth_status_needs_elements_write):
    _, tokens = oauth_tokens(alice.user, scope="elements:write")
    mcp = McpClient(tokens["access_token"])
    mcp.initialize()

    status = mcp.call_expecting_success("auth_status")

    assert status["scopes"] == ["elements:write"]
    assert "auth_status" in mcp.tool_names()


# Logout and audience


def test_it_revokes_oauth_tokens_on_logout(alice):
    client_id, tokens = oauth_tokens(alice.user)
    access = AccessToken.objects.get(token_checksum=checksum(tokens["access_token"]))
    refresh_row = RefreshToken.objects.get(access_token=access)
    mcp = McpClient(tokens["access_token"])
    mcp.initialize()

    result = mcp.call_expecting_success("auth_logout")

    assert result == {"logged_out": True, "revoked": "oauth",
                      "message": "Token revoked. Reconnect to sign in again."}
    assert not AccessToken.objects.filter(pk=access.pk).exists()
    refresh_row.refresh_from_db()
    assert refresh_row.revoked is not None
    event = AuditEvent.objects.get(action="oauth.logout")
    assert event.actor == alice.user
    assert event.via == "mcp"
    assert mcp.post("tools/list").status_code == 401
    assert refresh(Client(), client_id, tokens["refresh_token"]).status_code == 400


def test_it_refuses_token_issued_for_another_resource(alice):
    app = Application.objects.create(name="elsewhere", client_type=Application.CLIENT_PUBLIC,
                                     authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
                                     redirect_uris=REGISTERED_CALLBACK)
    raw = secrets.token_urlsafe(30)
    AccessToken.objects.create(user=alice.user, application=app, token=raw, scope="elements:read docs:read",
                               expires=timezone.now() + timedelta(hours=1),
                               resource=["https://other.example/mcp"])

    response = mcp_post(raw, "initialize", INITIALIZE)

    assert response.status_code == 401
    assert "resource_metadata=" in response["WWW-Authenticate"]
    assert response.json() == {"error": "Token was not issued for this server.",
                               "code": "authentication_failed"}


def test_it_accepts_token_bound_to_this_server(alice):
    app = Application.objects.create(name="here", client_type=Application.CLIENT_PUBLIC,
                                     authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
                                     redirect_uris=REGISTERED_CALLBACK)
    raw = secrets.token_urlsafe(30)
    AccessToken.objects.create(user=alice.user, application=app, token=raw, scope="docs:read",
                               expires=timezone.now() + timedelta(hours=1),
                               resource=[settings.ATRIUM_MCP_URL])

    response = mcp_post(raw, "initialize", INITIALIZE)

    assert response.status_code == 200, response.content
    assert response["Mcp-Session-Id"]


# --- browser-based clients (the MCP Inspector) ----------------------------------------------

INSPECTOR = "http://localhost:6274"


@pytest.mark.parametrize("path", ["/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource",
                                  "/.well-known/oauth-protected-resource/mcp"])
def test_the_metadata_can_be_read_from_any_origin(db, client, path):
    response = client.get(path, HTTP_ORIGIN=INSPECTOR)

    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in response


@pytest.mark.parametrize("path", ["/oauth/register/", "/oauth/token/", "/oauth/revoke/"])
def test_registration_token_and_revocation_answer_a_preflight(db, client, path):
    response = client.options(path, HTTP_ORIGIN=INSPECTOR, HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
                              HTTP_ACCESS_CONTROL_REQUEST_HEADERS="content-type, authorization")

    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "*"
    assert "POST" in response["Access-Control-Allow-Methods"]
    assert {"content-type", "authorization"} <= {h.strip() for h in response["Access-Control-Allow-Headers"].split(",")}


def test_a_browser_client_registers_and_its_answer_is_readable_cross_origin(db, client):
    response = client.post("/oauth/register/", json.dumps({"client_name": "MCP Inspector",
                                                           "redirect_uris": [f"{INSPECTOR}/oauth/callback"]}),
                           content_type="application/json", HTTP_ORIGIN=INSPECTOR)

    assert response.status_code == 201 and response["Access-Control-Allow-Origin"] == "*"
    assert response.json()["client_id"]


@pytest.mark.parametrize("path", ["/oauth/authorize/", "/api/me", "/accounts/login/", "/admin/login/"])
def test_pages_and_the_api_stay_same_origin(db, client, path):
    response = client.options(path, HTTP_ORIGIN=INSPECTOR, HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")

    assert "Access-Control-Allow-Origin" not in response
