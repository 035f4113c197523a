"""Scopes decide which tools a caller sees and may call, checked in one place for every tool."""

import dataclasses

import pytest

from accounts.models import AuditEvent, PersonalToken
from core import tools as mcp_registry
from tests.conftest import make_member

pytestmark = pytest.mark.django_db


@pytest.fixture
def auth_status_needs_elements_write(monkeypatch):
    """Every tool so far needs no scope; make one need a scope to watch the guard work."""
    spec = mcp_registry.TOOLS["auth_status"]
    monkeypatch.setitem(mcp_registry.TOOLS, "auth_status", dataclasses.replace(spec, scope="elements:write"))


def test_tools_list_shows_only_tools_the_scopes_allow(db, mcp_client, auth_status_needs_elements_write):
    reader = mcp_client(make_member("reader", scopes=["elements:read"]))
    writer = mcp_client(make_member("writer", scopes=["elements:read", "elements:write"]))
    reader.initialize()
    writer.initialize()

    assert reader.tool_names() == {"auth_logout", "mcp_aql_read", "permission_prompt"}
    assert writer.tool_names() == {"auth_logout", "auth_status", "mcp_aql_read", "mcp_aql_create",
                                   "mcp_aql_update", "permission_prompt"}


def test_a_call_outside_the_scopes_names_the_missing_scope(db, mcp_client, auth_status_needs_elements_write):
    client = mcp_client(make_member("reader", scopes=["elements:read"]))
    client.initialize()

    error = client.call_expecting_error("auth_status")

    assert error["code"] == "insufficient_scope"
    assert "'elements:write'" in error["error"]
    assert "elements:read" in error["error"]


def test_a_refused_call_changes_nothing(db, mcp_client, monkeypatch):
    spec = mcp_registry.TOOLS["auth_logout"]
    monkeypatch.setitem(mcp_registry.TOOLS, "auth_logout", dataclasses.replace(spec, scope="elements:delete"))
    member = make_member("reader", scopes=["elements:read"])
    client = mcp_client(member)
    client.initialize()

    client.call_expecting_error("auth_logout")

    assert PersonalToken.objects.get(user=member.user).revoked_at is None
    assert not AuditEvent.objects.filter(action="token.revoke").exists()


def test_a_token_without_scopes_still_has_the_auth_tools(db, mcp_client):
    client = mcp_client(make_member("nobody", scopes=[]))
    client.initialize()

    assert client.tool_names() == {"auth_status", "auth_logout"}
    assert client.call_expecting_success("auth_status")["scopes"] == []


def test_an_unknown_tool_is_a_tool_error(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    assert client.call_expecting_error("no_such_tool") == {"error": "Unknown tool: no_such_tool.",
                                                          "code": "unknown_tool"}


def test_unknown_arguments_are_refused(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()

    error = client.call_expecting_error("auth_status", {"verbose": True})

    assert error["code"] == "invalid_arguments"
    assert "verbose" in error["error"]


def test_a_domain_error_is_a_tool_error_with_its_code(alice, mcp_client, monkeypatch):
    from core.errors import NotFound

    def fail(*, caller):
        raise NotFound("Nothing here.", code="thing_not_found")

    monkeypatch.setattr("accounts.mcp.caller_describe", fail)
    client = mcp_client(alice)
    client.initialize()

    assert client.call_expecting_error("auth_status") == {"error": "Nothing here.", "code": "thing_not_found"}


def test_an_unexpected_failure_does_not_leak_its_message(alice, mcp_client, monkeypatch):
    def crash(*, caller):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("accounts.mcp.caller_describe", crash)
    client = mcp_client(alice)
    client.initialize()

    error = client.call_expecting_error("auth_status")

    assert error["code"] == "internal_error"
    assert "secret" not in error["error"]
