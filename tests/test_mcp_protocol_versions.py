"""Every protocol version /mcp speaks, with a raw JSON-RPC client: the four handshake revisions
through initialize and Mcp-Session-Id, and 2026-07-28 statelessly, with its error cases."""

import base64
import json

import pytest
from django.test import Client

from accounts.models import McpSession, ToolCall
from core.protocol import LEGACY_VERSIONS, SUPPORTED_VERSIONS
from tests.conftest import ACCEPT

pytestmark = pytest.mark.django_db

MODERN = "2026-07-28"


def meta(version: str = MODERN, **extra) -> dict:
    return {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}, **extra}


class Modern:
    """A 2026-07-28 client: no session, the version in every request's _meta and header."""

    def __init__(self, token: str, path: str = "/mcp") -> None:
        self.http = Client()
        self.token = token
        self.path = path

    def post(self, method: str, params: dict | None = None, *, headers: dict | None = None,
             body_meta: dict | None = None, notification: bool = False):
        params = {**(params or {}), "_meta": body_meta if body_meta is not None else meta()}
        body = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notification:
            body["id"] = 7
        sent = {"HTTP_ACCEPT": ACCEPT, "HTTP_AUTHORIZATION": f"Bearer {self.token}",
                "HTTP_MCP_PROTOCOL_VERSION": MODERN, "HTTP_MCP_METHOD": method}
        if "name" in params:
            sent["HTTP_MCP_NAME"] = params["name"]
        for name, value in (headers or {}).items():
            key = "HTTP_" + name.upper().replace("-", "_")
            if value is None:
                sent.pop(key, None)
            else:
                sent[key] = value
        return self.http.post(self.path, data=json.dumps(body), content_type="application/json", **sent)


@pytest.fixture
def modern(alice):
    return Modern(alice.token)


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_each_handshake_version_is_negotiated_and_served_in_a_session(alice, mcp_client, version):
    client = mcp_client(alice)

    result = client.initialize(version).json()["result"]
    listed = client.post("tools/list")
    called = client.call("auth_status")

    assert result["protocolVersion"] == version
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert McpSession.objects.get(pk=client.session_id).protocol_version == version
    assert "resultType" not in listed.json()["result"]
    assert called["structuredContent"]["session"]["protocol_version"] == version


def test_an_unknown_handshake_version_gets_the_newest_handshake_version(alice, mcp_client):
    for requested in ("1999-01-01", MODERN):
        response = mcp_client(alice).post("initialize", {"protocolVersion": requested, "capabilities": {},
                                                         "clientInfo": {"name": "old", "version": "1"}})

        assert response.json()["result"]["protocolVersion"] == LEGACY_VERSIONS[0]


def test_discover_names_the_versions_capabilities_and_server(modern):
    response = modern.post("server/discover")

    assert response.status_code == 200
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == list(SUPPORTED_VERSIONS)
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "Atrium"
    assert "auth_status" in result["instructions"]
    assert result["cacheScope"] == "public" and result["ttlMs"] > 0


def test_modern_tools_list_is_stateless_ordered_and_private_to_the_token(modern):
    response = modern.post("tools/list")

    assert response.status_code == 200
    assert "Mcp-Session-Id" not in response.headers
    result = response.json()["result"]
    names = [tool["name"] for tool in result["tools"]]
    assert names == sorted(names) and "auth_status" in names
    assert (result["resultType"], result["cacheScope"]) == ("complete", "private")
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "Atrium"
    assert all("outputSchema" in tool for tool in result["tools"])
    assert not McpSession.objects.exists()


def test_modern_tool_calls_share_the_tokens_standing_session(alice, modern):
    first = modern.post("tools/call", {"name": "auth_status", "arguments": {}}).json()["result"]
    second = modern.post("tools/call", {"name": "auth_status", "arguments": {}}).json()["result"]

    assert first["resultType"] == "complete" and first["isError"] is False
    assert first["structuredContent"]["user"]["username"] == "alice"
    assert "Mcp-Session-Id" not in modern.post("tools/list").headers
    session = McpSession.objects.get()
    assert first["structuredContent"]["session"]["id"] == second["structuredContent"]["session"]["id"] == session.id
    assert (session.protocol_version, session.client_name) == (MODERN, "raw")
    assert ToolCall.objects.filter(user=alice.user, tool="auth_status").count() == 2


