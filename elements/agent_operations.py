"""The agent execution lifecycle as MCP-AQL operations: parse a call's params, call a service or
selector of elements.agents, shape the answer with the original's `_type` discriminators.

Every operation names its agent in element_name; those without a goalId act on the agent's most
recent execution in progress. While the agent is blocked by the danger zone only
get_execution_state and abort_execution (which ends the blocked work) are answered.
"""

from __future__ import annotations

import math
from typing import Any

from core.errors import InvalidInput
from elements import agents, autonomy, dangerzone, selectors
from elements.gatekeeper import Level
from elements.mcpaql import Call, Endpoint, Param, operation
from elements.models import Element
from elements.types import ElementType

AGENT = Param("element_name", "string", True, "Agent name")
GOAL_ID = Param("goalId", "string", True, "Execution (goal) id, as execute_agent answered it")
MAX_ACTIVE_TEXT = 50_000  # of each element's text in activeElements
MAX_FINDINGS = 50_000
MAX_PREVIOUS_RESULT = 10_000


# --- parsing ---------------------------------------------------------------------------------

def _agent_name(call: Call) -> str:
    if not isinstance(call.params.get("element_name", call.params.get("name")), str):
        raise InvalidInput(f"Missing required parameter 'element_name' for {call.operation}: the agent's name, e.g. "
                           f'{{"operation": "{call.operation}", "params": {{"element_name": "code-reviewer"}}}}. '
                           'list_elements with element_type "agent" lists your agents.', code="missing_parameter")
    return call.name()


def _agent(call: Call) -> Element:
    return selectors.element_get(caller=call.caller, element_type=ElementType.AGENT, name=_agent_name(call))


def _bounded(call: Call, key: str, limit: int, *, required: bool = False) -> str:
    value = call.text(key, required=required) or ""
    if required and not value.strip():
        raise InvalidInput(f"Missing required parameter '{key}' for {call.operation}.", code="missing_parameter")
    if len(value) > limit:
        raise InvalidInput(f"Parameter '{key}' is at most {limit:,} characters (got {len(value):,}).",
                           code="invalid_parameter")
    return value


def _parameters(call: Call, *, required: bool) -> dict[str, Any]:
    return call.obj("parameters", required=required) or {}


def _goal_id(call: Call, *, required: str | None = None) -> str | None:
    value = call.params.get("goalId", call.params.get("goal_id"))
    if value is None:
        if required:
            raise InvalidInput(required, code="missing_parameter")
        return None
    if not isinstance(value, str) or not value or len(value) > 40:
        raise InvalidInput("goalId must be an execution id such as goal_3f2a… (at most 40 characters).",
                           code="invalid_parameter")
    return value


def _score(call: Call, key: str, low: float, high: float) -> float | None:
    """An optional number from low to high, refused in the original's words ("riskScore must be
    between 0 and 100")."""
    if call.params.get(key) is None:
        return None
    value = call.params[key]
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or not low <= value <= high):
        raise InvalidInput(f"{key} must be between {low:g} and {high:g}", code="invalid_parameter")
    return float(value)


def _outcome(call: Call) -> str:
    outcome = call.text("outcome", required=True)
    if outcome not in agents.OUTCOMES:
        raise InvalidInput(f"outcome must be one of {', '.join(agents.OUTCOMES)} (got {outcome[:40]!r}).",
                           code="invalid_parameter")
    return outcome


# --- shaping ---------------------------------------------------------------------------------

def _active_elements(plan: list[Element], agent: Element) -> dict[str, list[dict[str, Any]]]:
    active: dict[str, list[dict[str, Any]]] = {}
    for element in plan:
        if element.pk == agent.pk:
            continue
        active.setdefault(ElementType(element.element_type).plural, []).append(
            {"name": element.name, "content": agents.element_text(element, MAX_ACTIVE_TEXT)})
    return active


