"""The run page in a real headless Chromium against a live server: sign in through the allauth form,
open the URL start_workflow answered with, watch the page follow the run by itself while the run
moves on in the background, then answer the human step with its button."""

import asyncio
import json
import shutil
import threading
from typing import Any

import httpx
import pytest
from django.db import connection
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from core.caller import Caller
from runs import engine
from runs.models import Run
from tests.conftest import make_member
from workflows.scoping import Scope

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CHROMIUM = shutil.which("chromium")

REVIEW = {
    "name": "Review loop", "start": "check",
    "nodes": {
        "check": {"type": "condition", "if": "context.go == true", "transitions": {"true": "draft", "false": "done"}},
        "draft": {"type": "ai_agent", "label": "Draft the text", "prompt": "Write about {{ context.topic }}",
                  "transitions": {"done": "review"}},
        "review": {"type": "human", "prompt": "Publish {{ draft.output }}?",
                   "transitions": {"publish": "done", "redo": "draft"}},
        "done": {"type": "end", "output": "{{ draft.output || 'nothing' }}"},
    },
}


async def start_over_mcp(mcp_url: str, token: str) -> dict[str, Any]:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, streamable_http_client(mcp_url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        created = await session.call_tool("create_workflow", {"id": "review", "config": REVIEW, "global": True})
        assert not created.isError, created
        started = await session.call_tool("start_workflow", {"workflow_id": "review", "global": True,
                                                             "context": {"go": True, "topic": "otters"}})
        assert not started.isError, started
        return json.loads(started.content[0].text)


def in_background(work) -> None:
    """Run ORM work on a thread of its own: Playwright's sync API keeps an event loop on this one,
    where Django refuses database calls. The transactional test database is shared, so the live
    server sees the commit."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as exc:  # handed back to the test below
            failure.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the background answer did not finish"
    if failure:
        raise failure[0]


def test_the_run_page_follows_the_run_and_answers_a_human_step(live_atrium, real_password_hashing, tmp_path):
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[dev])")
    alice = make_member("alice")
    started = asyncio.run(start_over_mcp(live_atrium.mcp_url, alice.token))
    run_id = started["runId"]
    assert started["url"] == f"{live_atrium.url}/open/runs/{run_id}?project=global"
    assert started["pendingStep"]["nodeId"] == "draft"

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        expect = sync_api.expect
        try:
            page.goto(f"{live_atrium.url}/accounts/login/")
            page.fill("input[name=login]", "alice")
            page.fill("input[name=password]", "pw-alice")
            page.get_by_role("button", name="Sign In").click()
            page.wait_for_url(f"{live_atrium.url}/")

            page.goto(started["url"])
            expect(page.get_by_role("heading", level=1)).to_contain_text("Review loop")
            nodes = page.locator("svg a.node")
            assert sorted(nodes.evaluate_all("els => els.map(e => e.dataset.node)")) == [
                "check", "done", "draft", "review"]
            current = page.locator('svg a.node[aria-current="step"]')
            expect(current).to_have_count(1)
            expect(current).to_have_attribute("data-node", "draft")
            assert float(current.locator("rect").evaluate("r => getComputedStyle(r).strokeWidth").rstrip("px")) >= 4
            expect(page.get_by_text("Waiting for your MCP client")).to_be_visible()
            page.evaluate("window.loadedOnce = true")  # gone if the page reloaded instead of updating itself

            in_background(lambda: engine.run_answer(
                caller=Caller.trusted(alice.user, via="command"), scope=Scope(owner=alice.user, project=None),
                run_id=run_id, tool="advance_run",
                payload={"response": "Otters hold hands.", "usage": None, "thinking": "Keep it short."},
                step_id=started["pendingStep"]["stepId"]))

            expect(current).to_have_attribute("data-node", "review", timeout=8000)
            expect(page.locator('svg a.node[data-node="draft"]')).to_have_class("node status-completed")
            expect(page.get_by_text("Publish Otters hold hands.?").first).to_be_visible()
            assert page.evaluate("window.loadedOnce") is True
            page.screenshot(path=str(tmp_path / "run-page-paused.png"), full_page=True)

            page.get_by_role("button", name="publish").click()
            expect(page.locator("#run-heading .status")).to_have_text("completed", timeout=8000)
            expect(page.get_by_text("the run goes on")).to_be_visible()
            expect(page.locator('svg a.node[aria-current="step"]')).to_have_count(0)
            expect(page.locator("#run-live")).to_have_attribute("data-terminal", "true")
            page.screenshot(path=str(tmp_path / "run-page-completed.png"), full_page=True)
            polls: list[str] = []
            page.on("request", lambda request: polls.append(request.url) if "state.json" in request.url else None)
            page.wait_for_timeout(2500)
            assert polls == []  # an ended run is not polled
        finally:
            browser.close()

    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.COMPLETED and run.output == "Otters hold hands."
    assert list(run.nodes.order_by("seq").values_list("node_id", "status")) == [
        ("check", "completed"), ("draft", "completed"), ("review", "completed"), ("done", "completed")]
