"""Every capability and vault tool through the official SDK client against a live server: search,
details, the integration list, connecting with credentials and through the connect page a person
signs in to, executing actions (Atrium's own, HTTP to a local server, an imported OpenAPI one with
the key entered on the page) and a skill that calls an action from inside the sandbox, and a client
that declares URL elicitation sent to the connect page."""

import asyncio
from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from integrations.crypto import unseal
from integrations.models import Connection, ConnectRequest, Execution
from tests.actions import json_reply
from tests.conftest import hidden_inputs, make_member
from tests.live.conftest import Tools, serve

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

WEATHER = Path(__file__).resolve().parents[1] / "fixtures" / "openapi" / "weather.yaml"
WEATHER_KEY = "wk-live-51c9e0a7d3b2f8e6"
WEBHOOK_SECRET = "whsec-0d9c8b7a6f5e4d3c"
SKILL_SOURCE = """\
def run(input, atrium):
    reply = atrium.call("http_tools.request", {"method": "POST", "url": input["url"], "json": {"note": input["note"]}})
    return {"status": reply["status"], "stored": reply["body"]}
"""


@pytest.fixture
def capability_server(transactional_db, tmp_path, fake_server):
    """A hosted server whose http_tools may reach the fake server, with the catalogue synced and the
    small Weather API imported to call the fake server too."""
    call_command("sync_catalogue", verbosity=0)
    call_command("import_integration", str(WEATHER), "--server-url", fake_server.url, stdout=StringIO())
    call_command("import_docs", verbosity=0)
    with serve(tmp_path, CELERY_BROKER_URL="", ATRIUM_HTTP_ALLOWED_HOSTS=fake_server.netloc) as server:
        yield server


async def sign_in(web: httpx.AsyncClient, username: str) -> None:
    """Sign in through the login page, the way a browser does."""
    login = await web.get("/accounts/login/")
    assert login.status_code == 200, login.text
    signed_in = await web.post("/accounts/login/", data={
        "csrfmiddlewaretoken": hidden_inputs(login.text)["csrfmiddlewaretoken"],
        "login": username, "password": f"pw-{username}"})
    assert signed_in.status_code == 302, signed_in.text


def test_the_sdk_client_uses_every_capability_and_vault_tool(capability_server, fake_server, real_password_hashing):
    alice = make_member("alice")
    make_member("bob")
    fake_server.route("GET", "/status", json_reply({"ok": True}))
    fake_server.route("POST", "/notes", json_reply({"id": 7}, status=201))
    fake_server.route("GET", "/forecast", json_reply({"city": "Oslo", "highs": [4, 6]}))
    created = httpx.post(f"{capability_server.url}/api/capabilities/skills/", timeout=30,
                         headers={"Authorization": f"Bearer {alice.token}"},
                         json={"name": "note_keeper", "description": "Keep a note on the notes server.",
                               "source_code": SKILL_SOURCE, "integrations": ["http_tools"], "timeout_seconds": 30,
                               "input_schema": {"type": "object", "required": ["url", "note"],
                                                "properties": {"url": {"type": "string"},
                                                               "note": {"type": "string"}}}})
    assert created.status_code == 201, created.text

    async def main() -> None:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {alice.token}"}, timeout=60)
        async with http, streamable_http_client(capability_server.mcp_url, http_client=http) as (read, write, _), \
                ClientSession(read, write) as session:
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            assert {"capabilities_search", "capabilities_get", "capabilities_execute",
                    "capabilities_integration_list", "vault"} <= names
            call = Tools(session)
            await search(call)
            await details(call)
            await integration_list(call)
            await vault_with_credentials(call)
            await vault_through_the_connect_page(call, capability_server.url, fake_server)
            await execute(call, fake_server)

    asyncio.run(main())