def _started(started: agents.Started, message: str) -> dict[str, Any]:
    execution = started.execution
    agent = execution.agent
    settings = execution.settings
    agent_autonomy = agents.execution_autonomy(execution)
    tier = started.tier
    data: dict[str, Any] = {
        "agentName": execution.agent_name, "goal": execution.goal, "goalId": execution.pk,
        "stateVersion": execution.state_version, "activeElements": _active_elements(started.plan, agent),
        "availableTools": settings["tools"]["allowed"], "successCriteria": execution.success_criteria,
        "systemPrompt": settings["systemPrompt"], "safetyTier": tier.tier, "safetyTierResult": tier.to_json(),
        "constraints": {
            "maxAutonomousSteps": agents.execution_max_steps(execution), "riskTolerance": agent_autonomy.risk_tolerance,
            "riskThreshold": agent_autonomy.threshold, "requiresApproval": list(agent_autonomy.requires_approval),
            "autoApprove": list(agent_autonomy.auto_approve), "deniedTools": settings["tools"]["denied"],
            "verificationTimeoutMinutes": agent_autonomy.verification_timeout_minutes or dangerzone.CHALLENGE_MINUTES,
            "maxExecutionsInProgress": agents.MAX_IN_PROGRESS, "resilience": settings["resilience"]},
        "riskAssessment": {"level": "critical" if tier.tier == "danger_zone" else autonomy.risk_level(tier.risk_score),
                           "score": tier.risk_score, "tier": tier.tier, "factors": [tier.reason],
                           "riskTolerance": agent_autonomy.risk_tolerance},
        "priorityScore": started.goal.priority,
        "executionContext": {"goalId": execution.pk, "startedAt": execution.started_at.isoformat(),
                             "parameters": execution.parameters, "instructions": agent.instructions,
                             "stepCount": execution.step_count, "stepsRemaining": agents.steps_remaining(execution),
                             "upgradedFromV1": started.upgraded},
        "message": message,
    }
    for key, warnings in (("activationWarnings", started.activation_warnings),
                          ("templateWarnings", started.template_warnings),
                          ("securityWarnings", started.security_warnings)):
        if warnings:
            data[key] = warnings
    if started.challenge is not None:
        data["dangerZoneBlocked"] = True
        data["verification"] = agents.verification_answer(
            started.challenge, f"Agent '{execution.agent_name}' is blocked: its goal matches a danger-zone pattern. "
                               "Ask the user to read the code on their approvals page and pass it to "
                               f"verify_challenge (challenge_id {started.challenge.pk}), or stop with "
                               "abort_execution.")
    return data


# --- EXECUTE: start ---------------------------------------------------------------------------

@operation("execute_agent", Endpoint.EXECUTE, "Start an execution of an agent: its goal.template rendered with "
           "parameters ({param} placeholders), the elements in its activates activated in this session for the "
           "duration (with the agent itself, so its gatekeeper policy, or its tools {allowed, denied}, applies). A "
           "v1 agent gets a goal from its instructions (parameter objective). Answers an ExecuteAgentResult with "
           "goalId; priorityScore is the goal's priority (1-10, default 5). A goal matching a danger-zone pattern "
           "blocks the agent until its owner verifies.", params=(
    AGENT, Param("parameters", "object", True, "Values for the goal template's {placeholders}"),
    Param("maxAutonomousSteps", "number", False, "Runtime override of the step limit (0: unlimited)")),
    returns="ExecuteAgentResult: {agentName, goal, goalId, stateVersion, activeElements, availableTools, "
            "successCriteria, systemPrompt, safetyTier, constraints, riskAssessment, executionContext, ...}",
    examples=('{"operation": "execute_agent", "params": {"element_name": "triager", "parameters": {"issue": "#42"}}}',),
    can_be_elevated=False)
def execute_agent(call: Call) -> dict[str, Any]:
    agent = _agent(call)
    parameters = _parameters(call, required=True)
    max_steps = call.number("maxAutonomousSteps", None, low=0, high=autonomy.MAX_STEPS_LIMIT)
    started = agents.agent_execute(caller=call.caller, agent=agent, parameters=parameters, max_steps=max_steps)
    return {"_type": "ExecuteAgentResult", **_started(started, f"Execution {started.execution.pk} of agent "
                                                               f"'{agent.name}' started. Record each step with "
                                                               "record_execution_step.")}


# --- CREATE: steps ----------------------------------------------------------------------------

@operation("record_execution_step", Endpoint.CREATE, "Record a step of the agent's current execution. Answers a "
           "StepResult whose autonomy says whether to continue or pause (step limit, failed outcome, approval "
           "patterns on nextActionHint, safety tier of riskScore and the hint, risk tolerance; then the resilience "
           "policy). A danger-zone step blocks the agent; a verify-tier step pauses the execution until its owner "
           "passes the challenge to verify_challenge.", params=(
    AGENT, Param("stepDescription", "string", True, "What the step did"),
    Param("outcome", "string", True, "success, failure or partial"),
    Param("findings", "string", False, "What the step found"),
    Param("confidence", "number", False, "Confidence from 0 to 1"),
    Param("nextActionHint", "string", False, "The next planned action, for the autonomy evaluation"),
    Param("riskScore", "number", False, "Risk of the next action, 0-100 (higher pauses sooner)")),
    returns="StepResult: {success, message, decision, state: {goalCount, stateVersion}, autonomy}")
