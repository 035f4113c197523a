"""Twenty steps recorded at once on one execution, from real threads on real connections: every one
lands, numbered 1 to 20, and the state version goes up exactly once per step."""

from typing import Any

import pytest

from accounts.services import mcp_session_open
from core.caller import Caller
from elements import agents, services
from elements.mcpaql import Endpoint, run
from elements.models import AgentExecution, ExecutionStep
from tests.agent_helpers import make_agent
from tests.test_element_concurrency import THREADS, in_threads

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_twenty_concurrent_steps_on_one_execution_are_numbered_one_to_twenty(alice):
    session = mcp_session_open(caller=Caller.trusted(alice.user, via="mcp"), transport="http")
    caller = Caller.trusted(alice.user, via="mcp", session=session)
    agent = make_agent(alice, autonomy={"maxAutonomousSteps": 0})
    started = agents.agent_execute(caller=caller, agent=agent, parameters={"issue": "42"})
    services.confirmation_grant(caller=caller, operation="record_execution_step", element_type="", level="session")

    def record(index: int) -> dict[str, Any]:
        return run(Endpoint.CREATE, {"operation": "record_execution_step", "params": {
            "element_name": "triager", "stepDescription": f"step from thread {index}", "outcome": "success"}}, caller)

    answers = in_threads(record)

    assert [a["success"] for a in answers] == [True] * THREADS, answers
    assert sorted(a["data"]["decision"]["stepNumber"] for a in answers) == list(range(1, THREADS + 1))
    assert sorted(a["data"]["state"]["stateVersion"] for a in answers) == list(range(2, THREADS + 2))
    steps = ExecutionStep.objects.filter(execution_id=started.execution.pk)
    assert sorted(steps.values_list("number", flat=True)) == list(range(1, THREADS + 1))
    assert {d for d in steps.values_list("description", flat=True)} == {f"step from thread {i}" for i in range(THREADS)}
    execution = AgentExecution.objects.get(pk=started.execution.pk)
    assert (execution.step_count, execution.state_version) == (THREADS, THREADS + 1)
