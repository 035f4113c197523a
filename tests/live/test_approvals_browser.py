"""The approvals pages in a real headless Chromium against a live server, with the official SDK
client on the MCP side: a danger-zone code is read off its owner's page and given back through
verify_challenge (and no MCP answer ever carries it), another user gets 404, a block survives a
server restart, a CLI request Claude Code's session asked about is approved on the page, after
which that session's retry goes through, and a request made while the page is open appears on it
and leaves it when approved, without a reload."""

import asyncio
import json
import queue
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.db import connections
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from core.caller import Caller
from elements.models import AgentBlock, CliApproval, VerificationChallenge, VerificationFailure
from elements.services import element_create
from elements.types import ElementType
from integrations.crypto import unseal
from tests.conftest import make_member
from tests.live.conftest import Tools, sdk_session, serve
from tests.live.test_csp_browser import WATCH_VIOLATIONS
from tests.live.test_vault_page_browser import sign_in
from tests.test_approvals_page import cli_request

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CHROMIUM = shutil.which("chromium")
CREATE = "mcp_aql_create"
DEPLOY = {"command": "make deploy prod"}


def browser_tools():
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    return pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[dev])")


async def aql(mcp_url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], str]:
    """Each (operation, params) on mcp_aql_create in one SDK session: the answers' texts, and the session's id."""
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, streamable_http_client(mcp_url, http_client=http) as (read, write, session_id), \
            ClientSession(read, write) as session:
        await session.initialize()
        texts = []
        for operation, params in calls:
            result = await session.call_tool(CREATE, {"operation": operation, "params": params})
            assert result.isError is (not json.loads(result.content[0].text)["success"]), result
            texts.append(result.content[0].text)
        return texts, session_id()


def outside_the_browsers_loop(work: Any) -> Any:
    """Run a coroutine to its end in a thread of its own: Playwright's sync API keeps an event loop
    running in the test's thread, where neither asyncio.run nor the ORM may be used."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work).result()


def beside_the_browser(work: Any, *args: Any) -> Any:
    """Call `work` in a thread of its own, for the ORM, which refuses the thread Playwright's loop runs in."""
    def call() -> Any:
        try:
            return work(*args)
        finally:
            connections.close_all()
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def test_a_code_read_on_the_page_unblocks_the_agent_through_verify_challenge(live_atrium, real_password_hashing,
                                                                              tmp_path):
    sync_api = browser_tools()
    expect = sync_api.expect
    alice, charlie = make_member("alice"), make_member("charlie")
    (triggered,), _ = asyncio.run(aql(live_atrium.mcp_url, alice.token,
                                      [("beetlejuice_beetlejuice_beetlejuice", {"agent_name": "night-shift"})]))
    answers = [triggered]
    data = json.loads(triggered)["data"]
    assert data["triggered"] is True and data["agent_name"] == "night-shift"
    url = data["message"].split("approvals page: ")[1].split(". Pass it")[0]
    assert url == f"{live_atrium.url}/approvals/challenges/{data['challenge_id']}"
    sealed = VerificationChallenge.objects.get(pk=data["challenge_id"]).sealed_code

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            other = browser.new_context().new_page()
            sign_in(other, live_atrium.url, "charlie")
            assert other.goto(url).status == 404
            expect(other.get_by_role("heading", level=1)).to_have_text("Verification challenge not found")

            page = browser.new_context().new_page()
            page.add_init_script(WATCH_VIOLATIONS)
            page.goto(url)  # signed out: sent to sign in, then back
            page.fill("input[name=login]", "alice")
            page.fill("input[name=password]", "pw-alice")
            page.get_by_role("button", name="Sign In").click()
            page.wait_for_url(url)
            expect(page.get_by_role("heading", level=1)).to_contain_text("Verification code")
            code = page.locator("#challenge-code").inner_text().strip()
            assert len(code) == 6 and code == unseal(sealed)
            expect(page.locator("#verify-call")).to_contain_text(data["challenge_id"])
            expect(page.get_by_role("button", name="Copy").first).to_be_visible()  # the page's script ran
            assert page.evaluate("window.cspViolations") == []
            page.screenshot(path=str(tmp_path / "challenge-open.png"), full_page=True)
            page.get_by_role("link", name="All your approvals").click()
            listed = page.locator("li.item", has_text="night-shift")
            expect(listed).to_contain_text("code waiting")
            page.screenshot(path=str(tmp_path / "approvals-blocked.png"), full_page=True)
            listed.get_by_role("link", name="Show the code").click()
            page.wait_for_url(url)

            wrong = ("A" if code[0] != "A" else "B") + code[1:]
            replies, _ = outside_the_browsers_loop(aql(live_atrium.mcp_url, alice.token, [
                ("verify_challenge", {"challenge_id": data["challenge_id"], "code": wrong}),
                ("verify_challenge", {"challenge_id": data["challenge_id"], "code": code.lower()}),
            ]))
            answers += replies
            refused, verified = (json.loads(reply) for reply in replies)
            assert refused["success"] is False and refused["error"].startswith("Incorrect verification code")
            assert verified["data"]["verified"] is True and verified["data"]["unblockedAgent"] == "night-shift"
            assert all(code not in answer for answer in answers)

            page.reload()
            expect(page.get_by_role("heading", level=1)).to_contain_text("Verified")
            expect(page.get_by_text("is unblocked and may continue")).to_be_visible()
            assert page.locator("#challenge-code").count() == 0 and code not in page.content()
            page.screenshot(path=str(tmp_path / "challenge-verified.png"), full_page=True)
            assert page.evaluate("window.cspViolations") == []
            assert other.goto(url).status == 404
        finally:
            browser.close()

    block = AgentBlock.objects.get(owner=alice.user, agent_name="night-shift")
    assert block.released_by == "code"
    challenge = VerificationChallenge.objects.get(pk=data["challenge_id"])
    assert (challenge.failures, challenge.outcome) == (1, "verified")  # the wrong code was kept, though refused
    assert VerificationFailure.objects.filter(owner=alice.user).count() == 1
    assert not AgentBlock.objects.filter(owner=charlie.user).exists()


