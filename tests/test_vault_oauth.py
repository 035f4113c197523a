"""OAuth through the vault against a fake provider on loopback: the consent redirect with PKCE, the
callback's single-use state bound to the signed-in user, the code exchange, refresh on use (once
for twenty concurrent uses) and a refresh the provider refuses."""

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from core.caller import Caller
from integrations import vault
from integrations.crypto import seal, unseal
from integrations.models import Connection, ConnectRequest, Integration
from tests.conftest import Member, hidden_inputs
from tests.test_element_concurrency import THREADS, in_threads

pytestmark = pytest.mark.django_db

CLIENT_ID = "atrium-client"
CLIENT_SECRET = "provider-client-secret-31415"
REDIRECT_URI = f"{settings.ATRIUM_PUBLIC_URL}/vault/oauth/callback/"


def challenge_of(verifier: str) -> str:
    """PKCE's S256 (RFC 7636 section 4.2), as the provider computes it."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


class FakeProvider:
    """An OAuth 2.0 authorization server with PKCE, just big enough: /authorize redirects straight
    back with a code (the user's consent, simulated), /token exchanges codes and refresh tokens."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.codes: dict[str, dict[str, str]] = {}
        self.refresh_tokens: set[str] = set()
        self.token_requests: list[dict[str, str]] = []
        self.client_auth = "client_secret_post"
        self.refuse_refresh = False
        self.fail_with: int | None = None
        self.refresh_delay = 0.0
        self.expires_in = 3600
        self.issued = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = dict(parse_qsl(url.query))
                code = secrets.token_urlsafe(12)
                with provider.lock:
                    provider.codes[code] = query
                self.send_response(302)
                back = urlencode({"code": code, "state": query["state"]})
                self.send_header("Location", f"{query['redirect_uri']}?{back}")
                self.end_headers()

            def do_POST(self) -> None:
                form = dict(parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
                status, body = provider.token(form, self.headers.get("Authorization", ""))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def client_ok(self, form: dict[str, str], authorization: str) -> bool:
        if self.client_auth == "client_secret_basic":
            expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
            return authorization == f"Basic {expected}" and "client_secret" not in form
        return form.get("client_id") == CLIENT_ID and form.get("client_secret") == CLIENT_SECRET

    def issue(self, scope: str) -> dict[str, Any]:
        self.issued += 1
        refresh = f"refresh-{self.issued}-{secrets.token_urlsafe(8)}"
        self.refresh_tokens.add(refresh)
        return {"access_token": f"access-{self.issued}-{secrets.token_urlsafe(8)}", "refresh_token": refresh,
                "token_type": "Bearer", "expires_in": self.expires_in, "scope": scope}

    def token(self, form: dict[str, str], authorization: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.token_requests.append(form)
        if form.get("grant_type") == "refresh_token":
            time.sleep(self.refresh_delay)  # a slow provider widens the window the lock must cover
        with self.lock:
            if self.fail_with:
                return self.fail_with, {"error": "temporarily_unavailable"}
            if not self.client_ok(form, authorization):
                return 401, {"error": "invalid_client"}
            if form.get("grant_type") == "authorization_code":
                asked = self.codes.pop(form.get("code", ""), None)
                if (asked is None or asked.get("code_challenge_method") != "S256"
                        or asked.get("code_challenge") != challenge_of(form.get("code_verifier", ""))
                        or form.get("redirect_uri") != asked["redirect_uri"]):
                    return 400, {"error": "invalid_grant"}
                return 200, self.issue(asked.get("scope", ""))
            if form.get("grant_type") == "refresh_token":
                if self.refuse_refresh or form.get("refresh_token") not in self.refresh_tokens:
                    return 400, {"error": "invalid_grant"}
                self.refresh_tokens.discard(form["refresh_token"])  # refresh tokens rotate
                return 200, self.issue("repo read:user")
            return 400, {"error": "unsupported_grant_type"}

    def refreshes(self) -> int:
        return sum(1 for form in self.token_requests if form.get("grant_type") == "refresh_token")


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture
def github(db, provider: FakeProvider) -> Integration:
    integration = Integration.objects.create(
        id="github_tools", name="GitHub", auth_scheme="oauth2",
        auth_config={"authorizationUrl": f"{provider.url}/authorize?prompt=consent",
                     "tokenUrl": f"{provider.url}/token", "clientId": CLIENT_ID,
                     "scopes": {"repo": "Repositories", "read:user": "Profile"}})
    vault.integration_client_secret_set(integration=integration, secret=CLIENT_SECRET)
    return integration


def signed_in(member: Member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def caller_of(member: Member) -> Caller:
    return Caller.trusted(member.user, via="mcp")


def consent(client: Client, member: Member) -> tuple[str, dict[str, str]]:
    """Ask for a connect link, open it, press Continue: the provider URL the browser is sent to."""
    answer = vault.vault_connect(caller=caller_of(member), integration_id="github_tools")
    assert answer["status"] == "pending"
    assert "sign in as" in answer["instructions"] and "GitHub" in answer["instructions"]
    page = client.get(urlsplit(answer["connectUrl"]).path)
    html = page.content.decode()
    assert page.status_code == 200 and "Continue to GitHub" in html and "<script" not in html
    token = urlsplit(answer["connectUrl"]).path.rstrip("/").rsplit("/", 1)[1]
    response = client.post(f"/vault/connect/{token}/authorize/", hidden_inputs(html))
    assert response.status_code == 302
    return response["Location"], dict(parse_qsl(urlsplit(response["Location"]).query))


def provider_redirect(location: str) -> dict[str, str]:
    """The browser at the provider: the user consents and is sent back with a code."""
    back = httpx.get(location, follow_redirects=False, timeout=5)
    assert back.status_code == 302
    url = urlsplit(back.headers["Location"])
    assert f"{settings.ATRIUM_PUBLIC_URL}{url.path}" == REDIRECT_URI
    return dict(parse_qsl(url.query))


def callback(client: Client, params: dict[str, str]):
    return client.get("/vault/oauth/callback/", params)


def test_the_whole_consent_stores_the_tokens_sealed(alice, github, provider):
    client = signed_in(alice)

    location, asked = consent(client, alice)

    assert location.startswith(f"{provider.url}/authorize?prompt=consent&")
    link = ConnectRequest.objects.get(user=alice.user)
    assert asked["response_type"] == "code" and asked["client_id"] == CLIENT_ID
    assert asked["redirect_uri"] == REDIRECT_URI and asked["scope"] == "repo read:user"
    assert asked["state"] == link.oauth_state and asked["code_challenge_method"] == "S256"
    verifier = unseal(link.sealed_verifier)
    assert verifier not in link.sealed_verifier and 43 <= len(verifier) <= 128
    assert asked["code_challenge"] == challenge_of(verifier)

    response = callback(client, provider_redirect(location))

    assert response.status_code == 200 and "You can return to your client" in response.content.decode()
    row = Connection.objects.get(user=alice.user, integration=github)
    tokens = unseal(row.sealed_credentials)
    assert set(tokens) == {"accessToken", "refreshToken", "tokenType"}
    assert tokens["accessToken"].startswith("access-1-") and tokens["refreshToken"].startswith("refresh-1-")
    assert tokens["accessToken"] not in row.sealed_credentials
    assert timedelta(minutes=59) < row.expires_at - timezone.now() <= timedelta(hours=1)
    assert row.granted_scopes == "repo read:user" and row.state == "connected"
    exchange, = provider.token_requests
    assert exchange["grant_type"] == "authorization_code" and exchange["code_verifier"] == verifier
    link.refresh_from_db()
    assert link.used_at is not None and link.sealed_verifier == ""
    status, = vault.vault_status(caller=caller_of(alice), integration_id="github_tools")["integrations"]
    assert (status["state"], status["expiresAt"]) == ("connected", row.expires_at.isoformat())


def test_the_client_may_authenticate_to_the_token_endpoint_with_http_basic(alice, github, provider):
    provider.client_auth = "client_secret_basic"
    Integration.objects.filter(pk=github.pk).update(auth_config={**github.auth_config,
                                                                 "tokenAuthMethod": "client_secret_basic"})
    client = signed_in(alice)
    location, _ = consent(client, alice)

    assert callback(client, provider_redirect(location)).status_code == 200
    assert Connection.objects.filter(user=alice.user, integration=github).exists()


def test_a_callback_is_single_use(alice, github, provider):
    client = signed_in(alice)
    location, _ = consent(client, alice)
    back = provider_redirect(location)
    assert callback(client, back).status_code == 200
    Connection.objects.all().delete()

    replay = callback(client, back)

    assert replay.status_code == 400 and "already been used" in replay.content.decode()
    assert not Connection.objects.exists()
    assert len(provider.token_requests) == 1


def test_a_state_that_matches_no_link_stores_nothing(alice, github, provider):
    client = signed_in(alice)
    location, _ = consent(client, alice)
    back = provider_redirect(location)

    for params in ({**back, "state": "forged-state"}, {"code": back["code"]}):
        response = callback(client, params)
        assert response.status_code == 400 and "does not match" in response.content.decode()
    assert not Connection.objects.exists() and not provider.token_requests
    assert ConnectRequest.objects.get(user=alice.user).used_at is None


def test_bob_cannot_finish_alices_consent_and_alice_still_can(alice, bob, github, provider):
    alices = signed_in(alice)
    location, _ = consent(alices, alice)
    back = provider_redirect(location)

    assert callback(signed_in(bob), back).status_code == 400
    assert not Connection.objects.exists() and not provider.token_requests

    assert callback(alices, back).status_code == 200
    assert list(Connection.objects.values_list("user__username", flat=True)) == ["alice"]


def test_an_expired_link_cannot_be_finished(alice, github, provider):
    client = signed_in(alice)
    location, _ = consent(client, alice)
    back = provider_redirect(location)
    ConnectRequest.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    response = callback(client, back)

    assert response.status_code == 400 and "expired" in response.content.decode()
    assert not Connection.objects.exists() and not provider.token_requests


def test_a_consent_the_user_declines_shows_the_providers_reason_and_stores_nothing(alice, github, provider):
    client = signed_in(alice)
    _, asked = consent(client, alice)

    response = callback(client, {"error": "access_denied", "error_description": "The user said <no>",
                                 "state": asked["state"]})

    html = response.content.decode()
    assert response.status_code == 400 and "GitHub did not grant access" in html
    assert "The user said &lt;no&gt;" in html
    assert not Connection.objects.exists()
    assert ConnectRequest.objects.get(user=alice.user).used_at is None


def test_a_code_the_provider_refuses_stores_nothing(alice, github, provider):
    client = signed_in(alice)
    location, _ = consent(client, alice)
    back = provider_redirect(location)

    response = callback(client, {**back, "code": "not-a-code"})

    assert response.status_code == 400 and "refused to issue tokens (invalid_grant)" in response.content.decode()
    assert not Connection.objects.exists()


def test_the_callback_needs_a_sign_in(alice, github, provider):
    response = Client().get("/vault/oauth/callback/", {"code": "c", "state": "s"})

    assert response.status_code == 302 and response["Location"].startswith(settings.LOGIN_URL)


def test_the_continue_button_needs_a_post_with_its_csrf_token(alice, github, provider):
    answer = vault.vault_connect(caller=caller_of(alice), integration_id="github_tools")
    token = urlsplit(answer["connectUrl"]).path.rstrip("/").rsplit("/", 1)[1]
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice.user)

    assert client.get(f"/vault/connect/{token}/authorize/").status_code == 405
    assert client.post(f"/vault/connect/{token}/authorize/").status_code == 403
    assert ConnectRequest.objects.get(pk=token).oauth_state == ""


# Refresh on use.

def oauth_connection(member: Member, github: Integration, provider: FakeProvider, *,
                     expires_in: timedelta = timedelta(seconds=-5), refresh: bool = True) -> Connection:
    refresh_token = provider.issue("repo")["refresh_token"] if refresh else ""
    return Connection.objects.create(
        user=member.user, integration=github, granted_scopes="repo",
        sealed_credentials=seal({"accessToken": "old-access", "refreshToken": refresh_token, "tokenType": "Bearer"}),
        expires_at=timezone.now() + expires_in)


def test_an_expired_access_token_is_refreshed_on_use(alice, github, provider):
    row = oauth_connection(alice, github, provider)

    credentials = vault.connection_credentials(caller=caller_of(alice), integration=github)

    assert credentials["accessToken"].startswith("access-2-") and credentials["refreshToken"].startswith("refresh-2-")
    refresh, = provider.token_requests
    assert refresh["grant_type"] == "refresh_token" and refresh["client_secret"] == CLIENT_SECRET
    row.refresh_from_db()
    assert unseal(row.sealed_credentials) == credentials
    assert row.expires_at > timezone.now() + timedelta(minutes=59)
    assert row.granted_scopes == "repo read:user" and row.last_used_at is not None


def test_a_token_within_a_minute_of_expiry_is_refreshed_and_one_further_off_is_not(alice, github, provider):
    oauth_connection(alice, github, provider, expires_in=timedelta(seconds=30))
    assert vault.connection_credentials(caller=caller_of(alice), integration=github)["accessToken"] != "old-access"
    assert provider.refreshes() == 1

    Connection.objects.all().delete()
    oauth_connection(alice, github, provider, expires_in=timedelta(minutes=5))
    assert vault.connection_credentials(caller=caller_of(alice), integration=github)["accessToken"] == "old-access"
    assert provider.refreshes() == 1


def test_a_refresh_the_provider_refuses_expires_the_connection(alice, github, provider):
    provider.refuse_refresh = True
    row = oauth_connection(alice, github, provider)

    with pytest.raises(vault.ConnectionExpired) as expired:
        vault.connection_credentials(caller=caller_of(alice), integration=github)

    assert expired.value.code == "connection_expired" and "Connect again" in expired.value.message
    row.refresh_from_db()
    assert row.state == "expired" and unseal(row.sealed_credentials)["accessToken"] == "old-access"
    status, = vault.vault_status(caller=caller_of(alice), integration_id="github_tools")["integrations"]
    assert (status["connected"], status["state"]) == (False, "expired")
    with pytest.raises(vault.ConnectionExpired):
        vault.connection_credentials(caller=caller_of(alice), integration=github)
    assert provider.refreshes() == 1  # an expired connection is not tried again


def test_an_expired_token_with_no_refresh_token_expires_the_connection(alice, github, provider):
    oauth_connection(alice, github, provider, refresh=False)

    with pytest.raises(vault.ConnectionExpired):
        vault.connection_credentials(caller=caller_of(alice), integration=github)

    assert Connection.objects.get(user=alice.user).state == "expired" and not provider.token_requests


def test_a_provider_that_fails_on_its_side_leaves_the_connection_as_it_was(alice, github, provider):
    provider.fail_with = 503
    oauth_connection(alice, github, provider)

    with pytest.raises(vault.ProviderUnavailable) as unavailable:
        vault.connection_credentials(caller=caller_of(alice), integration=github)

    assert unavailable.value.code == "provider_unavailable" and "try again" in unavailable.value.message
    assert Connection.objects.get(user=alice.user).state == "connected"

    provider.fail_with = None
    assert vault.connection_credentials(caller=caller_of(alice), integration=github)["accessToken"] != "old-access"


def test_a_provider_that_fails_during_the_exchange_stores_nothing_and_says_the_link_is_used_up(alice, github,
                                                                                                 provider):
    client = signed_in(alice)
    location, _ = consent(client, alice)
    back = provider_redirect(location)
    provider.fail_with = 503

    response = callback(client, back)

    assert response.status_code == 502 and "ask your client for a new one" in response.content.decode()
    assert not Connection.objects.exists()


def test_reconnecting_an_expired_connection_makes_it_usable_again(alice, github, provider):
    provider.refuse_refresh = True
    oauth_connection(alice, github, provider)
    with pytest.raises(vault.ConnectionExpired):
        vault.connection_credentials(caller=caller_of(alice), integration=github)
    provider.refuse_refresh = False
    client = signed_in(alice)

    location, _ = consent(client, alice)
    assert callback(client, provider_redirect(location)).status_code == 200

    row = Connection.objects.get(user=alice.user)
    assert row.state == "connected"
    assert vault.connection_credentials(caller=caller_of(alice), integration=github)["accessToken"] != "old-access"


def test_charlie_never_uses_alices_oauth_connection(alice, charlie, github, provider):
    oauth_connection(alice, github, provider)

    assert vault.connection_credentials(caller=caller_of(charlie), integration=github) is None
    assert not provider.token_requests


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_concurrent_uses_of_an_expired_token_refresh_it_once(alice, github, provider):
    provider.refresh_delay = 0.2
    oauth_connection(alice, github, provider)
    caller = caller_of(alice)
    everyone_ready = threading.Barrier(THREADS, timeout=30)

    def use(index: int) -> dict[str, Any]:
        everyone_ready.wait()
        return vault.connection_credentials(caller=caller, integration=github)

    answers = in_threads(use)

    assert provider.refreshes() == 1
    row = Connection.objects.get(user=alice.user, integration=github)
    stored = unseal(row.sealed_credentials)
    assert stored["accessToken"].startswith("access-2-")
    assert [a["accessToken"] for a in answers] == [stored["accessToken"]] * THREADS
    assert row.state == "connected" and row.expires_at > timezone.now() + timedelta(minutes=59)
