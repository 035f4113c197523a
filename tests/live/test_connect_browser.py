"""The Connect page in a real headless Chromium: a snippet for every client, a token made on the spot
and filled into them, and the Python SDK snippet, copied off the page, run as written with the
current major version of the official SDK against the live server."""

import os
import subprocess

import pytest

from accounts.models import PersonalToken
from accounts.scopes import ALL_SCOPES
from tests.conftest import make_member
from tests.live.test_approvals_browser import CHROMIUM, browser_tools
from tests.live.test_vault_page_browser import sign_in

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CLIENTS = ("Claude Code", "Claude Desktop", "Cursor", "VS Code", "MCP Inspector", "Python SDK",
           "stdio, on the server's machine")


def test_the_connect_page_makes_a_token_and_its_python_snippet_runs(live_atrium, real_password_hashing, sdk_python,
                                                                   tmp_path):
    sync_api = browser_tools()
    expect = sync_api.expect
    make_member("alice")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            sign_in(page, live_atrium.url, "alice")
            page.goto(f"{live_atrium.url}/connect/")
            for client in CLIENTS:
                expect(page.get_by_role("heading", name=client, exact=True)).to_be_visible()
            assert page.get_by_text(live_atrium.mcp_url).count() >= 6

            page.fill("input[name=label]", "Laptop")
            page.get_by_role("button", name="Make a token").click()
            raw = page.locator("#new-token").inner_text().strip()
            snippets = {client: page.locator("section.snippet", has=page.get_by_role("heading", name=client,
                                                                                      exact=True))
                        .locator("pre").inner_text() for client in CLIENTS}
            page.goto(f"{live_atrium.url}/connect/")  # shown once: the page again has the placeholder
            assert raw not in page.content() and "atr_..." in page.content()
        finally:
            browser.close()

    token = PersonalToken.objects.get(user__username="alice", label="Laptop")
    assert raw.startswith("atr_") and token.prefix in raw and token.expires_at is not None
    assert set(token.scopes.values_list("name", flat=True)) == ALL_SCOPES
    assert raw in snippets["Claude Code"] and raw in snippets["Cursor"] and raw in snippets["VS Code"]
    assert raw in snippets["Claude Desktop"] and raw in snippets["MCP Inspector"]
    script = tmp_path / "atrium_client.py"
    script.write_text(snippets["Python SDK"])
    done = subprocess.run([str(sdk_python), str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ATRIUM_TOKEN": raw})
    assert done.returncode == 0, done.stderr[-3000:]
    version, tools, status = done.stdout.strip().splitlines()
    assert version == "2026-07-28" and "'auth_status'" in tools and "'username': 'alice'" in status
