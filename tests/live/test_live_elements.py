"""Every MCP-AQL operation of the elements surface, through the official SDK client against a live server."""

import asyncio
import json

import httpx
import pytest
from django.db import connections
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from elements.models import Element, VerificationChallenge
from integrations.crypto import unseal
from tests.conftest import make_member

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CREATE, READ, UPDATE, DELETE, EXECUTE = (f"mcp_aql_{e}" for e in ("create", "read", "update", "delete", "execute"))


class Session:
    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.seen: list[str] = []

    async def call(self, tool: str, op: str, element_type: str | None = None, /, **params) -> dict:
        arguments = {"operation": op, "params": params}
        if element_type:
            arguments["element_type"] = element_type
        result = await self.session.call_tool(tool, arguments)
        envelope = json.loads(result.content[0].text)
        assert result.isError is (not envelope["success"]), envelope
        return envelope

    async def ok(self, tool: str, op: str, element_type: str | None = None, /, **params):
        envelope = await self.call(tool, op, element_type, **params)
        if not envelope["success"] and "confirmation" in envelope:
            assert (await self.call(EXECUTE, "confirm_operation", operation=op))["success"]
            self.seen.append("confirm_operation")
            envelope = await self.call(tool, op, element_type, **params)
        assert envelope["success"], (op, envelope)
        self.seen.append(op)
        return envelope["data"]


def code_on_the_page(challenge_id: str) -> str:
    """The code its owner reads on their approvals page (no MCP answer carries it)."""
    try:
        return unseal(VerificationChallenge.objects.get(pk=challenge_id).sealed_code)
    finally:
        connections.close_all()  # this thread's own connection