def test_a_blocked_agent_is_still_blocked_after_the_server_restarts(transactional_db, tmp_path):
    alice = make_member("alice")
    with serve(tmp_path, CELERY_BROKER_URL="") as first:
        (triggered,), _ = asyncio.run(aql(first.mcp_url, alice.token, [("beetlejuice_beetlejuice_beetlejuice", {})]))
    challenge_id = json.loads(triggered)["data"]["challenge_id"]
    assert AgentBlock.objects.get(owner=alice.user).released_at is None

    with serve(tmp_path, CELERY_BROKER_URL="") as second:
        code = unseal(VerificationChallenge.objects.get(pk=challenge_id).sealed_code)
        (verified,), _ = asyncio.run(aql(second.mcp_url, alice.token, [
            ("verify_challenge", {"challenge_id": challenge_id, "code": code})]))

    assert json.loads(verified)["data"]["unblockedAgent"] == "beetlejuice-test-agent"
    assert AgentBlock.objects.get(owner=alice.user).released_by == "code"


async def claude_asks_then_retries(mcp_url: str, token: str, asked: "queue.Queue[dict]",
                                   approved: threading.Event) -> dict[str, Any]:
    """One SDK session, as Claude Code holds it: a deploy is asked about (and waits for a person),
    and once the person has decided on the page, the same session asks again."""
    async with sdk_session(mcp_url, token) as session:
        tools = Tools(session)
        await tools.ok("mcp_aql_read", operation="activate_element", element_type="persona",
                       params={"element_name": "guard"})
        first = await tools.ok("permission_prompt", tool_name="Bash", input=DEPLOY, tool_use_id="toolu_01")
        asked.put(first)
        await asyncio.to_thread(approved.wait, 60)
        retried = await tools.ok("permission_prompt", tool_name="Bash", input=DEPLOY, tool_use_id="toolu_02")
        later = await tools.ok("permission_prompt", tool_name="Bash", input={"command": "make deploy staging"})
        pending = await tools.ok("mcp_aql_read", operation="get_pending_cli_approvals")
        return {"retried": retried, "later": later, "pending": pending["data"]}


