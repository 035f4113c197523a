"""Every tool call is recorded once, also outside any transaction (as a server runs it), where on
PostgreSQL the record's own commit does not wait for the disk and nothing else's changes; both
transports write it after the answer has gone out."""

import io
import json
from datetime import timedelta
from unittest.mock import patch

import pytest
from django.apps import apps
from django.core.signals import request_finished
from django.db import close_old_connections, connection
from django.test import RequestFactory
from django.utils import timezone
from mcp_server import mcp_server

from accounts.models import McpSession, ToolCall
from accounts.services import mcp_session_open
from core.caller import Caller
from core.http import mcp_view
from core.management.commands.mcp_stdio import serve
from tests.conftest import McpClient, make_member

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_a_call_outside_a_transaction_is_recorded_and_leaves_the_connection_as_it_was():
    member = make_member("alice")
    client = McpClient(member.token)
    client.initialize()

    client.call_expecting_success("auth_status")
    client.call("no_such_tool")

    rows = list(ToolCall.objects.filter(user=member.user).values_list("tool", "outcome", "transport"))
    assert rows == [("auth_status", "ok", "http")]
    record = ToolCall.objects.get(user=member.user)
    assert record.duration_ms >= 0 and timezone.now() - timedelta(minutes=1) < record.at <= timezone.now()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone() == ("on",)
    assert connection.get_autocommit()


def _initialize(version: str = "2025-11-25") -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}}


def _status_call() -> dict:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "auth_status", "arguments": {}}}


def test_over_http_the_record_is_written_when_the_sent_response_is_closed():
    member = make_member("alice")
    view = mcp_view(mcp_server)
    factory = RequestFactory(headers={"Authorization": f"Bearer {member.token}", "Accept": "application/json"})
    opened = view(factory.post("/mcp", json.dumps(_initialize()), content_type="application/json"))
    opened.close()
    request = factory.post("/mcp", json.dumps(_status_call()), content_type="application/json",
                           headers={"Mcp-Session-Id": opened.headers["Mcp-Session-Id"]})

    response = view(request)
    before_close = ToolCall.objects.filter(user=member.user).count()
    response.close()

    assert json.loads(response.content)["result"]["isError"] is False
    assert before_close == 0
    assert list(ToolCall.objects.filter(user=member.user).values_list("tool", "outcome")) == [("auth_status", "ok")]


class _Stdout(io.BytesIO):
    """stdout that notes how many records there were when each answer was written."""

    def __init__(self, user) -> None:
        super().__init__()
        self.user = user
        self.records_at_write: list[int] = []

    def write(self, data: bytes) -> int:
        self.records_at_write.append(ToolCall.objects.filter(user=self.user).count())
        return super().write(data)


def test_over_stdio_the_record_is_written_after_the_answer():
    member = make_member("alice")
    caller = Caller.trusted(member.user, via="mcp")
    session = mcp_session_open(caller=caller, transport=McpSession.Transport.STDIO, client_name="stdio")
    stdin = io.BytesIO(b"\n".join(json.dumps(m).encode() for m in (_initialize(), _status_call(), _status_call())))
    stdout = _Stdout(member.user)

    serve(mcp_server, caller.with_session(session), stdin, stdout)

    assert stdout.records_at_write == [0, 0, 1]  # each call's record follows its answer
    assert ToolCall.objects.filter(user=member.user, transport="stdio").count() == 2


def test_records_are_written_before_the_requests_connections_are_released():
    # As at start-up, whatever earlier tests' clients did to the order: Django's receiver first.
    request_finished.disconnect(dispatch_uid="core.records_after_response")
    request_finished.disconnect(close_old_connections)
    request_finished.connect(close_old_connections)
    apps.get_app_config("core").ready()
    order: list[str] = []
    with (patch("core.http.records_write", side_effect=lambda: order.append("records")),
          patch.object(connection, "close_if_unusable_or_obsolete", side_effect=lambda: order.append("released"))):
        connection.ensure_connection()
        request_finished.send(sender=None)

    assert order == ["records", "released"]
