"""The agent execution lifecycle through MCP-AQL: execute_agent, steps, state, gathered data,
continue, complete and abort, the agent's tools as its policy, and the danger zone's hold on it."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import AuditEvent, McpSession
from core.caller import Caller
from elements import dangerzone, selectors
from elements.gatekeeper import Level
from elements.mcpaql import ROUTES
from elements.models import Activation, AgentBlock, AgentExecution, Element, ExecutionStep, VerificationChallenge
from elements.types import ElementType
from integrations.crypto import unseal
from tests.agent_helpers import CREATE, EXECUTE, READ, execute, make_agent, make_element, step

pytestmark = pytest.mark.django_db


def active_names(aql) -> set[tuple[str, str]]:
    return set(Activation.objects.filter(session_id=aql.client.session_id)
               .values_list("element__element_type", "element__name"))


# --- execute_agent ---------------------------------------------------------------------------

def test_execute_agent_renders_the_goal_and_activates_what_the_agent_lists(alice, portfolio):
    make_element(alice, ElementType.PERSONA, "reviewer", instructions="You ARE a reviewer.")
    make_element(alice, ElementType.SKILL, "labelling", content="Label by area.")
    make_agent(alice, activates={"personas": ["reviewer"], "skills": ["labelling", "missing"]})
    aql = portfolio(alice)

    data = execute(aql, issue="42")

    assert data["_type"] == "ExecuteAgentResult"
    assert (data["agentName"], data["goal"], data["stateVersion"]) == ("triager", "Triage issue 42 in atrium", 1)
    assert data["activeElements"] == {"personas": [{"name": "reviewer", "content": "You ARE a reviewer."}],
                                      "skills": [{"name": "labelling", "content": "Label by area."}]}
    assert data["activationWarnings"] == ["skill 'missing' (in the activates of agent 'triager') does not exist and "
                                          "was skipped."]
    assert data["successCriteria"] == ["The issue is labelled", "A summary is posted"]
    assert (data["systemPrompt"], data["safetyTier"], data["priorityScore"]) == ("Be brief.", "advisory", 5)
    assert data["constraints"]["maxAutonomousSteps"] == 10
    assert data["executionContext"]["parameters"] == {"issue": "42", "repo": "atrium"}
    execution = AgentExecution.objects.get(pk=data["goalId"])
    assert (execution.owner, execution.status, execution.session_id) == (alice.user, "in_progress",
                                                                         aql.client.session_id)
    agent = Element.objects.get(element_type="agent", name="triager")
    assert set(Activation.objects.filter(session_id=aql.client.session_id, via=agent)
               .values_list("element__name", flat=True)) == {"triager", "reviewer", "labelling"}
    assert AuditEvent.objects.filter(actor=alice.user, action="agent.execute").count() == 1


def test_every_missing_required_parameter_is_named_in_one_error(alice, portfolio):
    make_agent(alice, goal={"template": "Review {repo} at {branch}", "parameters": [
        {"name": "repo", "type": "string", "required": True},
        {"name": "branch", "type": "string", "required": True, "description": "Branch to review"}]})
    aql = portfolio(alice)
    aql.ok(EXECUTE, "confirm_operation", operation="execute_agent")

    error = aql.fails(EXECUTE, "execute_agent", element_name="triager", parameters={})

    assert "Missing required parameter(s) for agent 'triager': repo (string), branch (string: Branch to review)" \
        in error
    assert "introspect" in error
    assert not AgentExecution.objects.exists()


def test_parameters_of_the_wrong_type_are_refused(alice, portfolio):
    make_agent(alice, goal={"template": "Sleep {hours} hours", "parameters": [
        {"name": "hours", "type": "number", "required": True}]})
    aql = portfolio(alice)
    aql.ok(EXECUTE, "confirm_operation", operation="execute_agent")

    error = aql.fails(EXECUTE, "execute_agent", element_name="triager", parameters={"hours": "eight"})

    assert error == "Goal parameter 'hours' must be a number (got a string)."
    assert not AgentExecution.objects.exists()


def test_a_placeholder_without_a_parameter_is_left_and_warned_about(alice, portfolio):
    make_agent(alice, goal={"template": "Fix {issue} before {deadline}", "parameters": [
        {"name": "issue", "type": "string", "required": True}]})

    data = execute(portfolio(alice), issue="#7")

    assert data["goal"] == "Fix #7 before {deadline}"
    assert data["templateWarnings"] == ["1 placeholder(s) were not substituted: {deadline}"]


def test_a_goal_longer_than_five_thousand_characters_is_cut(alice, portfolio):
    make_agent(alice, goal={"template": "{a}{b}", "parameters": []})

    data = execute(portfolio(alice), a="x" * 4000, b="y" * 4000)

    assert len(data["goal"]) == 5000
    assert "The goal was truncated to 5,000 characters." in data["templateWarnings"]


def test_a_v1_agent_gets_a_goal_from_its_instructions_on_its_first_execution(alice, portfolio):
    make_element(alice, ElementType.AGENT, "helper",
                 instructions="# Help with releases\n\nSuccess criteria:\n- Notes written\n- Tag pushed\n")
    aql = portfolio(alice)
    aql.ok(EXECUTE, "confirm_operation", operation="execute_agent")

    missing = aql.fails(EXECUTE, "execute_agent", element_name="helper", parameters={})
    data = execute(aql, "helper", objective="ship 2.0")

    assert "objective (string" in missing
    assert data["goal"] == "Help with releases: ship 2.0"
    assert data["successCriteria"] == ["Notes written", "Tag pushed"]
    assert data["executionContext"]["upgradedFromV1"] is True
    goal = Element.objects.get(name="helper").metadata["goal"]
    assert goal["template"] == "Help with releases: {objective}"
    assert goal["parameters"] == [{"name": "objective", "type": "string", "required": True,
                                   "description": "What the agent should accomplish"}]


def test_agents_that_activate_each_other_are_refused_naming_the_cycle(alice, portfolio):
    make_element(alice, ElementType.PERSONA, "reviewer", instructions="You ARE a reviewer.")
    make_agent(alice, "planner", activates={"personas": ["reviewer"], "agents": ["builder"]})
    make_agent(alice, "builder", activates={"agents": ["planner"]})
    aql = portfolio(alice)
    aql.ok(EXECUTE, "confirm_operation", operation="execute_agent")

    error = aql.fails(EXECUTE, "execute_agent", element_name="planner", parameters={"issue": "1"})

    assert error.startswith("Activation cycle: planner -> builder -> planner.")
    assert not Activation.objects.exists()
    assert not AgentExecution.objects.exists()


def test_an_agent_listed_by_an_agent_is_activated_with_what_it_lists(alice, portfolio):
    make_element(alice, ElementType.SKILL, "testing", content="Test first.")
    make_agent(alice, "builder", activates={"skills": ["testing"]})
    make_agent(alice, "planner", activates={"agents": ["builder"]})
    aql = portfolio(alice)

    data = execute(aql, "planner")

    assert set(data["activeElements"]) == {"agents", "skills"}
    assert active_names(aql) == {("agent", "planner"), ("agent", "builder"), ("skill", "testing")}


def test_an_agent_may_have_fifty_executions_in_progress_and_no_more(alice, portfolio):
    agent = make_agent(alice)
    AgentExecution.objects.bulk_create([AgentExecution(id=f"goal_{i:032x}", owner=alice.user, agent=agent,
                                                       agent_name="triager", goal="g") for i in range(50)])
    aql = portfolio(alice)
    aql.ok(EXECUTE, "confirm_operation", operation="execute_agent")

    error = aql.fails(EXECUTE, "execute_agent", element_name="triager", parameters={"issue": "1"})

    assert "has 50 executions in progress, the most it may have" in error
    assert AgentExecution.objects.count() == 50


def test_an_execution_in_progress_does_not_stop_another_from_starting(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)

    first, second = execute(aql, issue="1"), execute(aql, issue="2")

    assert first["goalId"] != second["goalId"]
    assert AgentExecution.objects.filter(status="in_progress").count() == 2


# --- the agent's tools as its policy ----------------------------------------------------------

def test_the_agents_tools_are_its_policy_while_it_executes(alice, portfolio):
    make_element(alice, ElementType.PERSONA, "reviewer", instructions="You ARE a reviewer.")
    make_agent(alice, tools={"allowed": ["record_execution_step", "get_*"], "denied": ["delete_*"]})
    aql = portfolio(alice)
    execute(aql)

    recorded = aql.call(CREATE, "record_execution_step", element_name="triager", stepDescription="Looked",
                        outcome="success")
    denied = aql.fails("mcp_aql_delete", "delete_element", "persona", element_name="reviewer")
    aql.ok(EXECUTE, "complete_execution", element_name="triager", outcome="success", summary="Done")
    after = aql.call("mcp_aql_delete", "delete_element", "persona", element_name="reviewer")

    assert recorded["success"] is True  # approved by the agent's allowed tools: no confirmation asked
    assert denied == 'Operation "delete_element" is blocked by active agent "triager"\'s deny policy.'
    assert after["success"] is False and "confirmation" in after  # back to the default once it completed
    assert Element.objects.filter(name="reviewer").exists()


def test_an_agents_own_gatekeeper_section_wins_over_its_tools(alice, portfolio):
    make_agent(alice, tools={"denied": ["list_elements"]}, gatekeeper={"deny": ["search_elements"]})
    aql = portfolio(alice)
    execute(aql)

    assert aql.call(READ, "list_elements", "persona")["success"] is True
    assert "deny policy" in aql.fails(READ, "search_elements", query="x")


# --- steps -----------------------------------------------------------------------------------

def test_a_step_is_numbered_and_bumps_the_state_version(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    goal_id = execute(aql)["goalId"]

    first = step(aql, findings="A crash", confidence=0.5)
    second = step(aql, stepDescription="Labelled it", outcome="partial", confidence=1)

    assert first["_type"] == "StepResult" and first["success"] is True
    assert first["decision"] == {"id": first["decision"]["id"], "goalId": goal_id, "stepNumber": 1,
                                 "decision": "Read the issue", "reasoning": "A crash", "confidence": 0.5}
    assert (first["state"], second["state"]) == ({"goalCount": 1, "stateVersion": 2},
                                                 {"goalCount": 1, "stateVersion": 3})
    assert first["autonomy"]["continue"] is True and first["autonomy"]["stepsRemaining"] == 8
    assert list(ExecutionStep.objects.order_by("number").values_list("number", "outcome")) == [
        (1, "success"), (2, "partial")]


def test_a_risk_score_or_confidence_out_of_range_is_refused_in_the_originals_words(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    execute(aql)
    step(aql)

    for value in (-1, 101, "high", True):
        assert aql.fails(CREATE, "record_execution_step", element_name="triager", stepDescription="x",
                         outcome="success", riskScore=value) == "riskScore must be between 0 and 100"
    assert aql.fails(CREATE, "record_execution_step", element_name="triager", stepDescription="x",
                     outcome="success", confidence=1.5) == "confidence must be between 0 and 1"
    assert "outcome must be one of success, failure, partial" in aql.fails(
        CREATE, "record_execution_step", element_name="triager", stepDescription="x", outcome="done")
    assert ExecutionStep.objects.count() == 1


def test_a_step_without_an_execution_says_how_to_start_one(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    aql.ok(EXECUTE, "confirm_operation", operation="record_execution_step")

    error = aql.fails(CREATE, "record_execution_step", element_name="triager", stepDescription="x",
                      outcome="success")

    assert error == "No active execution found for agent 'triager'. Use execute_agent to start one."


def test_steps_on_a_completed_execution_are_refused(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    goal_id = execute(aql)["goalId"]
    step(aql)
    aql.ok(EXECUTE, "complete_execution", element_name="triager", outcome="success", summary="Done")

    error = aql.fails(CREATE, "record_execution_step", element_name="triager", stepDescription="x",
                      outcome="success")

    assert error == (f"Agent 'triager' has no execution in progress: execution {goal_id} is completed. Use "
                     "execute_agent to start a new execution.")
    assert ExecutionStep.objects.count() == 1


def test_an_execution_holds_at_most_a_hundred_thousand_characters_of_steps(alice, portfolio):
    make_agent(alice, autonomy={"maxAutonomousSteps": 0})
    aql = portfolio(alice)
    execute(aql)
    for _ in range(2):
        step(aql, findings="f" * 45_000)

    error = aql.fails(CREATE, "record_execution_step", element_name="triager", stepDescription="More",
                      outcome="success", findings="f" * 20_000)

    assert "would hold more than 100,000 characters of steps" in error
    assert ExecutionStep.objects.count() == 2


# --- state and gathered data -----------------------------------------------------------------

def test_get_execution_state_shows_the_current_execution_with_history_and_context(alice, portfolio):
    make_element(alice, ElementType.PERSONA, "reviewer", instructions="You ARE a reviewer.")
    make_agent(alice, activates={"personas": ["reviewer"]})
    aql = portfolio(alice)
    goal_id = execute(aql)["goalId"]
    step(aql, findings="Seen")

    state = aql.ok(READ, "get_execution_state", element_name="triager", includeDecisionHistory=True,
                   includeContext=True)

    assert state["_type"] == "ExecutionState"
    assert (state["goalId"], state["status"], state["stepCount"], state["stateVersion"]) == (
        goal_id, "in_progress", 1, 2)
    assert state["activeGoals"][0]["goalId"] == goal_id and state["goalCount"] == 1
    assert [d["decision"] for d in state["decisionHistory"]] == ["Read the issue"]
    assert state["context"]["activeElements"] == {"personas": ["reviewer"]}
    assert state["context"]["parameters"] == {"issue": "42", "repo": "atrium"}
    assert state["dangerZoneBlocked"] is False


def test_an_agent_that_never_ran_is_idle(alice, portfolio):
    make_agent(alice)

    state = portfolio(alice).ok(READ, "get_execution_state", element_name="triager")

    assert (state["status"], state["goalId"], state["activeGoals"]) == ("idle", None, [])


def test_gathered_data_is_the_findings_of_the_steps_with_a_summary(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    goal_id = execute(aql)["goalId"]
    step(aql, findings="Crash in parser", confidence=0.8)
    step(aql, stepDescription="Tried a fix", outcome="failure", confidence=0.4)
    aql.ok(EXECUTE, "continue_execution", element_name="triager")
    step(aql, stepDescription="Fixed", outcome="partial", findings="Fixed but untested")

    data = aql.ok(READ, "get_gathered_data", element_name="triager", goalId=goal_id)

    assert data["_type"] == "GatheredData"
    assert [e["findings"] for e in data["entries"]] == ["Crash in parser", "Fixed but untested"]
    assert data["summary"] == {"totalSteps": 3, "successfulSteps": 1, "failedSteps": 1, "partialSteps": 1,
                               "entriesWithFindings": 2, "averageConfidence": 0.6}
    assert data["goal"] == {"description": "Triage issue 42 in atrium", "status": "in_progress"}


def test_gathered_data_needs_a_goal_id_of_the_agent(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    execute(aql)

    assert aql.fails(READ, "get_gathered_data", element_name="triager") == "goalId is required for get_gathered_data"
    assert "No execution 'goal_nope' of agent 'triager' found" in aql.fails(
        READ, "get_gathered_data", element_name="triager", goalId="goal_nope")


def test_an_operation_without_element_name_says_what_to_pass(alice, portfolio):
    error = portfolio(alice).fails(READ, "get_execution_state")

    assert error.startswith("Missing required parameter 'element_name' for get_execution_state: the agent's name")


# --- continue, from any of the user's sessions ------------------------------------------------

def test_an_execution_started_in_one_client_goes_on_in_another_of_the_same_user(alice, portfolio):
    make_element(alice, ElementType.SKILL, "labelling", content="Label by area.")
    make_agent(alice, activates={"skills": ["labelling"]})
    desktop, laptop = portfolio(alice), portfolio(alice)
    goal_id = execute(desktop)["goalId"]
    step(desktop)

    stepped = step(laptop, stepDescription="From the laptop")
    continued = laptop.ok(EXECUTE, "continue_execution", element_name="triager", previousStepResult="Labelled")

    assert stepped["decision"]["goalId"] == goal_id and stepped["decision"]["stepNumber"] == 2
    assert continued["_type"] == "ContinueResult"
    assert (continued["goalId"], continued["movedToThisSession"], continued["previousStepResult"]) == (
        goal_id, True, "Labelled")
    assert active_names(laptop) == {("agent", "triager"), ("skill", "labelling")}
    assert active_names(desktop) == set()
    assert AgentExecution.objects.get(pk=goal_id).session_id == laptop.client.session_id


def test_continue_after_the_step_limit_starts_a_new_window(alice, portfolio):
    make_agent(alice, autonomy={"maxAutonomousSteps": 2})
    aql = portfolio(alice)
    execute(aql)
    step(aql)
    paused = step(aql)

    continued = aql.ok(EXECUTE, "continue_execution", element_name="triager")
    after = step(aql)

    assert paused["autonomy"]["continue"] is False
    assert paused["autonomy"]["reason"] == "Maximum autonomous steps reached (2)"
    assert (continued["stepWindowRenewed"], continued["continuationCount"], continued["stepsRemaining"]) == (
        True, 1, 1)
    assert after["autonomy"]["continue"] is True


def test_continue_checks_new_parameters_and_renders_the_goal_again(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    execute(aql)

    continued = aql.ok(EXECUTE, "continue_execution", element_name="triager", parameters={"repo": "shop"})
    refused = aql.fails(EXECUTE, "continue_execution", element_name="triager", parameters={"issue": 7})

    assert continued["goal"] == "Triage issue 42 in shop"
    assert refused == "Goal parameter 'issue' must be a string (got a number)."
    assert AgentExecution.objects.get().parameters == {"issue": "42", "repo": "shop"}


# --- complete -------------------------------------------------------------------------------

def test_completing_deactivates_exactly_what_the_execution_brought_in(alice, portfolio):
    make_element(alice, ElementType.PERSONA, "reviewer", instructions="You ARE a reviewer.")
    make_element(alice, ElementType.SKILL, "labelling", content="Label by area.")
    make_agent(alice, activates={"personas": ["reviewer"], "skills": ["labelling"]})
    aql = portfolio(alice)
    aql.ok(READ, "activate_element", "persona", element_name="reviewer")
    goal_id = execute(aql)["goalId"]
    step(aql, confidence=0.9)

    done = aql.ok(EXECUTE, "complete_execution", element_name="triager", outcome="success", summary="Labelled")

    assert done["_type"] == "CompletionResult" and done["success"] is True
    assert (done["goalId"], done["status"], done["outcome"], done["stepsCompleted"]) == (
        goal_id, "completed", "success", 1)
    assert {(d["element_type"], d["element_name"]) for d in done["deactivated"]} == {
        ("agent", "triager"), ("skill", "labelling")}
    assert active_names(aql) == {("persona", "reviewer")}
    execution = AgentExecution.objects.get(pk=goal_id)
    assert (execution.status, execution.summary, execution.finished_at is not None) == ("completed", "Labelled", True)


def test_a_failure_outcome_finishes_the_execution_as_failed(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    goal_id = execute(aql)["goalId"]

    done = aql.ok(EXECUTE, "complete_execution", element_name="triager", outcome="failure", summary="Stuck",
                  goalId=goal_id)

    assert (done["status"], done["outcome"]) == ("failed", "failure")


def test_completing_one_of_two_executions_keeps_what_the_other_needs(alice, portfolio):
    make_element(alice, ElementType.SKILL, "labelling", content="Label by area.")
    make_agent(alice, activates={"skills": ["labelling"]})
    aql = portfolio(alice)
    first = execute(aql, issue="1")["goalId"]
    execute(aql, issue="2")

    done = aql.ok(EXECUTE, "complete_execution", element_name="triager", outcome="success", summary="One",
                  goalId=first)

    assert done["deactivated"] == []
    assert ("skill", "labelling") in active_names(aql)


# --- abort -----------------------------------------------------------------------------------

def test_abort_ends_every_execution_in_progress_and_later_operations_on_them_are_refused(alice, portfolio):
    make_element(alice, ElementType.SKILL, "labelling", content="Label by area.")
    make_agent(alice, activates={"skills": ["labelling"]})
    aql = portfolio(alice)
    first, second = execute(aql, issue="1")["goalId"], execute(aql, issue="2")["goalId"]

    aborted = aql.ok(EXECUTE, "abort_execution", element_name="triager", reason="Wrong repo")

    assert aborted["_type"] == "AbortResult" and aborted["success"] is True
    assert set(aborted["abortedGoalIds"]) == {first, second} and aborted["reason"] == "Wrong repo"
    assert set(AgentExecution.objects.values_list("status", "outcome", "summary")) == {
        ("aborted", "failure", "Execution aborted: Wrong repo")}
    assert active_names(aql) == set()
    refusal = (f"Agent 'triager' execution was aborted (goalId: {second}). Further execution operations are "
               "rejected. Use execute_agent to start a new execution.")
    for operation in ("record_execution_step", "continue_execution", "prepare_handoff"):
        aql.ok(EXECUTE, "confirm_operation", operation=operation)
    assert aql.fails(CREATE, "record_execution_step", element_name="triager", stepDescription="x",
                     outcome="success") == refusal
    assert aql.fails(EXECUTE, "continue_execution", element_name="triager") == refusal
    assert aql.fails(READ, "get_gathered_data", element_name="triager", goalId=second) == refusal
    assert "execution was aborted (goalId: " + first in aql.fails(
        EXECUTE, "prepare_handoff", element_name="triager", goalId=first)
    assert aql.ok(READ, "get_execution_state", element_name="triager")["status"] == "aborted"


def test_abort_with_nothing_in_progress_says_so_and_the_agent_can_run_again(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    execute(aql)
    aql.ok(EXECUTE, "abort_execution", element_name="triager")
    aql.ok(EXECUTE, "confirm_operation", operation="abort_execution")

    nothing = aql.fails(EXECUTE, "abort_execution", element_name="triager")
    again = execute(aql)

    assert nothing == "No active execution found for agent 'triager'. Nothing to abort."
    assert step(aql)["decision"]["goalId"] == again["goalId"]
    assert AuditEvent.objects.filter(action="agent.abort").count() == 1


# --- the danger zone and verification ---------------------------------------------------------

def test_a_danger_zone_step_blocks_the_agent_and_answers_where_to_read_the_code(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    goal_id = execute(aql)["goalId"]
    aql.ok(EXECUTE, "confirm_operation", operation="record_execution_step")

    answer = aql.call(CREATE, "record_execution_step", element_name="triager", stepDescription="Clean up",
                      outcome="success", nextActionHint="rm -rf /var/data")
    autonomy = answer["data"]["autonomy"]

    assert (autonomy["continue"], autonomy["stopped"]) == (False, True)
    assert autonomy["notifications"][0]["type"] == "danger_zone"
    challenge = VerificationChallenge.objects.get()
    assert autonomy["verification"]["challengeId"] == str(challenge.pk)
    assert autonomy["verification"]["url"] == dangerzone.challenge_url(challenge)
    assert unseal(challenge.sealed_code) not in str(answer)
    block = AgentBlock.objects.get()
    assert (block.agent_name, block.execution_id, block.released_at) == ("triager", goal_id, None)


def test_while_blocked_only_the_state_is_answered(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    goal_id = execute(aql)["goalId"]
    step(aql, nextActionHint="DROP TABLE users")
    for operation in ("execute_agent", "abort_execution", "continue_execution", "complete_execution",
                      "prepare_handoff", "resume_from_handoff"):
        aql.ok(EXECUTE, "confirm_operation", operation=operation)
    blocked = dangerzone.blocked_message(AgentBlock.objects.get())

    refused = [
        aql.fails(EXECUTE, "execute_agent", element_name="triager", parameters={"issue": "1"}),
        aql.fails(CREATE, "record_execution_step", element_name="triager", stepDescription="x", outcome="success"),
        aql.fails(EXECUTE, "continue_execution", element_name="triager"),
        aql.fails(EXECUTE, "abort_execution", element_name="triager"),
        aql.fails(EXECUTE, "complete_execution", element_name="triager", outcome="success", summary="x"),
        aql.fails(EXECUTE, "prepare_handoff", element_name="triager", goalId=goal_id),
        aql.fails(EXECUTE, "resume_from_handoff", element_name="triager", handoffBlock="x"),
        aql.fails(READ, "get_gathered_data", element_name="triager", goalId=goal_id),
    ]
    state = aql.ok(READ, "get_execution_state", element_name="triager")

    assert refused == [blocked] * 8
    challenge = VerificationChallenge.objects.get()
    assert (state["dangerZoneBlocked"], state["challengeId"], state["url"]) == (
        True, str(challenge.pk), dangerzone.challenge_url(challenge))
    assert AgentExecution.objects.count() == 1 and ExecutionStep.objects.count() == 1


def test_once_unblocked_the_agent_goes_on(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    execute(aql)
    step(aql, nextActionHint="process.exit(1)")

    dangerzone.agent_unblock(caller=Caller.trusted(alice.user, via="mcp"), agent_name="triager", by="code")

    assert step(aql)["decision"]["stepNumber"] == 2


def test_abort_cannot_walk_around_a_danger_zone_block(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    goal_id = execute(aql)["goalId"]
    step(aql, riskScore=95)
    aql.ok(EXECUTE, "confirm_operation", operation="abort_execution")

    refused = aql.fails(EXECUTE, "abort_execution", element_name="triager", reason="Too risky")

    assert refused == dangerzone.blocked_message(AgentBlock.objects.get())
    assert AgentBlock.objects.get().released_at is None
    assert AgentExecution.objects.get(pk=goal_id).status == "in_progress"


def test_a_goal_matching_a_danger_pattern_blocks_the_agent_at_execute(alice, portfolio):
    make_agent(alice, goal={"template": "Run {command}", "parameters": []})

    data = execute(portfolio(alice), command="DELETE FROM users WHERE 1=1")

    assert (data["safetyTier"], data["dangerZoneBlocked"]) == ("danger_zone", True)
    assert data["verification"]["challengeId"] == str(VerificationChallenge.objects.get().pk)
    assert AgentBlock.objects.get().execution_id == data["goalId"]


def test_a_verify_tier_step_pauses_the_execution_until_its_challenge_is_passed(alice, portfolio):
    make_agent(alice, autonomy={"verificationTimeoutMinutes": 15})
    aql = portfolio(alice)
    execute(aql)

    paused = step(aql, riskScore=70)
    aql.ok(EXECUTE, "confirm_operation", operation="continue_execution")
    refused_step = aql.fails(CREATE, "record_execution_step", element_name="triager", stepDescription="x",
                             outcome="success")
    refused_continue = aql.fails(EXECUTE, "continue_execution", element_name="triager")
    state = aql.ok(READ, "get_execution_state", element_name="triager")
    challenge = VerificationChallenge.objects.get()
    challenge.outcome, challenge.used_at = "verified", timezone.now()
    challenge.save()

    assert paused["autonomy"]["continue"] is False and "stopped" not in paused["autonomy"]
    assert paused["autonomy"]["verification"]["challengeId"] == str(challenge.pk)
    assert paused["autonomy"]["notifications"][0]["type"] == "permission_pending"
    assert 14 * 60 < (challenge.expires_at - challenge.created_at).total_seconds() <= 15 * 60
    for refused in (refused_step, refused_continue):
        assert refused.startswith("Agent 'triager' awaits verification: ")
        assert "pass the code its owner reads on their approvals page to verify_challenge" in refused
    assert state["awaitingVerification"]["challengeId"] == str(challenge.pk)
    assert not AgentBlock.objects.exists()
    assert step(aql)["decision"]["stepNumber"] == 2


# --- isolation -------------------------------------------------------------------------------

def test_charlie_sees_and_touches_none_of_alices_executions(alice, charlie, portfolio):
    make_agent(alice)
    goal_id = execute(portfolio(alice))["goalId"]
    make_agent(charlie)
    theirs = portfolio(charlie)
    for operation in ("prepare_handoff", "abort_execution"):
        theirs.ok(EXECUTE, "confirm_operation", operation=operation)

    state = theirs.ok(READ, "get_execution_state", element_name="triager")
    gathered = theirs.fails(READ, "get_gathered_data", element_name="triager", goalId=goal_id)
    handoff = theirs.fails(EXECUTE, "prepare_handoff", element_name="triager", goalId=goal_id)
    abort = theirs.fails(EXECUTE, "abort_execution", element_name="triager")

    assert state["status"] == "idle" and state["activeGoals"] == []
    assert "No execution" in gathered and "No execution" in handoff
    assert abort == "No active execution found for agent 'triager'. Nothing to abort."
    assert AgentExecution.objects.get(pk=goal_id).status == "in_progress"


# --- routes and records ---------------------------------------------------------------------

def test_the_lifecycle_operations_are_gated_as_the_original_overrides_them():
    levels = {name: (ROUTES[name].endpoint.name, ROUTES[name].default_level, ROUTES[name].can_be_elevated)
              for name in ("execute_agent", "record_execution_step", "get_execution_state", "get_gathered_data",
                           "continue_execution", "complete_execution", "abort_execution", "prepare_handoff",
                           "resume_from_handoff")}

    assert levels == {
        "execute_agent": ("EXECUTE", Level.CONFIRM_SINGLE_USE, False),
        "record_execution_step": ("CREATE", Level.CONFIRM_SESSION, True),
        "get_execution_state": ("READ", Level.AUTO_APPROVE, True),
        "get_gathered_data": ("READ", Level.AUTO_APPROVE, True),
        "continue_execution": ("EXECUTE", Level.CONFIRM_SESSION, True),
        "complete_execution": ("EXECUTE", Level.CONFIRM_SESSION, True),
        "abort_execution": ("EXECUTE", Level.CONFIRM_SINGLE_USE, False),
        "prepare_handoff": ("EXECUTE", Level.CONFIRM_SESSION, True),
        "resume_from_handoff": ("EXECUTE", Level.CONFIRM_SINGLE_USE, False),
    }


def test_the_session_policies_of_active_agents_are_read_in_one_statement(alice, portfolio):
    make_element(alice, ElementType.PERSONA, "reviewer", instructions="You ARE a reviewer.",
                 gatekeeper={"confirm": ["create_element"]})
    make_agent(alice, activates={"personas": ["reviewer"]}, tools={"allowed": ["get_*"], "denied": ["clear"]})
    make_agent(alice, "plain", tools="not an object")
    aql = portfolio(alice)
    execute(aql)
    execute(aql, "plain")
    caller = Caller.trusted(alice.user, via="mcp", session=McpSession.objects.get(pk=aql.client.session_id))

    with CaptureQueriesContext(connection) as queries:
        policies = selectors.session_policies(caller=caller)

    assert len(queries) == 1
    assert {(p.element_name, p.allow, p.confirm, p.deny) for p in policies} == {
        ("reviewer", (), ("create_element",), ()), ("triager", ("get_*",), (), ("clear",))}


def test_every_write_of_the_lifecycle_is_audited(alice, portfolio):
    make_agent(alice)
    aql = portfolio(alice)
    goal_id = execute(aql)["goalId"]
    step(aql)
    aql.ok(EXECUTE, "continue_execution", element_name="triager")
    block = aql.ok(EXECUTE, "prepare_handoff", element_name="triager", goalId=goal_id)["handoffBlock"]
    aql.ok(EXECUTE, "resume_from_handoff", element_name="triager", handoffBlock=block)
    aql.ok(EXECUTE, "complete_execution", element_name="triager", outcome="success", summary="x", goalId=goal_id)
    aql.ok(EXECUTE, "abort_execution", element_name="triager")

    actions = list(AuditEvent.objects.filter(actor=alice.user, action__startswith="agent.").order_by("at", "id")
                   .values_list("action", flat=True))

    assert actions == ["agent.execute", "agent.step", "agent.continue", "agent.handoff_prepare", "agent.execute",
                       "agent.handoff_resume", "agent.complete", "agent.abort"]
