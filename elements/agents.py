"""Agent executions: starting one, recording its steps and what autonomy makes of each, continuing,
completing and aborting it, and handing it to another session. Services (writes, each in one
transaction with its audit row) and selectors (reads, scoped to the caller).

An execution is a row owned by its user, not process state, so any client of theirs can go on
with it. Operations that name no goalId act on the agent's most recent execution in progress.
What an execution brings into its MCP session (the agent itself and what it activates) is
activated there with `via` the agent, so finishing it deactivates exactly that.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Avg, Count, Q, QuerySet, Sum
from django.db.models.functions import Length
from django.utils import timezone

from accounts.services import audit_record
from core.caller import Caller
from core.errors import Forbidden, InvalidInput, NotFound
from elements import autonomy, dangerzone, ensembles, handoff, services
from elements.agent_goals import (
    MAX_RENDERED_GOAL,
    Goal,
    activates_of,
    goal_of,
    goal_render,
    parameters_check,
    parameters_from,
    system_prompt_of,
    tools_of,
    v1_goal,
)
from elements.models import Activation, AgentExecution, Element, ExecutionStep, VerificationChallenge
from elements.types import ElementType

Status = AgentExecution.Status
OUTCOMES = tuple(ExecutionStep.Outcome.values)
MAX_IN_PROGRESS = 50  # per agent and user, the original's goal limit
MAX_STATE_CHARS = 100_000  # the text of an execution's steps, the original's state size
MAX_HISTORY = 100  # steps shown in a decision history
MAX_NESTED_AGENTS = 5
MAX_ACTIVATED = 100
MAX_DESCRIPTION = 5_000
MAX_SUMMARY = 10_000
MAX_REASON = 500
RECENT_ENTRIES = 20  # in a handoff
HANDOFF_DECISIONS = 10


# --- finding executions ----------------------------------------------------------------------

def aborted_refusal(execution: AgentExecution) -> InvalidInput:
    return InvalidInput(f"Agent '{execution.agent_name}' execution was aborted (goalId: {execution.pk}). Further "
                        "execution operations are rejected. Use execute_agent to start a new execution.",
                        code="execution_aborted")


def _finished_refusal(execution: AgentExecution) -> InvalidInput:
    return InvalidInput(f"Agent '{execution.agent_name}' has no execution in progress: execution {execution.pk} is "
                        f"{execution.status}. Use execute_agent to start a new execution.", code="execution_finished")


def executions_list(*, caller: Caller, agent_name: str | None = None, status: str | None = None
                  ) -> QuerySet[AgentExecution]:
    """The caller's executions, newest first."""
    executions = AgentExecution.objects.filter(owner=caller.user)
    if agent_name is not None:
        executions = executions.filter(agent_name=agent_name)
    if status is not None:
        executions = executions.filter(status=status)
    return executions.order_by("-started_at", "-id")


def execution_get(*, caller: Caller, goal_id: str, agent_name: str | None = None) -> AgentExecution:
    """One of the caller's executions (of `agent_name`, if given); anyone else's is not found."""
    execution = executions_list(caller=caller, agent_name=agent_name).filter(pk=goal_id).first()
    if execution is None:
        of = f" of agent '{agent_name}'" if agent_name is not None else ""
        raise NotFound(f"No execution '{goal_id[:60]}'{of} found. get_execution_state lists the agent's "
                       "executions.", code="execution_not_found")
    return execution


def execution_current(*, caller: Caller, agent_name: str) -> AgentExecution:
    """The agent's most recent execution in progress, from whichever session of the caller's it
    was started in; or the refusal that says why there is none."""
    executions = executions_list(caller=caller, agent_name=agent_name)
    current = executions.filter(status=Status.IN_PROGRESS).first()
    if current is not None:
        return current
    last = executions.first()
    if last is None:
        raise NotFound(f"No active execution found for agent '{agent_name}'. Use execute_agent to start one.",
                       code="no_active_execution")
    raise aborted_refusal(last) if last.status == Status.ABORTED else _finished_refusal(last)


def refuse_if_blocked(*, caller: Caller, agent_name: str) -> None:
    block = dangerzone.agent_block_open(user=caller.user, agent_name=agent_name)
    if block is not None:
        raise Forbidden(dangerzone.blocked_message(block), code="agent_blocked")


def _in_progress(caller: Caller, execution: AgentExecution) -> AgentExecution:
    """The execution locked until the transaction ends, and still in progress and unblocked. Every
    write to an execution starts here: without the lock two concurrent steps would both take the
    same number, and a step waiting on it would miss the block a dangerous step just set."""
    locked = AgentExecution.objects.select_for_update().get(pk=execution.pk)
    if locked.status == Status.ABORTED:
        raise aborted_refusal(locked)
    if locked.status != Status.IN_PROGRESS:
        raise _finished_refusal(locked)
    refuse_if_blocked(caller=caller, agent_name=locked.agent_name)
    return locked


