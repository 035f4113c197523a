"""The vault's connect page in a real headless Chromium against a live server: a connect URL from the
vault tool, opened by its signed-in owner, takes the API key in a password field and stores it
sealed; the same URL is then used up, and another user never sees the page."""

import asyncio
import json
import shutil

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from integrations.models import Connection, Integration
from tests.conftest import make_member

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CHROMIUM = shutil.which("chromium")
SECRET = "key-0123456789abcdef"


async def connect_over_mcp(mcp_url: str, token: str) -> dict:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, streamable_http_client(mcp_url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("vault", {"action": "connect", "integrationId": "keyed_tools"})
        assert not result.isError, result
        return json.loads(result.content[0].text)


def sign_in(page, url: str, username: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=login]", username)
    page.fill("input[name=password]", f"pw-{username}")
    page.get_by_role("button", name="Sign In").click()
    page.wait_for_url(f"{url}/")


def test_the_connect_page_takes_the_key_from_its_owner_only(live_atrium, real_password_hashing, tmp_path):
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[dev])")
    Integration.objects.create(id="keyed_tools", name="Keyed service", auth_scheme="api_key")
    make_member("charlie")
    alice = make_member("alice")
    pending = asyncio.run(connect_over_mcp(live_atrium.mcp_url, alice.token))
    assert pending["status"] == "pending"

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        expect = sync_api.expect
        try:
            other = browser.new_context().new_page()
            sign_in(other, live_atrium.url, "charlie")
            assert other.goto(pending["connectUrl"]).status == 404

            page = browser.new_context().new_page()
            page.goto(pending["connectUrl"])  # signed out: sent to sign in, then back
            page.fill("input[name=login]", "alice")
            page.fill("input[name=password]", "pw-alice")
            page.get_by_role("button", name="Sign In").click()
            page.wait_for_url(pending["connectUrl"])
            expect(page.get_by_role("heading", level=1)).to_contain_text("Keyed service")
            key = page.locator("input[name=apiKey]")
            expect(key).to_have_attribute("type", "password")
            page.screenshot(path=str(tmp_path / "vault-connect.png"), full_page=True)
            key.fill(SECRET)
            page.get_by_role("button", name="Connect").click()
            expect(page.get_by_text("return to your")).to_be_visible()
            assert SECRET not in page.content()
            page.screenshot(path=str(tmp_path / "vault-connected.png"), full_page=True)
            assert page.goto(pending["connectUrl"]).status == 410  # single-use
        finally:
            browser.close()

    connection = Connection.objects.get(user=alice.user, integration_id="keyed_tools")
    assert connection.state == "connected" and SECRET not in connection.sealed_credentials
