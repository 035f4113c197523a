"""Every tool, checked in one place: description, annotations, argument schema, declared scope."""

import dataclasses

import pytest
from jsonschema import Draft202012Validator
from mcp_server import mcp_server

from accounts.scopes import ALL_SCOPES
from core import tools as mcp_registry
from core.tools import TOOLS, registered_tools

pytestmark = pytest.mark.django_db


@pytest.fixture
def listed_tools(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()
    return client.post("tools/list").json()["result"]["tools"]


def test_every_registered_tool_is_declared_with_a_known_scope():
    registered = set(registered_tools(mcp_server))

    assert registered == set(TOOLS)
    for spec in TOOLS.values():
        accepted = () if spec.scope is None else (spec.scope,) if isinstance(spec.scope, str) else spec.scope
        assert set(accepted) <= ALL_SCOPES, spec


def test_every_tool_sets_all_four_hints_and_a_title(listed_tools):
    for tool in listed_tools:
        hints = tool["annotations"]
        assert {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} <= hints.keys(), tool["name"]
        assert tool["title"] == hints["title"]
        if hints["readOnlyHint"]:
            assert hints["destructiveHint"] is False, tool["name"]


def test_every_tool_has_a_one_paragraph_description(listed_tools):
    for tool in listed_tools:
        assert len(tool["description"]) > 40, tool["name"]
        assert "\n" not in tool["description"].split("\n\n")[0], tool["name"]


def test_every_argument_is_described_and_unknown_ones_are_closed_off(listed_tools):
    for tool in listed_tools:
        schema = tool["inputSchema"]
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False, tool["name"]
        for name, prop in schema.get("properties", {}).items():
            assert prop.get("description"), f"{tool['name']}.{name} has no description"


def test_every_tool_declares_an_output_schema_that_says_what_it_holds(listed_tools):
    for tool in listed_tools:
        schema = tool["outputSchema"]
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object", tool["name"]
        assert schema.get("properties") or schema.get("anyOf"), tool["name"]


def test_the_suite_checks_every_answer_against_its_tools_output_schema(settings):
    # Every tool call a test makes, in process or against a live server, is checked.
    assert settings.ATRIUM_CHECK_TOOL_OUTPUT is True


@pytest.fixture
def auth_status_promises_more(monkeypatch):
    spec = mcp_registry.TOOLS["auth_status"]
    promised = {"type": "object", "required": ["user", "never_sent"]}
    monkeypatch.setitem(mcp_registry.TOOLS, "auth_status", dataclasses.replace(spec, output_schema=promised))
    mcp_registry.output_validator.cache_clear()
    yield
    mcp_registry.output_validator.cache_clear()


def test_an_answer_outside_its_output_schema_is_an_error_under_the_check(alice, mcp_client, auth_status_promises_more):
    client = mcp_client(alice)
    client.initialize()

    error = client.call_expecting_error("auth_status")

    assert error["code"] == "output_schema_violation"
    assert "never_sent" in error["error"]


def test_the_auth_tools_need_no_scope():
    assert TOOLS["auth_status"].scope is None
    assert TOOLS["auth_logout"].scope is None
    assert TOOLS["auth_logout"].annotations.destructiveHint is True
