"""The limits on a real server (gunicorn, several threads, the configured cache): the client
address it counts, failures per address, tool calls per token."""

import httpx
import pytest

from tests.conftest import ACCEPT, make_member
from tests.live.conftest import serve

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "pytest", "version": "1"}}}


def post(url: str, token: str, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/mcp", json=body, timeout=30,
                      headers={"Accept": ACCEPT, "Authorization": f"Bearer {token}", **headers})


def test_a_forged_x_forwarded_for_does_not_escape_the_limit(transactional_db, tmp_path):
    alice = make_member("alice")
    with serve(tmp_path, ATRIUM_AUTH_FAILURE_LIMIT="3") as server:
        codes = [post(server.url, "atr_guess", INITIALIZE, **{"X-Forwarded-For": f"203.0.113.{n}"}).status_code
                 for n in range(4)]
        blocked = post(server.url, alice.token, INITIALIZE)

    assert codes == [401, 401, 401, 429]
    assert blocked.status_code == 429
    assert int(blocked.headers["Retry-After"]) > 0


def test_behind_a_trusted_proxy_one_client_does_not_block_another(transactional_db, tmp_path):
    alice = make_member("alice")
    with serve(tmp_path, ATRIUM_AUTH_FAILURE_LIMIT="3", ATRIUM_TRUSTED_PROXIES="127.0.0.1") as server:
        for _ in range(3):
            post(server.url, "atr_guess", INITIALIZE, **{"X-Forwarded-For": "198.51.100.1"})
        guesser = post(server.url, alice.token, INITIALIZE, **{"X-Forwarded-For": "198.51.100.1"})
        colleague = post(server.url, alice.token, INITIALIZE, **{"X-Forwarded-For": "198.51.100.2"})

    assert guesser.status_code == 429
    assert colleague.status_code == 200, colleague.text


def test_tool_calls_past_the_per_token_limit_get_429(transactional_db, tmp_path):
    alice = make_member("alice")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "auth_status", "arguments": {}}}
    with serve(tmp_path, ATRIUM_TOOL_CALLS_PER_MINUTE="2") as server:
        session = post(server.url, alice.token, INITIALIZE).headers["Mcp-Session-Id"]
        answers = [post(server.url, alice.token, call, **{"Mcp-Session-Id": session}) for _ in range(3)]

    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].json()["error"]["code"] == -32000
    assert int(answers[2].headers["Retry-After"]) == answers[2].json()["error"]["data"]["retryAfter"]
