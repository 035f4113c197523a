"""The agent execution lifecycle through the official SDK client against a live server: execute,
steps, state, gathered data, a handoff resumed in a second client session, complete and abort; and
introspect describing each of the lifecycle's operations with its parameters."""

import asyncio
from contextlib import asynccontextmanager
from typing import Any

import pytest

from elements.models import AgentExecution, ExecutionStep
from tests.conftest import make_member
from tests.live.conftest import sdk_session
from tests.live.test_live_elements import CREATE, EXECUTE, READ, Session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

AGENT_OPERATIONS = {
    "execute_agent": ("EXECUTE", ["element_name", "parameters", "maxAutonomousSteps"]),
    "record_execution_step": ("CREATE", ["element_name", "stepDescription", "outcome", "findings", "confidence",
                                         "nextActionHint", "riskScore"]),
    "get_execution_state": ("READ", ["element_name", "includeDecisionHistory", "includeContext"]),
    "get_gathered_data": ("READ", ["element_name", "goalId"]),
    "continue_execution": ("EXECUTE", ["element_name", "previousStepResult", "parameters"]),
    "complete_execution": ("EXECUTE", ["element_name", "outcome", "summary", "goalId"]),
    "abort_execution": ("EXECUTE", ["element_name", "reason"]),
    "prepare_handoff": ("EXECUTE", ["element_name", "goalId"]),
    "resume_from_handoff": ("EXECUTE", ["element_name", "handoffBlock", "parameters"]),
}


@asynccontextmanager
async def connected(mcp_url: str, token: str):
    async with sdk_session(mcp_url, token) as client:
        yield Session(client)


async def lifecycle(mcp_url: str, token: str) -> dict[str, Any]:
    async with connected(mcp_url, token) as first:
        await first.ok(CREATE, "create_element", "agent", element_name="triager", description="Triages issues",
                       instructions="You ARE a careful triager.", goal={
                           "template": "Triage issue {issue}", "successCriteria": ["Labelled"],
                           "parameters": [{"name": "issue", "type": "string", "required": True}]},
                       tools={"allowed": ["record_execution_step"]})
        started = await first.ok(EXECUTE, "execute_agent", element_name="triager", parameters={"issue": "42"})
        goal_id = started["goalId"]
        stepped = await first.ok(CREATE, "record_execution_step", element_name="triager",
                                 stepDescription="Read the issue", outcome="success", findings="A parser crash",
                                 confidence=0.8, nextActionHint="label it", riskScore=10)
        await first.ok(EXECUTE, "continue_execution", element_name="triager", previousStepResult="read")
        state = await first.ok(READ, "get_execution_state", element_name="triager", includeDecisionHistory=True)
        gathered = await first.ok(READ, "get_gathered_data", element_name="triager", goalId=goal_id)
        prepared = await first.ok(EXECUTE, "prepare_handoff", element_name="triager", goalId=goal_id)
        described = {name: (await first.ok(READ, "introspect", query="operations", name=name))["operation"]
                     for name in AGENT_OPERATIONS}
    async with connected(mcp_url, token) as second:
        resumed = await second.ok(EXECUTE, "resume_from_handoff", element_name="triager",
                                  handoffBlock=prepared["handoffBlock"])
        completed = await second.ok(EXECUTE, "complete_execution", element_name="triager", outcome="success",
                                    summary="Labelled as a bug", goalId=resumed["goalId"])
        aborted = await second.ok(EXECUTE, "abort_execution", element_name="triager", reason="Done elsewhere")
        seen = first.seen + second.seen
    return {"goal_id": goal_id, "started": started, "stepped": stepped, "state": state, "gathered": gathered,
            "prepared": prepared, "resumed": resumed, "completed": completed, "aborted": aborted,
            "described": described, "seen": seen}


def test_the_sdk_client_runs_an_agent_from_execute_to_complete_across_two_sessions(live_atrium):
    alice = make_member("alice")

    run = asyncio.run(lifecycle(live_atrium.mcp_url, alice.token))

    goal_id = run["goal_id"]
    assert run["started"]["_type"] == "ExecuteAgentResult" and run["started"]["goal"] == "Triage issue 42"
    assert run["stepped"]["autonomy"]["continue"] is True
    # The agent's tools allow record_execution_step: no confirmation was asked for it.
    assert run["seen"][run["seen"].index("execute_agent") + 1] == "record_execution_step"
    assert run["state"]["_type"] == "ExecutionState" and run["state"]["stepCount"] == 1
    assert run["gathered"]["entries"][0]["findings"] == "A parser crash"
    assert run["prepared"]["handoffState"]["goalId"] == goal_id
    assert (run["resumed"]["_type"], run["resumed"]["resumedFromHandoff"], run["resumed"]["originalGoalId"]) == (
        "ResumeResult", True, goal_id)
    assert run["completed"]["_type"] == "CompletionResult" and run["completed"]["status"] == "completed"
    assert run["aborted"]["abortedGoalIds"] == [goal_id]
    assert set(AGENT_OPERATIONS) <= set(run["seen"])
    assert dict(AgentExecution.objects.values_list("pk", "status")) == {
        goal_id: "aborted", run["resumed"]["goalId"]: "completed"}
    assert AgentExecution.objects.get(pk=run["resumed"]["goalId"]).resumed_from == goal_id
    assert ExecutionStep.objects.count() == 1
    for name, (endpoint, parameters) in AGENT_OPERATIONS.items():
        described = run["described"][name]
        assert (described["endpoint"], described["mcpTool"]) == (endpoint, f"mcp_aql_{endpoint.lower()}")
        assert [p["name"] for p in described["parameters"]] == parameters
        assert all(p["description"] for p in described["parameters"])