def verification_pending(execution: AgentExecution) -> VerificationChallenge | None:
    """The execution's latest verify-tier challenge, unless its owner has passed it."""
    latest = execution.challenges.filter(kind=VerificationChallenge.Kind.VERIFICATION).order_by("-created_at").first()
    return latest if latest is not None and latest.outcome != "verified" else None


def _refuse_if_awaiting(execution: AgentExecution) -> None:
    challenge = verification_pending(execution)
    if challenge is None:
        return
    expired = challenge.expires_at <= timezone.now() or challenge.used_at is not None
    when = ("it can no longer be passed (end the execution with complete_execution or abort_execution)"
            if expired else f"it expires at {challenge.expires_at.isoformat()}")
    raise InvalidInput(
        f"Agent '{execution.agent_name}' awaits verification: {challenge.reason}. Challenge {challenge.pk}: {when}. "
        "Ask the user to pass the code its owner reads on their approvals page to verify_challenge "
        f"(challenge_id {challenge.pk}, page {dangerzone.challenge_url(challenge)}).",
        code="awaiting_verification")


def verification_answer(challenge: VerificationChallenge, message: str) -> dict[str, Any]:
    """How an answer points at a challenge: where to read its code, never the code."""
    return {"challengeId": str(challenge.pk), "url": dangerzone.challenge_url(challenge),
            "expiresAt": challenge.expires_at.isoformat(), "message": message}


# --- settings an execution runs by -----------------------------------------------------------

def execution_autonomy(execution: AgentExecution) -> autonomy.Autonomy:
    return autonomy.autonomy_from(execution.settings.get("autonomy"))


def execution_resilience(execution: AgentExecution) -> autonomy.Resilience:
    return autonomy.resilience_from(execution.settings.get("resilience"))


def execution_max_steps(execution: AgentExecution) -> int:
    return autonomy.effective_max_steps(execution_autonomy(execution), execution.max_steps)


def step_window(execution: AgentExecution) -> int:
    """The steps recorded since the step limit's window last started (continuations renew it)."""
    limit = execution_max_steps(execution)
    return execution.step_count - execution.continuations * limit if limit else execution.step_count


def steps_remaining(execution: AgentExecution) -> int | None:
    """How many more steps go on by themselves before the step limit pauses the agent (the
    original's max - stepCount - 1); None if unlimited."""
    limit = execution_max_steps(execution)
    return max(0, limit - step_window(execution) - 1) if limit else None


# --- what an execution brings into its session ----------------------------------------------

def activation_plan(*, caller: Caller, agent: Element) -> tuple[list[Element], list[str]]:
    """The agent and what it activates, agents it lists expanded in turn and ensembles with their
    members, and warnings for what was skipped. An agent that would activate itself again through
    the agents it lists is refused, naming the cycle, before anything is activated."""
    plan: list[Element] = [agent]
    seen = {agent.pk}
    warnings: list[str] = []

    def visit(current: Element, path: tuple[str, ...]) -> None:
        for element_type, name in activates_of(current.metadata, current.name):
            if element_type is ElementType.AGENT and name in path:
                raise InvalidInput(f"Activation cycle: {' -> '.join((*path, name))}. Agent '{path[0]}' was not "
                                   "executed and nothing was activated; remove one of the agents from the other's "
                                   "activates.agents.", code="activation_cycle")
            element = Element.objects.filter(owner=caller.user, element_type=element_type, name=name).first()
            if element is None:
                warnings.append(f"{element_type.value} '{name}' (in the activates of agent '{current.name}') does "
                                "not exist and was skipped.")
                continue
            if element.pk in seen:
                continue
            if len(plan) >= MAX_ACTIVATED:
                warnings.append(f"Stopped at {MAX_ACTIVATED} elements, the most one execution activates.")
                return
            seen.add(element.pk)
            plan.append(element)
            if element_type is ElementType.ENSEMBLE:
                members, member_warnings = ensembles.resolve(caller=caller, ensemble=element)
                warnings.extend(member_warnings)
                for member in members:
                    if member.pk not in seen and len(plan) < MAX_ACTIVATED:
                        seen.add(member.pk)
                        plan.append(member)
            elif element_type is ElementType.AGENT:
                if len(path) >= MAX_NESTED_AGENTS:
                    warnings.append(f"Agent '{element.name}' was activated without what it activates: agents nest "
                                    f"at most {MAX_NESTED_AGENTS} deep.")
                    continue
                visit(element, (*path, element.name))

    visit(agent, (agent.name,))
    return plan, warnings