def test_a_confirmation_and_an_activation_carry_from_one_modern_call_to_the_next(alice, modern):
    def aql(tool, op, **params):
        response = modern.post("tools/call", {"name": tool, "arguments": {"operation": op, "params": params}})
        result = response.json()["result"]
        return json.loads(result["content"][0]["text"])

    def create():
        return aql("mcp_aql_create", "create_element", element_name="Reviewer", element_type="persona",
                   description="Reviews", instructions="You review.")

    refused = create()
    confirmed = aql("mcp_aql_execute", "confirm_operation", operation="create_element")
    created = create()
    activated = aql("mcp_aql_read", "activate_element", element_name="Reviewer", element_type="persona")
    active = aql("mcp_aql_read", "get_active_elements", element_type="persona")

    assert not refused["success"] and "confirm_operation" in refused["error"]
    assert confirmed["success"] and created["success"] and activated["success"], (confirmed, created, activated)
    assert "Reviewer" in json.dumps(active["data"])


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_standing_session_is_opened_once_by_concurrent_first_calls(alice, modern):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    def call(_):
        try:
            return Modern(alice.token).post("tools/call", {"name": "auth_status", "arguments": {}}).status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(call, range(20)))

    assert statuses == [200] * 20
    assert McpSession.objects.filter(user=alice.user, closed_at__isnull=True).count() == 1


def test_a_modern_request_ignores_a_session_id(alice, modern):
    response = modern.post("tools/list", headers={"Mcp-Session-Id": "anything"})

    assert response.status_code == 200


def test_mcp_name_may_be_sent_base64_encoded(modern):
    encoded = "=?base64?" + base64.b64encode(b"auth_status").decode() + "?="

    response = modern.post("tools/call", {"name": "auth_status", "arguments": {}}, headers={"Mcp-Name": encoded})

    assert response.json()["result"]["isError"] is False


@pytest.mark.parametrize(("headers", "says"), [
    ({"MCP-Protocol-Version": None}, "MCP-Protocol-Version"),
    ({"MCP-Protocol-Version": "2025-11-25"}, "MCP-Protocol-Version"),
    ({"Mcp-Method": None}, "Mcp-Method"),
    ({"Mcp-Method": "tools/list"}, "Mcp-Method"),
    ({"Mcp-Name": None}, "Mcp-Name"),
    ({"Mcp-Name": "auth_logout"}, "Mcp-Name"),
    ({"Mcp-Name": "=?base64?not base64?="}, "Mcp-Name"),
])
def test_headers_that_disagree_with_the_body_are_a_header_mismatch(alice, modern, headers, says):
    response = modern.post("tools/call", {"name": "auth_status", "arguments": {}}, headers=headers)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32020 and says in error["message"]
    assert response.json()["id"] == 7
    assert not ToolCall.objects.exists()


def test_an_unsupported_version_names_the_supported_ones(modern):
    response = modern.post("tools/list", body_meta=meta("2099-01-01"), headers={"MCP-Protocol-Version": "2099-01-01"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": list(SUPPORTED_VERSIONS), "requested": "2099-01-01"}


@pytest.mark.parametrize("missing", ["io.modelcontextprotocol/protocolVersion",
                                     "io.modelcontextprotocol/clientCapabilities"])
def test_a_request_without_its_envelope_is_invalid_params(modern, missing):
    envelope = meta()
    del envelope[missing]

    response = modern.post("tools/list", body_meta=envelope)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32602
    assert missing in response.json()["error"]["message"]


def test_an_unknown_method_is_404_method_not_found(modern):
    for method in ("resources/list", "ping", "initialize/nope"):
        response = modern.post(method)

        assert response.status_code == 404
        assert response.json()["error"]["code"] == -32601


def test_a_modern_notification_is_accepted(modern):
    assert modern.post("notifications/cancelled", {"requestId": 1}, notification=True).status_code == 202


def test_a_modern_request_still_needs_a_token(db):
    response = Modern("atr_not-a-token").post("tools/list")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer resource_metadata=")


def test_discrete_mode_speaks_the_modern_version_too(alice):
    response = Modern(alice.token, path="/mcp/discrete").post("tools/list")

    names = {tool["name"] for tool in response.json()["result"]["tools"]}
    assert "list_elements" in names and "auth_status" not in names


@pytest.mark.parametrize(("body", "code"), [
    ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], -32600),
    ("5", -32600),
    ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, -32600),
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, -32600),
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, -32600),
    ({"jsonrpc": "2.0", "id": 1}, -32600),
    ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": []}, -32602),
])
def test_a_message_that_is_not_one_json_rpc_request_is_refused(alice, body, code):
    response = Client().post("/mcp", data=body if isinstance(body, str) else json.dumps(body),
                             content_type="application/json", HTTP_ACCEPT=ACCEPT,
                             HTTP_AUTHORIZATION=f"Bearer {alice.token}")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert not McpSession.objects.exists()


def test_the_mcp_endpoint_skips_the_browser_middlewares(alice, modern):
    response = modern.post("tools/list")

    assert "sessionid" not in response.cookies and "csrftoken" not in response.cookies
    assert "Vary" not in response or "Cookie" not in response["Vary"]
