"""The run engine: a state machine over Run and NodeRun rows.

`run_start` creates a run and drives it: script, condition and subworkflow nodes run at once,
and the run pauses at the first node that needs an answer (runs.nodes). `run_answer` applies
an answer under the run's row lock, then drives on in the same transaction, up to the next pause
or end, the next script or the next child run: a run survives a restart at any point, and a crash
mid-way loses only the answer in flight, which its client sees fail. The run's row is written once
per transaction, and each node visit once when it pauses or ends.

Script nodes run in a separate process (runs.sandbox), handed to a Celery worker when a broker is
set, else to a thread of this process (runs.scripts); a web request waits for scripts at most
ATRIUM_SCRIPT_WAIT_SECONDS, then answers with the run `running`.

Who answers a paused node is not the engine's business: runs.answerers keeps the table (the MCP
host for AI steps, a person for human steps, the operator's model backend for the AI steps of runs
started by triggers), and `drive` tells it each time it leaves a run paused. Every answer, whoever
gives it, comes back through `run_answer` with the step's identity.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from jsonschema import Draft202012Validator

from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError, NotFound
from runs import costs
from runs.handlers import HANDLERS, node_types_check
from runs.models import NodeRun, Run, ScriptSettings, StepShown
from runs.nodes import AnswerRejected, Ctx, Step
from workflows import expressions
from workflows.events import event_emit
from workflows.models import Workflow, WorkflowRevision
from workflows.scoping import Scope
from workflows.selectors import workflow_find

logger = logging.getLogger(__name__)

RUN_NOT_FOUND = "Run not found."


class RunError(DomainError):
    """A run tool's user error, answered as {error}."""

    code = "run_error"


def run_not_found() -> NotFound:
    return NotFound(RUN_NOT_FOUND, code="run_not_found")


# --- loading ---------------------------------------------------------------------------------------

def run_get(*, scope: Scope, run_id: str, kind: str | None = Run.Kind.REAL) -> Run:
    """The run, when it belongs to this caller and this exact scope: another project's (or user's)
    run is "not found", so its existence does not leak."""
    runs = Run.objects.select_related("project").filter(pk=run_id, owner=scope.owner, project=scope.project)
    if kind is not None:
        runs = runs.filter(kind=kind)
    run = runs.first()
    if run is None:
        raise run_not_found()
    return run


# Written once, when the run is created; later saves leave them out (a definition can be tens of KB).
RUN_FIXED = {"id", "owner", "project", "workflow", "revision", "workflow_key", "workflow_name", "workflow_description",
             "workflow_source", "definition", "context", "kind", "host", "parent", "parent_node", "spending_cap_usd",
             "spending_cap_tokens", "billing_mode", "started_at"}
RUN_PROGRESS = [field.name for field in Run._meta.concrete_fields if field.name not in RUN_FIXED]


def _save(run: Run) -> None:
    if getattr(run, "_save_pending", None) is not None:
        run._save_pending = True
        return
    run.save(update_fields=RUN_PROGRESS)


@contextmanager
def _saved_once(run: Run) -> Iterator[None]:
    """Within: the engine's saves of `run` are one UPDATE at the end. Driving a run through an answer,
    a condition and the next pause touches the row three or four times; no one else can see it
    meanwhile (the row is locked, or not yet committed), so only the last state needs writing."""
    if getattr(run, "_save_pending", None) is not None:
        yield  # an outer block saves it
        return
    run._save_pending = False
    try:
        yield
    except BaseException:
        del run._save_pending
        raise
    pending = run._save_pending
    del run._save_pending
    if pending:
        _save(run)


def run_locked(run_id: str) -> Run:
    """The run, under its row lock: call inside transaction.atomic()."""
    return Run.objects.select_for_update(of=("self",)).select_related("project").get(pk=run_id)


def _run_locked_in(scope: Scope, run_id: str) -> Run:
    """run_get and run_locked in one statement: the caller's run (of any kind), under its row lock."""
    run = Run.objects.select_for_update(of=("self",)).select_related("project").filter(
        pk=run_id, owner=scope.owner, project=scope.project).first()
    if run is None:
        raise run_not_found()
    return run


def _definition_node(run: Run, node_id: str) -> dict[str, Any]:
    return run.definition["nodes"][node_id]


def _model_for(run: Run, node: dict[str, Any]) -> str:
    return node.get("model") or run.definition.get("model") or costs.default_model() or ""


def paused_node(run: Run) -> NodeRun | None:
    # The engine keeps on the run object the visit it last paused at (or read), so a result built
    # from the run it just drove reads nothing again. It is used only while it still matches the
    # object's own state: anything that moved the run on also changed these fields in memory.
    known = getattr(run, "_paused_node", None)
    if (known is not None and run.status == Run.Status.PAUSED and known.status == NodeRun.Status.PAUSED
            and known.node_id == run.current_node and known.pk is not None):
        return known
    node_run = run.nodes.filter(node_id=run.current_node, status=NodeRun.Status.PAUSED, parent=None).order_by(
        "-seq").first()
    run._paused_node = node_run
    return node_run


