"""The pages under the Content-Security-Policy in a real headless Chromium: sign-in, admin (its
scripts, the workflow's code editor), the docs, the consent page and Swagger UI all work, and
the browser reports no violation. The run page's polling is driven in test_run_page_browser.py."""

import json
import shutil
from urllib.parse import urlencode

import httpx
import pytest

from accounts.models import User
from tests.test_oauth import REGISTERED_CALLBACK, authorize_query, pkce_pair

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CHROMIUM = shutil.which("chromium")

# Runs before any page script, outside the policy, and records what the browser refused.
WATCH_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", function (event) {
  window.cspViolations.push(event.violatedDirective + " " + (event.blockedURI || "inline"));
});
"""


def test_the_pages_work_under_the_policy(kb, live_atrium, real_password_hashing):
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[dev])")
    User.objects.create_superuser("root", "root@example.com", "pw-root")
    registered = httpx.post(f"{live_atrium.url}/oauth/register/", json={
        "redirect_uris": [REGISTERED_CALLBACK], "token_endpoint_auth_method": "none", "client_name": "Inspector"})
    assert registered.status_code == 201, registered.text
    query = authorize_query(registered.json()["client_id"], pkce_pair()[1])
    query["resource"] = live_atrium.mcp_url
    expect = sync_api.expect

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.add_init_script(WATCH_VIOLATIONS)
        seen: dict[str, list[str]] = {}

        def visit(path: str) -> None:
            response = page.goto(f"{live_atrium.url}{path}")
            assert response is not None and response.status == 200, path
            assert "script-src 'self'" in response.headers["content-security-policy"]

        def violations(path: str) -> None:
            seen[path] = page.evaluate("window.cspViolations")

        try:
            visit("/accounts/login/")
            page.fill("input[name=login]", "root")
            page.fill("input[name=password]", "pw-root")
            page.get_by_role("button", name="Sign In").click()
            page.wait_for_url(f"{live_atrium.url}/")
            violations("/")

            visit("/docs/operations")
            expect(page.get_by_role("heading", level=1)).to_contain_text("Operating Atrium")
            violations("/docs/operations")

            visit("/admin/")
            # Admin's own script: the theme toggle switches the page's colour scheme.
            before = page.evaluate("document.documentElement.dataset.theme || 'auto'")
            page.locator("button.theme-toggle").first.click()
            assert page.evaluate("document.documentElement.dataset.theme") != before
            violations("/admin/")

            visit("/admin/workflows/workflow/add/")
            page.wait_for_load_state("load")  # django_ace sets its editors up on the window's load
            page.locator(".django-ace-widget .ace_content").click()
            page.keyboard.press("Control+A")
            page.keyboard.press("Delete")
            page.keyboard.press("Tab")
            # The editor's scripts ran: Tab indents by two spaces, into the field the form posts.
            assert page.locator("textarea#id_yaml_text").input_value() == "  "
            violations("/admin/workflows/workflow/add/")

            visit("/oauth/authorize/?" + urlencode(query))
            expect(page.get_by_role("button", name="Allow")).to_be_visible()
            violations("/oauth/authorize/")

            visit("/api/docs/")
            expect(page.locator(".swagger-ui .info .title")).to_contain_text("Atrium API", timeout=15000)
            expect(page.locator(".opblock").first).to_be_visible()
            violations("/api/docs/")
        finally:
            browser.close()

    assert seen == {path: [] for path in seen}, json.dumps(seen, indent=2)
