"""A server whose PostgreSQL is down answers /mcp with a JSON-RPC error and the REST API with a JSON
error, both HTTP 503, instead of an HTML page or a request that hangs."""

import json
import socket

import httpx
import pytest

from tests.live.conftest import free_port, serve

pytestmark = pytest.mark.live

ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on, so every connection to it is refused."""
    port = free_port()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    return port


def test_mcp_and_rest_answer_503_json_while_the_database_is_down(tmp_path, closed_port):
    down = f"postgres://atrium@127.0.0.1:{closed_port}/atrium"
    with serve(tmp_path, healthy=False, DATABASE_URL=down, CELERY_BROKER_URL="") as server:
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "pytest", "version": "1"}}}
        headers = {"Authorization": "Bearer atr_not-checked-while-down", "Accept": ACCEPT}
        mcp = httpx.post(server.mcp_url, content=json.dumps(initialize), timeout=30,
                         headers={**headers, "Content-Type": "application/json"})
        rest = httpx.get(f"{server.url}/api/workflows/", params={"global": "true"}, headers=headers, timeout=30)

    assert mcp.status_code == 503
    assert mcp.headers["content-type"] == "application/json"
    assert mcp.json() == {"jsonrpc": "2.0", "id": None,
                          "error": {"code": -32603, "message": "The database is unavailable; try again shortly."}}
    assert rest.status_code == 503
    assert rest.json() == {"error": "The database is unavailable; try again shortly.", "code": "database_unavailable"}