async def search(call: Tools) -> None:
    for mode in ("keyword", "semantic", "hybrid"):
        hits = (await call.ok("capabilities_search", query="send a signed webhook", mode=mode, limit=5))["results"]
        assert hits and len(hits) <= 5, (mode, hits)
        assert "webhook_tools.send_webhook" in [h["name"] for h in hits[:2]], (mode, hits)
        assert all(set(h) == {"type", "name", "description", "integrationId", "connected", "score"} for h in hits)
    # The keyword operators: a phrase, and a word excluded.
    hits = (await call.ok("capabilities_search", query='"pull request" -slack', mode="keyword"))["results"]
    assert hits and all(h["integrationId"] == "github_tools" for h in hits), hits
    assert any(h["name"] == "github_tools.pulls_create" for h in hits)
    hits = (await call.ok("capabilities_search", query="webhook*", mode="keyword", types=["action"]))["results"]
    assert [h["name"] for h in hits] == ["webhook_tools.send_webhook"]
    hits = (await call.ok("capabilities_search", query="issue", scope={"integrationId": "github_tools"},
                          types=["action"], limit=3))["results"]
    assert len(hits) == 3 and {h["integrationId"] for h in hits} == {"github_tools"}
    error, refused = await call("capabilities_search", query="x")
    assert error and refused["code"] == "invalid_arguments"


async def details(call: Tools) -> None:
    github = await call.ok("capabilities_get", name="github_tools",
                           parts=["description", "agentFriendlyInstructions", "availableSkills"])
    assert (github["type"], github["displayName"], github["connected"]) == ("integration", "GitHub", False)
    assert github["description"] and "personal access token" in github["agentFriendlyInstructions"]
    assert {"github_tools.issues_create", "github_tools.pulls_create"} <= {s["name"] for s in github["availableSkills"]}
    request = await call.ok("capabilities_get", name="http_tools.request", parts=["inputSchema"])
    assert request["type"] == "action" and request["integrationId"] == "http_tools"
    assert request["inputSchema"]["required"] == ["method", "url"] and "description" not in request
    skill = await call.ok("capabilities_get", name="note_keeper", parts=["sourceCode"])
    assert skill == {"name": "note_keeper", "type": "skill", "integrations": ["http_tools"],
                     "sourceCode": SKILL_SOURCE}
    error, missing = await call("capabilities_get", name="http_tools.requst")
    assert error and missing["code"] == "capability_not_found"
    assert "http_tools.request" in missing["suggestions"]


async def integration_list(call: Tools) -> None:
    listed = await call.ok("capabilities_integration_list")
    rows = {row["integrationId"]: row for row in listed["integrations"]}
    assert set(rows) == {"atrium_tools", "email_tools", "github_tools", "http_tools", "slack_tools", "webhook_tools",
                         "weather_tools"}
    assert listed["total"] == 7
    assert rows["webhook_tools"]["authScheme"] == "api_key" and rows["webhook_tools"]["actionCount"] == 1
    assert rows["email_tools"]["firstParty"] is True
    assert rows["http_tools"]["connectionRequired"] is False
    assert not any(row["connected"] for row in rows.values())


async def vault_with_credentials(call: Tools) -> None:
    status = await call.ok("vault", action="status")
    assert {row["integrationId"]: row["state"] for row in status["integrations"]}["webhook_tools"] == "not_connected"
    connected = await call.ok("vault", action="connect", integrationId="webhook_tools",
                              credentials={"secret": WEBHOOK_SECRET})
    assert connected == {"status": "connected", "integrationId": "webhook_tools"}
    row = await asyncio.to_thread(Connection.objects.get, integration_id="webhook_tools")
    assert WEBHOOK_SECRET not in row.sealed_credentials and unseal(row.sealed_credentials) == {
        "secret": WEBHOOK_SECRET}
    [status] = (await call.ok("vault", action="status", integrationId="webhook_tools"))["integrations"]
    assert (status["connected"], status["state"]) == (True, "connected") and WEBHOOK_SECRET not in str(status)
    gone = await call.ok("vault", action="disconnect", integrationId="webhook_tools")
    assert gone == {"status": "disconnected", "integrationId": "webhook_tools", "affectedSkills": []}
    [status] = (await call.ok("vault", action="status", integrationId="webhook_tools"))["integrations"]
    assert status["state"] == "not_connected"
    assert not await asyncio.to_thread(Connection.objects.filter(integration_id="webhook_tools").exists)