def record_execution_step(call: Call) -> dict[str, Any]:
    name = _agent_name(call)
    risk = _score(call, "riskScore", 0, 100)
    confidence = _score(call, "confidence", 0, 1)
    recorded = agents.execution_step_record(
        caller=call.caller, agent_name=name, description=_bounded(call, "stepDescription", agents.MAX_DESCRIPTION,
                                                                  required=True),
        outcome=_outcome(call), findings=_bounded(call, "findings", MAX_FINDINGS), confidence=confidence,
        next_action_hint=_bounded(call, "nextActionHint", autonomy.MAX_HINT),
        risk_score=None if risk is None else round(risk))
    execution, step = recorded.execution, recorded.step
    goals = agents.executions_list(caller=call.caller, agent_name=name, status=agents.Status.IN_PROGRESS).count()
    verdict = "continue" if recorded.directive["continue"] else "pause"
    return {"_type": "StepResult", "success": True,
            "message": f"Step {step.number} of execution {execution.pk} recorded; autonomy: {verdict}.",
            "decision": {"id": step.decision_id, "goalId": execution.pk, "stepNumber": step.number,
                         "decision": step.description, "reasoning": step.findings, "confidence": step.confidence},
            "state": {"goalCount": goals, "stateVersion": execution.state_version},
            "autonomy": recorded.directive}


# --- READ: state and gathered data -------------------------------------------------------------

@operation("get_execution_state", Endpoint.READ, "The state of the agent's current execution (or its latest, or "
           "idle), its executions in progress, and whether the danger zone blocks it. Works while it is blocked.",
           params=(AGENT, Param("includeDecisionHistory", "boolean", False, "Include the last 100 steps", False),
                   Param("includeContext", "boolean", False, "Include parameters, settings and activated elements",
                         False)),
           returns="ExecutionState")
def get_execution_state(call: Call) -> dict[str, Any]:
    name = _agent_name(call)
    history, context = call.flag("includeDecisionHistory"), call.flag("includeContext")
    if not agents.executions_list(caller=call.caller, agent_name=name).exists():
        _agent(call)  # an agent with no executions yet must exist
    return {"_type": "ExecutionState", **agents.execution_state(caller=call.caller, agent_name=name,
                                                                include_history=history, include_context=context)}


@operation("get_gathered_data", Endpoint.READ, "The findings an execution's steps gathered, with a summary of its "
           "steps.", params=(AGENT, GOAL_ID), returns="GatheredData: {goalId, agentName, entries, summary, goal}")
def get_gathered_data(call: Call) -> dict[str, Any]:
    name = _agent_name(call)
    goal_id = _goal_id(call, required="goalId is required for get_gathered_data")
    return {"_type": "GatheredData", **agents.execution_gathered_data(caller=call.caller, agent_name=name,
                                                                      goal_id=goal_id)}


# --- EXECUTE: continue, complete, abort --------------------------------------------------------

@operation("continue_execution", Endpoint.EXECUTE, "Go on with the agent's current execution after a pause: a used-up"
           " step window starts again, parameters (when given) are checked and merged and the goal rendered again, "
           "and an execution started from another of your sessions moves into this one. Refused while a "
           "verify-tier challenge of the execution is not passed.", params=(
    AGENT, Param("previousStepResult", "string", False, "What the last step came to"),
    Param("parameters", "object", False, "Goal parameters to check and merge over the execution's")),
    returns="ContinueResult", level=Level.CONFIRM_SESSION)
def continue_execution(call: Call) -> dict[str, Any]:
    name = _agent_name(call)
    previous = _bounded(call, "previousStepResult", MAX_PREVIOUS_RESULT)
    continued = agents.execution_continue(caller=call.caller, agent_name=name, previous_step_result=previous,
                                          parameters=_parameters(call, required=False))
    execution = continued.execution
    data: dict[str, Any] = {
        "_type": "ContinueResult", "agentName": name, "goalId": execution.pk, "goal": execution.goal,
        "status": execution.status, "stateVersion": execution.state_version, "stepCount": execution.step_count,
        "maxAutonomousSteps": agents.execution_max_steps(execution),
        "stepsRemaining": agents.steps_remaining(execution),
        "continuationCount": execution.continuations, "stepWindowRenewed": continued.renewed,
        "movedToThisSession": continued.moved, "successCriteria": execution.success_criteria,
        "lastStep": agents.last_step(execution), "gatheredDataSummary": agents.gathered_summary(execution),
        "message": f"Execution {execution.pk} continues; record the next step with record_execution_step.",
    }
    if previous:
        data["previousStepResult"] = previous
    for key, warnings in (("templateWarnings", continued.template_warnings),
                          ("securityWarnings", continued.security_warnings)):
        if warnings:
            data[key] = warnings
    return data


def _deactivated(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"element_type": kind, "element_name": name} for kind, name in pairs]


