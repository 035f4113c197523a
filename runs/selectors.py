"""Reads for runs: the AdvanceResult every run tool answers with, run lists and histories. Always
within the caller's exact scope (their user, and the project or the global namespace)."""

from __future__ import annotations

import hashlib
from datetime import date, datetime
from typing import Any

from django.db.models import Count, Max, Sum
from django.db.models.functions import TruncDate

from runs.answerers import waiting_for
from runs.engine import paused_node, public_url
from runs.models import NodeRun, Run, Turn
from workflows.scoping import Scope

FANOUT_HINT = ("Desktop chat cannot spawn subagents: run each agent's prompt yourself, one after another, "
               "without showing one agent another's answer, then return every answer in order.")


def _money(value: Any) -> float:
    return float(round(value, 6))


def cost_fields(run: Run) -> dict[str, Any]:
    return {
        "totalCostUsd": _money(run.total_cost_usd),
        "meteredCostUsd": _money(run.metered_cost_usd),
        "subscriptionEquivCostUsd": _money(run.subscription_equiv_cost_usd),
        "billingMode": run.billing_mode,
        "inputTokens": run.input_tokens,
        "outputTokens": run.output_tokens,
    }


def root_of(run: Run) -> Run:
    while run.parent_id:
        run = Run.objects.select_related("project").get(pk=run.parent_id)
    return run


def pending_step(run: Run) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(pendingStep, awaitingChild) of a paused run; a run waiting on a child shows the child's step."""
    if run.status != Run.Status.PAUSED:
        return None, None
    node_run = paused_node(run)
    if node_run is None:
        return None, None
    if node_run.node_type == "subworkflow":
        child = Run.objects.select_related("project").filter(pk=node_run.input.get("childRunId")).first()
        if child is None:
            return None, None
        step, _ = pending_step(child)
        return step, {"childRunId": child.pk}
    node = run.definition["nodes"][node_run.node_id]
    nodes = run.definition["nodes"]
    transitions = [
        {"event": event, "target": target, **({"targetLabel": nodes[target]["label"]}
                                               if "label" in nodes.get(target, {}) else {})}
        for event, target in node.get("transitions", {}).items()
    ]
    step = {"runId": run.pk, "stepId": node_run.step_id, "nodeId": node_run.node_id,
            "nodeType": node_run.node_type, **node_run.input, "validTransitions": list(node.get("transitions", {}))}
    step.setdefault("prompt", "")
    if "label" in node:
        step["label"] = node["label"]
    step["transitions"] = transitions
    return step, None


def advance_result(run: Run) -> dict[str, Any]:
    """The AdvanceResult shape, for the run's root (a child's answer moves its parent on by itself),
    with waitingFor: who answers its pending step ({who, message}), or null when it waits for no one."""
    root = root_of(run)
    step, awaiting = pending_step(root)
    result: dict[str, Any] = {"runId": root.pk, "status": root.status, "url": public_url(root)}
    if step is not None:
        result["pendingStep"] = step
        if root.host == "desktop_chat" and step["nodeType"] in ("consensus", "round_robin", "map"):
            result["hostHint"] = FANOUT_HINT
    if awaiting is not None:
        result["awaitingChild"] = awaiting
    # Who answers the pending step, in words (an Atrium extension of the reference's AdvanceResult).
    result["waitingFor"] = waiting_for(root)
    if root.stop_reason and root.stop_reason != "cancelled":
        result["stop_reason"] = root.stop_reason
    if root.error:
        result["error"] = root.error
    if root.status == Run.Status.COMPLETED:
        result["output"] = root.output
    return {**result, **cost_fields(root)}


def start_result(run: Run) -> dict[str, Any]:
    """What starting a run answers (start_workflow, POST /api/runs/): AdvanceResult plus the workflow
    and a ready-to-send opening line naming it and its live URL."""
    result = advance_result(run)
    name = run.workflow_name
    return {
        **result,
        "workflow": {"id": run.workflow_key, "name": name, "description": run.workflow_description or None},
        "narration": f"Started the workflow \u201c{name}\u201d. Follow it live: {result['url']}",
    }


def run_list(*, scope: Scope, workflow_id: str | None = None, status: str | None = None,
             since: datetime | None = None, limit: int = 25, kind: str = "real") -> list[dict[str, Any]]:
    runs = Run.objects.filter(owner=scope.owner, project=scope.project)
    if kind != "all":
        runs = runs.filter(kind=kind)
    if workflow_id:
        runs = runs.filter(workflow_key=workflow_id)
    if status:
        runs = runs.filter(status=status)
    if since:
        runs = runs.filter(started_at__gte=since)
    return [run_row(run) for run in runs.order_by("-started_at", "-pk")[:limit]]