# --- starting --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Caps:
    usd: Decimal | None = None
    tokens: int | None = None


# What a run's cap columns hold: numeric(12, 6) dollars and a bigint of tokens. A larger cap would
# be refused by PostgreSQL mid-start, so adapters refuse it first.
MAX_SPENDING_CAP_USD = 999_999
MAX_SPENDING_CAP_TOKENS = 2**63 - 1


def caps_from(*, usd: float | None, tokens: int | None) -> Caps:
    """Caps as a caller gives them, the dollars kept to the micro-dollar the run stores."""
    return Caps(usd=None if usd is None else Decimal(str(usd)).quantize(Decimal("0.000001")), tokens=tokens)


def _context_check(definition: dict[str, Any], context: dict[str, Any]) -> None:
    schema = definition.get("context")
    if not schema:
        return
    problems = sorted(Draft202012Validator(schema).iter_errors(context), key=lambda e: list(e.path))
    if problems:
        details = "; ".join(f"{'.'.join(map(str, p.path)) or 'context'}: {p.message}" for p in problems)
        raise RunError(f"The context does not match the workflow's context schema: {details}.",
                       code="invalid_context")


def _billing_mode(host: str | None) -> str:
    # A host with subagents runs fan-out on the user's subscription; a chat client pays per call.
    return "metered" if host == "desktop_chat" else "subscription"


def run_create(*, caller: Caller, scope: Scope, definition: dict[str, Any], context: dict[str, Any] | None,
               workflow: Workflow | None, workflow_key: str, source: str, host: str | None = None,
               caps: Caps = Caps(), kind: str = Run.Kind.REAL, parent: Run | None = None,
               parent_node: str = "", playbook: Any = None, trigger: Any = None) -> Run:
    context = context or {}
    _context_check(definition, context)
    revision = (WorkflowRevision.objects.filter(workflow=workflow).order_by("-created_at", "-id").first()
                if workflow is not None else None)
    run = Run.objects.create(
        owner=scope.owner, project=scope.project, workflow=workflow, revision=revision, workflow_key=workflow_key,
        workflow_name=str(definition.get("name", workflow_key)),
        workflow_description=str(definition.get("description") or ""), workflow_source=source,
        definition=definition, context=context, status=Run.Status.RUNNING, kind=kind, host=host or "",
        current_node=definition["start"], parent=parent, parent_node=parent_node,
        spending_cap_usd=caps.usd, spending_cap_tokens=caps.tokens, billing_mode=_billing_mode(host),
        playbook=playbook if playbook is not None else getattr(parent, "playbook", None),
        trigger=trigger if trigger is not None else getattr(parent, "trigger", None),
    )
    # Who started a run is worth keeping; a child run is its parent's doing, and a test leaves nothing.
    if parent is None and kind == Run.Kind.REAL:
        _audit(caller, run, "start")
    return run


def _audit(caller: Caller, run: Run, verb: str, **detail: Any) -> None:
    audit_record(caller=caller, action=f"run.{verb}", target=f"run {run.pk} of workflow '{run.workflow_key}'",
                 detail={"project": run.project_key or None, **detail})


def run_start(*, caller: Caller, scope: Scope, workflow_id: str, source: str | None, context: dict[str, Any] | None,
              host: str | None, caps: Caps, kind: str = Run.Kind.REAL) -> Run:
    workflow = workflow_find(scope=scope, workflow_id=workflow_id, source=source)
    with transaction.atomic():
        run = run_create(caller=caller, scope=scope, definition=workflow.config, context=context, workflow=workflow,
                         workflow_key=workflow.workflow_id, source=workflow.source, host=host, caps=caps, kind=kind)
        # Not committed yet, so no one else can see it: driven here without a lock of its own.
        action, target = _advance(run)
    return _drive_on(run, action, target)


def run_dispatch(run_id: str) -> None:
    """Have a new run driven: by a worker once the run is committed, when there is a broker (one that
    is down leaves it to scripts_reap, which sends runs that never started), else here and now."""
    from runs.tasks import run_drive

    if run_drive.app.conf.task_always_eager:
        drive(run_id)
    else:
        transaction.on_commit(lambda: _run_send(run_id))


def _run_send(run_id: str) -> None:
    from runs.tasks import run_drive

    try:
        run_drive.apply_async((run_id,), retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5,
                                                       "interval_max": 1})
    except Exception as exc:  # kombu's OperationalError, or the transport's own connection errors
        logger.warning("Could not send run %s to a worker (%s); it will be sent again", run_id, exc)