async def vault_through_the_connect_page(call: Tools, server_url: str, fake_server) -> None:
    pending = await call.ok("vault", action="connect", integrationId="weather_tools")
    assert pending["status"] == "pending" and pending["connectUrl"].startswith(f"{server_url}/vault/connect/")
    assert "enter the API key" in pending["instructions"]
    link = pending["connectUrl"]

    # Someone else signed in finds no such page, and can store nothing through it.
    async with httpx.AsyncClient(base_url=server_url, timeout=30) as bob:
        await sign_in(bob, "bob")
        page = await bob.get(link)
        assert page.status_code == 404
        posted = await bob.post(link, data={"csrfmiddlewaretoken": bob.cookies["csrftoken"], "apiKey": "bobs-key"})
        assert posted.status_code == 404
    assert not await asyncio.to_thread(Connection.objects.filter(integration_id="weather_tools").exists)

    async with httpx.AsyncClient(base_url=server_url, timeout=30) as web:
        await sign_in(web, "alice")
        page = await web.get(link)
        assert page.status_code == 200 and 'name="apiKey"' in page.text and "Signed in as" in page.text
        done = await web.post(link, data={"csrfmiddlewaretoken": hidden_inputs(page.text)["csrfmiddlewaretoken"],
                                          "apiKey": WEATHER_KEY})
        assert done.status_code == 200 and "Weather is connected" in done.text, done.text
        again = await web.post(link, data={"csrfmiddlewaretoken": hidden_inputs(page.text)["csrfmiddlewaretoken"],
                                           "apiKey": "another-key-0000"})
        assert again.status_code == 410  # a connect link works once

    [status] = (await call.ok("vault", action="status", integrationId="weather_tools"))["integrations"]
    assert (status["connected"], status["state"]) == (True, "connected")
    row = await asyncio.to_thread(Connection.objects.get, integration_id="weather_tools")
    assert WEATHER_KEY not in row.sealed_credentials and unseal(row.sealed_credentials) == {"apiKey": WEATHER_KEY}

    # The key typed on the page is what the imported action sends to the API.
    forecast = await call.ok("capabilities_execute", name="weather_tools.get_forecast",
                             input={"city": "Oslo", "days": 2})
    assert forecast == {"city": "Oslo", "highs": [4, 6]}
    received = fake_server.last()
    assert (received.path, received.query) == ("/forecast", {"city": ["Oslo"], "days": ["2"]})
    assert received.headers["x-api-key"] == WEATHER_KEY


async def execute(call: Tools, fake_server) -> None:
    docs = await call.ok("capabilities_execute", name="atrium_tools.search_docs",
                         input={"query": "cancel a workflow run", "limit": 3})
    assert set(docs) == {"results"} and 1 <= len(docs["results"]) <= 3  # the output itself, no timing fields
    assert "runs" in {hit["slug"] for hit in docs["results"]}

    fake_server.received.clear()
    answer = await call.ok("capabilities_execute", name="http_tools.request",
                           input={"method": "GET", "url": f"{fake_server.url}/status", "query": {"verbose": 1}})
    assert (answer["status"], answer["body"], answer["truncated"]) == (200, {"ok": True}, False)
    assert answer["headers"]["content-type"] == "application/json"
    [received] = fake_server.received
    assert (received.method, received.path, received.query) == ("GET", "/status", {"verbose": ["1"]})

    # An action's own failure is its error payload, recorded as a failed execution.
    error, refused = await call("capabilities_execute", name="http_tools.request",
                                input={"method": "GET", "url": "http://127.0.0.2:9/elsewhere"})
    assert error and refused["code"] == "host_not_allowed" and "ATRIUM_HTTP_ALLOWED_HOSTS" in refused["error"]
    failed = await asyncio.to_thread(Execution.objects.filter(name="http_tools.request", status="failed").get)
    assert failed.error_code == "host_not_allowed"

    # Input that does not fit the schema runs nothing and records nothing.
    executions = await asyncio.to_thread(Execution.objects.count)
    error, invalid = await call("capabilities_execute", name="http_tools.request",
                                input={"method": "FETCH", "url": f"{fake_server.url}/status", "extra": True})
    assert error and invalid["code"] == "invalid_input"
    assert any("method" in p for p in invalid["problems"]) and any("extra" in p for p in invalid["problems"])
    assert await asyncio.to_thread(Execution.objects.count) == executions
    assert len(fake_server.received) == 1

    # The skill runs in the sandbox and calls http_tools.request through atrium.call, as alice.
    ran = await call.ok("capabilities_execute", name="note_keeper",
                        input={"url": f"{fake_server.url}/notes", "note": "buy milk"})
    assert ran["success"] is True and ran["output"] == {"status": 201, "stored": {"id": 7}}, ran
    assert isinstance(ran["executionTimeMs"], int)
    posted = fake_server.last()
    assert (posted.method, posted.path, posted.json()) == ("POST", "/notes", {"note": "buy milk"})
    skill_run = await asyncio.to_thread(Execution.objects.get, name="note_keeper")
    assert (skill_run.kind, skill_run.status, skill_run.via) == ("skill", "succeeded", "mcp")
    child = await asyncio.to_thread(Execution.objects.get, parent=skill_run)
    assert (child.name, child.kind, child.status) == ("http_tools.request", "action", "succeeded")