def runs_of_owner(*, user: Any, workflow: str = "", status: str = "", project: str = "",
                  since: datetime | None = None) -> Any:
    """The console's run list: `user`'s real runs and playbook executions (not subworkflows), newest
    first; `project` is a project id or "global"."""
    runs = Run.objects.filter(owner=user, parent__isnull=True, kind=Run.Kind.REAL).select_related(
        "project", "playbook")
    if workflow:
        runs = runs.filter(workflow_key=workflow)
    if status:
        runs = runs.filter(status=status)
    if project == "global":
        runs = runs.filter(project__isnull=True)
    elif project:
        runs = runs.filter(project__project_id=project)
    if since:
        runs = runs.filter(started_at__gte=since)
    return runs.order_by("-started_at", "-pk")


def run_row(run: Run) -> dict[str, Any]:
    return {"id": run.pk, "workflowId": run.workflow_key, "workflowName": run.workflow_name, "status": run.status,
            "startedAt": run.started_at, "completedAt": run.completed_at,
            "source": run.project_key or "global", "workflowSource": run.workflow_source, "kind": run.kind}


def _node_row(node_run: NodeRun, children: list[NodeRun]) -> dict[str, Any]:
    return {
        "id": node_run.pk, "nodeId": node_run.node_id, "nodeType": node_run.node_type, "status": node_run.status,
        "startedAt": node_run.started_at, "completedAt": node_run.completed_at, "durationMs": node_run.duration_ms,
        "attempts": node_run.attempts, "input": node_run.input, "output": node_run.output,
        "error": node_run.error or None, "event": node_run.event or None,
        "turns": [{"phase": t.phase, "agentIndex": t.agent_index, "model": t.model, "prompt": t.prompt,
                   "response": t.response, "thinking": t.thinking or None, "usage": t.usage,
                   "costUsd": _money(t.cost_usd), "estimated": t.estimated, "at": t.created_at}
                  for t in node_run.turns.all()],
        "children": [_node_row(child, []) for child in children],
    }


def run_history(run: Run) -> dict[str, Any]:
    node_runs = list(run.nodes.prefetch_related("turns").order_by("seq", "id"))
    by_parent: dict[int | None, list[NodeRun]] = {}
    for node_run in node_runs:
        by_parent.setdefault(node_run.parent_id, []).append(node_run)
    awaiting = None
    paused = paused_node(run) if run.status == Run.Status.PAUSED else None
    if paused is not None and paused.node_type == "subworkflow":
        awaiting = {"childRunId": paused.input.get("childRunId")}
    return {
        "run": {**run_row(run), "context": run.context, "parentRunId": run.parent_id,
                "childRunIds": list(run.children.order_by("started_at").values_list("pk", flat=True)),
                "awaitingChild": awaiting, "stop_reason": run.stop_reason or None, "error": run.error or None,
                "output": run.output, "url": public_url(run), **cost_fields(run)},
        "nodes": [_node_row(n, by_parent.get(n.pk, [])) for n in by_parent.get(None, [])],
    }


def run_owned(user: Any, run_id: str) -> Run | None:
    """The run when `user` owns it. The page's ?project= is informational: the id is unique, and
    anyone else's run is "not found", so its existence does not leak."""
    return Run.objects.select_related("project", "parent", "playbook", "trigger").filter(pk=run_id, owner=user).first()


def run_version(run: Run) -> str:
    """Changes whenever anything the page shows does: the run row, its node visits and turns, and
    its child runs (a parent waiting on a child shows the child's step)."""
    visits = NodeRun.objects.filter(run=run).aggregate(count=Count("id"), done=Max("completed_at"))
    turns = Turn.objects.filter(node_run__run=run).count()
    children = Run.objects.filter(parent=run).aggregate(count=Count("id"), updated=Max("updated_at"))
    parts = (run.updated_at.isoformat(), run.status, run.current_node, visits["count"], visits["done"], turns,
             children["count"], children["updated"])
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:20]


def run_costs_by_day(*, user: Any, since: datetime) -> list[tuple[date, float]]:
    """The cost of the user's runs started since `since`, summed per day (UTC), oldest first."""
    rows = (Run.objects.filter(owner=user, parent__isnull=True, started_at__gt=since).order_by()
            .annotate(day=TruncDate("started_at")).values("day").annotate(cost=Sum("total_cost_usd")).order_by("day"))
    return [(row["day"], _money(row["cost"] or 0)) for row in rows]