def _release(execution: AgentExecution) -> list[tuple[str, str]]:
    """Deactivate what the execution brought into its session, unless another execution of the
    agent still in progress there needs it. Returns the (type, name) deactivated."""
    if execution.session_id is None or execution.agent_id is None:
        return []
    if AgentExecution.objects.filter(session_id=execution.session_id, agent_id=execution.agent_id,
                                     status=Status.IN_PROGRESS).exclude(pk=execution.pk).exists():
        return []
    brought = Activation.objects.filter(session_id=execution.session_id, via_id=execution.agent_id)
    released = list(brought.values_list("element__element_type", "element__name"))
    brought.delete()
    return released


def brought_in(execution: AgentExecution) -> dict[str, list[str]]:
    """What the execution activated in its session besides the agent, by type (plural)."""
    active: dict[str, list[str]] = {}
    if execution.session_id is None or execution.agent_id is None:
        return active
    for kind, name in (Activation.objects.filter(session_id=execution.session_id, via_id=execution.agent_id)
                       .exclude(element_id=execution.agent_id).order_by("activated_at", "id")
                       .values_list("element__element_type", "element__name")):
        active.setdefault(ElementType(kind).plural, []).append(name)
    return active


def _close_challenges(executions: list[AgentExecution], now: Any) -> None:
    """A finished execution's unanswered verify-tier challenges are spent with it."""
    VerificationChallenge.objects.filter(execution__in=executions, kind=VerificationChallenge.Kind.VERIFICATION,
                                         used_at=None).update(used_at=now, outcome="released")


# --- execute ---------------------------------------------------------------------------------

@dataclass
class Started:
    execution: AgentExecution
    plan: list[Element]
    goal: Goal
    tier: autonomy.SafetyTier  # of the goal
    activation_warnings: list[str] = field(default_factory=list)
    template_warnings: list[str] = field(default_factory=list)
    security_warnings: list[str] = field(default_factory=list)
    challenge: VerificationChallenge | None = None
    upgraded: bool = False


def _upgrade_v1(caller: Caller, agent: Element) -> Element:
    """A v1 agent (no goal.template) gets a goal made from its instructions, saved on the agent."""
    source = agent.instructions or agent.content
    if not source.strip():
        raise InvalidInput(f"Agent '{agent.name}' has no goal.template and no instructions to make one from: add a "
                           "goal with edit_element.", code="invalid_agent")
    current = agent.metadata.get("goal") if isinstance(agent.metadata.get("goal"), dict) else {}
    goal = v1_goal(source)
    declared = current.get("parameters") if isinstance(current.get("parameters"), list) else []
    if any(isinstance(p, dict) and p.get("name") == "objective" for p in declared):
        goal["parameters"] = declared
    else:
        goal["parameters"] = [*declared, *goal["parameters"]]
    if current.get("successCriteria"):
        goal["successCriteria"] = current["successCriteria"]
    return services.element_edit(caller=caller, element=agent, changes={"metadata": {"goal": {**current, **goal}}})


