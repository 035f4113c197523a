"""Every tool call is recorded once, also outside any transaction (as a server runs it), where on
PostgreSQL the record's own commit does not wait for the disk and nothing else's changes."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from accounts.models import ToolCall
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
