"""Admin in a real headless Chromium against a live server, as a curator: the workflow editor is Ace,
the saved workflow's graph is drawn, a broken edit is reported under the editor as it is typed (and
nothing is saved), a click on a graph node moves the cursor to its definition, an element's Markdown
previews under its editor, the editors follow admin's dark theme, and no page breaks the
Content-Security-Policy. Screenshots go to var/screenshots/admin-*.png."""

import json

import pytest

from accounts.models import User
from core.caller import Caller
from elements.models import Element
from elements.services import element_create
from elements.types import ElementType
from tests.conftest import make_member
from tests.live.conftest import BASE_DIR
from tests.live.test_approvals_browser import CHROMIUM, browser_tools
from tests.live.test_csp_browser import WATCH_VIOLATIONS
from tests.test_workflows_admin import REVIEW, stored
from workflows.models import Workflow

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SCREENSHOTS = BASE_DIR / "var" / "screenshots"


def test_a_curator_edits_a_workflow_with_checks_as_they_type(live_atrium, real_password_hashing):
    sync_api = browser_tools()
    expect = sync_api.expect
    User.objects.create_superuser("root", "root@example.com", "pw-root")
    alice = make_member("alice")
    workflow = stored(alice)
    skill = element_create(caller=Caller.trusted(alice.user, via="mcp"), element_type=ElementType.SKILL,
                           name="code-review", params={"description": "Reviews pull requests.",
                                                       "content": "## Steps\n\nRead the diff."})
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.add_init_script(WATCH_VIOLATIONS)
        seen: dict[str, list[str]] = {}

        def visit(path: str) -> None:
            response = page.goto(f"{live_atrium.url}{path}")
            assert response is not None and response.status == 200, path
            page.wait_for_load_state("load")

        try:
            visit("/admin/login/")
            page.fill("input[name=username]", "root")
            page.fill("input[name=password]", "pw-root")
            page.get_by_role("button", name="Log in").click()
            page.wait_for_url(f"{live_atrium.url}/admin/")
            expect(page.locator("#site-name")).to_have_text("Atrium administration")
            expect(page.get_by_role("heading", name="Curate Atrium")).to_be_visible()
            page.screenshot(path=str(SCREENSHOTS / "admin-index.png"), full_page=True)
            seen["/admin/"] = page.evaluate("window.cspViolations")

            change = f"/admin/workflows/workflow/{workflow.pk}/change/"
            visit(change)
            editor = page.locator(".django-ace-widget .ace_editor")
            expect(editor).to_be_visible()
            expect(editor.locator(".ace_content")).to_contain_text("name: review")
            graph = page.locator(".run-graph svg")
            expect(graph).to_be_visible()
            expect(graph.locator("a.node")).to_have_count(2)
            page.screenshot(path=str(SCREENSHOTS / "admin-workflow.png"), full_page=True)

            # A node of the graph puts the cursor on its definition: `done` is the YAML's last line.
            graph.locator('a.node[data-node="done"]').click()
            assert page.evaluate("document.querySelector('.django-ace-widget').editor"
                                 ".getCursorPosition().row") == REVIEW.splitlines().index("  done: {type: end}")

            # A key indented under a scalar: YAML that does not parse, on the line typed.
            page.locator(".django-ace-widget .ace_content").click()
            page.keyboard.press("Control+Home")
            page.keyboard.press("ArrowDown")
            page.keyboard.press("End")
            page.keyboard.press("Enter")
            page.keyboard.type("  oops: indented")
            checks = page.locator("#yaml-checks")
            expect(checks).to_contain_text("does not parse", timeout=10000)
            expect(checks).to_contain_text("cannot be saved until it is fixed")
            expect(checks.get_by_role("button", name="line 3")).to_be_visible()
            # The gutter marks the line once the cursor leaves it (Ace spares the line being typed on).
            page.keyboard.press("ArrowUp")
            expect(page.locator(".ace_gutter-cell.ace_error")).to_have_count(1)
            expect(page.locator(".ace_gutter-cell.ace_error")).to_contain_text("3")
            page.screenshot(path=str(SCREENSHOTS / "admin-workflow-checks.png"), full_page=True)

            # Put right again, the same pane says so.
            page.keyboard.press("ArrowDown")
            page.keyboard.press("Home")
            page.keyboard.press("Shift+End")
            page.keyboard.press("Backspace")
            page.keyboard.press("Backspace")
            expect(checks).to_contain_text("No problems", timeout=10000)
            seen[change] = page.evaluate("window.cspViolations")

            element_page = f"/admin/elements/element/{skill.pk}/change/"
            visit(element_page)
            # instructions, content, metadata and gatekeeper
            expect(page.locator(".django-ace-widget .ace_editor")).to_have_count(4)
            preview = page.locator("#id_content-preview")
            page.locator("button[aria-controls=id_content-preview]").click()
            expect(preview.get_by_role("heading", name="Steps")).to_be_visible()
            page.screenshot(path=str(SCREENSHOTS / "admin-element-preview.png"), full_page=True)
            seen[element_page] = page.evaluate("window.cspViolations")

            # In admin's dark theme the editors are dark too.
            page.emulate_media(color_scheme="dark")
            visit(change)
            expect(page.locator(".django-ace-widget .ace_editor.ace_dark")).to_be_visible()
            page.screenshot(path=str(SCREENSHOTS / "admin-workflow-dark.png"), full_page=True)
            page.locator("button.theme-toggle").first.click()  # auto -> light
            expect(page.locator(".django-ace-widget .ace_editor.ace_dark")).to_have_count(0)
            seen[f"{change} (dark)"] = page.evaluate("window.cspViolations")
        finally:
            browser.close()

    assert seen == {path: [] for path in seen}, json.dumps(seen, indent=2)
    saved = Workflow.objects.get(pk=workflow.pk)
    assert saved.yaml_text == REVIEW  # checked as typed, never saved
    assert Element.objects.get(pk=skill.pk).content == "## Steps\n\nRead the diff."