def test_a_client_that_declares_url_elicitation_is_sent_to_the_connect_page(capability_server, fake_server):
    alice = make_member("alice")
    asked: list[types.ElicitRequestParams] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="decline")

    async def main() -> list[McpError]:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {alice.token}"}, timeout=60)
        async with http, streamable_http_client(capability_server.mcp_url, http_client=http) as (read, write, _), \
                ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            errors = []
            for tool, arguments in (("vault", {"action": "connect", "integrationId": "weather_tools"}),
                                    ("capabilities_execute", {"name": "weather_tools.get_forecast",
                                                              "input": {"city": "Oslo"}})):
                with pytest.raises(McpError) as raised:
                    await session.call_tool(tool, arguments)
                errors.append(raised.value)
            # With credentials there is nothing to send the user to: it connects.
            connected = await session.call_tool("vault", {"action": "connect", "integrationId": "webhook_tools",
                                                          "credentials": {"secret": WEBHOOK_SECRET}})
            assert not connected.isError and connected.structuredContent["status"] == "connected"
            return errors

    errors = asyncio.run(main())
    links = set(ConnectRequest.objects.filter(user=alice.user, integration_id="weather_tools")
                .values_list("token", flat=True))
    assert len(links) == 1  # asked twice within its life, the user is sent to the same link
    for error in errors:
        assert error.error.code == -32042
        [elicitation] = error.error.data["elicitations"]
        assert elicitation["mode"] == "url" and elicitation["elicitationId"]
        assert elicitation["url"].startswith(f"{capability_server.url}/vault/connect/")
        assert elicitation["url"].rstrip("/").rsplit("/", 1)[-1] in links
        assert "sign in as alice" in elicitation["message"]
    assert asked == []  # the error is the elicitation: no elicitation request was sent
    assert not fake_server.received and not Execution.objects.exists()
    assert not Connection.objects.filter(integration_id="weather_tools").exists()


def test_a_token_that_may_only_search_sees_only_capabilities_search(capability_server):
    searcher = make_member("searcher", scopes=["capabilities:search"])

    async def main() -> None:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {searcher.token}"}, timeout=60)
        async with http, streamable_http_client(capability_server.mcp_url, http_client=http) as (read, write, _), \
                ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            assert tools == {"capabilities_search", "auth_status", "auth_logout"}
            call = Tools(session)
            hits = (await call.ok("capabilities_search", query="github issue"))["results"]
            assert hits and hits[0]["integrationId"] == "github_tools"
            for tool, arguments in (("capabilities_get", {"name": "github_tools"}),
                                    ("capabilities_execute", {"name": "atrium_tools.search_docs",
                                                              "input": {"query": "runs"}}),
                                    ("capabilities_integration_list", {}),
                                    ("vault", {"action": "status"})):
                error, refused = await call(tool, **arguments)
                assert error and refused["code"] == "insufficient_scope", (tool, refused)

    asyncio.run(main())
    assert not Execution.objects.exists()
