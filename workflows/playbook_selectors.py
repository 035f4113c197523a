"""Reads for playbooks, their executions and the dashboard. Always the caller's own rows: another
user's playbook or execution is "not found".

An execution is a run with `playbook` set; its id is the run's id (the reference's execution and
session ids), and its page is the run page.
"""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from core.caller import Caller
from core.errors import NotFound
from integrations import selectors as capability_selectors
from runs.engine import public_url
from runs.models import NodeRun, Run
from runs.selectors import cost_fields, pending_step
from workflows import yamltext
from workflows.models import Playbook, Trigger, TriggerFiring
from workflows.playbooks import playbook_get_owned, playbook_version
from workflows.triggers import trigger_describe

HEALTHY, NOT_READY = "Healthy", "Not Ready"
ACTIVE = (Run.Status.PENDING, Run.Status.RUNNING, Run.Status.PAUSED)


def execution_not_found() -> NotFound:
    return NotFound("Execution not found. executions_list shows your executions and their ids.",
                    code="execution_not_found")


def user_tz(caller: Caller) -> ZoneInfo:
    """The caller's timezone (what their schedules mean), UTC when it is not a zone this server knows."""
    try:
        return ZoneInfo(caller.user.timezone or "UTC")
    except (ValueError, KeyError):
        return ZoneInfo("UTC")


# --- status ------------------------------------------------------------------------------------------

def _integration_states(caller: Caller, playbook: Playbook) -> list[dict[str, Any]]:
    return capability_selectors.integration_states(caller=caller, integration_ids=list(playbook.integrations))