@operation("complete_execution", Endpoint.EXECUTE, "Finish an execution (the agent's current one, or goalId): "
           "completed, or failed for outcome failure. What it activated is deactivated.", params=(
    AGENT, Param("outcome", "string", True, "success, failure or partial"),
    Param("summary", "string", True, "Summary of the execution's results"),
    Param("goalId", "string", False, "The execution to finish (default: the current one)")),
    returns="CompletionResult", level=Level.CONFIRM_SESSION)
def complete_execution(call: Call) -> dict[str, Any]:
    name = _agent_name(call)
    finished = agents.execution_complete(caller=call.caller, agent_name=name, outcome=_outcome(call),
                                         summary=_bounded(call, "summary", agents.MAX_SUMMARY, required=True),
                                         goal_id=_goal_id(call))
    execution = finished.execution
    return {"_type": "CompletionResult", "success": True, "agentName": name, "goalId": execution.pk,
            "status": execution.status, "outcome": execution.outcome, "summary": execution.summary,
            "stepsCompleted": execution.step_count, "successCriteria": execution.success_criteria,
            "gatheredDataSummary": agents.gathered_summary(execution),
            "deactivated": _deactivated(finished.deactivated),
            "message": f"Execution {execution.pk} of agent '{name}' is {execution.status}."}


@operation("abort_execution", Endpoint.EXECUTE, "Abort every execution of the agent in progress: each ends as a "
           "failure, what they activated is deactivated, and later operations on them are refused. execute_agent "
           "starts anew. A blocked agent cannot be aborted: only its owner's code lifts a danger-zone block.", params=(
    AGENT, Param("reason", "string", False, "Why", "Aborted by user")),
    returns="AbortResult: {success, agentName, abortedGoalIds, reason, message}", can_be_elevated=False)
def abort_execution(call: Call) -> dict[str, Any]:
    name = _agent_name(call)
    reason = _bounded(call, "reason", agents.MAX_REASON).strip() or "Aborted by user"
    aborted = agents.execution_abort(caller=call.caller, agent_name=name, reason=reason)
    return {"_type": "AbortResult", "success": True, "agentName": name, "abortedGoalIds": aborted.goal_ids,
            "reason": reason, "deactivated": _deactivated(aborted.deactivated),
            "message": f"Aborted {len(aborted.goal_ids)} execution(s) of agent '{name}'."}


# --- EXECUTE: handoff ---------------------------------------------------------------------------

@operation("prepare_handoff", Endpoint.EXECUTE, "An execution's progress as a copy-pasteable handoff block (a "
           "readable header, then base64 of gzip of JSON with a SHA-256 checksum over the whole state), for "
           "resume_from_handoff in another session.", params=(AGENT, GOAL_ID),
           returns="HandoffResult: {handoffState, handoffBlock}", level=Level.CONFIRM_SESSION)
def prepare_handoff(call: Call) -> dict[str, Any]:
    name = _agent_name(call)
    prepared = agents.handoff_prepare(caller=call.caller, agent_name=name,
                                      goal_id=_goal_id(call, required="goalId is required for prepare_handoff"))
    return {"_type": "HandoffResult", "handoffState": prepared.state, "handoffBlock": prepared.block,
            "message": "Paste handoffBlock into resume_from_handoff (with this agent's name) to go on elsewhere."}


@operation("resume_from_handoff", Endpoint.EXECUTE, "Go on from a handoff block as a new execution of the agent. The "
           "block must be intact (markers, payload, size, integrity) and prepared for this agent; a damaged or "
           "edited one is refused and changes nothing.", params=(
    AGENT, Param("handoffBlock", "string", True, "The whole handoff block, markers included"),
    Param("parameters", "object", False, "Goal parameters (default: those the handoff carries)")),
    returns="ResumeResult: {..., resumedFromHandoff, originalGoalId, restoredFrom}", can_be_elevated=False)
def resume_from_handoff(call: Call) -> dict[str, Any]:
    agent = _agent(call)
    block = call.params.get("handoffBlock", call.params.get("handoff_block"))
    if block is None:
        raise InvalidInput("Missing required parameter 'handoffBlock' for resume_from_handoff: the whole block "
                           "prepare_handoff answered.", code="missing_parameter")
    started, state = agents.handoff_resume(caller=call.caller, agent=agent, block=block,
                                           parameters=_parameters(call, required=False))
    execution = started.execution
    restored = execution.settings["restoredFrom"]
    return {"_type": "ResumeResult", **_started(started, f"Resumed from handoff of {restored['goalId']} as "
                                                         f"execution {execution.pk}."),
            "resumedFromHandoff": True, "originalGoalId": restored["goalId"], "restoredFrom": restored,
            "gatheredDataSummary": execution.settings.get("handoffSummary") or {},
            "decisionHistory": state.get("decisionHistory") if isinstance(state.get("decisionHistory"), list) else [],
            "continuationInstructions": str(state.get("continuationInstructions") or "")[:2000]}
