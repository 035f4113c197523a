"""The five docs tools through the official SDK client against a live server."""

import asyncio
import json

import httpx
import pytest
from django.core.management import call_command
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import make_member

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_the_sdk_client_uses_every_docs_tool(live_atrium):
    call_command("import_docs", verbosity=0)
    member = make_member("reader", scopes=["docs:read"])

    async def main() -> None:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {member.token}"}, timeout=30)
        async with http, streamable_http_client(live_atrium.mcp_url, http_client=http) as (read, write, _), \
                ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            # A docs:read token sees the docs tools (and the scope-free auth tools), nothing else.
            assert tools == {"list_docs", "get_doc", "search_docs", "ask_docs", "answer_docs", "auth_status",
                             "auth_logout"}

            async def call(tool: str, **arguments):
                result = await session.call_tool(tool, arguments)
                return bool(result.isError), json.loads(result.content[0].text)

            error, listed = await call("list_docs")
            assert not error and "runs" in {row["slug"] for row in listed}
            error, page = await call("get_doc", slug="workflow-format")
            assert not error and page["frontmatter"]["title"] and "## Node types" in page["markdown"]
            assert (await call("get_doc", slug="nope"))[0] is True
            error, hits = await call("search_docs", query="subworkflw", limit=5)
            assert not error and len(hits) <= 5
            assert ("workflow-format", "subworkflows") in {(h["slug"], h["headingId"]) for h in hits}
            error, asked = await call("ask_docs", question="How do I cancel a workflow run?", maxSections=2,
                                      maxChars=3000)
            assert not error and asked["sections"][0]["headingId"] == "cancelling"
            assert asked["totalChars"] <= 3000 and len(asked["sections"]) <= 2
            error, answer = await call("answer_docs", question="How do I cancel a workflow run?")
            assert not error and answer["action"] == "answer_prompt" and answer["citations"]
            assert (await call("answer_docs", question="qzxv wplk"))[1]["code"] == "no_relevant_sections"
            assert (await call("search_docs", query="workflow", limit=51))[0] is True

    asyncio.run(main())