@transaction.atomic
def agent_execute(
    *, caller: Caller, agent: Element, parameters: dict[str, Any], max_steps: int | None = None,
    restored: dict[str, Any] | None = None,
) -> Started:
    """Start an execution of `agent` in the caller's MCP session. `restored`: what a handoff
    carried ({restoredFrom, handoffSummary}), for an execution resumed from one."""
    refuse_if_blocked(caller=caller, agent_name=agent.name)
    if caller.session is None:
        raise InvalidInput("execute_agent activates the agent's elements in an MCP session; this call has none.",
                           code="no_session")
    agent = services.element_lock(agent)  # executions of one agent start one at a time
    upgraded = False
    goal = goal_of(agent.metadata, agent.name)
    if goal is None:
        agent = _upgrade_v1(caller, agent)
        goal = goal_of(agent.metadata, agent.name)
        upgraded = True
    agent_autonomy = autonomy.autonomy_from(agent.metadata.get("autonomy"),
                                            legacy_risk_tolerance=agent.metadata.get("riskTolerance"))
    resilience = autonomy.resilience_from(agent.metadata.get("resilience"))
    values, security_warnings = parameters_check(goal, parameters, agent.name)
    rendered, template_warnings = goal_render(goal.template, values)
    plan, activation_warnings = activation_plan(caller=caller, agent=agent)
    running = executions_list(caller=caller, agent_name=agent.name, status=Status.IN_PROGRESS).count()
    if running >= MAX_IN_PROGRESS:
        raise InvalidInput(f"Agent '{agent.name}' has {running} executions in progress, the most it may have: "
                           "complete or abort them first.", code="too_many_executions")
    allowed, denied = tools_of(agent.metadata)
    settings: dict[str, Any] = {
        "autonomy": agent_autonomy.to_json(), "resilience": resilience.to_json(),
        "tools": {"allowed": allowed, "denied": denied}, "systemPrompt": system_prompt_of(agent.metadata),
        "goalTemplate": goal.template, "goalParameters": [p.to_json() for p in goal.parameters],
        **(restored or {}),
    }
    now = timezone.now()
    execution = AgentExecution.objects.create(
        id=f"goal_{secrets.token_hex(16)}", owner=caller.user, agent=agent, agent_name=agent.name,
        session=caller.session, goal=rendered, parameters=values, success_criteria=list(goal.success_criteria),
        settings=settings, max_steps=max_steps,
        resumed_from=(restored or {}).get("restoredFrom", {}).get("goalId", "")[:40], started_at=now, updated_at=now,
    )
    services.activation_set(caller=caller, elements=plan, via=agent)
    tier = autonomy.safety_tier(None, rendered, limit=MAX_RENDERED_GOAL)
    challenge = None
    if tier.tier == "danger_zone":
        challenge = dangerzone.agent_block(caller=caller, agent_name=agent.name, execution=execution,
                                           reason=f"the goal of execution {execution.pk}: {tier.reason}")
    audit_record(caller=caller, action="agent.execute", target=f"agent '{agent.name}'",
                 detail={"goalId": execution.pk, "activated": len(plan), "upgraded": upgraded,
                         **({"resumedFrom": execution.resumed_from} if execution.resumed_from else {})})
    return Started(execution=execution, plan=plan, goal=goal, activation_warnings=activation_warnings,
                   template_warnings=template_warnings, security_warnings=security_warnings, tier=tier,
                   challenge=challenge, upgraded=upgraded)


# --- steps -----------------------------------------------------------------------------------

@dataclass
class Recorded:
    execution: AgentExecution
    step: ExecutionStep
    directive: dict[str, Any]


def _state_chars(execution: AgentExecution) -> int:
    sizes = execution.steps.aggregate(description=Sum(Length("description")), findings=Sum(Length("findings")))
    return (sizes["description"] or 0) + (sizes["findings"] or 0)


@transaction.atomic
def execution_step_record(
    *, caller: Caller, agent_name: str, description: str, outcome: str, findings: str = "",
    confidence: float | None = None, next_action_hint: str = "", risk_score: int | None = None,
) -> Recorded:
    """Record a step of the agent's current execution and decide, by its autonomy and resilience,
    whether the agent goes on. A danger-zone step blocks the agent; a verify-tier one pauses this
    execution until its owner passes the challenge it issues."""
    refuse_if_blocked(caller=caller, agent_name=agent_name)
    if outcome not in OUTCOMES:
        raise InvalidInput(f"outcome must be one of {', '.join(OUTCOMES)}.", code="invalid_parameter")
    execution = _in_progress(caller, execution_current(caller=caller, agent_name=agent_name))
    _refuse_if_awaiting(execution)
    if _state_chars(execution) + len(description) + len(findings) > MAX_STATE_CHARS:
        raise InvalidInput(f"Execution {execution.pk} would hold more than {MAX_STATE_CHARS:,} characters of steps "
                           "(the agent state limit): record shorter findings, or complete this execution and "
                           "start another.", code="state_too_large")
    agent_autonomy = execution_autonomy(execution)
    max_steps = execution_max_steps(execution)
    number = execution.step_count + 1
    step = autonomy.Step(step_count=step_window(execution) + 1,
                         outcome=outcome, next_action_hint=next_action_hint, risk_score=risk_score)
    now = timezone.now()
    directive, counters = autonomy.resilience_apply(
        autonomy.evaluate(step, agent_autonomy, max_steps), step=step, autonomy=agent_autonomy, max_steps=max_steps,
        policy=execution_resilience(execution), now=now,
        counters=autonomy.Counters(continuations=execution.continuations, retries=execution.retries,
                                   consecutive_failures=execution.consecutive_failures,
                                   circuit_open_until=execution.circuit_open_until))
    answer = directive.to_json()
    if not directive.proceed and directive.rule == "danger_zone":
        challenge = dangerzone.agent_block(caller=caller, agent_name=agent_name, execution=execution,
                                           reason=f"step {number} of execution {execution.pk}: {directive.tier.reason}")
        answer["verification"] = verification_answer(
            challenge, f"Agent '{agent_name}' is blocked. Ask the user to read the code on their approvals page and "
                       f"pass it to verify_challenge (challenge_id {challenge.pk}), or stop with abort_execution.")
    elif not directive.proceed and directive.rule == "verify":
        challenge = dangerzone.challenge_issue(
            caller=caller, kind=VerificationChallenge.Kind.VERIFICATION, agent_name=agent_name, execution=execution,
            reason=f"step {number} of execution {execution.pk}: {directive.tier.reason}",
            minutes=agent_autonomy.verification_timeout_minutes)
        answer["verification"] = verification_answer(
            challenge, f"Execution {execution.pk} is paused for verification. Ask the user to read the code on their "
                       f"approvals page and pass it to verify_challenge (challenge_id {challenge.pk}); then go on.")
    recorded = ExecutionStep.objects.create(
        execution=execution, number=number, decision_id=f"decision_{secrets.token_hex(8)}", description=description,
        outcome=outcome, findings=findings, confidence=confidence, next_action_hint=next_action_hint[:500],
        risk_score=risk_score, autonomy=answer, created_at=now)
    execution.step_count = number
    execution.state_version += 1
    execution.continuations, execution.retries = counters.continuations, counters.retries
    execution.consecutive_failures, execution.circuit_open_until = (counters.consecutive_failures,
                                                                    counters.circuit_open_until)
    execution.updated_at = now
    execution.save(update_fields=["step_count", "state_version", "continuations", "retries", "consecutive_failures",
                                  "circuit_open_until", "updated_at"])
    audit_record(caller=caller, action="agent.step", target=f"agent '{agent_name}'",
                 detail={"goalId": execution.pk, "step": number, "outcome": outcome, "continue": directive.proceed,
                         "rule": directive.rule})
    return Recorded(execution=execution, step=recorded, directive=answer)


