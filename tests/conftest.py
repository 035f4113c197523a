"""Shared fixtures. Alice owns things, Bob shares a team with her, Charlie must see nothing of hers."""

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.cache import cache
from django.db import connections
from django.test import Client

from accounts.models import User
from accounts.services import token_create
from core.caller import Caller

ACCEPT = "application/json, text/event-stream"


@dataclass
class Member:
    user: User
    token: str  # raw personal token with every scope


def make_member(username: str, scopes: list[str] | None = None) -> Member:
    user = User.objects.create_user(username=username, email=f"{username}@example.com", password="pw-" + username)
    _, raw = token_create(caller=Caller.trusted(user, via="command"), user=user, label="tests", scopes=scopes)
    return Member(user=user, token=raw)


# How many calls a race test makes at once.
THREADS = 20


def in_threads(work: Callable[[int], Any]) -> list[Any]:
    """Run work(0..THREADS-1) at once, each in its own thread with its own database connection."""

    def one(index: int) -> Any:
        try:
            return work(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        return list(pool.map(one, range(THREADS)))


FAST_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", "django.contrib.auth.hashers.PBKDF2PasswordHasher"]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Hashing test passwords with a million PBKDF2 rounds would be most of the suite's time.
    Live tests, whose server checks passwords with the real hashers, use `real_password_hashing`."""
    settings.PASSWORD_HASHERS = FAST_HASHERS


@pytest.fixture
def real_password_hashing(settings):
    settings.PASSWORD_HASHERS = FAST_HASHERS[1:]


# Every tool answer is checked against its tool's output schema, in this process and in the servers
# and workers the tests start (they inherit the environment).
os.environ["ATRIUM_CHECK_TOOL_OUTPUT"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    settings.ATRIUM_CHECK_TOOL_OUTPUT = True


# Where tests that drive a real worker find a broker when CELERY_BROKER_URL is unset (CI's SQLite pass).
TEST_BROKER_URL = os.environ.get("ATRIUM_TEST_BROKER_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(autouse=True, scope="session")
def _one_broker_url():
    """Celery pools its producers for the broker URL of the first task sent, even an eager one, and
    keeps them: without CELERY_BROKER_URL, that URL is TEST_BROKER_URL from the start, so a test
    that later sends to a real worker sends there."""
    from django.conf import settings

    from config.celery import app

    # Read first: that loads the configuration, which would otherwise be read later over this.
    if not app.conf.broker_url and not settings.CELERY_BROKER_URL:
        app.conf.broker_url = TEST_BROKER_URL


@pytest.fixture(autouse=True)
def _tasks_in_process(request):
    """Tasks (script nodes) run in the test's own process, broker or not; tests marked `uses_broker`
    send them to a real worker through CELERY_BROKER_URL instead."""
    from django.conf import settings

    from config.celery import app

    configured = not settings.CELERY_BROKER_URL
    app.conf.task_always_eager = configured if request.node.get_closest_marker("uses_broker") else True
    yield
    app.conf.task_always_eager = configured


@pytest.fixture(autouse=True)
def _clear_cache():
    from accounts.authentication import authenticated_forget
    from accounts.services import standing_forget

    cache.clear()  # rate-limit counters must not leak between tests
    authenticated_forget()  # nor tokens and sessions this process has looked up
    standing_forget()
    yield
    cache.clear()
    authenticated_forget()
    standing_forget()


def served_path(workflow_id: str, **query: str) -> str:
    """The `path` a workflow tool answers for a workflow kept in the server's store: the REST URL it is
    read at (`global="true"`, or `source="repo", cwd=...`)."""
    from django.conf import settings

    return f"{settings.ATRIUM_PUBLIC_URL}/api/workflows/{workflow_id}/?{urlencode(query)}"


@pytest.fixture
def kb(db) -> None:
    """The docs knowledge base, loaded from docs/ as `make run` loads it."""
    from django.core.management import call_command

    call_command("import_docs", verbosity=0)


@pytest.fixture
def alice(db) -> Member:
    return make_member("alice")


@pytest.fixture
def bob(db) -> Member:
    return make_member("bob")


@pytest.fixture
def charlie(db) -> Member:
    return make_member("charlie")


class McpClient:
    """JSON-RPC over Django's test client against /mcp (or another MCP endpoint, `path`), the way an
    MCP client talks to it."""

    def __init__(self, token: str | None, *, origin: str | None = None, path: str = "/mcp") -> None:
        self.http = Client()
        self.token = token
        self.origin = origin
        self.path = path
        self.session_id: str | None = None
        self.next_id = 1

    def headers(self) -> dict[str, str]:
        extra = {"HTTP_ACCEPT": ACCEPT}
        if self.token:
            extra["HTTP_AUTHORIZATION"] = f"Bearer {self.token}"
        if self.session_id:
            extra["HTTP_MCP_SESSION_ID"] = self.session_id
        if self.origin:
            extra["HTTP_ORIGIN"] = self.origin
        return extra

    def post(self, method: str, params: dict[str, Any] | None = None, *, notification: bool = False):
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if not notification:
            body["id"] = self.next_id
            self.next_id += 1
        if params is not None:
            body["params"] = params
        return self.http.post(self.path, data=json.dumps(body), content_type="application/json", **self.headers())

    def initialize(self, version: str = "2025-11-25"):
        response = self.post("initialize", {"protocolVersion": version, "capabilities": {},
                                            "clientInfo": {"name": "pytest", "version": "1"}})
        assert response.status_code == 200, response.content
        self.session_id = response.headers["Mcp-Session-Id"]
        return response

    def tool_names(self) -> set[str]:
        response = self.post("tools/list")
        assert response.status_code == 200, response.content
        return {t["name"] for t in response.json()["result"]["tools"]}

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.post("tools/call", {"name": name, "arguments": arguments or {}})
        assert response.status_code == 200, response.content
        return response.json()["result"]

    def call_expecting_success(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        result = self.call(name, arguments)
        assert result["isError"] is False, result
        payload = json.loads(result["content"][0]["text"])
        assert result["structuredContent"] == payload
        return payload

    def call_expecting_error(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        result = self.call(name, arguments)
        assert result["isError"] is True, result
        assert "structuredContent" not in result or result["structuredContent"] is None
        return json.loads(result["content"][0]["text"])


@pytest.fixture
def mcp_client():
    def connect(member_or_token: Member | str | None, **kwargs: Any) -> McpClient:
        token = member_or_token.token if isinstance(member_or_token, Member) else member_or_token
        return McpClient(token, **kwargs)

    return connect


class Api:
    """Django's test client speaking JSON to the REST API with a bearer token."""

    def __init__(self, member: Member | None = None, token: str | None = None) -> None:
        self.http = Client()
        self.extra: dict[str, str] = {}
        raw = token or (member.token if member else None)
        if raw:
            self.extra["HTTP_AUTHORIZATION"] = f"Bearer {raw}"

    def get(self, path: str, params: dict[str, Any] | None = None):
        return self.http.get(path, params or {}, **self.extra)

    def post(self, path: str, body: object = None):
        return self.http.post(path, json.dumps(body if body is not None else {}), content_type="application/json",
                              **self.extra)

    def put(self, path: str, body: object):
        return self.http.put(path, json.dumps(body), content_type="application/json", **self.extra)

    def patch(self, path: str, body: object):
        return self.http.patch(path, json.dumps(body), content_type="application/json", **self.extra)

    def delete(self, path: str, query: str = ""):
        return self.http.delete(f"{path}?{query}" if query else path, **self.extra)


class HiddenInputs(HTMLParser):
    """The hidden fields of a page's forms, the way a browser would submit them."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "input" and attributes.get("type") == "hidden" and attributes.get("name"):
            self.fields[attributes["name"]] = attributes.get("value") or ""


def hidden_inputs(html: str) -> dict[str, str]:
    parser = HiddenInputs()
    parser.feed(html)
    return parser.fields


class Portfolio:
    """MCP-AQL over a live MCP session, the way a DollhouseMCP client calls it."""

    def __init__(self, client: McpClient) -> None:
        self.client = client

    def call(self, tool: str, op: str | None = None, element_type: str | None = None, /,
             **params: Any) -> dict[str, Any]:
        arguments: dict[str, Any] = {"operation": op, "params": params}
        if element_type:
            arguments["element_type"] = element_type
        result = self.client.call(tool, arguments)
        envelope = json.loads(result["content"][0]["text"])
        assert result["isError"] is (not envelope.get("success", False)), result
        return envelope

    def batch(self, tool: str, operations: list[dict[str, Any]]) -> dict[str, Any]:
        result = self.client.call(tool, {"operations": operations})
        return json.loads(result["content"][0]["text"])

    def ok(self, tool: str, op: str, element_type: str | None = None, /, **params: Any) -> Any:
        """Call, confirming once if the gatekeeper asks (as a user who agrees would), and expect success."""
        envelope = self.call(tool, op, element_type, **params)
        if not envelope["success"] and "confirmation" in envelope:
            confirmed = self.call("mcp_aql_execute", "confirm_operation", operation=op)
            assert confirmed["success"], confirmed
            envelope = self.call(tool, op, element_type, **params)
        assert envelope["success"], envelope
        return envelope["data"]

    def fails(self, tool: str, op: str, element_type: str | None = None, /, **params: Any) -> str:
        envelope = self.call(tool, op, element_type, **params)
        assert envelope["success"] is False and envelope["error"], envelope
        return envelope["error"]


@pytest.fixture
def portfolio(mcp_client):
    def connect(member: Member) -> Portfolio:
        client = mcp_client(member)
        client.initialize()
        return Portfolio(client)

    return connect


@pytest.fixture
def fake_server():
    """An HTTP server on loopback that records what it is sent (tests.actions.FakeServer)."""
    from tests.actions import FakeServer

    server = FakeServer()
    yield server
    server.close()


@pytest.fixture
def model_backend(settings, fake_server):
    """The server's model backend pointed at a fake completions API (tests.fakes.FakeCompletions)."""
    from tests.fakes import FakeCompletions

    fake = FakeCompletions(fake_server)
    settings.ATRIUM_MODEL_BACKEND_URL = fake.url
    settings.ATRIUM_MODEL_BACKEND_MODEL = "fake-model"
    settings.ATRIUM_MODEL_BACKEND_KEY = "sk-test-backend-key-0123456789"
    settings.ATRIUM_MODEL_BACKEND_TIMEOUT_SECONDS = 5
    return fake
