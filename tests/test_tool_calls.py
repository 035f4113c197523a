"""Every MCP tool call is recorded for its caller (tool, operation, outcome, error code, duration),
listed by query_logs' performance category and the console's Logs page, counted on the Metrics
page, and purged after its retention; a record that cannot be written never changes an answer."""

from datetime import timedelta

import pytest
from django.db import DatabaseError
from django.test import Client
from django.utils import timezone

from accounts.models import AuditEvent, ToolCall
from accounts.services import expired_purge


def calls_of(member) -> list[ToolCall]:
    return list(ToolCall.objects.filter(user=member.user).order_by("at", "id"))


def signed_in(member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def test_an_answered_call_is_recorded_with_its_tool_operation_and_duration(alice, portfolio):
    client = portfolio(alice)

    client.ok("mcp_aql_read", "list_elements", "persona")

    [call] = calls_of(alice)
    assert (call.tool, call.operation, call.outcome, call.error_code) == ("mcp_aql_read", "list_elements", "ok", "")
    assert (call.server, call.transport) == ("mcp", "http")
    assert call.duration_ms > 0


def test_a_failed_call_is_recorded_with_its_error_code(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    error = client.call_expecting_error("auth_status", {"surprise": 1})

    [call] = calls_of(alice)
    assert (call.tool, call.outcome, call.error_code) == ("auth_status", "error", error["code"])
    assert error["code"] == "invalid_arguments"


def test_an_mcp_aql_failure_without_a_code_is_recorded_as_error(alice, portfolio):
    client = portfolio(alice)

    client.fails("mcp_aql_read", "get_element", "persona", element_name="nobody")

    [call] = calls_of(alice)
    assert (call.operation, call.outcome, call.error_code) == ("get_element", "error", "error")


@pytest.mark.parametrize("operation", ["a\udfffb", "a\x00b", "x" * 100_000, "get element"])
def test_an_operation_that_is_no_name_is_answered_and_recorded_without_it(alice, mcp_client, operation):
    client = mcp_client(alice)
    client.initialize()

    result = client.call("mcp_aql_read", {"operation": operation, "params": {}})

    assert "success" in result["content"][0]["text"]
    [call] = calls_of(alice)
    assert (call.tool, call.operation) == ("mcp_aql_read", "")


def test_a_call_of_an_unknown_tool_is_refused_and_not_recorded(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    error = client.call_expecting_error("no_such_tool\udfff")

    assert error["code"] == "unknown_tool"
    assert calls_of(alice) == []


def test_query_logs_lists_tool_calls_as_performance_entries_newest_first(alice, portfolio):
    client = portfolio(alice)
    client.ok("mcp_aql_read", "list_elements", "persona")
    client.fails("mcp_aql_read", "get_element", "persona", element_name="nobody")

    logs = client.ok("mcp_aql_read", "query_logs", category="performance")

    assert logs["total"] == 2  # the query_logs call itself is recorded once it has answered
    failed, answered = logs["entries"]
    assert (failed["level"], failed["category"], failed["source"]) == ("warn", "performance", "mcp")
    assert failed["message"].startswith("mcp_aql_read get_element failed: error in ")
    assert failed["data"]["operation"] == "get_element" and failed["data"]["outcome"] == "error"
    assert answered["level"] == "info" and answered["message"].startswith("mcp_aql_read list_elements answered in ")
    assert answered["data"]["durationMs"] > 0


def test_level_warn_lists_only_failed_calls_and_error_lists_nothing(alice, portfolio):
    client = portfolio(alice)
    client.ok("mcp_aql_read", "list_elements", "persona")
    client.fails("mcp_aql_read", "get_element", "persona", element_name="nobody")

    warned = client.ok("mcp_aql_read", "query_logs", level="warn")
    errors = client.ok("mcp_aql_read", "query_logs", level="error")

    assert [e["data"]["operation"] for e in warned["entries"]] == ["get_element"]
    assert errors == {"entries": [], "total": 0, "limit": 50, "offset": 0}


def test_all_merges_writes_and_calls_in_time_order_and_pages_through_both(alice, portfolio):
    client = portfolio(alice)
    client.ok("mcp_aql_create", "create_element", "persona", element_name="ada", description="A persona.",
              instructions="Be precise.")
    client.ok("mcp_aql_read", "list_elements", "persona")
    recorded = (AuditEvent.objects.filter(actor=alice.user).count()
                + ToolCall.objects.filter(user=alice.user).count())

    everything = client.ok("mcp_aql_read", "query_logs", limit=500)
    first = client.ok("mcp_aql_read", "query_logs", limit=2)
    rest = client.ok("mcp_aql_read", "query_logs", limit=500, offset=2)

    stamps = [e["timestamp"] for e in everything["entries"]]
    assert stamps == sorted(stamps, reverse=True)
    categories = {e["category"] for e in everything["entries"]}
    assert {"application", "performance"} <= categories
    assert everything["total"] == recorded and len(everything["entries"]) == recorded
    assert len(first["entries"]) == 2 and len(rest["entries"]) == rest["total"] - 2


def test_a_text_filter_matches_the_tool_operation_or_error_code(alice, portfolio):
    client = portfolio(alice)
    client.ok("mcp_aql_read", "list_elements", "persona")
    client.fails("mcp_aql_read", "get_element", "persona", element_name="nobody")

    found = client.ok("mcp_aql_read", "query_logs", category="performance", message="list_elem")
    by_source = client.ok("mcp_aql_read", "query_logs", category="performance", source="stdio")

    assert [e["data"]["operation"] for e in found["entries"]] == ["list_elements"]
    assert by_source["total"] == 0


def test_charlie_sees_none_of_alices_calls(alice, charlie, portfolio):
    portfolio(alice).ok("mcp_aql_read", "list_elements", "persona")

    logs = portfolio(charlie).ok("mcp_aql_read", "query_logs", category="performance")

    assert logs["total"] == 0
    assert not any("list_elements" in str(e) for e in logs["entries"])
    assert signed_in(charlie).get("/logs/", {"category": "performance"}).content.count(b"list_elements") == 0


def test_a_record_that_cannot_be_written_leaves_the_answer_alone(alice, portfolio, monkeypatch):
    client = portfolio(alice)

    def broken(*args, **kwargs):
        raise DatabaseError("disk full")

    monkeypatch.setattr(ToolCall.objects, "create", broken)
    unrecorded = client.ok("mcp_aql_read", "list_elements", "persona")
    monkeypatch.undo()

    assert ToolCall.objects.count() == 0
    assert unrecorded == client.ok("mcp_aql_read", "list_elements", "persona")
    assert ToolCall.objects.count() == 1


def test_the_logs_page_shows_tool_calls_with_their_level(alice, portfolio):
    portfolio(alice).fails("mcp_aql_read", "get_element", "persona", element_name="nobody")

    page = signed_in(alice).get("/logs/", {"level": "warn"})

    assert page.status_code == 200
    text = page.content.decode()
    assert "mcp_aql_read get_element failed: error in" in text and "<td>warn</td>" in text


def test_the_metrics_page_counts_calls_errors_and_latency_per_tool(alice, portfolio):
    client = portfolio(alice)
    for _ in range(3):
        client.ok("mcp_aql_read", "list_elements", "persona")
    client.fails("mcp_aql_read", "get_element", "persona", element_name="nobody")

    page = signed_in(alice).get("/metrics/", {"since": "1h"})

    assert page.status_code == 200
    [row] = page.context["tools"]
    assert (row["tool"], row["calls"], row["errors"]) == ("mcp_aql_read", 4, 1)
    durations = sorted(ToolCall.objects.filter(user=alice.user).values_list("duration_ms", flat=True))
    assert row["p95_ms"] == durations[3] and row["mean_ms"] == pytest.approx(sum(durations) / 4)
    assert b"Calls per tool" in page.content


def test_calls_older_than_the_retention_are_purged(alice, portfolio, settings):
    portfolio(alice).ok("mcp_aql_read", "list_elements", "persona")
    ToolCall.objects.update(at=timezone.now() - timedelta(days=settings.ATRIUM_TOOL_CALL_RETENTION_DAYS + 1))
    portfolio(alice).ok("mcp_aql_read", "list_elements", "persona")

    purged = expired_purge()

    assert purged["toolCalls"] == 1
    assert ToolCall.objects.filter(user=alice.user).count() == 1