# --- continue, complete, abort ---------------------------------------------------------------

@dataclass
class Continued:
    execution: AgentExecution
    renewed: bool  # the step window started again
    moved: bool  # the execution moved into the caller's session
    template_warnings: list[str] = field(default_factory=list)
    security_warnings: list[str] = field(default_factory=list)


@transaction.atomic
def execution_continue(
    *, caller: Caller, agent_name: str, previous_step_result: str = "", parameters: dict[str, Any] | None = None,
) -> Continued:
    """Go on with the agent's current execution after a pause. Parameters, when given, are checked
    as execute_agent checks them and merged over the execution's, and the goal is rendered again.
    A step window used up starts again (a person chose to go on); an execution continued from
    another session of the caller's moves there, with what it activates."""
    refuse_if_blocked(caller=caller, agent_name=agent_name)
    execution = _in_progress(caller, execution_current(caller=caller, agent_name=agent_name))
    _refuse_if_awaiting(execution)
    template_warnings: list[str] = []
    security_warnings: list[str] = []
    if parameters:
        goal = Goal(template=execution.settings.get("goalTemplate") or execution.goal,
                    parameters=parameters_from(execution.settings.get("goalParameters"), agent_name),
                    success_criteria=tuple(execution.success_criteria))
        values, security_warnings = parameters_check(goal, {**execution.parameters, **parameters}, agent_name)
        execution.parameters = values
        execution.goal, template_warnings = goal_render(goal.template, values)
    limit = execution_max_steps(execution)
    renewed = bool(limit) and step_window(execution) >= limit
    if renewed:
        execution.continuations += 1
    moved = caller.session is not None and execution.session_id != caller.session.pk and execution.agent is not None
    if moved:
        plan, _ = activation_plan(caller=caller, agent=execution.agent)
        _release(execution)
        services.activation_set(caller=caller, elements=plan, via=execution.agent)
        execution.session = caller.session
    execution.state_version += 1
    execution.updated_at = timezone.now()
    execution.save(update_fields=["parameters", "goal", "continuations", "session", "state_version", "updated_at"])
    audit_record(caller=caller, action="agent.continue", target=f"agent '{agent_name}'",
                 detail={"goalId": execution.pk, "renewed": renewed, "moved": moved,
                         "previousStepResult": previous_step_result[:200]})
    return Continued(execution=execution, renewed=renewed, moved=moved, template_warnings=template_warnings,
                     security_warnings=security_warnings)


@dataclass
class Finished:
    execution: AgentExecution
    deactivated: list[tuple[str, str]]