def runs_unstarted_send(*, older_than: timedelta) -> int:
    """Send again the runs that were created but never entered a node (their send failed)."""
    cutoff = timezone.now() - older_than
    unstarted = Run.objects.filter(status=Run.Status.RUNNING, parent__isnull=True, started_at__lt=cutoff,
                                   nodes__isnull=True)
    sent = 0
    for run_id in list(unstarted.values_list("pk", flat=True)[:500]):
        _run_send(run_id)
        sent += 1
    return sent


# --- driving ---------------------------------------------------------------------------------------

def _finish(run: Run, status: str, *, stop_reason: str = "", error: str = "", output: Any = None) -> None:
    run.status = status
    run.stop_reason = stop_reason
    run.error = error
    run.output = output
    run.completed_at = timezone.now()
    run.updated_at = run.completed_at
    _save(run)
    # A subworkflow's end is part of its parent's execution, and a test run is nobody's event.
    if status in (Run.Status.COMPLETED, Run.Status.FAILED) and run.parent_id is None and run.kind == Run.Kind.REAL:
        event_emit(owner_id=run.owner_id, name=f"run.{status}", data={
            "runId": run.pk, "workflowId": run.workflow_key, "playbookId": run.playbook_id, "status": str(status)})


def run_fail(run: Run, error: str, *, stop_reason: str = "error") -> None:
    _finish(run, Run.Status.FAILED, stop_reason=stop_reason, error=error)


def node_complete(node_run: NodeRun, *, status: str, output: Any = None, error: str = "", event: str = "") -> None:
    node_run.status = status
    node_run.output = output
    node_run.error = error
    node_run.event = event
    node_run.completed_at = timezone.now()
    node_run.duration_ms = int((node_run.completed_at - node_run.started_at).total_seconds() * 1000)
    node_run.save()


def _follow(run: Run, node_run: NodeRun, event: str) -> None:
    """Move the run along the node's transition for `event`, or fail it when there is none."""
    target = _definition_node(run, node_run.node_id).get("transitions", {}).get(event)
    if target is None:
        run_fail(run, f"Node {node_run.node_id!r} ended with {event!r}, which has no transition.",
                 stop_reason="unhandled_event")
        return
    run.current_node = target
    run.updated_at = timezone.now()
    _save(run)


def node_decide(run: Run, node_run: NodeRun, step: Step) -> None:
    """A node is decided: store its output where templates find it, then follow its event."""
    status = NodeRun.Status.FAILED if step.event in ("failure", "failed", "no_consensus") else \
        NodeRun.Status.COMPLETED
    node_complete(node_run, status=status, output=step.output, event=step.event or "")
    run.outputs = {**run.outputs, node_run.node_id: step.output}
    _follow(run, node_run, step.event or "")


def _enter(run: Run, node_id: str) -> NodeRun | None:
    """Count the visit (maxIterations) and open its NodeRun; None when the limit stopped the run."""
    node = _definition_node(run, node_id)
    visits = run.visits.get(node_id, 0) + 1
    limit = node.get("maxIterations")
    if limit is not None and visits > limit:
        run_fail(run, f"Node {node_id!r} would run a {visits}th time; its maxIterations is {limit}.",
                 stop_reason="max_iterations_exceeded")
        return None
    run.visits = {**run.visits, node_id: visits}
    _save(run)
    # Every visit opens one NodeRun, so the visits so far number them. It is written by whatever the
    # node's type does with it first (pauses it, decides it, hands it to a worker): one INSERT.
    seq = sum(run.visits.values()) - 1
    return NodeRun(run=run, seq=seq, node_id=node_id, node_type=node["type"], status=NodeRun.Status.RUNNING,
                   attempts=visits)


def template_scope(run: Run) -> dict[str, Any]:
    return {**run.outputs, "context": run.context}


def _condition(run: Run, node_run: NodeRun, node: dict[str, Any]) -> None:
    try:
        value = bool(expressions.evaluate(expressions.parse(node["if"]), template_scope(run)))
    except expressions.EvaluationError as exc:
        node_complete(node_run, status=NodeRun.Status.FAILED, error=str(exc))
        run_fail(run, f"Condition {node_run.node_id!r} could not be evaluated: {exc}")
        return
    node_run.input = {"if": node["if"]}
    node_decide(run, node_run, Step(event="true" if value else "false", output={"value": value}))


def _end(run: Run, node_run: NodeRun, node: dict[str, Any]) -> None:
    output = render_data(node.get("output"), template_scope(run)) if "output" in node else None
    node_complete(node_run, status=NodeRun.Status.COMPLETED, output=output)
    run.outputs = {**run.outputs, node_run.node_id: output}
    if node.get("status") == "failed":
        _finish(run, Run.Status.FAILED, stop_reason="failed_end", error=f"The run ended at {node_run.node_id!r}.",
                output=output)
    else:
        _finish(run, Run.Status.COMPLETED, output=output)


