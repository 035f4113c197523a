"""Agents for the execution lifecycle tests, and the calls every one of them makes."""

from typing import Any

from core.caller import Caller
from elements import services
from elements.models import Element
from elements.types import ElementType
from tests.conftest import Member, Portfolio

EXECUTE, CREATE, READ = "mcp_aql_execute", "mcp_aql_create", "mcp_aql_read"
GOAL = {"template": "Triage issue {issue} in {repo}",
        "parameters": [{"name": "issue", "type": "string", "required": True, "description": "Issue number"},
                       {"name": "repo", "type": "string", "required": False, "default": "atrium"}],
        "successCriteria": ["The issue is labelled", "A summary is posted"]}


def make_element(member: Member, element_type: ElementType, name: str, **params: Any) -> Element:
    return services.element_create(caller=Caller.trusted(member.user, via="command"), element_type=element_type,
                                   name=name, params={"description": f"The {name}.", **params})


def make_agent(member: Member, name: str = "triager", **metadata: Any) -> Element:
    """An agent with a goal (GOAL unless `goal` is given) and the other metadata given."""
    return make_element(member, ElementType.AGENT, name, instructions="You ARE a careful triager.",
                        metadata={"goal": GOAL, "systemPrompt": "Be brief.", **metadata})


def execute(aql: Portfolio, name: str = "triager", **parameters: Any) -> dict[str, Any]:
    return aql.ok(EXECUTE, "execute_agent", element_name=name, parameters=parameters or {"issue": "42"})


def step(aql: Portfolio, name: str = "triager", **fields: Any) -> dict[str, Any]:
    return aql.ok(CREATE, "record_execution_step", element_name=name,
                  **{"stepDescription": "Read the issue", "outcome": "success", **fields})