@transaction.atomic
def execution_complete(
    *, caller: Caller, agent_name: str, outcome: str, summary: str, goal_id: str | None = None,
) -> Finished:
    """Finish an execution (by default the agent's current one): completed, or failed for the
    outcome failure. What it brought into its session is deactivated."""
    refuse_if_blocked(caller=caller, agent_name=agent_name)
    if outcome not in OUTCOMES:
        raise InvalidInput(f"outcome must be one of {', '.join(OUTCOMES)}.", code="invalid_parameter")
    found = (execution_get(caller=caller, goal_id=goal_id, agent_name=agent_name) if goal_id
             else execution_current(caller=caller, agent_name=agent_name))
    execution = _in_progress(caller, found)
    now = timezone.now()
    execution.status = Status.FAILED if outcome == ExecutionStep.Outcome.FAILURE else Status.COMPLETED
    execution.outcome, execution.summary = outcome, summary[:MAX_SUMMARY]
    execution.state_version += 1
    execution.finished_at = execution.updated_at = now
    execution.save(update_fields=["status", "outcome", "summary", "state_version", "finished_at", "updated_at"])
    deactivated = _release(execution)
    _close_challenges([execution], now)
    audit_record(caller=caller, action="agent.complete", target=f"agent '{agent_name}'",
                 detail={"goalId": execution.pk, "outcome": outcome, "status": execution.status})
    return Finished(execution=execution, deactivated=deactivated)


@dataclass
class Aborted:
    goal_ids: list[str]
    deactivated: list[tuple[str, str]]


@transaction.atomic
def execution_abort(*, caller: Caller, agent_name: str, reason: str) -> Aborted:
    """Abort every execution of the agent in progress: each is finished as a failure "Execution
    aborted: <reason>" and what they brought in is deactivated. Later operations on those
    executions are refused. A blocked agent cannot be aborted: aborting and executing again would
    walk around the block, which only its owner's code lifts."""
    refuse_if_blocked(caller=caller, agent_name=agent_name)
    running = list(executions_list(caller=caller, agent_name=agent_name, status=Status.IN_PROGRESS)
                   .select_for_update())
    if not running:
        raise NotFound(f"No active execution found for agent '{agent_name}'. Nothing to abort.",
                       code="no_active_execution")
    now = timezone.now()
    reason = reason[:MAX_REASON]
    for execution in running:
        execution.status, execution.outcome = Status.ABORTED, ExecutionStep.Outcome.FAILURE
        execution.summary, execution.abort_reason = f"Execution aborted: {reason}", reason
        execution.state_version += 1
        execution.finished_at = execution.updated_at = now
    AgentExecution.objects.bulk_update(running, ["status", "outcome", "summary", "abort_reason", "state_version",
                                                 "finished_at", "updated_at"])
    deactivated: list[tuple[str, str]] = []
    for execution in running:
        deactivated += _release(execution)
    _close_challenges(running, now)
    audit_record(caller=caller, action="agent.abort", target=f"agent '{agent_name}'",
                 detail={"goalIds": [e.pk for e in running], "reason": reason})
    return Aborted(goal_ids=[e.pk for e in running], deactivated=deactivated)


# --- gathered data ---------------------------------------------------------------------------

def gathered_summary(execution: AgentExecution) -> dict[str, Any]:
    counts = execution.steps.aggregate(
        total=Count("id"), successful=Count("id", filter=Q(outcome=ExecutionStep.Outcome.SUCCESS)),
        failed=Count("id", filter=Q(outcome=ExecutionStep.Outcome.FAILURE)),
        partial=Count("id", filter=Q(outcome=ExecutionStep.Outcome.PARTIAL)),
        confidence=Avg("confidence"), findings=Count("id", filter=~Q(findings="")))
    return {"totalSteps": counts["total"], "successfulSteps": counts["successful"],
            "failedSteps": counts["failed"], "partialSteps": counts["partial"],
            "entriesWithFindings": counts["findings"],
            "averageConfidence": None if counts["confidence"] is None else round(counts["confidence"], 3)}


def gathered_entry(step: ExecutionStep) -> dict[str, Any]:
    return {"stepNumber": step.number, "decisionId": step.decision_id, "stepDescription": step.description,
            "outcome": step.outcome, "findings": step.findings, "confidence": step.confidence,
            "timestamp": step.created_at.isoformat()}


def gathered_entries(execution: AgentExecution) -> list[dict[str, Any]]:
    """The findings of the execution's steps, in order (bounded with the steps by MAX_STATE_CHARS)."""
    return [gathered_entry(s) for s in execution.steps.exclude(findings="").order_by("number")]


def decision(step: ExecutionStep) -> dict[str, Any]:
    return {"id": step.decision_id, "goalId": step.execution_id, "stepNumber": step.number,
            "decision": step.description, "reasoning": step.findings, "outcome": step.outcome,
            "confidence": step.confidence, "nextActionHint": step.next_action_hint, "riskScore": step.risk_score,
            "autonomy": step.autonomy, "timestamp": step.created_at.isoformat()}


def decision_history(execution: AgentExecution, limit: int = MAX_HISTORY) -> list[dict[str, Any]]:
    """The execution's last `limit` steps, oldest first."""
    return [decision(s) for s in reversed(list(execution.steps.order_by("-number")[:limit]))]


# --- handoff ---------------------------------------------------------------------------------

