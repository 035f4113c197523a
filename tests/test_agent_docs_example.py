"""The worked example on docs/agents.md runs as the page says: the agent it defines, started with
the call it shows, records the step it shows and then pauses on the approval pattern it names."""

import json
import re
from pathlib import Path

from elements.models import AgentExecution
from elements.types import ElementType
from tests.agent_helpers import CREATE, EXECUTE, READ, make_element

PAGE = (Path(__file__).parents[1] / "docs" / "agents.md").read_text()
BLOCKS = [json.loads(block) for block in re.findall(r"^ *```json\n(.*?)^ *```", PAGE, re.MULTILINE | re.DOTALL)]


def shown(operation: str) -> dict:
    return next(block for block in BLOCKS if block.get("operation") == operation)


def test_the_worked_example_runs_as_the_page_says(alice, portfolio):
    make_element(alice, ElementType.PERSONA, "careful-reviewer", instructions="You ARE careful.")
    make_element(alice, ElementType.SKILL, "label-rules", instructions="Label by area.")
    aql = portfolio(alice)
    create = shown("create_element")
    aql.ok(CREATE, "create_element", create["element_type"], **create["params"])

    started = aql.ok(EXECUTE, "execute_agent", **shown("execute_agent")["params"])
    recorded = aql.ok(CREATE, "record_execution_step", **shown("record_execution_step")["params"])
    paused = aql.ok(CREATE, "record_execution_step", element_name="issue-triager", stepDescription="Checked",
                    outcome="success", nextActionHint="apply label bug", riskScore=10)
    aql.ok(EXECUTE, "continue_execution", element_name="issue-triager", parameters={"issue": 42})
    state = aql.ok(READ, "get_execution_state", element_name="issue-triager")
    done = aql.ok(EXECUTE, "complete_execution", element_name="issue-triager", outcome="success",
                  summary="Labelled as a bug.")

    assert started["goal"] == "Triage issue 42 in atrium"
    assert started["availableTools"] == ["list_elements", "get_element", "search_*"]
    assert {name for names in started["activeElements"].values() for name in (e["name"] for e in names)} == {
        "careful-reviewer", "label-rules"}
    assert recorded["autonomy"]["continue"] is True
    assert paused["autonomy"]["continue"] is False
    assert paused["autonomy"]["reason"] == 'Action requires approval: matches pattern "*label*"'
    assert state["_type"] == "ExecutionState" and done["_type"] == "CompletionResult"
    assert AgentExecution.objects.get(pk=started["goalId"]).status == "completed"