def render_data(value: Any, scope: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return expressions.template_value(value, scope)
    if isinstance(value, dict):
        return {k: render_data(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [render_data(v, scope) for v in value]
    return value


def _pause(run: Run, node_run: NodeRun, node: dict[str, Any]) -> bool:
    """Open a pausing node's first phase; True when it paused, False when it was decided at once."""
    handler = HANDLERS[node["type"]]
    model = _model_for(run, node)
    ctx = Ctx(run=run, node_run=node_run, node=node, model=model, record=_recorder(run, node_run, model))
    try:
        step = handler.enter(ctx)
    except (AnswerRejected, expressions.EvaluationError, ValueError) as exc:
        node_complete(node_run, status=NodeRun.Status.FAILED, error=str(exc))
        run_fail(run, f"Node {node_run.node_id!r} could not start: {exc}")
        return False
    if step is not None:
        node_decide(run, node_run, step)
        return False
    node_run.status = NodeRun.Status.PAUSED
    node_run.step += 1
    node_run.input = handler.pending(ctx)
    node_run.save()
    run.status = Run.Status.PAUSED
    run.updated_at = timezone.now()
    run._paused_node = node_run
    _save(run)
    return True


def _subworkflow(run: Run, node_run: NodeRun, node: dict[str, Any]) -> Run | None:
    """Start the child run; the parent waits, paused, until the child ends."""
    scope = Scope(owner=run.owner, project=run.project)
    try:
        child_workflow = workflow_find(scope=scope, workflow_id=node["workflow"])
        context = render_data(node.get("context", {}), template_scope(run))
        child = run_create(caller=Caller.trusted(run.owner, via="task"), scope=scope,
                           definition=child_workflow.config, context=context if isinstance(context, dict) else {},
                           workflow=child_workflow, workflow_key=child_workflow.workflow_id,
                           source=child_workflow.source, host=run.host, kind=run.kind, parent=run,
                           parent_node=node_run.node_id, caps=_remaining_caps(run))
    except DomainError as exc:
        node_complete(node_run, status=NodeRun.Status.FAILED, error=exc.message)
        run.outputs = {**run.outputs, node_run.node_id: None}
        _follow(run, node_run, "failed")
        return None
    node_run.status = NodeRun.Status.PAUSED
    node_run.input = {"workflow": node["workflow"], "context": child.context, "childRunId": child.pk}
    node_run.save()
    run.status = Run.Status.PAUSED
    run.updated_at = timezone.now()
    _save(run)
    return child


def _remaining_caps(run: Run) -> Caps:
    """A child may spend what its parent has left, so the two together stay within the parent's caps."""
    usd = run.spending_cap_usd - run.total_cost_usd if run.spending_cap_usd is not None else None
    tokens = (run.spending_cap_tokens - run.input_tokens - run.output_tokens
              if run.spending_cap_tokens is not None else None)
    return Caps(usd=max(usd, Decimal(0)) if usd is not None else None,
                tokens=max(tokens, 0) if tokens is not None else None)


def _scripts_allowed(run: Run) -> bool:
    own = ScriptSettings.objects.filter(user=run.owner).first()
    if own is not None:
        return own.scripts_enabled
    site = ScriptSettings.objects.filter(user__isnull=True).first()
    return site is None or site.scripts_enabled


def _run_condition(run: Run, node_run: NodeRun, node: dict[str, Any]) -> tuple[str, Any]:
    _condition(run, node_run, node)
    return "again", None


def _run_end(run: Run, node_run: NodeRun, node: dict[str, Any]) -> tuple[str, Any]:
    _end(run, node_run, node)
    return "again", None


def _run_subworkflow(run: Run, node_run: NodeRun, node: dict[str, Any]) -> tuple[str, Any]:
    child = _subworkflow(run, node_run, node)
    return ("child", child.pk) if child is not None else ("again", None)


def _run_script(run: Run, node_run: NodeRun, node: dict[str, Any]) -> tuple[str, Any]:
    # A capability node runs no script of the user's own (a skill it names has its own sandbox).
    if "capability" not in node and not _scripts_allowed(run):
        node_complete(node_run, status=NodeRun.Status.FAILED, error="Script nodes are turned off.")
        run_fail(run, f"Script node {node_run.node_id!r} cannot run: script nodes are turned off for this account "
                      "or site.", stop_reason="scripts_disabled")
        return "stop", None
    try:
        # Rendered here, under the lock, so a template that does not evaluate fails the node now
        # rather than in whichever worker claims it.
        render_data(node.get("input" if "capability" in node else "env") or {}, template_scope(run))
    except (expressions.EvaluationError, expressions.ExpressionError, ValueError) as exc:
        node_complete(node_run, status=NodeRun.Status.FAILED, error=str(exc))
        run_fail(run, f"Node {node_run.node_id!r} could not start: {exc}")
        return "stop", None
    node_run.save()
    return "script", node_run.pk


def _run_pausing(run: Run, node_run: NodeRun, node: dict[str, Any]) -> tuple[str, Any]:
    _pause(run, node_run, node)
    return "again", None


# Node type -> what entering it does, under the run's lock: the types the engine runs itself, then
# every type that hands a step back (runs.handlers.HANDLERS). With the definition's NODE_TYPES (what
# validates) they must name the same types, checked when the engine loads.
RUNNERS: dict[str, Any] = {"condition": _run_condition, "end": _run_end, "subworkflow": _run_subworkflow,
                           "script": _run_script, **{name: _run_pausing for name in HANDLERS}}
node_types_check(RUNNERS)


# How many nodes one transaction drives at most; a longer stretch of conditions commits and goes on
# in the next, so no transaction holds the run's lock for long.
NODES_PER_TRANSACTION = 50


def _advance(run: Run) -> tuple[str, Any]:
    """Drive the run (locked, or not yet committed) through every node that needs neither an
    answer nor a worker, saving it once. Returns what to do next outside the transaction:
    ("stop", None), ("again", None), ("script", node_run_id) or ("child", child_run_id)."""
    with _saved_once(run):
        for _ in range(NODES_PER_TRANSACTION):
            if run.status != Run.Status.RUNNING:
                return "stop", None
            node_id = run.current_node
            node = _definition_node(run, node_id)
            node_run = _enter(run, node_id)
            if node_run is None:
                return "stop", None
            action, target = RUNNERS[node["type"]](run, node_run, node)
            if action != "again":
                return action, target
        return ("again" if run.status == Run.Status.RUNNING else "stop"), None


def _step_once(run_id: str) -> tuple[Run, str, Any]:
    """Drive the run on under its lock: the run as it was left, and what to do next (`_advance`)."""
    with transaction.atomic():
        run = run_locked(run_id)
        return run, *_advance(run)


def _drive_on(run: Run, action: str, target: Any) -> Run:
    """After a transaction that drove `run` and left (`action`, `target`) to do: the rest of `drive`,
    and the run as it stands. Where nothing was left to do, the object in hand is the run as committed."""
    if action == "stop":
        _settled(run, inline_scripts=False)
        return run
    drive(run.pk, first=(run, action, target))
    return Run.objects.select_related("project").get(pk=run.pk)


def _settled(run: Run, *, inline_scripts: bool) -> None:
    """The run stopped (paused or ended): its parent moves on if it ended, and a model answers its
    step if the step is the model's."""
    from runs import answerers

    if run.parent_id and run.is_terminal:
        _resume_parent(run, inline_scripts=inline_scripts)
    answerers.after_pause(run.pk)


def drive(run_id: str, *, inline_scripts: bool = False, first: tuple[Run, str, Any] | None = None) -> None:
    """Run every node that needs no answer, until the run pauses or ends. Script nodes go to a
    worker unless `inline_scripts` (a worker runs them itself); the caller waits for them at most
    ATRIUM_SCRIPT_WAIT_SECONDS in all, then the run goes on without it. `first` is what a caller's
    own transaction already drove (`_advance`), to carry on from."""
    from runs import scripts

    deadline: float | None = None
    while True:
        run, action, target = first if first is not None else _step_once(run_id)
        first = None
        if action == "again":
            continue
        if action == "child":
            drive(target, inline_scripts=inline_scripts)
            _child_settled(target, inline_scripts=inline_scripts)
            return
        if action == "script":
            if inline_scripts:
                if scripts.script_execute(target):
                    continue
                return  # it waits its turn behind the owner's other scripts
            if deadline is None:
                deadline = time.monotonic() + settings.ATRIUM_SCRIPT_WAIT_SECONDS
            if scripts.script_dispatch(target, deadline=deadline):
                continue  # the script ended within the wait and its result is applied: go on here
            return  # whoever runs the script carries the run on
        _settled(run, inline_scripts=inline_scripts)
        return


def _child_settled(child_id: str, *, inline_scripts: bool) -> None:
    child = Run.objects.get(pk=child_id)
    if child.is_terminal:
        _resume_parent(child, inline_scripts=inline_scripts)


def _resume_parent(child: Run, *, inline_scripts: bool) -> None:
    """The child ended: its parent's subworkflow node is decided by how."""
    with transaction.atomic():
        parent = run_locked(child.parent_id)
        node_run = parent.nodes.filter(node_id=child.parent_node, status=NodeRun.Status.PAUSED).order_by(
            "-seq").first()
        if parent.is_terminal or node_run is None or node_run.input.get("childRunId") != child.pk:
            return
        event = "completed" if child.status == Run.Status.COMPLETED else "failed"
        parent.status = Run.Status.RUNNING
        _add_child_costs(parent, child)
        node_decide(parent, node_run, Step(event=event, output=child.output))
        if event == "failed":
            node_run.error = child.error or f"The child run ended {child.status}."
            node_run.save()
        _check_caps(parent)
    drive(parent.pk, inline_scripts=inline_scripts)


def _add_child_costs(parent: Run, child: Run) -> None:
    for field in ("total_cost_usd", "metered_cost_usd", "subscription_equiv_cost_usd", "input_tokens",
                  "output_tokens"):
        setattr(parent, field, getattr(parent, field) + getattr(child, field))
    _save(parent)


# --- answers ---------------------------------------------------------------------------------------

def _recorder(run: Run, node_run: NodeRun, node_model: str) -> Any:
    def record(*, prompt: str, response: str, phase: str = "", agent_index: int | None = None,
               usage: dict[str, Any] | None = None, thinking: str | None = None, model: str | None = None) -> None:
        used_model = model or node_model
        charge = costs.turn_charge(model=used_model, usage=usage, prompt=prompt, response=response,
                                   free=phase == "human")
        node_run.turns.create(phase=phase, agent_index=agent_index, model=used_model, prompt=prompt,
                              response=response, thinking=thinking or "", usage=usage or {},
                              input_tokens=charge.input_tokens, output_tokens=charge.output_tokens,
                              cost_usd=charge.cost_usd, estimated=charge.estimated)
        run.input_tokens += charge.input_tokens
        run.output_tokens += charge.output_tokens
        run.total_cost_usd += charge.cost_usd
        if run.billing_mode == "metered":
            run.metered_cost_usd += charge.cost_usd
        else:
            run.subscription_equiv_cost_usd += charge.cost_usd

    return record


def _check_caps(run: Run, *, at_cap: bool = False) -> bool:
    """Stop the run when a spending cap is exceeded (or, `at_cap`, reached); True when it was."""
    spent_tokens = run.input_tokens + run.output_tokens
    if at_cap:
        over_usd = run.spending_cap_usd is not None and run.total_cost_usd >= run.spending_cap_usd
        over_tokens = run.spending_cap_tokens is not None and spent_tokens >= run.spending_cap_tokens
    else:
        over_usd = run.spending_cap_usd is not None and run.total_cost_usd > run.spending_cap_usd
        over_tokens = run.spending_cap_tokens is not None and spent_tokens > run.spending_cap_tokens
    if not (over_usd or over_tokens):
        return False
    spent = (f"${run.total_cost_usd:.4f} against a cap of ${run.spending_cap_usd}" if over_usd else
             f"{run.input_tokens + run.output_tokens} tokens against a cap of {run.spending_cap_tokens}")
    run_fail(run, f"The run stopped: it spent {spent}.", stop_reason="spending_cap_exceeded")
    return True


def run_stop_at_caps(run_id: str, *, step_id: str) -> bool:
    """Before someone pays for an answer to `step_id`: stop the run, as an answer over its caps
    would, when it has already spent all a cap allows; True when it stopped (or the step is no
    longer pending, so nothing should be paid for)."""
    with transaction.atomic():
        run = run_locked(run_id)
        node_run = paused_node(run) if run.status == Run.Status.PAUSED else None
        if node_run is None or node_run.step_id != step_id:
            return True
        if not _check_caps(run, at_cap=True):
            return False
        node_complete(node_run, status=NodeRun.Status.FAILED, error="Stopped by the spending cap.")
    _settled(run, inline_scripts=False)
    return True


def run_answer(*, caller: Caller, scope: Scope, run_id: str, tool: str, payload: dict[str, Any],
               step_id: str | None = None) -> Run:
    """Apply one answer to the run's paused step, then drive on.

    The answer names its step: by `step_id` (the pendingStep's stepId), or else it is for the step
    the run last showed to this caller's viewer (steps_shown_record). Both are checked under the
    run's row lock, before anything else: of racing answers to one step exactly one is applied and
    every other is refused with not_waiting, and an answer is never applied to a later step that
    happens to be of the same type. A person's choice at a human node is audited; a model's
    answers are kept as the node's turns.

    The answer and the nodes it leads through, up to the next pause, are one transaction under
    the lock (unless a script or a child run comes first): the run, the answered visit, its turn
    and the next visit are each written once."""
    viewer = viewer_key(caller)
    digest = _answer_digest(tool, payload)
    with transaction.atomic():
        run = _run_locked_in(scope, run_id)
        # Consumed in the same transaction as the answer: a second answer from this viewer, racing
        # or retried, finds nothing shown to it until this answer's result shows the next step.
        node_run = _step_consumed(run, viewer=viewer, step_id=step_id, digest=digest)
        with _saved_once(run):
            decided = _apply_answer(run, node_run, tool, payload)
            if tool == "resume_run" and run.kind == Run.Kind.REAL:
                _audit(caller, run, "resume", node=node_run.node_id, choice=payload["transition"])
            # Not decided, the answer may still have stopped the run (a cap, a failing node).
            action, target = _advance(run) if decided else ("stop", None)
    return _drive_on(run, action, target)


def viewer_key(caller: Caller) -> str:
    """Who was shown a step: the MCP session, else the token, else the signed-in user."""
    if caller.session is not None:
        return f"session:{caller.session.pk}"
    if caller.token is not None:
        return f"{caller.token_kind}:{caller.token.pk}"
    return f"user:{caller.user.pk}:{caller.via}"


def _answer_digest(tool: str, payload: dict[str, Any]) -> str:
    text = json.dumps([tool, payload], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _not_waiting(detail: str) -> RunError:
    return RunError(f"The run is not waiting for this answer: {detail} Call get_run_status for the current "
                    "step and answer it with its stepId.", code="not_waiting")


def _step_consumed(run: Run, *, viewer: str, step_id: str | None, digest: str) -> NodeRun:
    """The paused NodeRun this answer is for, on the locked run, recorded as answered by `viewer`;
    or a refusal."""
    node_run = paused_node(run) if run.status == Run.Status.PAUSED else None
    current = node_run.step_id if node_run is not None else None
    consumed = {"step_id": "", "answered_step_id": current, "answer_digest": digest, "updated_at": timezone.now()}
    if step_id is not None:
        # Checked first, even on a run that has ended: the loser of a race is told its step is
        # gone, whatever the winning answer did to the run.
        if step_id != current:
            moved = f"the run is {run.status}" if run.is_terminal else "another answer was applied, or the run moved on"
            raise _not_waiting(f"step {step_id} is no longer pending ({moved}).")
        _shown_set(run.pk, viewer, **consumed)
        return node_run
    if run.is_terminal:
        raise RunError(f"The run is already {run.status}.", code="run_terminal")
    # The check and the record in one statement: the step shown to this viewer is the one pending,
    # and this is not the answer it last gave.
    if current is not None and StepShown.objects.filter(run=run, viewer=viewer, step_id=current).exclude(
            answer_digest=digest).update(**consumed):
        return node_run
    raise _refusal(run, viewer=viewer, current=current, digest=digest)


def _refusal(run: Run, *, viewer: str, current: str | None, digest: str) -> RunError:
    """Why an answer without a stepId is not for the step pending now."""
    seen = StepShown.objects.filter(run=run, viewer=viewer).first()
    if seen is None or not seen.step_id:
        return _not_waiting("no step of this run was shown to you since your last answer.")
    if seen.step_id != current:
        return _not_waiting("the step you were shown was answered meanwhile.")
    # Shown only in the result of that same answer: most likely a retry of it, which must not land
    # on the next step. A stepId (or a get_run_status first) says it is meant.
    return _not_waiting(f"this exact answer was just applied to step {seen.answered_step_id}.")


def steps_shown_record(*, caller: Caller, result: dict[str, Any], after_answer: bool = False,
                       started: bool = False) -> None:
    """Remember the pending step a result showed to the caller's viewer. A step shown by a read
    (get_run_status) clears the memory of the viewer's last answer: it has seen the new step.
    `started`: the result of starting the run, so no one was shown any of its steps before."""
    step = result.get("pendingStep")
    if step is None:
        return
    defaults: dict[str, Any] = {"step_id": step["stepId"], "updated_at": timezone.now()}
    if not after_answer:
        defaults.update(answered_step_id="", answer_digest="")
    _shown_set(step["runId"], viewer_key(caller), first=started, **defaults)


def _shown_set(run_id: str, viewer: str, *, first: bool = False, **fields: Any) -> None:
    """Set what was last shown to `viewer` of the run: one UPDATE, or the row's first INSERT (where
    two race to make it, the loser updates the winner's). `first`: there is no row yet to update."""
    if not first and StepShown.objects.filter(run_id=run_id, viewer=viewer).update(**fields):
        return
    try:
        with transaction.atomic():
            StepShown.objects.create(run_id=run_id, viewer=viewer, **fields)
    except IntegrityError:
        StepShown.objects.filter(run_id=run_id, viewer=viewer).update(**fields)


def _apply_answer(run: Run, node_run: NodeRun, tool: str, payload: dict[str, Any]) -> bool:
    """Apply the answer to the locked run's paused step (already matched to the answer's step);
    True when its node was decided and the run should go on."""
    node = _definition_node(run, node_run.node_id)
    handler = HANDLERS.get(node["type"])
    if handler is None or handler.tool != tool:
        wanted = handler.tool if handler else "nothing: it waits on a subworkflow"
        raise RunError(f"The run is paused at a {node['type']} node, which {tool} cannot answer; "
                       f"use {wanted}.", code="wrong_tool")
    model = _model_for(run, node)
    ctx = Ctx(run=run, node_run=node_run, node=node, model=model, record=_recorder(run, node_run, model))
    try:
        step = handler.answer(ctx, payload)
    except (expressions.EvaluationError, expressions.ExpressionError, ValueError) as exc:
        # The answer was fine but the node cannot go on with it (a reduce template that does not
        # evaluate, say): the node fails, as it would on entry.
        node_complete(node_run, status=NodeRun.Status.FAILED, error=str(exc))
        run_fail(run, f"Node {node_run.node_id!r} failed: {exc}")
        return False
    # The visit's state as the answer left it is written by whichever save below comes first.
    if _check_caps(run):
        node_complete(node_run, status=NodeRun.Status.FAILED, error="Stopped by the spending cap.")
        return False
    if step.event is None:
        # The node re-pauses with its next phase: a new step, with a new identity.
        node_run.step += 1
        node_run.input = handler.pending(ctx)
        node_run.save()
        run.updated_at = timezone.now()
        _save(run)
        return False
    run.status = Run.Status.RUNNING
    node_decide(run, node_run, step)
    return True


# --- script nodes: what runs.scripts reports back ---------------------------------------------------

def script_succeeded(run: Run, node_run: NodeRun, *, output: Any) -> None:
    """The locked run's script node ended well: follow its success transition."""
    node_decide(run, node_run, Step(event="success", output=output))


def script_failed(run: Run, node_run: NodeRun, *, output: Any, error: str, stop_reason: str) -> None:
    """The locked run's script node failed (its exit status, its timeout, its worker lost): the
    node's failure path when it has one, else the run fails with `stop_reason`, saying why."""
    if "failure" in _definition_node(run, node_run.node_id).get("transitions", {}):
        node_decide(run, node_run, Step(event="failure", output=output))
        node_run.error = error
        node_run.save()
        return
    node_complete(node_run, status=NodeRun.Status.FAILED, output=output, error=error)
    run.outputs = {**run.outputs, node_run.node_id: output}
    run_fail(run, f"Script {node_run.node_id!r} failed: {error}", stop_reason=stop_reason)


def run_cancel(*, caller: Caller, scope: Scope, run_id: str) -> Run:
    run = run_get(scope=scope, run_id=run_id, kind=None)
    with transaction.atomic():
        run = run_locked(run.pk)
        if run.is_terminal:
            raise RunError(f"The run is already {run.status}; only a running or paused run can be cancelled.",
                           code="run_terminal")
        _cancel_tree(run)
        _audit(caller, run, "cancel")
    if run.parent_id:
        _resume_parent(Run.objects.get(pk=run.pk), inline_scripts=False)
    return Run.objects.get(pk=run.pk)


def run_rerun(*, caller: Caller, scope: Scope, run_id: str) -> Run:
    """A new run of exactly what `run_id` ran (its definition, context, host and caps), in its project,
    as a real run: the console's re-run. A child run is re-run through its parent, a test by testing again."""
    run = run_get(scope=scope, run_id=run_id, kind=None)
    if run.parent_id:
        raise RunError(f"Run {run.pk} is a subworkflow of run {run.parent_id}: re-run that one.", code="run_child")
    if run.kind != Run.Kind.REAL:
        raise RunError("A test run is not re-run: test the workflow again.", code="run_test")
    again = run_create(caller=caller, scope=scope, definition=run.definition, context=run.context,
                       workflow=run.workflow, workflow_key=run.workflow_key, source=run.workflow_source,
                       host=run.host or None, caps=caps_from(usd=run.spending_cap_usd, tokens=run.spending_cap_tokens),
                       playbook=run.playbook)
    _audit(caller, again, "rerun", of=run.pk)
    drive(again.pk)
    return Run.objects.get(pk=again.pk)


def _cancel_tree(run: Run) -> None:
    for node_run in run.nodes.filter(status__in=(NodeRun.Status.RUNNING, NodeRun.Status.PAUSED,
                                                 NodeRun.Status.PENDING)):
        node_complete(node_run, status=NodeRun.Status.CANCELLED, error="Cancelled.")
    _finish(run, Run.Status.CANCELLED, stop_reason="cancelled")
    for child in Run.objects.select_for_update().filter(parent=run).exclude(status__in=Run.TERMINAL):
        _cancel_tree(child)


def public_url(run: Run) -> str:
    """The run page's deep link, as the reference has it: /open/runs/<id>?project=<project or global>."""
    return f"{settings.ATRIUM_PUBLIC_URL}/open/runs/{run.pk}?project={run.project_key or 'global'}"
