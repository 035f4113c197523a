"""`manage.py mcp_stdio --user` driven by the official SDK's stdio client."""

import asyncio
import json
import subprocess
import sys

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError

from accounts.models import McpSession, ToolCall
from accounts.scopes import ALL_SCOPES
from core.caller import Caller
from elements.mcpaql import ROUTES
from elements.models import MemoryEntry
from elements.services import element_create
from elements.types import ElementType
from tests.conftest import make_member
from tests.live.conftest import BASE_DIR, child_env

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


async def stdio_status(username: str) -> tuple[set[str], dict]:
    params = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio", "--user", username],
                                   cwd=str(BASE_DIR), env=child_env())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        status = await session.call_tool("auth_status", {})
        logout = await session.call_tool("auth_logout", {})
    assert logout.isError
    return tools, status.structuredContent


def test_stdio_serves_the_tools_as_the_user_with_every_scope(db):
    make_member("alice")

    tools, status = asyncio.run(stdio_status("alice"))

    assert {"auth_status", "auth_logout"} <= tools
    assert status["user"]["username"] == "alice"
    assert status["token"]["kind"] == "stdio"
    assert set(status["scopes"]) == ALL_SCOPES
    session = McpSession.objects.get(pk=status["session"]["id"])
    assert session.transport == "stdio"
    assert session.closed_at is not None
    calls = ToolCall.objects.filter(user__username="alice").order_by("at", "id")
    assert [(c.tool, c.transport, c.outcome) for c in calls] == [("auth_status", "stdio", "ok"),
                                                                  ("auth_logout", "stdio", "error")]


async def stdio_workflows(username: str, repo: str) -> tuple[dict, dict]:
    params = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio", "--user", username],
                                   cwd=str(BASE_DIR), env=child_env(ATRIUM_SERVER_PATHS="0"))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        created = await session.call_tool("create_workflow", {"id": "local", "cwd": repo})
        listed = await session.call_tool("list_workflows", {"cwd": repo})
    return json.loads(created.content[0].text), json.loads(listed.content[0].text)


def test_stdio_resolves_cwd_on_the_users_own_disk(db, tmp_path):
    make_member("alice")
    repo = tmp_path / "notes"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)

    created, listed = asyncio.run(stdio_workflows("alice", str(repo)))

    assert created == {"id": "local", "source": "repo", "path": str(repo / ".atrium" / "workflows" / "local.yaml")}
    assert (repo / ".atrium" / "workflows" / "local.yaml").read_text().startswith("name: local\n")
    assert [(w["id"], w["source"]) for w in listed] == [("local", "repo")]


async def stdio_vault_connect(username: str, *, url_elicitation: bool) -> tuple[bool, object]:
    async def elicit(context, params):  # declaring a callback declares form and URL elicitation
        raise AssertionError("the server never sends an elicitation request")

    params = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio", "--user", username],
                                   cwd=str(BASE_DIR), env=child_env())
    async with stdio_client(params) as (read, write), \
            ClientSession(read, write, elicitation_callback=elicit if url_elicitation else None) as session:
        await session.initialize()
        try:
            result = await session.call_tool("vault", {"action": "connect", "integrationId": "keyed_tools"})
        except McpError as exc:
            return True, exc.error
    return False, json.loads(result.content[0].text)


def test_stdio_sends_a_url_elicitation_when_the_client_declares_it(db):
    from integrations.models import Integration

    make_member("alice")
    Integration.objects.create(id="keyed_tools", name="Keyed", auth_scheme="api_key")

    raised, error = asyncio.run(stdio_vault_connect("alice", url_elicitation=True))
    assert raised and error.code == -32042
    assert "/vault/connect/" in error.data["elicitations"][0]["url"]
    raised, payload = asyncio.run(stdio_vault_connect("alice", url_elicitation=False))
    assert not raised and payload["status"] == "pending"


async def stdio_discrete(username: str) -> tuple[set[str], dict, dict]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["manage.py", "mcp_stdio", "--user", username, "--discrete"],
                                   cwd=str(BASE_DIR), env=child_env())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        initialized = await session.initialize()
        assert initialized.capabilities.resources is None and initialized.capabilities.prompts is None
        tools = {t.name for t in (await session.list_tools()).tools}
        entry = {"element_name": "notes", "content": "From stdio"}
        asked = await session.call_tool("addEntry", entry)
        assert asked.isError and "confirm_operation" in asked.content[0].text
        confirmed = await session.call_tool("confirm_operation", {"operation": "addEntry"})
        assert not confirmed.isError
        created = await session.call_tool("addEntry", entry)
        listed = await session.call_tool("list_elements", {"element_type": "memory"})
    assert not created.isError and not listed.isError
    return tools, json.loads(created.content[0].text), json.loads(listed.content[0].text)


def test_stdio_discrete_serves_one_tool_per_operation(db):
    alice = make_member("alice")
    element_create(caller=Caller.trusted(alice.user, via="command"), element_type=ElementType.MEMORY, name="notes",
                   params={"description": "Notes"})

    tools, created, listed = asyncio.run(stdio_discrete("alice"))

    assert tools == set(ROUTES)
    assert created["success"] is True
    assert [item["element_name"] for item in listed["data"]["items"]] == ["notes"]
    assert list(MemoryEntry.objects.filter(memory__name="notes").values_list("content", flat=True)) == ["From stdio"]
