"""The top-level permission_prompt tool, which Claude Code calls with flat arguments: its text is
exactly the decision JSON Claude Code reads, from the same evaluation as MCP-AQL's operation."""

import json

import pytest

from core.caller import Caller
from elements.models import CliApproval
from elements.services import element_create
from elements.types import ElementType
from tests.conftest import make_member

pytestmark = pytest.mark.django_db


@pytest.fixture
def claude(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()
    return client


def test_an_allowed_call_answers_behavior_and_updated_input_first(claude):
    result = claude.call("permission_prompt", {"tool_name": "Bash", "input": {"command": "git status"},
                                               "tool_use_id": "toolu_01"})

    assert result["isError"] is False
    text = result["content"][0]["text"]
    assert text.startswith('{"behavior": "allow", "updatedInput": {"command": "git status"}')
    assert json.loads(text) == result["structuredContent"] == {
        "behavior": "allow", "updatedInput": {"command": "git status"},
        "classification": {"riskLevel": "safe", "reason": "Safe command pattern: git status*",
                           "stage": "static_classification"}}


def test_a_denied_call_answers_behavior_and_message(claude):
    payload = claude.call_expecting_success("permission_prompt", {"tool_name": "Bash",
                                                                  "input": {"command": "rm -rf ~"}})

    assert list(payload)[:2] == ["behavior", "message"]
    assert payload["behavior"] == "deny" and "rm -rf *" in payload["message"]
    assert "updatedInput" not in payload


def test_it_decides_exactly_as_the_mcp_aql_operation(claude):
    for tool_name, tool_input in (("Bash", {"command": "make build"}), ("Read", {"file_path": "a.py"}),
                                  ("Bash", {"command": "sudo reboot"}), ("Bash", {"command": ""})):
        direct = claude.call_expecting_success("permission_prompt", {"tool_name": tool_name, "input": tool_input})
        via_aql = claude.call_expecting_success("mcp_aql_read", {"operation": "permission_prompt",
                                                                 "params": {"tool_name": tool_name,
                                                                            "input": tool_input}})
        assert via_aql == {"success": True, "data": direct}


def test_a_request_that_needs_a_person_is_pending_for_this_session(claude, alice):
    element_create(caller=Caller.trusted(alice.user, via="command"), element_type=ElementType.SKILL, name="deploys",
                   params={"description": "Deploys.", "content": "Deploy.",
                           "gatekeeper": {"externalRestrictions": {"confirmPatterns": ["Bash:make deploy*"]}}})
    claude.call_expecting_success("mcp_aql_read", {"operation": "activate_element", "element_type": "skill",
                                                   "params": {"element_name": "deploys"}})

    payload = claude.call_expecting_success("permission_prompt", {
        "tool_name": "Bash", "input": {"command": "make deploy"}, "agent_identity": "release-bot"})
    pending = claude.call_expecting_success("mcp_aql_read", {"operation": "get_pending_cli_approvals"})

    request_id = payload["approvalRequest"]["requestId"]
    assert payload["behavior"] == "deny" and request_id in payload["message"]
    assert [p["requestId"] for p in pending["data"]["pending"]] == [request_id]
    assert CliApproval.objects.get(pk=request_id).agent_identity == "release-bot"


@pytest.mark.parametrize("arguments", [{"tool_name": "Bash"}, {"tool_name": "Bash", "input": "ls"},
                                       {"tool_name": "", "input": {}},
                                       {"tool_name": "Bash", "input": {}, "permission_suggestions": []}])
def test_arguments_it_cannot_read_are_denied_in_the_decision_shape(claude, arguments):
    payload = claude.call_expecting_error("permission_prompt", arguments)

    assert payload["behavior"] == "deny" and payload["code"] == "invalid_arguments"
    assert payload["message"].startswith(("Invalid arguments for permission_prompt", "Unknown argument(s)"))


def test_input_nested_past_the_request_bounds_is_denied(claude):
    deep: dict = {}
    for _ in range(66):
        deep = {"a": deep}

    payload = claude.call_expecting_error("permission_prompt", {"tool_name": "Edit", "input": deep})

    assert payload == {"behavior": "deny", "code": "invalid_arguments",
                       "message": "Invalid arguments for permission_prompt: JSON nested more than 64 levels deep."}


def test_it_needs_the_elements_read_scope(mcp_client):
    reader = mcp_client(make_member("reader", scopes=["elements:read"]))
    runner = mcp_client(make_member("runner", scopes=["runs:read"]))
    reader.initialize()
    runner.initialize()

    refused = runner.call_expecting_error("permission_prompt", {"tool_name": "Read", "input": {}})

    assert "permission_prompt" in reader.tool_names()
    assert "permission_prompt" not in runner.tool_names()
    assert refused["behavior"] == "deny" and refused["code"] == "insufficient_scope"
