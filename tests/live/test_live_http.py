"""The official MCP SDK client against a real server over streamable HTTP, with a personal token."""

import asyncio
import json

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import make_member

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


async def list_status_logout(mcp_url: str, token: str) -> tuple[set[str], dict, dict, str]:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, streamable_http_client(mcp_url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        init = await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        status = await session.call_tool("auth_status", {})
        logout = await session.call_tool("auth_logout", {})
    assert not status.isError and not logout.isError
    return tools, status.structuredContent, json.loads(logout.content[0].text), init.protocolVersion


def test_sdk_client_lists_calls_and_logs_out(live_atrium):
    alice = make_member("alice", scopes=["docs:read"])

    tools, status, logout, version = asyncio.run(list_status_logout(live_atrium.mcp_url, alice.token))

    assert version == "2025-11-25"
    assert {"auth_status", "auth_logout"} <= tools
    assert status["user"]["username"] == "alice"
    assert status["scopes"] == ["docs:read"]
    assert status["token"]["kind"] == "personal"
    assert status["session"]["transport"] == "http"
    assert logout == {"logged_out": True, "revoked": "personal",
                      "message": "Token revoked. Reconnect to sign in again."}

    headers = {"Authorization": f"Bearer {alice.token}", "Accept": "application/json, text/event-stream"}
    after = httpx.post(live_atrium.mcp_url, headers=headers,
                       json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "auth_status", "arguments": {}}})
    assert after.status_code == 401
    assert 'resource_metadata="' + live_atrium.url in after.headers["WWW-Authenticate"]
    # For a minute the token may still list what anyone sees: the tools that need no scope.
    listed = httpx.post(live_atrium.mcp_url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    names = {tool["name"] for tool in listed.json()["result"]["tools"]}
    assert names == {"auth_status", "auth_logout"}


def test_server_answers_get_with_405_and_stays_responsive(live_atrium):
    alice = make_member("alice")
    headers = {"Authorization": f"Bearer {alice.token}", "Accept": "text/event-stream"}

    assert httpx.get(live_atrium.mcp_url, headers=headers, timeout=5).status_code == 405
    assert httpx.get(f"{live_atrium.url}/healthz", timeout=5).json() == {
        "status": "ok", "database": "ok", "cache": "ok", "broker": "not configured"}
