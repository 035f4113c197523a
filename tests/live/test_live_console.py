"""The console links and the cache report through the official SDK client against a live server; each
link answered opens its page on that server for the signed-in user."""

import asyncio

import httpx
import pytest
from django.test import Client

from tests.conftest import make_member
from tests.live.conftest import sdk_session
from tests.live.test_live_elements import READ, Session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CONSOLE_OPERATIONS = ("open_portfolio_browser", "open_console", "open_logs", "open_metrics", "open_permissions",
                      "open_setup", "get_cache_budget_report")


async def walk(mcp_url: str, token: str) -> dict:
    async with sdk_session(mcp_url, token) as client:
        s = Session(client)
        links = {
            "portfolio": await s.ok(READ, "open_portfolio_browser", tab="portfolio", q="review", type="skill"),
            "console": await s.ok(READ, "open_console", tab="metrics", since="1h"),
            "logs": await s.ok(READ, "open_logs", level="info", category="application", source="mcp", since="24h"),
            "metrics": await s.ok(READ, "open_metrics", since="15m", refresh=0),
            "permissions": await s.ok(READ, "open_permissions"),
            "setup": await s.ok(READ, "open_setup"),
        }
        report = await s.ok(READ, "get_cache_budget_report")
        return {"links": links, "report": report, "seen": s.seen}


def test_the_sdk_client_gets_console_links_that_open_their_pages(live_atrium, settings):
    alice = make_member("alice")
    browser = Client()
    browser.force_login(alice.user)

    answers = asyncio.run(walk(live_atrium.mcp_url, alice.token))

    assert set(answers["seen"]) == set(CONSOLE_OPERATIONS)
    cookies = {settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value}
    for tab, data in answers["links"].items():
        assert data["opened"] is False, tab
        assert data["url"].startswith(live_atrium.url + "/"), data
        response = httpx.get(data["url"], cookies=cookies)
        assert response.status_code == 200, (tab, data["url"], response.status_code)
        assert "Atrium" in response.text and alice.user.username in response.text
    assert {c["name"] for c in answers["report"]["caches"]} >= {"collection-index", "search-index", "mcp-sessions"}
