"""The console in a real headless Chromium against a live server, as a user who is not staff: make a
token and revoke it, edit an element and restore a revision, cancel a run and re-run another, turn a
playbook's triggers on and execute it, make a playbook from a template, while a second user sees none
of it; no page breaks the CSP. Screenshots of each page at 1280 and 390 px go
to var/screenshots/."""

import re

import httpx
import pytest

from core.caller import Caller
from elements.models import Element
from elements.services import element_create, element_edit
from elements.types import ElementType
from integrations.services import catalogue_sync
from runs.models import Run
from tests.conftest import make_member
from tests.live.conftest import BASE_DIR
from tests.live.test_approvals_browser import CHROMIUM, browser_tools
from tests.live.test_csp_browser import WATCH_VIOLATIONS
from tests.live.test_vault_page_browser import sign_in
from tests.playbook_helpers import playbook_make
from tests.test_run_page import REVIEW, save, start
from workflows.models import Playbook
from workflows.templates import templates_sync
from workflows.triggers import trigger_create

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SCREENSHOTS = BASE_DIR / "var" / "screenshots"
PAGES = ("/", "/portfolio/", "/runs/", "/playbooks/", "/playbooks/templates/", "/integrations/", "/approvals/",
         "/logs/", "/metrics/", "/tokens/", "/connect/")
WIDTHS = (1280, 390)


