"""Run tools answer as Roscoe's reference has it: a user error is `{error, code}` in a result that
is not isError; only a failure of the server sets isError. Run links are /open/runs/<id>, and the
older /runs/<id> opens the same page."""

import json
from typing import Any

import pytest
from django.test import Client

from runs import engine
from tests.conftest import McpClient

G = {"global": True}

# Every run tool, with arguments it accepts, minus the scope (cwd or global).
RUN_TOOLS: dict[str, dict[str, Any]] = {
    "start_workflow": {"workflow_id": "nope"},
    "get_run_status": {"run_id": "nope"},
    "advance_run": {"run_id": "nope", "response": "x"},
    "advance_consensus": {"run_id": "nope", "results": [{"raw": "x"}]},
    "advance_round_robin": {"run_id": "nope", "result": {"raw": "x"}},
    "advance_map": {"run_id": "nope", "results": [{"raw": "x"}]},
    "resume_run": {"run_id": "nope", "transition": "x"},
    "cancel_run": {"run_id": "nope"},
    "list_runs": {},
    "get_run_history": {"run_id": "nope"},
}


@pytest.fixture
def client(alice) -> McpClient:
    mcp = McpClient(alice.token)
    mcp.initialize()
    return mcp


def payload(result: dict[str, Any]) -> dict[str, Any]:
    return json.loads(result["content"][0]["text"])


@pytest.mark.parametrize("tool", sorted(RUN_TOOLS))
def test_a_user_error_is_an_error_payload_without_is_error(client, tool):
    without_scope = client.call(tool, RUN_TOOLS[tool])
    unknown = client.call(tool, {**RUN_TOOLS[tool], **G})

    assert without_scope["isError"] is False and payload(without_scope)["code"] == "CWD_REQUIRED"
    assert set(payload(without_scope)) >= {"error", "code"}
    if tool != "list_runs":
        assert unknown["isError"] is False
        expected = "not_found" if tool == "start_workflow" else "run_not_found"
        assert payload(unknown)["code"] == expected
        if expected == "run_not_found":
            assert payload(unknown) == {"error": "Run not found.", "code": "run_not_found"}


def test_a_server_failure_still_sets_is_error(client, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(engine, "run_get", broken)

    result = client.call("get_run_status", {"run_id": "any", **G})

    assert result["isError"] is True
    assert payload(result) == {"error": "get_run_status failed on the server; the error was logged.",
                               "code": "internal_error"}


def test_test_workflow_keeps_its_own_failure_shape(client):
    result = client.call("test_workflow", {"workflow_id": "nope", **G})

    assert result["isError"] is True
    assert payload(result)["ok"] is False and payload(result)["code"] == "workflow_not_found"


def test_the_run_link_opens_the_run_page_and_the_older_path_still_does(alice, client):
    client.call("create_workflow", {"id": "one", "config": "name: One\nstart: a\nnodes:\n  a: {type: ai_agent, "
                                    "prompt: Hi, transitions: {done: b}}\n  b: {type: end}\n", **G})
    started = payload(client.call("start_workflow", {"workflow_id": "one", **G}))
    browser = Client()
    browser.force_login(alice.user)

    assert started["url"] == f"http://127.0.0.1:8000/open/runs/{started['runId']}?project=global"
    opened = browser.get(f"/open/runs/{started['runId']}?project=global")
    older = browser.get(f"/runs/{started['runId']}?project=global")
    assert opened.status_code == older.status_code == 200
    assert b"Waiting for your MCP client" in opened.content and b"Waiting for your MCP client" in older.content
    assert browser.get(f"/runs/{started['runId']}/state.json").json()["status"] == "paused"
