"""A call refused before its tool runs (a missing scope, an unknown or ill-typed argument) is answered
in the tool's own product's error shape, exactly like the tool's own errors."""

import json

import pytest

from elements.models import Element
from runs.models import Run
from tests.conftest import make_member

pytestmark = pytest.mark.django_db


def payload(result: dict) -> dict:
    return json.loads(result["content"][0]["text"])


def test_mcp_aql_refuses_a_missing_scope_in_its_envelope(mcp_client):
    client = mcp_client(make_member("reader", scopes=["elements:read"]))
    client.initialize()

    result = client.call("mcp_aql_create", {"operation": "create_element", "element_type": "skill",
                                            "params": {"element_name": "x", "description": "d", "content": "c"}})

    assert result["isError"] is True
    body = payload(result)
    assert body["success"] is False and "'elements:write'" in body["error"]
    assert set(body) == {"success", "error"}
    assert not Element.objects.exists()


def test_mcp_aql_refuses_an_unknown_argument_in_its_envelope(mcp_client):
    client = mcp_client(make_member("writer"))
    client.initialize()

    body = payload(client.call("mcp_aql_create", {"operation": "create_element", "element_type": "skill",
                                                  "params": {"element_name": "x"}, "colour": "red"}))

    assert body == {"success": False, "error": body["error"]}
    assert "Unknown argument(s) for mcp_aql_create: colour" in body["error"]
    assert not Element.objects.exists()


def test_a_run_tool_answers_a_missing_scope_in_band(mcp_client):
    client = mcp_client(make_member("reader", scopes=["runs:read"]))
    client.initialize()

    result = client.call("start_workflow", {"workflow_id": "flow", "global": True})

    assert result["isError"] is False  # a user error: the host reads it and recovers
    assert payload(result)["code"] == "insufficient_scope"
    assert not Run.objects.exists()


def test_a_run_tool_answers_an_ill_typed_argument_in_band(mcp_client):
    client = mcp_client(make_member("runner"))
    client.initialize()

    result = client.call("start_workflow", {"workflow_id": "flow", "global": True, "context": ["not", "a", "map"]})

    assert result["isError"] is False
    body = payload(result)
    assert body["code"] == "invalid_arguments" and body["error"].startswith("Invalid arguments for start_workflow:")
    assert not Run.objects.exists()


def test_test_workflow_answers_a_refusal_in_its_own_shape(mcp_client):
    client = mcp_client(make_member("reader", scopes=["runs:read"]))
    client.initialize()

    body = payload(client.call("test_workflow", {"workflow_id": "flow", "global": True}))

    assert body["ok"] is False and body["code"] == "insufficient_scope" and body["message"]


def test_a_writer_tool_keeps_is_error_with_its_code(mcp_client):
    client = mcp_client(make_member("reader", scopes=["workflows:read"]))
    client.initialize()

    result = client.call("create_workflow", {"id": "x", "config": "name: X", "global": True})

    assert result["isError"] is True
    assert payload(result)["code"] == "insufficient_scope"


@pytest.mark.parametrize("caps", [{"spending_cap_usd": 1e7}, {"spending_cap_tokens": 2**63}])
def test_a_cap_larger_than_a_run_can_hold_is_refused_before_anything_starts(mcp_client, caps):
    client = mcp_client(make_member("runner"))
    client.initialize()

    result = client.call("start_workflow", {"workflow_id": "flow", "global": True, **caps})

    assert result["isError"] is False
    assert payload(result)["code"] == "invalid_arguments"
    assert not Run.objects.exists()