async def walk_cli_permissions(s: Session, mcp_url: str, token: str) -> None:
    """Claude Code's permission prompt asks about a deploy; a second session relays the approval."""
    await s.ok(CREATE, "create_element", "skill", element_name="deploys", description="Deploys", content="Deploy.",
               gatekeeper={"externalRestrictions": {"confirmPatterns": ["Bash:make deploy*"]}})
    await s.ok(READ, "activate_element", "skill", element_name="deploys")
    asked = await s.ok(READ, "permission_prompt", tool_name="Bash", input={"command": "make deploy"})
    await s.ok(READ, "get_effective_cli_policies", tool_name="Bash", tool_input={"command": "make deploy"})
    assert (await s.ok(READ, "get_pending_cli_approvals"))["count"] == 1
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, streamable_http_client(mcp_url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as bridge:
        await bridge.initialize()
        relayed = Session(bridge)
        await relayed.ok(EXECUTE, "approve_cli_permission", request_id=asked["approvalRequest"]["requestId"])
        s.seen += relayed.seen
    await s.ok(READ, "deactivate_element", "skill", element_name="deploys")


async def walk_every_operation(mcp_url: str, token: str) -> list[str]:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, streamable_http_client(mcp_url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as client:
        await client.initialize()
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {CREATE, READ, UPDATE, DELETE, EXECUTE} <= tools
        s = Session(client)
        await s.ok(CREATE, "create_element", "persona", element_name="reviewer", description="Reviews code",
                   instructions="You ARE a careful reviewer.", tags=["code"], triggers=["review"])
        await s.ok(CREATE, "create_element", "skill", element_name="debugging", description="Debug programs",
                   content="Reproduce, bisect, fix.", triggers=["debug"])
        await s.ok(CREATE, "create_element", "template", element_name="greeting", description="Greets",
                   content="Hello {{name}}")
        await s.ok(CREATE, "create_element", "memory", element_name="notes", description="Notes")
        await s.ok(CREATE, "create_element", "ensemble", element_name="team", description="Team",
                   elements=[{"element_name": "reviewer", "element_type": "persona"},
                             {"element_name": "debugging", "element_type": "skill"}])
        await s.ok(CREATE, "addEntry", element_name="notes", content="The reviewer likes small PRs")
        blocked = await s.ok(CREATE, "beetlejuice_beetlejuice_beetlejuice", agent_name="reviewer-bot")
        code = await asyncio.to_thread(code_on_the_page, blocked["challenge_id"])
        assert (await s.ok(CREATE, "verify_challenge", challenge_id=blocked["challenge_id"], code=code))["verified"]
        await s.ok(CREATE, "import_persona",
                   source='{"element_name": "helper", "description": "Helps", "instructions": "You help."}')
        package = await s.ok(READ, "export_element", "skill", element_name="debugging")
        await s.ok(CREATE, "import_element", data={**package, "element_name": "debugging-copy"})
        assert (await s.ok(READ, "list_elements", "persona", pageSize=5))["pagination"]["totalItems"] == 2
        await s.ok(READ, "query_elements", "skill", filters={"nameContains": "debug"})
        await s.ok(READ, "get_element", "persona", element_name="reviewer")
        await s.ok(READ, "get_element_details", "persona", element_name="reviewer")
        found = await s.ok(READ, "search_elements", query="reviewer")
        assert {i["element_name"] for i in found["items"]} >= {"reviewer", "notes"}
        await s.ok(READ, "search", query="debug", scope="local")
        await s.ok(READ, "search_portfolio", query="debug")
        await s.ok(READ, "search_all", query="debug")
        await s.ok(READ, "activate_element", "ensemble", element_name="team")
        assert (await s.ok(READ, "get_active_elements"))["count"] == 3
        await s.ok(READ, "deactivate_element", "ensemble", element_name="team")
        await s.ok(READ, "validate_element", "skill", element_name="debugging")
        assert (await s.ok(READ, "render", element_name="greeting", variables={"name": "Ada"}))["content"] == \
            "Hello Ada"
        await s.ok(READ, "introspect", query="format", name="template")
        await s.ok(READ, "find_similar_elements", "skill", element_name="debugging", threshold=0.1)
        await s.ok(READ, "search_by_verb", verb="debug")
        await s.ok(READ, "get_element_relationships", "persona", element_name="reviewer")
        await s.ok(READ, "get_relationship_stats")
        await s.ok(READ, "convert_skill_format", direction="agent_to_dollhouse",
                   agent_skill={"name": "pdf", "description": "PDFs", "body": "Use pypdf."})
        await s.ok(READ, "get_build_info")
        await s.ok(READ, "query_logs", limit=5)
        await s.ok(READ, "dollhouse_config", action="get")
        await walk_cli_permissions(s, mcp_url, token)
        await s.ok(UPDATE, "edit_element", "persona", element_name="reviewer", input={"description": "Reviews"})
        await s.ok(UPDATE, "upgrade_element", "skill", element_name="debugging", dry_run=True)
        await s.ok(DELETE, "clear", element_name="notes")
        await s.ok(DELETE, "delete_element", "skill", element_name="debugging-copy")
        return s.seen


def test_the_sdk_client_runs_every_element_operation(live_atrium):
    alice = make_member("alice")

    seen = asyncio.run(walk_every_operation(live_atrium.mcp_url, alice.token))

    from elements.mcpaql import ROUTES
    from tests.live.test_live_agents import AGENT_OPERATIONS
    from tests.live.test_live_collection import COLLECTION_OPERATIONS
    from tests.live.test_live_collection_submissions import SUBMISSION_OPERATIONS
    from tests.live.test_live_console import CONSOLE_OPERATIONS
    from tests.live.test_live_github_auth import GITHUB_OPERATIONS
    from tests.live.test_live_portfolio_sync import PORTFOLIO_OPERATIONS

    # The agent lifecycle, the community collection, submitting to it, the console links, GitHub
    # sign-in and portfolio sync have walks of their own (test_live_agents.py, test_live_collection.py,
    # test_live_collection_submissions.py, test_live_console.py, test_live_github_auth.py,
    # test_live_portfolio_sync.py).
    walked = {*AGENT_OPERATIONS, *COLLECTION_OPERATIONS, *SUBMISSION_OPERATIONS, *CONSOLE_OPERATIONS,
              *GITHUB_OPERATIONS, *PORTFOLIO_OPERATIONS}
    assert set(ROUTES) - walked == set(seen)
    assert set(Element.objects.filter(owner=alice.user).values_list("name", flat=True)) == {
        "reviewer", "debugging", "greeting", "notes", "team", "helper", "deploys"}
