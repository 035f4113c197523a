"""Repeated failed authentications from one address are slowed down before any token or password
check, the address is one no client can choose, and each token's tool calls are limited."""

import json

import pytest
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext

from accounts.models import User
from accounts.ratelimit import client_address
from tests.conftest import ACCEPT

pytestmark = pytest.mark.django_db


def test_an_address_that_keeps_failing_gets_429(alice, mcp_client, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 3
    guesser = mcp_client("atr_guess")

    assert [guesser.post("initialize", {}).status_code for _ in range(3)] == [401, 401, 401]
    blocked = guesser.post("initialize", {})

    assert blocked.status_code == 429
    assert 0 < int(blocked["Retry-After"]) <= settings.ATRIUM_AUTH_FAILURE_WINDOW


def test_a_blocked_address_is_refused_without_a_token_lookup(alice, mcp_client, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 1
    mcp_client("atr_guess").post("initialize", {})

    with CaptureQueriesContext(connection) as queries:
        response = mcp_client(alice).post("initialize", {})

    assert response.status_code == 429
    assert not [q for q in queries.captured_queries if "personaltoken" in q["sql"]]


def test_successful_calls_do_not_count(alice, mcp_client, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 2
    client = mcp_client(alice)

    for _ in range(5):
        client.initialize()
    assert mcp_client("atr_guess").post("initialize", {}).status_code == 401


def initialize(token: str, **extra: str):
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "pytest", "version": "1"}}}
    return Client().post("/mcp", data=json.dumps(body), content_type="application/json", HTTP_ACCEPT=ACCEPT,
                         HTTP_AUTHORIZATION=f"Bearer {token}", **extra)


# The client address


def test_a_guesser_cannot_escape_the_limit_by_writing_x_forwarded_for(db, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 3

    codes = [initialize("atr_guess", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code for n in range(4)]

    assert codes == [401, 401, 401, 429]


def test_nobody_can_lock_out_an_address_of_their_choice(alice, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 3
    for _ in range(5):
        initialize("atr_guess", HTTP_X_FORWARDED_FOR="203.0.113.7")

    response = initialize(alice.token, REMOTE_ADDR="203.0.113.7")

    assert response.status_code == 200, response.content


def test_behind_a_trusted_proxy_each_client_is_counted_on_its_own(alice, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 3
    settings.ATRIUM_TRUSTED_PROXIES = ["10.0.0.0/8"]
    proxy = {"REMOTE_ADDR": "10.1.2.3"}
    # The guesser writes its own X-Forwarded-For; the proxy appends the address it really saw.
    for n in range(3):
        initialize("atr_guess", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}, 198.51.100.1", **proxy)

    assert initialize(alice.token, HTTP_X_FORWARDED_FOR="192.0.2.9, 198.51.100.1", **proxy).status_code == 429
    assert initialize(alice.token, HTTP_X_FORWARDED_FOR="198.51.100.2", **proxy).status_code == 200


@pytest.mark.parametrize(("remote", "forwarded", "expected"), [
    ("198.51.100.1", "", "198.51.100.1"),
    ("198.51.100.1", "203.0.113.5", "198.51.100.1"),
    ("10.0.0.2", "203.0.113.5", "203.0.113.5"),
    ("10.0.0.2", "192.0.2.1, 203.0.113.5, 10.0.0.9", "203.0.113.5"),
    ("10.0.0.2", "10.0.0.7", "10.0.0.7"),
    ("10.0.0.2", "", "10.0.0.2"),
    ("2001:db8::2", "2001:db8:1::5", "2001:db8:1::5"),
])
def test_the_client_address_is_the_nearest_untrusted_hop(settings, remote, forwarded, expected):
    settings.ATRIUM_TRUSTED_PROXIES = ["10.0.0.0/8", "2001:db8::/48"]
    request = RequestFactory().get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)

    assert client_address(request) == expected


# Sign-in forms and the token endpoint


def test_the_admin_login_refuses_an_address_that_keeps_failing(db, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 3
    User.objects.create_superuser("root", "root@example.com", "pw-root")
    browser = Client()
    for _ in range(3):
        failed = browser.post("/admin/login/", {"username": "root", "password": "wrong"})
        assert failed.status_code == 200

    response = browser.post("/admin/login/", {"username": "root", "password": "pw-root"})

    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= settings.ATRIUM_AUTH_FAILURE_WINDOW
    assert "_auth_user_id" not in browser.session
    assert browser.get("/admin/login/").status_code == 200


def test_the_sign_in_page_refuses_an_address_that_keeps_failing(alice, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 3
    browser = Client()
    for _ in range(3):
        assert browser.post("/accounts/login/", {"login": "alice", "password": "wrong"}).status_code == 200

    response = browser.post("/accounts/login/", {"login": "alice", "password": "pw-alice"})

    assert response.status_code == 429
    assert "_auth_user_id" not in browser.session
    # The same counter guards tokens: one door's failures block the others.
    assert initialize(alice.token).status_code == 429


def test_allauth_counts_each_client_behind_a_trusted_proxy(alice, settings):
    settings.ATRIUM_TRUSTED_PROXIES = ["127.0.0.1"]
    settings.ACCOUNT_RATE_LIMITS = {"login_failed": "2/m/ip"}
    for _ in range(3):
        Client(HTTP_X_FORWARDED_FOR="198.51.100.1").post("/accounts/login/", {"login": "alice", "password": "no"})

    response = Client(HTTP_X_FORWARDED_FOR="198.51.100.2").post(
        "/accounts/login/", {"login": "alice", "password": "pw-alice"})

    assert response.status_code == 302


def test_the_token_endpoint_refuses_an_address_that_keeps_failing(db, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 3
    bad_exchange = {"grant_type": "authorization_code", "code": "guess", "client_id": "nobody",
                    "redirect_uri": "http://127.0.0.1:5000/cb", "code_verifier": "x" * 43}
    codes = [Client().post("/oauth/token/", bad_exchange).status_code for _ in range(3)]
    assert all(code in (400, 401) for code in codes)

    response = Client().post("/oauth/token/", bad_exchange)

    assert response.status_code == 429
    assert response.json()["error"] == "temporarily_unavailable"
    assert 0 < int(response["Retry-After"]) <= settings.ATRIUM_AUTH_FAILURE_WINDOW


# Tool calls per token


def test_tool_calls_over_the_per_token_limit_get_429(alice, bob, mcp_client, settings):
    settings.ATRIUM_TOOL_CALLS_PER_MINUTE = 2
    client = mcp_client(alice)
    client.initialize()
    client.call_expecting_success("auth_status")
    client.call_expecting_success("auth_status")

    response = client.post("tools/call", {"name": "auth_status", "arguments": {}})

    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 60
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] == client.next_id - 1
    assert body["error"]["code"] == -32000
    assert "at most 2 a minute" in body["error"]["message"]
    assert body["error"]["data"]["retryAfter"] == int(response["Retry-After"])
    assert client.tool_names()  # listing tools is not a tool call
    other = mcp_client(bob)
    other.initialize()
    other.call_expecting_success("auth_status")


def test_a_zero_tool_call_limit_means_no_limit(alice, mcp_client, settings):
    settings.ATRIUM_TOOL_CALLS_PER_MINUTE = 0
    client = mcp_client(alice)
    client.initialize()

    for _ in range(5):
        client.call_expecting_success("auth_status")
