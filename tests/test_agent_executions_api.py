"""The agent executions REST API: the caller's executions, filtered by agent and status, and one
with its steps; nobody else's, not even by id."""

import pytest

from tests.agent_helpers import EXECUTE, READ, execute, make_agent, step
from tests.conftest import Api, make_member

pytestmark = pytest.mark.django_db


@pytest.fixture
def executions(alice, portfolio):
    """Alice's triager: one execution completed with two steps, one in progress; her planner: one."""
    make_agent(alice)
    make_agent(alice, "planner")
    aql = portfolio(alice)
    done = execute(aql, issue="1")["goalId"]
    step(aql, findings="A crash", confidence=0.5, riskScore=10)
    step(aql, stepDescription="Labelled", outcome="partial")
    aql.ok(EXECUTE, "complete_execution", element_name="triager", outcome="success", summary="Labelled", goalId=done)
    running = execute(aql, issue="2")["goalId"]
    planned = execute(aql, "planner", issue="3")["goalId"]
    return {"done": done, "running": running, "planned": planned, "aql": aql}


def test_the_list_shows_the_callers_executions_newest_first(alice, executions):
    response = Api(alice).get("/api/agent-executions/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert [i["goalId"] for i in body["items"]] == [executions["planned"], executions["running"], executions["done"]]
    assert body["pagination"]["totalItems"] == 3
    done = body["items"][2]
    assert (done["agentName"], done["status"], done["outcome"], done["summary"], done["stepCount"]) == (
        "triager", "completed", "success", "Labelled", 2)
    assert (done["goal"], done["maxAutonomousSteps"], done["stateVersion"]) == ("Triage issue 1 in atrium", 10, 4)


def test_the_list_filters_by_agent_and_status(alice, executions):
    api = Api(alice)

    by_agent = api.get("/api/agent-executions/", {"agent": "triager"}).json()["items"]
    running = api.get("/api/agent-executions/", {"agent": "triager", "status": "in_progress"}).json()["items"]
    refused = api.get("/api/agent-executions/", {"status": "sleeping"})

    assert {i["goalId"] for i in by_agent} == {executions["done"], executions["running"]}
    assert [i["goalId"] for i in running] == [executions["running"]]
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_input"


def test_the_list_pages(alice, executions):
    body = Api(alice).get("/api/agent-executions/", {"pageSize": 2, "page": 2}).json()

    assert [i["goalId"] for i in body["items"]] == [executions["done"]]
    assert (body["pagination"]["totalPages"], body["pagination"]["hasPrevPage"]) == (2, True)


def test_one_execution_comes_with_its_steps(alice, executions):
    response = Api(alice).get(f"/api/agent-executions/{executions['done']}/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["goalId"] == executions["done"]
    assert [(s["number"], s["stepDescription"], s["outcome"]) for s in body["steps"]] == [
        (1, "Read the issue", "success"), (2, "Labelled", "partial")]
    first = body["steps"][0]
    assert (first["findings"], first["confidence"], first["riskScore"]) == ("A crash", 0.5, 10)
    assert first["autonomy"]["continue"] is True


def test_charlie_sees_none_of_alices_executions(charlie, executions, portfolio):
    api = Api(charlie)

    listing = api.get("/api/agent-executions/")
    one = api.get(f"/api/agent-executions/{executions['running']}/")
    make_agent(charlie)
    theirs = portfolio(charlie)
    state = theirs.ok(READ, "get_execution_state", element_name="triager")

    assert listing.status_code == 200 and listing.json()["items"] == []
    assert one.status_code == 404 and one.json()["code"] == "execution_not_found"
    assert state["status"] == "idle"
    assert "No execution" in theirs.fails(READ, "get_gathered_data", element_name="triager",
                                          goalId=executions["running"])


def test_an_unknown_execution_is_404(alice):
    response = Api(alice).get("/api/agent-executions/goal_nope/")

    assert response.status_code == 404


def test_reading_executions_needs_the_elements_read_scope(db):
    writer = make_member("writer", scopes=["elements:write"])

    response = Api(writer).get("/api/agent-executions/")

    assert response.status_code == 403
    assert response["WWW-Authenticate"] == 'Bearer error="insufficient_scope", scope="elements:read"'


def test_executions_need_a_token(db):
    assert Api().get("/api/agent-executions/").status_code == 401