@dataclass
class Prepared:
    state: dict[str, Any]
    block: str


def element_text(element: Element, limit: int) -> str:
    text = "\n\n".join(t for t in (element.instructions, element.content) if t)
    return text if len(text) <= limit else text[:limit]


@transaction.atomic
def handoff_prepare(*, caller: Caller, agent_name: str, goal_id: str) -> Prepared:
    """The execution's progress as a handoff state and block, for resume_from_handoff elsewhere."""
    refuse_if_blocked(caller=caller, agent_name=agent_name)
    execution = execution_get(caller=caller, goal_id=goal_id, agent_name=agent_name)
    if execution.status == Status.ABORTED:
        raise aborted_refusal(execution)
    steps = list(execution.steps.order_by("-number")[:max(RECENT_ENTRIES, HANDOFF_DECISIONS)])[::-1]
    summary = gathered_summary(execution)
    active = brought_in(execution)
    active["agents"] = [*active.get("agents", []), execution.agent_name]
    last_hint = next((s.next_action_hint for s in reversed(steps) if s.next_action_hint), "")
    instructions = (f"Resume agent '{execution.agent_name}' with resume_from_handoff (element_name "
                    f"'{execution.agent_name}', handoffBlock: this block). {summary['totalSteps']} step(s) were "
                    f"recorded" + (f"; next planned: {last_hint}" if last_hint else "") + ".")
    state = handoff.sealed({
        "version": handoff.VERSION, "agentName": execution.agent_name, "goalId": execution.pk,
        "preparedAt": timezone.now().isoformat(),
        "goalProgress": {"description": execution.goal, "status": execution.status,
                         "stepsCompleted": execution.step_count, "successCriteria": list(execution.success_criteria),
                         "parameters": execution.parameters},
        "gatheredDataSummary": {"totalEntries": summary["entriesWithFindings"],
                                "recentEntries": [gathered_entry(s) for s in steps[-RECENT_ENTRIES:] if s.findings],
                                "summary": summary},
        "decisionHistory": [decision(s) for s in steps[-HANDOFF_DECISIONS:]],
        "activeElements": active,
        "continuationInstructions": instructions,
    })
    next_steps = [*([f"Next: {last_hint}"] if last_hint else []), *(f"Criterion: {c}" for c in
                                                                   execution.success_criteria)]
    next_steps.append(f"resume_from_handoff with element_name '{execution.agent_name}'")
    block = handoff.encode(state, next_steps[:handoff.MAX_NEXT_STEPS])
    audit_record(caller=caller, action="agent.handoff_prepare", target=f"agent '{agent_name}'",
                 detail={"goalId": execution.pk, "checksum": state["checksum"]})
    return Prepared(state=state, block=block)


def _restored_parameters(state: dict[str, Any]) -> dict[str, Any]:
    parameters = state["goalProgress"].get("parameters") or {}
    if not isinstance(parameters, dict):
        raise handoff.HandoffRefused("Invalid handoff block: payload could not be restored (goalProgress.parameters "
                                     "is not an object).")
    return parameters


@transaction.atomic
def handoff_resume(
    *, caller: Caller, agent: Element, block: str, parameters: dict[str, Any] | None = None,
) -> tuple[Started, dict[str, Any]]:
    """Go on from a handoff block as a new execution of `agent`. The block must decode, pass its
    integrity check and have been prepared for this agent; its parameters are checked as any
    execute_agent's (those given here override them). Returns the start and the decoded state."""
    refuse_if_blocked(caller=caller, agent_name=agent.name)
    state = handoff.decode(block)
    if state["agentName"] != agent.name:
        raise handoff.HandoffRefused("Handoff agent mismatch: the handoff block was not prepared for this agent")
    values = {**_restored_parameters(state), **(parameters or {})}
    carried = state.get("gatheredDataSummary") if isinstance(state.get("gatheredDataSummary"), dict) else {}
    if len(handoff.canonical(carried)) > MAX_STATE_CHARS:
        raise handoff.HandoffRefused(f"Invalid handoff block: payload could not be restored (its gathered data is "
                                     f"larger than the {MAX_STATE_CHARS:,}-character state limit).")
    restored_from = {"agentName": state["agentName"], "goalId": state["goalId"][:40], "version": state["version"],
                     "stepsCompleted": state["goalProgress"].get("stepsCompleted"),
                     "preparedAt": state["preparedAt"][:40]}
    started = agent_execute(caller=caller, agent=agent, parameters=values, restored={
        "restoredFrom": restored_from, "handoffSummary": carried})
    audit_record(caller=caller, action="agent.handoff_resume", target=f"agent '{agent.name}'",
                 detail={"goalId": started.execution.pk, "originalGoalId": restored_from["goalId"]})
    return started, state