def shoot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
        # Nothing on the page is wider than the window: no sideways scrolling on a phone.
        assert page.evaluate("document.documentElement.scrollWidth") <= width, (name, width)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_a_member_uses_the_console_and_another_sees_none_of_it(live_atrium, real_password_hashing):
    sync_api = browser_tools()
    expect = sync_api.expect
    alice, _ = make_member("alice"), make_member("charlie")
    caller = Caller.trusted(alice.user, via="mcp")
    skill = element_create(caller=caller, element_type=ElementType.SKILL, name="code-review",
                           params={"description": "Reviews pull requests.", "content": "## Steps\n\nRead the diff."})
    element_edit(caller=caller, element=skill, changes={"description": "Reviews pull requests well."})
    save(alice, "review", REVIEW)
    waiting, finished = start(alice), start(alice, context={"go": False})
    catalogue_sync(documents=[])
    templates_sync()
    digest = playbook_make(alice.user)
    trigger_create(caller=caller, playbook=digest, spec={"type": "schedule", "preset": "every weekday at 9"})

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.add_init_script(WATCH_VIOLATIONS)
            sign_in(page, live_atrium.url, "alice")
            for path in (*PAGES, f"/playbooks/{digest.pk}/"):
                response = page.goto(live_atrium.url + path)
                assert response is not None and response.status == 200, path
                expect(page.get_by_role("heading", level=1)).to_be_visible()
                assert page.evaluate("window.cspViolations") == [], path
                shoot(page, path.strip("/").replace(digest.pk, "one").replace("/", "-") or "home")

            # A playbook's triggers turned on, then an execution started with an input.
            page.goto(f"{live_atrium.url}/playbooks/")
            page.get_by_role("link", name="Morning digest").click()
            page.get_by_role("button", name="Activate triggers").click()
            expect(page.get_by_text("Turned on the triggers of Morning digest.")).to_be_visible()
            expect(page.get_by_text(re.compile("At 09:00 on Monday through Friday"))).to_be_visible()
            page.fill("#execute-input", '{"repo": 7}')
            page.get_by_role("button", name="Execute").click()
            expect(page.get_by_role("alert")).to_contain_text("does not match the playbook's input card")
            page.fill("#execute-input", '{"repo": "atrium"}')
            page.get_by_role("button", name="Execute").click()
            expect(page.get_by_text(re.compile("^Started execution .* of Morning digest."))).to_be_visible()
            shoot(page, "playbook-executed")

            # A playbook made from a template in the gallery.
            page.goto(f"{live_atrium.url}/playbooks/templates/")
            page.fill("#q", "memory")
            page.select_option("#category", "knowledge")
            page.get_by_role("button", name="Search").click()
            page.get_by_role("button", name="Instantiate Log webhook deliveries to a memory").click()
            expect(page.get_by_text(re.compile("Its triggers are off"))).to_be_visible()
            expect(page.get_by_role("heading", level=1)).to_contain_text("Log webhook deliveries to a memory")
            assert page.evaluate("window.cspViolations") == []
            shoot(page, "playbook-instantiated")

            # A token, made and then revoked.
            page.goto(f"{live_atrium.url}/tokens/")
            page.fill("#label", "Zed on the desk")
            page.get_by_label(re.compile("Read your personas")).check()
            page.get_by_role("button", name="Make token").click()
            raw = page.locator("#new-token").inner_text().strip()
            assert raw.startswith("atr_")
            assert httpx.get(f"{live_atrium.url}/api/me", headers={"Authorization": f"Bearer {raw}"}).status_code == 200
            shoot(page, "token-made")
            page.get_by_role("button", name="Revoke Zed on the desk").click()
            expect(page.get_by_text("Revoked Zed on the desk")).to_be_visible()
            assert httpx.get(f"{live_atrium.url}/api/me", headers={"Authorization": f"Bearer {raw}"}).status_code == 401

            # The element: edited, then restored to its first revision.
            page.goto(f"{live_atrium.url}/portfolio/?type=skill&name=code-review")
            expect(page.locator(".markdown h2")).to_have_text("Steps")
            page.fill("#edit-description", "Reviews with care.")
            page.get_by_role("button", name="Save").click()
            expect(page.get_by_text("Saved code-review.")).to_be_visible()
            page.select_option("#diff-a", index=page.locator("#diff-a option").count() - 1)
            page.get_by_role("button", name="Show the difference").click()
            added = page.locator(".diff-added", has_text="description:")
            expect(added).to_have_text("+description: Reviews with care.")
            shoot(page, "element")
            page.get_by_role("button", name=re.compile("^Restore the revision")).last.click()
            expect(page.get_by_text(re.compile("^Restored code-review"))).to_be_visible()

            # A run cancelled, another re-run.
            page.goto(f"{live_atrium.url}/runs/")
            page.get_by_role("link", name=waiting.pk).click()
            page.get_by_role("button", name="Cancel run").click()
            expect(page.get_by_text("Cancelled the run.")).to_be_visible()
            page.goto(f"{live_atrium.url}/runs/")
            page.get_by_role("link", name=finished.pk).click()
            page.get_by_role("button", name="Re-run").click()
            expect(page.get_by_text(re.compile(f"a re-run of {finished.pk}"))).to_be_visible()
            shoot(page, "run-rerun")
            assert page.evaluate("window.cspViolations") == []

            other = browser.new_context().new_page()
            sign_in(other, live_atrium.url, "charlie")
            assert other.goto(f"{live_atrium.url}/portfolio/?type=skill&name=code-review").status == 404
            for path in ("/portfolio/", "/runs/", "/playbooks/", "/tokens/", "/logs/"):
                other.goto(live_atrium.url + path)
                text = other.content()
                assert "code-review" not in text and waiting.pk not in text and "Zed on the desk" not in text, path
                assert "Morning digest" not in text and digest.pk not in text, path
            assert other.goto(f"{live_atrium.url}/open/runs/{waiting.pk}").status == 404
            assert other.goto(f"{live_atrium.url}/playbooks/{digest.pk}/").status == 404
        finally:
            browser.close()

    assert Element.objects.get(pk=skill.pk).description == "Reviews pull requests."
    assert Run.objects.get(pk=waiting.pk).status == Run.Status.CANCELLED
    assert Run.objects.filter(owner=alice.user, parent__isnull=True).count() == 4
    assert Run.objects.get(playbook=digest).context == {"repo": "atrium"}
    assert list(digest.triggers.values_list("enabled", flat=True)) == [True]
    made = Playbook.objects.get(owner=alice.user, template_id="webhook-to-memory")
    assert not made.triggers.filter(enabled=True).exists()
