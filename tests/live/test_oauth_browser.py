"""A browser-based MCP client's OAuth flow (as the MCP Inspector runs it) in a real headless Chromium
against a live server: from a page on another origin it reads the metadata, registers and exchanges
the code with fetch, which the browser allows only with the right CORS answers; the consent page in
between groups the scopes and names the client's host; the token then works on /mcp."""

import json

import httpx
import pytest

from tests.actions import FakeServer, Reply
from tests.conftest import make_member
from tests.live.test_approvals_browser import CHROMIUM, browser_tools
from tests.test_oauth import pkce_pair

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PAGE = b"<!DOCTYPE html><html><head><title>Client</title></head><body><h1>Browser client</h1></body></html>"


def test_a_browser_client_on_another_origin_completes_the_oauth_flow(live_atrium, real_password_hashing):
    sync_api = browser_tools()
    expect = sync_api.expect
    make_member("alice")
    client_site = FakeServer()
    for path in ("/", "/callback"):
        client_site.route("GET", path, lambda _: Reply(body=PAGE, headers={"Content-Type": "text/html"}))
    callback = f"{client_site.url}/callback"
    verifier, challenge = pkce_pair()
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.goto(client_site.url + "/")
                found = page.evaluate("""async (atrium) => {
                    const resource = await (await fetch(atrium + "/.well-known/oauth-protected-resource/mcp")).json();
                    const server = await (await fetch(atrium + "/.well-known/oauth-authorization-server")).json();
                    return {resource, server};
                }""", live_atrium.url)
                server = found["server"]
                assert found["resource"]["authorization_servers"] == [live_atrium.url]
                registered = page.evaluate("""async ([endpoint, callback]) => {
                    const answer = await fetch(endpoint, {method: "POST", headers: {"Content-Type": "application/json"},
                        body: JSON.stringify({client_name: "Browser Inspector", redirect_uris: [callback],
                                              token_endpoint_auth_method: "none"})});
                    return {status: answer.status, body: await answer.json()};
                }""", [server["registration_endpoint"], callback])
                assert registered["status"] == 201, registered
                client_id = registered["body"]["client_id"]

                query = httpx.QueryParams({
                    "response_type": "code", "client_id": client_id, "redirect_uri": callback,
                    "code_challenge": challenge, "code_challenge_method": "S256", "state": "s-1",
                    "scope": "elements:read runs:read", "resource": f"{live_atrium.url}/mcp"})
                page.goto(f"{server['authorization_endpoint']}?{query}")
                page.fill("input[name=login]", "alice")
                page.fill("input[name=password]", "pw-alice")
                page.get_by_role("button", name="Sign In").click()
                expect(page.get_by_role("heading", level=1)).to_have_text("Connect Browser Inspector to Atrium?")
                expect(page.locator("strong.mono")).to_have_text(f"127.0.0.1:{client_site.port}")
                expect(page.locator("h3.product")).to_have_text(["Elements (DollhouseMCP)",
                                                                 "Workflows, runs and docs (Roscoe)"])
                page.get_by_role("button", name="Allow").click()
                page.wait_for_url(f"{callback}?*")
                code = httpx.URL(page.url).params["code"]

                tokens = page.evaluate("""async ([endpoint, form]) => {
                    const answer = await fetch(endpoint, {method: "POST", body: new URLSearchParams(form),
                        headers: {"Content-Type": "application/x-www-form-urlencoded"}});
                    return {status: answer.status, body: await answer.json()};
                }""", [server["token_endpoint"], {"grant_type": "authorization_code", "code": code,
                                                  "redirect_uri": callback, "client_id": client_id,
                                                  "code_verifier": verifier, "resource": f"{live_atrium.url}/mcp"}])
            finally:
                browser.close()
    finally:
        client_site.close()

    assert tokens["status"] == 200, tokens
    assert set(tokens["body"]["scope"].split()) == {"elements:read", "runs:read"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "browser", "version": "1"}}}
    answer = httpx.post(f"{live_atrium.url}/mcp", json=initialize, headers={
        "Authorization": f"Bearer {tokens['body']['access_token']}", "Accept": "application/json, text/event-stream"})
    assert answer.status_code == 200 and json.loads(answer.text)["result"]["serverInfo"]["name"]