# --- state -----------------------------------------------------------------------------------

def last_step(execution: AgentExecution) -> dict[str, Any] | None:
    step = execution.steps.order_by("-number").first()
    return decision(step) if step is not None else None


def block_state(*, caller: Caller, agent_name: str) -> dict[str, Any]:
    """Whether the danger zone blocks the agent, and where its owner reads the code that lifts it."""
    block = dangerzone.agent_block_open(user=caller.user, agent_name=agent_name)
    if block is None:
        return {"dangerZoneBlocked": False}
    state: dict[str, Any] = {"dangerZoneBlocked": True, "blockReason": block.reason,
                             "blockedAt": block.blocked_at.isoformat()}
    challenge = block.challenges.filter(used_at=None).order_by("-created_at").first()
    if challenge is not None:
        state.update(challengeId=str(challenge.pk), url=dangerzone.challenge_url(challenge),
                     expiresAt=challenge.expires_at.isoformat())
    return state


def _summary(execution: AgentExecution) -> dict[str, Any]:
    return {"goalId": execution.pk, "goal": execution.goal, "status": execution.status,
            "stepCount": execution.step_count, "startedAt": execution.started_at.isoformat()}


def execution_state(*, caller: Caller, agent_name: str, include_history: bool = False,
                    include_context: bool = False) -> dict[str, Any]:
    """The agent's current execution (its latest if none is in progress; idle if it never ran),
    its executions in progress, and its danger-zone block. Answered while the agent is blocked."""
    executions = executions_list(caller=caller, agent_name=agent_name)
    running = list(executions.filter(status=Status.IN_PROGRESS)[:MAX_IN_PROGRESS])
    execution = running[0] if running else executions.first()
    blocked = block_state(caller=caller, agent_name=agent_name)
    if execution is None:
        return {"agentName": agent_name, "goalId": None, "status": "idle", "goalCount": 0, "activeGoals": [],
                **blocked}
    state: dict[str, Any] = {
        "agentName": agent_name, "goalId": execution.pk, "goal": execution.goal, "status": execution.status,
        "outcome": execution.outcome or None, "summary": execution.summary or None,
        "stateVersion": execution.state_version, "stepCount": execution.step_count,
        "maxAutonomousSteps": execution_max_steps(execution), "stepsRemaining": steps_remaining(execution),
        "continuations": execution.continuations, "retries": execution.retries,
        "consecutiveFailures": execution.consecutive_failures,
        "circuitOpenUntil": execution.circuit_open_until.isoformat() if execution.circuit_open_until else None,
        "resumedFrom": execution.resumed_from or None, "startedAt": execution.started_at.isoformat(),
        "updatedAt": execution.updated_at.isoformat(),
        "finishedAt": execution.finished_at.isoformat() if execution.finished_at else None,
        "goalCount": len(running), "activeGoals": [_summary(e) for e in running], "lastStep": last_step(execution),
        "gatheredDataSummary": gathered_summary(execution), **blocked,
    }
    pending = verification_pending(execution) if execution.status == Status.IN_PROGRESS else None
    if pending is not None:
        state["awaitingVerification"] = verification_answer(
            pending, "This execution is paused until its owner passes this challenge to verify_challenge.")
    if include_history:
        state["decisionHistory"] = decision_history(execution)
    if include_context:
        settings = execution.settings
        state["context"] = {
            "parameters": execution.parameters, "successCriteria": execution.success_criteria,
            "systemPrompt": settings.get("systemPrompt", ""), "tools": settings.get("tools", {}),
            "autonomy": settings.get("autonomy", {}), "resilience": settings.get("resilience", {}),
            "activeElements": brought_in(execution),
            **({"restoredFrom": settings["restoredFrom"]} if settings.get("restoredFrom") else {}),
        }
    return state


def execution_gathered_data(*, caller: Caller, agent_name: str, goal_id: str) -> dict[str, Any]:
    """What an execution's steps found, with the summary of its steps (and, for an execution
    resumed from a handoff, what the handoff carried)."""
    refuse_if_blocked(caller=caller, agent_name=agent_name)
    execution = execution_get(caller=caller, goal_id=goal_id, agent_name=agent_name)
    if execution.status == Status.ABORTED:
        raise aborted_refusal(execution)
    data: dict[str, Any] = {
        "goalId": execution.pk, "agentName": agent_name, "entries": gathered_entries(execution),
        "summary": gathered_summary(execution), "goal": {"description": execution.goal, "status": execution.status},
    }
    if execution.settings.get("restoredFrom"):
        data["restored"] = {"restoredFrom": execution.settings["restoredFrom"],
                            "gatheredDataSummary": execution.settings.get("handoffSummary") or {}}
    return data