def playbook_status(*, caller: Caller, playbook: Playbook, triggers: list[Trigger] | None = None,
                    integrations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Healthy when at least one trigger is active and every integration it needs is connected; Not
    Ready otherwise, with each reason in words."""
    triggers = list(playbook.triggers.all()) if triggers is None else triggers
    integrations = _integration_states(caller, playbook) if integrations is None else integrations
    reasons = []
    if playbook.workflow_id is None:
        reasons.append("Its workflow was deleted: save the plan again to recompile it.")
    for state in integrations:
        if not state["available"]:
            reasons.append(f"The integration {state['integrationId']} is not available on this server.")
        elif not state["connected"]:
            reasons.append(f"{state['name']} ({state['integrationId']}) is not connected: connect it with the "
                           "vault tool.")
    if not triggers:
        reasons.append("It has no trigger: add a schedule, an event or a webhook trigger.")
    elif not any(t.enabled for t in triggers):
        reasons.append("No trigger is active: turn one on with playbooks_trigger_activate.")
    return {"status": NOT_READY if reasons else HEALTHY, "reasons": reasons}


# --- triggers ---------------------------------------------------------------------------------------

def trigger_owned(*, caller: Caller, playbook_id: str, trigger_id: str) -> Trigger:
    """One trigger of one of the caller's playbooks, by the ids a URL names."""
    playbook = playbook_get_owned(caller=caller, playbook_id=playbook_id)
    trigger = Trigger.objects.filter(pk=int(trigger_id), playbook=playbook).first() if trigger_id.isdigit() and \
        len(trigger_id) < 18 else None
    if trigger is None:
        raise NotFound("Trigger not found on this playbook.", code="trigger_not_found")
    return trigger


# --- executions -------------------------------------------------------------------------------------

def executions_owned(*, caller: Caller) -> QuerySet[Run]:
    return Run.objects.filter(owner=caller.user, playbook__isnull=False, parent__isnull=True)


def execution_row(run: Run) -> dict[str, Any]:
    return {
        "executionId": run.pk, "sessionId": run.pk, "playbookId": run.playbook_id,
        "playbookName": run.playbook.name if run.playbook_id and run.playbook else run.workflow_name,
        "status": run.status, "startedBy": "trigger" if run.trigger_id else "user",
        "triggerId": run.trigger_id, "startedAt": run.started_at, "completedAt": run.completed_at,
        "stopReason": run.stop_reason or None, "error": run.error or None,
        "totalCostUsd": cost_fields(run)["totalCostUsd"], "url": public_url(run),
    }


def execution_started(run: Run) -> dict[str, Any]:
    """What starting an execution answers (playbooks_execute, POST .../execute/): its ids, where it
    got to (a run driven in the request may already have paused or ended), and its page."""
    run.refresh_from_db(fields=["status"])
    return {"executionId": run.pk, "sessionId": run.pk, "playbookId": run.playbook_id, "status": run.status,
            "url": public_url(run)}


def executions_list(*, caller: Caller, limit: int = 20, offset: int = 0,
                    playbook: Playbook | None = None) -> dict[str, Any]:
    runs = executions_owned(caller=caller)
    if playbook is not None:
        runs = runs.filter(playbook=playbook)
    total = runs.count()
    page = runs.select_related("playbook", "project").order_by("-started_at", "-pk")[offset:offset + limit]
    return {"executions": [execution_row(run) for run in page], "total": total, "limit": limit, "offset": offset}


def execution_get_owned(*, caller: Caller, execution_id: str) -> Run:
    run = executions_owned(caller=caller).select_related("playbook", "project").filter(pk=execution_id).first()
    if run is None:
        raise execution_not_found()
    return run


def _turn_messages(node_run: NodeRun) -> list[dict[str, Any]]:
    messages = []
    for turn in node_run.turns.all():
        if turn.phase == "human":
            messages.append({"role": "user", "content": f"Chose {turn.response!r}.", "stepId": node_run.node_id,
                             "at": turn.created_at})
            continue
        messages.append({"role": "user", "content": turn.prompt, "stepId": node_run.node_id, "at": turn.created_at})
        messages.append({"role": "assistant", "content": turn.response, "stepId": node_run.node_id,
                         "model": turn.model or None, "at": turn.created_at})
    return messages


def _step_message(run: Run, node_run: NodeRun) -> dict[str, Any] | None:
    node = run.definition.get("nodes", {}).get(node_run.node_id, {})
    label = node.get("label") or node_run.node_id
    if node_run.node_type == "end":
        return None
    if node_run.node_type == "script":
        name = node.get("capability")
        what = f"{name}" if name else "the script"
        if node_run.status == NodeRun.Status.COMPLETED:
            return {"role": "tool", "content": node_run.output, "name": name, "stepId": node_run.node_id,
                    "title": label, "at": node_run.completed_at}
        if node_run.status == NodeRun.Status.FAILED:
            return {"role": "tool", "content": {"error": node_run.error or f"{what} failed", "output": node_run.output},
                    "name": name, "stepId": node_run.node_id, "title": label, "at": node_run.completed_at}
        return {"role": "system", "content": f"{label}: running {what}.", "stepId": node_run.node_id,
                "at": node_run.started_at}
    return None


def execution_messages(run: Run) -> list[dict[str, Any]]:
    """A simplified chat transcript of the execution: each AI turn as the prompt and the answer, each
    capability step's result as a tool message, and where the run stands now."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"Execution of {run.workflow_name} started.",
                                       "at": run.started_at}]
    for node_run in run.nodes.filter(parent__isnull=True).prefetch_related("turns").order_by("seq", "id"):
        messages.extend(_turn_messages(node_run))
        step = _step_message(run, node_run)
        if step is not None:
            messages.append(step)
    if run.status == Run.Status.PAUSED:
        step, _ = pending_step(run)
        if step is not None:
            messages.append({"role": "system", "content": f"Waiting at {step.get('label') or step['nodeId']}: "
                             f"{_waiting(run).get('message', 'waiting for an answer.')}", "stepId": step["nodeId"],
                             "at": run.updated_at})
    elif run.is_terminal:
        ending = f"Execution {run.status}." + (f" {run.error}" if run.error else "")
        messages.append({"role": "system", "content": ending, "at": run.completed_at})
    return messages


def _waiting(run: Run) -> dict[str, Any]:
    from runs.answerers import waiting_for

    return waiting_for(run) or {}


def execution_detail(run: Run) -> dict[str, Any]:
    step, awaiting = pending_step(run)
    detail = {
        **execution_row(run), "input": run.context, "result": run.output if run.is_terminal else None,
        "pendingStep": step, "awaitingChild": awaiting, "waitingFor": _waiting(run) or None,
        "messages": execution_messages(run), "costs": cost_fields(run),
    }
    return detail


def execution_messages_get(*, caller: Caller, session_id: str) -> dict[str, Any]:
    run = execution_get_owned(caller=caller, execution_id=session_id)
    return {"sessionId": run.pk, "status": run.status, "done": run.is_terminal, "messages": execution_messages(run)}


# --- playbooks ---------------------------------------------------------------------------------------

def _last_executions(caller: Caller, playbook_ids: list[str]) -> dict[str, Run]:
    """Each playbook's newest execution, in one query however many executions each has."""
    owned = executions_owned(caller=caller)
    newest = owned.filter(playbook_id=OuterRef("playbook_id")).order_by("-started_at", "-pk").values("pk")[:1]
    runs = owned.filter(playbook_id__in=playbook_ids, pk=Subquery(newest)).select_related("playbook", "project")
    return {run.playbook_id: run for run in runs}


def _row(caller: Caller, playbook: Playbook, last: Run | None, running: int = 0) -> dict[str, Any]:
    triggers = list(playbook.triggers.all())
    status = playbook_status(caller=caller, playbook=playbook, triggers=triggers)
    upcoming = [t.next_fire_at for t in triggers if t.enabled and t.next_fire_at]
    return {
        "playbookId": playbook.pk, "name": playbook.name, "goal": playbook.goal, "status": status["status"],
        "statusReasons": status["reasons"], "triggerActive": any(t.enabled for t in triggers),
        "triggers": [trigger_describe(t, tz=user_tz(caller)) for t in triggers],
        "nextFireAt": min(upcoming) if upcoming else None,
        "integrations": list(playbook.integrations), "runningExecutions": running,
        "lastExecution": execution_row(last) if last is not None else None,
        "detached": bool(playbook.detached_reason), "updatedAt": playbook.updated_at,
    }


def playbook_list(*, caller: Caller, limit: int = 20, offset: int = 0) -> dict[str, Any]:
    playbooks = Playbook.objects.filter(owner=caller.user)
    total = playbooks.count()
    page = list(playbooks.order_by("-updated_at", "id").prefetch_related("triggers")[offset:offset + limit])
    last = _last_executions(caller, [p.pk for p in page])
    return {"playbooks": [_row(caller, p, last.get(p.pk)) for p in page], "total": total, "limit": limit,
            "offset": offset}


def playbook_detail(*, caller: Caller, playbook_id: str) -> dict[str, Any]:
    playbook = playbook_get_owned(caller=caller, playbook_id=playbook_id)
    triggers = list(playbook.triggers.all())
    integrations = _integration_states(caller, playbook)
    status = playbook_status(caller=caller, playbook=playbook, triggers=triggers, integrations=integrations)
    workflow = playbook.workflow
    tz = user_tz(caller)
    return {
        "playbookId": playbook.pk, "name": playbook.name, "goal": playbook.goal, "status": status["status"],
        "statusReasons": status["reasons"], "plan": playbook.plan,
        "content": workflow.yaml_text if workflow else yamltext.yaml_dump(playbook.plan),
        "workflowId": workflow.workflow_id if workflow else None,
        "detached": bool(playbook.detached_reason), "detachedReason": playbook.detached_reason or None,
        "integrations": integrations,
        "triggers": [trigger_describe(t, tz=tz) for t in triggers],
        "templateId": playbook.template_id,
        "spendingCapUsd": float(playbook.spending_cap_usd) if playbook.spending_cap_usd is not None else None,
        "version": playbook_version(playbook), "createdAt": playbook.created_at, "updatedAt": playbook.updated_at,
    }


def playbook_history(*, caller: Caller, playbook_id: str, limit: int = 10) -> dict[str, Any]:
    playbook = playbook_get_owned(caller=caller, playbook_id=playbook_id)
    listed = executions_list(caller=caller, limit=limit, playbook=playbook)
    return {"playbookId": playbook.pk, "name": playbook.name, "executions": listed["executions"],
            "total": listed["total"]}


def dashboard_overview(*, caller: Caller) -> dict[str, Any]:
    """Playbooks with an active trigger or a running execution, each with its status and last result."""
    running = dict(executions_owned(caller=caller).filter(status__in=ACTIVE).values_list("playbook_id")
                   .annotate(n=Count("pk")).values_list("playbook_id", "n"))
    playbooks = list(Playbook.objects.filter(owner=caller.user).filter(
        Q(triggers__enabled=True) | Q(pk__in=list(running))).distinct().prefetch_related("triggers")
        .order_by("-updated_at", "id")[:200])
    last = _last_executions(caller, [p.pk for p in playbooks])
    rows = [_row(caller, p, last.get(p.pk), running.get(p.pk, 0)) for p in playbooks]
    return {
        "playbooks": rows,
        "totals": {"playbooks": Playbook.objects.filter(owner=caller.user).count(), "shown": len(rows),
                   "healthy": sum(r["status"] == HEALTHY for r in rows),
                   "notReady": sum(r["status"] == NOT_READY for r in rows),
                   "runningExecutions": sum(running.values())},
    }


def firing_list(*, caller: Caller, playbook_id: str, limit: int = 20, offset: int = 0) -> dict[str, Any]:
    """When the playbook's triggers fired, why, and the execution each started or why it started none."""
    playbook = playbook_get_owned(caller=caller, playbook_id=playbook_id)
    firings = TriggerFiring.objects.filter(playbook=playbook, owner=caller.user).select_related("trigger")
    total = firings.count()
    return {"firings": [{"firingId": f.pk, "triggerId": f.trigger_id, "type": f.trigger.kind, "firedAt": f.fired_at,
                         "reason": f.reason, "outcome": f.outcome, "detail": f.detail or None,
                         "executionId": f.run_id} for f in firings[offset:offset + limit]],
            "total": total, "limit": limit, "offset": offset}


def created_triggers(playbook: Playbook) -> list[dict[str, Any]]:
    """The one-time values of the triggers a write just made (a webhook's URL and signing secret):
    shown in that write's answer only, never again."""
    return [{"triggerId": created.trigger.pk, **created.secrets}
            for created in getattr(playbook, "created_triggers", []) if created.secrets]