def test_an_approval_made_on_the_page_lets_the_sessions_retry_through(live_atrium, real_password_hashing, tmp_path):
    sync_api = browser_tools()
    expect = sync_api.expect
    alice = make_member("alice")
    make_member("charlie")
    element_create(caller=Caller.trusted(alice.user, via="command"), element_type=ElementType.PERSONA, name="guard",
                   params={"description": "Guards deploys.", "instructions": "You ARE careful.", "gatekeeper": {
                       "externalRestrictions": {"confirmPatterns": ["Bash:make deploy*"]}}})
    asked: queue.Queue[dict] = queue.Queue()
    approved = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        claude = pool.submit(asyncio.run, claude_asks_then_retries(live_atrium.mcp_url, alice.token, asked, approved))
        first = asked.get(timeout=60)
        request_id = first["approvalRequest"]["requestId"]
        try:
            with sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                try:
                    other = browser.new_context().new_page()
                    sign_in(other, live_atrium.url, "charlie")
                    other.goto(f"{live_atrium.url}/approvals/")
                    expect(other.get_by_role("heading", name="Nothing is waiting for you")).to_be_visible()
                    assert "make deploy" not in other.content()

                    page = browser.new_context().new_page()
                    sign_in(page, live_atrium.url, "alice")
                    page.goto(first["approvalRequest"]["url"])
                    item = page.locator(f"li[id='{request_id}']")
                    expect(item).to_contain_text("make deploy prod")
                    page.screenshot(path=str(tmp_path / "approvals-pending.png"), full_page=True)
                    item.get_by_role("button", name="Approve for this session").click()
                    page.wait_for_url(f"{live_atrium.url}/approvals/")
                    expect(page.get_by_text("Approved Bash for the rest of this session.")).to_be_visible()
                    expect(page.get_by_role("heading", name="Nothing is waiting for you")).to_be_visible()
                    page.screenshot(path=str(tmp_path / "approvals-decided.png"), full_page=True)
                finally:
                    browser.close()
        finally:
            approved.set()
        seen = claude.result(timeout=60)

    assert first["behavior"] == "deny" and "message" in first and "updatedInput" not in first
    assert seen["retried"]["behavior"] == "allow" and seen["retried"]["updatedInput"] == DEPLOY
    assert seen["retried"]["classification"]["stage"] == "cli_approval"
    # tool_session: the same tool with another input goes through for the rest of the session.
    assert seen["later"]["behavior"] == "allow"
    assert seen["pending"]["count"] == 0
    row = CliApproval.objects.get(pk=request_id)
    assert (row.status, row.scope, row.decided_via) == ("approved", "tool_session", "web")


def test_a_request_made_while_the_page_is_open_appears_and_leaves_when_approved(live_atrium, real_password_hashing,
                                                                                 tmp_path):
    sync_api = browser_tools()
    expect = sync_api.expect
    alice, charlie = make_member("alice"), make_member("charlie")
    index = f"{live_atrium.url}/approvals/"

    def polled(response: Any) -> bool:
        return response.url == index and response.request.headers.get("hx-request") == "true"

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            other = browser.new_context().new_page()
            sign_in(other, live_atrium.url, charlie.user.username)
            other.goto(index)
            page = browser.new_context().new_page()
            page.add_init_script(WATCH_VIOLATIONS)
            sign_in(page, live_atrium.url, alice.user.username)
            page.goto(index)
            expect(page.get_by_role("heading", name="Nothing is waiting for you")).to_be_visible()
            page.evaluate("window.loadedOnce = true")  # gone if the page reloads

            request = beside_the_browser(cli_request, alice)  # as permission_prompt makes it
            item = page.locator(f"li[id='{request.pk}']")
            expect(item).to_contain_text("npm publish", timeout=10_000)
            expect(item).to_contain_text("high risk")
            expect(page.get_by_role("heading", name="Nothing is waiting for you")).to_have_count(0)
            page.screenshot(path=str(tmp_path / "approvals-appeared.png"), full_page=True)
            with other.expect_response(polled, timeout=10_000):
                pass  # charlie's page polled since, and still shows nothing of alice's
            expect(other.get_by_role("heading", name="Nothing is waiting for you")).to_be_visible()
            assert "npm publish" not in other.content()

            item.get_by_role("button", name="Approve once").click()
            expect(page.get_by_text("Approved Bash once.")).to_be_visible()
            expect(item).to_have_count(0)
            expect(page.get_by_role("heading", name="Nothing is waiting for you")).to_be_visible()
            with page.expect_response(polled, timeout=10_000):
                pass  # the next poll does not bring it back, nor clear the notice
            expect(item).to_have_count(0)
            expect(page.get_by_text("Approved Bash once.")).to_be_visible()
            assert page.evaluate("window.loadedOnce") is True and page.url == index
            assert page.evaluate("window.cspViolations") == []
            page.screenshot(path=str(tmp_path / "approvals-approved.png"), full_page=True)
        finally:
            browser.close()

    row = CliApproval.objects.get(pk=request.pk)
    assert (row.status, row.scope, row.decided_via) == ("approved", "single", "web")
    assert not CliApproval.objects.filter(owner=charlie.user).exists()
