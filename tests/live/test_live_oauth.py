"""The official MCP SDK's OAuth client against a real server: discovery from the 401, dynamic
client registration, sign-in, consent, PKCE and the token exchange, then MCP calls with the token."""

import asyncio
import hashlib
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from oauth2_provider.models import AccessToken, Application, RefreshToken

from accounts.models import AuditEvent, Scope
from tests.conftest import hidden_inputs, make_member
from tests.live.conftest import free_port

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


class InMemoryTokenStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class Browser:
    """A person at a browser: signs in when the client opens the authorize URL, then clicks Allow."""

    server_url: str
    username: str
    password: str
    callback_uri: str
    authorize_url: str = ""
    consent_html: str = ""
    callback: "asyncio.Future[tuple[str, str | None]] | None" = None
    callback_query: dict[str, str] = field(default_factory=dict)

    async def open(self, authorize_url: str) -> None:
        self.authorize_url = authorize_url
        parts = urlsplit(authorize_url)
        next_path = f"{parts.path}?{parts.query}"
        async with httpx.AsyncClient(base_url=self.server_url, follow_redirects=False, timeout=30) as web:
            login = await web.get("/accounts/login/", params={"next": next_path})
            assert login.status_code == 200, login.text
            signed_in = await web.post("/accounts/login/", data={
                "csrfmiddlewaretoken": hidden_inputs(login.text)["csrfmiddlewaretoken"],
                "login": self.username, "password": self.password, "next": next_path,
            })
            assert signed_in.status_code == 302, signed_in.text
            assert signed_in.headers["Location"] == next_path

            consent = await web.get(signed_in.headers["Location"])
            assert consent.status_code == 200, consent.text
            self.consent_html = consent.text
            fields = hidden_inputs(consent.text)
            allowed = await web.post("/oauth/authorize/", data={**fields, "allow": "Allow"})

        assert allowed.status_code == 302, allowed.text
        location = allowed.headers["Location"]
        assert location.startswith(self.callback_uri + "?"), location
        self.callback_query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        self.future().set_result((self.callback_query["code"], self.callback_query.get("state")))

    async def wait_for_callback(self) -> tuple[str, str | None]:
        return await asyncio.wait_for(self.future(), timeout=60)

    def future(self) -> "asyncio.Future[tuple[str, str | None]]":
        if self.callback is None:
            self.callback = asyncio.get_running_loop().create_future()
        return self.callback


async def connect_with_oauth(mcp_url: str, browser: Browser, storage: InMemoryTokenStorage):
    provider = OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=OAuthClientMetadata(
            redirect_uris=[browser.callback_uri], token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"], response_types=["code"],
            client_name="pytest",
        ),
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.wait_for_callback,
    )
    http = httpx.AsyncClient(auth=provider, timeout=30)
    async with http, streamable_http_client(mcp_url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        status = await session.call_tool("auth_status", {})
    assert not status.isError, status
    return tools, status.structuredContent, provider.context


def test_sdk_client_signs_in_with_oauth_and_calls_tools(live_atrium, real_password_hashing):
    erin = make_member("erin")
    callback_uri = f"http://127.0.0.1:{free_port()}/callback"
    browser = Browser(server_url=live_atrium.url, username="erin", password="pw-erin",
                      callback_uri=callback_uri)
    storage = InMemoryTokenStorage()
    every_scope = sorted(Scope.objects.values_list("name", flat=True))

    tools, status, context = asyncio.run(connect_with_oauth(live_atrium.mcp_url, browser, storage))

    # Discovery: the 401 led the client to the resource metadata, and that to this server.
    assert str(context.protected_resource_metadata.resource) == live_atrium.mcp_url
    assert context.auth_server_url.rstrip("/") == live_atrium.url
    assert str(context.oauth_metadata.registration_endpoint) == f"{live_atrium.url}/oauth/register/"
    # The authorization request: PKCE S256, bound to /mcp, and the consent page showed it in words.
    authorize = {k: v[0] for k, v in parse_qs(urlsplit(browser.authorize_url).query).items()}
    assert browser.authorize_url.startswith(f"{live_atrium.url}/oauth/authorize/?")
    assert authorize["code_challenge_method"] == "S256"
    assert authorize["resource"] == live_atrium.mcp_url
    assert "Connect pytest to Atrium?" in browser.consent_html
    assert "Read and search the documentation" in browser.consent_html
    assert browser.callback_query["iss"] == live_atrium.url

    assert {"auth_status", "auth_logout"} <= tools
    assert status["user"]["username"] == "erin"
    assert status["token"]["kind"] == "oauth"
    assert status["token"]["client_id"] == storage.client_info.client_id
    assert status["token"]["client_name"] == "pytest"
    assert status["scopes"] == every_scope
    assert status["session"]["transport"] == "http"

    app = Application.objects.get(client_id=storage.client_info.client_id)
    assert app.name == "pytest"
    assert app.client_type == Application.CLIENT_PUBLIC
    assert app.redirect_uris.split() == [callback_uri]
    checksum = hashlib.sha256(storage.tokens.access_token.encode()).hexdigest()
    access = AccessToken.objects.get(token_checksum=checksum)
    assert access.user == erin.user
    assert access.application == app
    assert access.resource == [live_atrium.mcp_url]
    assert sorted(access.scope.split()) == every_scope
    assert RefreshToken.objects.get(access_token=access).revoked is None
    registered = AuditEvent.objects.filter(action="oauth.client_register", target__contains=app.client_id)
    assert registered.count() == 1
    assert AuditEvent.objects.filter(action="oauth.authorize", actor=erin.user).count() == 1
