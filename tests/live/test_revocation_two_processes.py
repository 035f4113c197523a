"""A revoked token is refused within a second by a process that authenticated it a moment before:
each process keeps who a token is for at most accounts.authentication.AUTH_CACHE_SECONDS."""

import time

import httpx
import pytest

from accounts.authentication import AUTH_CACHE_SECONDS
from tests.conftest import make_member
from tests.live.conftest import serve

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

MODERN = "2026-07-28"


def auth_status(url: str, token: str) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "auth_status", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}}
    return httpx.post(f"{url}/mcp", json=body, timeout=10, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "auth_status"})


def test_a_token_revoked_through_one_process_is_refused_by_another_within_a_second(transactional_db, tmp_path):
    alice = make_member("alice")
    with serve(tmp_path, CELERY_BROKER_URL="") as first, serve(tmp_path, CELERY_BROKER_URL="") as second:
        assert auth_status(second.url, alice.token).status_code == 200  # the second process now knows the token
        logout = httpx.post(f"{first.url}/mcp", timeout=10, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "auth_logout", "arguments": {},
                "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                          "io.modelcontextprotocol/clientCapabilities": {}}}},
            headers={"Authorization": f"Bearer {alice.token}", "Accept": "application/json, text/event-stream",
                     "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "auth_logout"})
        assert logout.json()["result"]["structuredContent"]["logged_out"] is True
        assert auth_status(first.url, alice.token).status_code == 401  # at once where it was revoked

        time.sleep(AUTH_CACHE_SECONDS + 0.1)
        refused = auth_status(second.url, alice.token)

    assert refused.status_code == 401
    assert refused.json()["code"] == "authentication_failed"
