"""A stdio process's session is its own: until one of its calls activates an element, its calls
skip the gatekeeper's query for active policies; from that call on, every call reads them. Over
HTTP, where any process may activate an element in a session at any time, every call reads them,
and a stdio session's id is refused."""

import io
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from mcp_server import mcp_server

from accounts.models import McpSession
from accounts.services import mcp_session_open
from core.caller import Caller
from core.management.commands.mcp_stdio import serve
from elements.services import element_create
from elements.types import ElementType
from tests.conftest import McpClient, make_member


def _call(message_id: int, operation: str, element_type: str, name: str, endpoint: str = "mcp_aql_read") -> dict:
    return {"jsonrpc": "2.0", "id": message_id, "method": "tools/call", "params": {
        "name": endpoint, "arguments": {"operation": operation, "element_type": element_type,
                                        "params": {"element_name": name}}}}


def _served(caller: Caller, *messages: dict) -> tuple[list[dict], list[str]]:
    """The answers to `messages` on one stdio session, and the SQL they ran."""
    stdin = io.BytesIO(b"\n".join(json.dumps(m).encode() for m in messages))
    stdout = io.BytesIO()
    with CaptureQueriesContext(connection) as queries:
        serve(mcp_server, caller, stdin, stdout)
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    return answers, [q["sql"] for q in queries.captured_queries]


def _envelope(answer: dict) -> dict:
    return json.loads(answer["result"]["content"][0]["text"])


# serve() closes a connection that is past its age between lines, as a server would.
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_stdio_session_reads_policies_only_from_its_first_activation_on():
    caller = Caller.trusted(make_member("alice").user, via="mcp")
    element_create(caller=caller, element_type=ElementType.PERSONA, name="read-only", params={
        "description": "Reads only.", "instructions": "You read.", "gatekeeper": {"deny": ["*_element"]}})
    session = mcp_session_open(caller=caller, transport=McpSession.Transport.STDIO, client_name="stdio")
    caller = caller.with_session(session)

    before, before_sql = _served(caller, _call(1, "get_element", "persona", "read-only"))
    activated, _ = _served(caller, _call(2, "activate_element", "persona", "read-only"))
    after, after_sql = _served(caller, _call(3, "get_element", "persona", "read-only"))

    assert _envelope(before[0])["success"] is True
    assert not [sql for sql in before_sql if "elements_activation" in sql]
    assert _envelope(activated[0])["success"] is True
    assert _envelope(after[0]) == {"success": False, "error": 'Operation "get_element" is blocked by active '
                                                              'persona "read-only"\'s deny policy.'}
    assert [sql for sql in after_sql if "elements_activation" in sql]


def test_an_http_session_reads_policies_on_every_call(alice):
    client = McpClient(alice.token)
    client.initialize()

    with CaptureQueriesContext(connection) as queries:
        client.call("mcp_aql_read", {"operation": "list_elements", "element_type": "persona"})

    assert [q for q in queries.captured_queries if "elements_activation" in q["sql"]]


def test_http_refuses_a_stdio_sessions_id(alice):
    session = mcp_session_open(caller=Caller.trusted(alice.user, via="mcp"), transport=McpSession.Transport.STDIO)
    client = McpClient(alice.token)
    client.session_id = session.id

    response = client.post("tools/list")

    assert response.status_code == 404
    assert "Session not found" in response.json()["error"]["message"]
