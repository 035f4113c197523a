"""The console's deep links in a real headless Chromium against a live server: the links the SDK client
gets from open_portfolio_browser and open_logs open, after sign-in, on pages showing exactly what they
filter for; another user following the same element link sees none of it; no page breaks the CSP."""

import asyncio

import pytest

from core.caller import Caller
from elements.services import element_create
from elements.types import ElementType
from tests.conftest import make_member
from tests.live.conftest import sdk_session
from tests.live.test_approvals_browser import CHROMIUM, browser_tools
from tests.live.test_csp_browser import WATCH_VIOLATIONS
from tests.live.test_live_elements import READ, Session
from tests.live.test_vault_page_browser import sign_in

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


async def links(mcp_url: str, token: str) -> dict[str, str]:
    async with sdk_session(mcp_url, token) as client:
        s = Session(client)
        found = await s.ok(READ, "open_portfolio_browser", q="review", type="skill")
        element = await s.ok(READ, "open_portfolio_browser", type="skill", name="code-review")
        logs = await s.ok(READ, "open_logs", q="release", since="1h")
        metrics = await s.ok(READ, "open_metrics", since="1h")
        return {"found": found["url"], "element": element["url"], "logs": logs["url"], "metrics": metrics["url"]}


def test_deep_links_open_their_filtered_pages_for_their_owner_only(live_atrium, real_password_hashing, tmp_path):
    sync_api = browser_tools()
    expect = sync_api.expect
    alice, _ = make_member("alice"), make_member("charlie")
    for name, description in (("code-review", "Reviews pull requests."), ("release-notes", "Writes release notes.")):
        element_create(caller=Caller.trusted(alice.user, via="mcp"), element_type=ElementType.SKILL, name=name,
                       params={"description": description, "content": "How to."})
    urls = asyncio.run(links(live_atrium.mcp_url, alice.token))

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_context().new_page()
            page.add_init_script(WATCH_VIOLATIONS)
            page.goto(urls["found"])  # signed out: sent to sign in, then back
            page.fill("input[name=login]", "alice")
            page.fill("input[name=password]", "pw-alice")
            page.get_by_role("button", name="Sign In").click()
            page.wait_for_url(urls["found"])
            expect(page.locator("#elements-heading")).to_have_text("1 element matching “review”")
            expect(page.locator("#q")).to_have_value("review")
            expect(page.locator("#type")).to_have_value("skill")
            assert page.get_by_role("link", name="release-notes").count() == 0
            page.screenshot(path=str(tmp_path / "portfolio.png"), full_page=True)
            page.get_by_role("link", name="code-review").click()
            page.wait_for_url(urls["element"])
            expect(page.get_by_role("heading", level=1)).to_contain_text("code-review")
            expect(page.get_by_text("Reviews pull requests.")).to_be_visible()

            page.goto(urls["logs"])
            rows = page.locator("table.rows tbody tr")
            expect(rows).to_have_count(1)
            expect(rows.first).to_contain_text("release-notes")
            page.goto(urls["metrics"])
            expect(page.locator("#writes-heading")).to_have_text("3 writes")
            assert page.evaluate("window.cspViolations") == []

            other = browser.new_context().new_page()
            sign_in(other, live_atrium.url, "charlie")
            assert other.goto(urls["element"]).status == 404
            assert "Reviews pull requests." not in other.content()
            assert other.goto(urls["found"]).status == 200
            expect(other.locator("#empty-heading")).to_have_text("Nothing matches")
        finally:
            browser.close()

