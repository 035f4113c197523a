"""Script nodes: the job a node describes, who runs it, and what its result does to the run.

The script itself always runs in a separate process (runs.sandbox). Around it:

- Dispatch. Reaching a script node commits the NodeRun `running` with no `dispatched_at`: that row
  is the outbox. `script_send` marks it sent (a conditional update, so it is sent once) and hands
  it to a Celery worker; when the broker is down the mark is taken back, the run stays `running`,
  and `scripts_reap` sends it once the broker answers again. Without a broker (tasks eager, as
  under `make run`) "sending" starts a thread of this process.
- Claim and lease. Whoever runs the script first claims it under a row lock: a claim takes one
  of the owner's ATRIUM_SCRIPT_CONCURRENCY_PER_USER slots (a script beyond them is left unsent and
  waits its turn) and writes `lease_expires_at` = now + timeout + grace. The runner renews the
  lease while it supervises the script; `scripts_reap` fails a node whose lease ran out as
  `worker_lost`, so a worker killed mid-script never leaves its run `running` for ever.
- Waiting. A web request waits for the script at most ATRIUM_SCRIPT_WAIT_SECONDS. A script that
  ends within the wait has its result applied by the request itself and the run goes on there;
  one that outlasts it is left to the worker (or the thread), which carries the run on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from core.caller import Caller
from core.errors import DomainError
from runs import engine, sandbox
from runs.models import NodeRun, Run, ScriptSettings
from workflows.definition import DEFAULT_SCRIPT_TIMEOUT

logger = logging.getLogger(__name__)

# How often the runner of a script renews its lease and checks for a cancel.
LEASE_RENEW_SECONDS = 5.0
POLL_SECONDS = 0.1
# The longest a skill may run (integrations.services.MAX_SKILL_TIMEOUT_SECONDS): a capability node's lease.
MAX_SKILL_SECONDS = 300
WORKER_LOST = ("The worker running this script stopped before the script ended (its lease ran out after the "
               "script's timeout and a grace period).")


def _files(run: Run) -> tuple[sandbox.BundledFile, ...]:
    """The bundled files of the exact revision the run started from."""
    if run.revision is not None:
        rows = run.revision.assets
    elif run.workflow is not None:
        rows = [{"path": a.path, "content": a.content, "executable": a.executable} for a in run.workflow.assets.all()]
    else:
        rows = []
    return tuple(sandbox.BundledFile(r["path"], r["content"], bool(r.get("executable"))) for r in rows)


def _memory_mb(run: Run) -> int:
    own = ScriptSettings.objects.filter(user=run.owner).first() or \
        ScriptSettings.objects.filter(user__isnull=True).first()
    return own.memory_mb if own is not None else 512


@dataclass(frozen=True)
class CapabilityJob:
    """A script node with `capability`: execute that capability as the run's owner, through the
    capability runtime (integrations.services), on whichever process claimed the node."""

    owner_id: int
    name: str
    input: dict[str, Any]
    timeout: float


@dataclass(frozen=True)
class CapabilityResult:
    """A capability's outcome in the shape _result_apply reads a script's result in."""

    succeeded: bool
    payload: Any
    message: str | None = None
    refused: str | None = None
    timed_out: bool = False

    def output(self) -> Any:
        return self.payload

    def error(self) -> str | None:
        return None if self.succeeded else self.message


def capability_run(job: CapabilityJob) -> CapabilityResult:
    from integrations.services import capability_execute

    owner = get_user_model().objects.get(pk=job.owner_id)
    try:
        outcome = capability_execute(caller=Caller.trusted(owner, via="task"), name=job.name, input=job.input,
                                     here=True)
    except DomainError as exc:
        return CapabilityResult(False, {"error": exc.message, "code": exc.code, **exc.extra},
                                message=f"{job.name}: {exc.message}")
    payload = outcome.payload
    status = payload.get("status") if isinstance(payload, dict) else None
    if status == "connection_required":
        missing = ", ".join(m.get("integrationId", "?") for m in payload.get("missingIntegrations", []))
        return CapabilityResult(False, payload, message=f"{job.name} needs {missing} connected; the owner connects "
                                                        "it in the vault (nothing ran).")
    if outcome.is_error:
        detail = payload.get("error") if isinstance(payload, dict) else None
        return CapabilityResult(False, payload, message=f"{job.name} failed: {detail or 'see the output'}")
    return CapabilityResult(True, payload)


Job = sandbox.ScriptJob | CapabilityJob


def script_job(run: Run, node: dict[str, Any]) -> Job:
    scope = engine.template_scope(run)
    if "capability" in node:
        rendered = engine.render_data(node.get("input") or {}, scope)
        return CapabilityJob(owner_id=run.owner_id, name=node["capability"],
                             input=rendered if isinstance(rendered, dict) else {},
                             timeout=float(node.get("timeout", DEFAULT_SCRIPT_TIMEOUT)))
    env = {name: str(engine.render_data(value, scope)) for name, value in (node.get("env") or {}).items()}
    return sandbox.ScriptJob(script=node.get("script"), command=node.get("command"),
                             timeout=float(node.get("timeout", DEFAULT_SCRIPT_TIMEOUT)), env=env,
                             files=_files(run), memory_mb=_memory_mb(run))


def _lease_for(seconds: float) -> datetime:
    return timezone.now() + timedelta(seconds=seconds + settings.ATRIUM_SCRIPT_LEASE_GRACE_SECONDS)


# --- claiming --------------------------------------------------------------------------------------

def script_claim(node_run_id: int) -> tuple[NodeRun, Job] | None:
    """Take the script's lease and one of its owner's slots; None when the script is not to run
    here: it ended, someone else holds it, or the owner has no free slot (then it is left unsent,
    to be sent again when one of the owner's scripts ends)."""
    with transaction.atomic():
        node_run = NodeRun.objects.select_for_update(of=("self",)).select_related(
            "run", "run__revision", "run__workflow").get(pk=node_run_id)
        run = node_run.run
        if node_run.status != NodeRun.Status.RUNNING or run.status != Run.Status.RUNNING or \
                node_run.lease_expires_at is not None:
            return None
        # The owner's row serialises claims of one user's scripts: without it two workers could
        # each count a free slot and both take the last one.
        get_user_model().objects.select_for_update().filter(pk=run.owner_id).first()
        busy = NodeRun.objects.filter(run__owner_id=run.owner_id, node_type="script", status=NodeRun.Status.RUNNING,
                                      lease_expires_at__isnull=False).count()
        if busy >= settings.ATRIUM_SCRIPT_CONCURRENCY_PER_USER:
            NodeRun.objects.filter(pk=node_run_id).update(dispatched_at=None)
            return None
        job = script_job(run, run.definition["nodes"][node_run.node_id])
        # A skill's own timeout may outlast the node's: the lease must cover it.
        node_run.lease_expires_at = _lease_for(job.timeout if isinstance(job, sandbox.ScriptJob) else
                                               max(job.timeout, MAX_SKILL_SECONDS))
        node_run.input = ({"capability": job.name, "input": job.input} if isinstance(job, CapabilityJob) else
                          {"script": job.script, "command": job.command, "timeout": job.timeout, "env": job.env})
        node_run.save(update_fields=["lease_expires_at", "input"])
        return node_run, job


class Supervision:
    """What the runner of a script does while it runs: renew the lease, and say whether the run
    was cancelled (the sandbox then kills the script)."""

    def __init__(self, node_run: NodeRun) -> None:
        self.node_run_id = node_run.pk
        self.run_id = node_run.run_id
        self.lease = node_run.lease_expires_at
        self.renew_at = time.monotonic() + LEASE_RENEW_SECONDS

    def cancelled(self) -> bool:
        if time.monotonic() >= self.renew_at:
            self.renew_at = time.monotonic() + LEASE_RENEW_SECONDS
            # Kept beyond the first lease while the runner is alive: the sandbox's own start-up
            # and kill can outlast the script's timeout.
            self.lease = max(self.lease, _lease_for(LEASE_RENEW_SECONDS))
            NodeRun.objects.filter(pk=self.node_run_id, status=NodeRun.Status.RUNNING).update(
                lease_expires_at=self.lease)
        return Run.objects.filter(pk=self.run_id, status=Run.Status.CANCELLED).exists()


def _result_apply(node_run_id: int, result: Result) -> bool:
    """Apply the script's result (or the sandbox's refusal of its job: a bundled file's path that
    escapes the directory, say) to its run; False when the run moved on meanwhile (a cancel, or
    the reaper declared the worker lost)."""
    with transaction.atomic():
        run_id = NodeRun.objects.values_list("run_id", flat=True).get(pk=node_run_id)
        run = engine.run_locked(run_id)
        node_run = NodeRun.objects.select_for_update().get(pk=node_run_id)
        if node_run.status != NodeRun.Status.RUNNING or run.status != Run.Status.RUNNING:
            return False
        if isinstance(result, ValueError):
            engine.script_failed(run, node_run, output=None, error=f"The script could not start: {result}",
                                 stop_reason="script_failed")
        elif result.refused is not None:
            # Nothing ran: the node's failure path is for the script's own failures, and must not
            # hide a server that cannot run scripts at all.
            engine.node_complete(node_run, status=NodeRun.Status.FAILED, error=result.refused)
            engine.run_fail(run, f"Script {node_run.node_id!r} cannot run: {result.refused}",
                            stop_reason="script_sandbox_unavailable")
        elif result.succeeded:
            engine.script_succeeded(run, node_run, output=result.output())
        else:
            engine.script_failed(run, node_run, output=result.output(), error=result.error() or "",
                                 stop_reason="script_timeout" if result.timed_out else "script_failed")
        return True


Result = sandbox.ScriptResult | CapabilityResult | ValueError


def _sandboxed(job: Job, should_cancel: Callable[[], bool]) -> Result:
    if isinstance(job, CapabilityJob):
        return capability_run(job)
    try:
        return sandbox.script_run(job, should_cancel=should_cancel)
    except ValueError as exc:  # the job itself is invalid; nothing ran
        return exc


# --- running ---------------------------------------------------------------------------------------

def script_execute(node_run_id: int) -> bool:
    """Run the script here and apply its result; True when it was applied and the run may go on."""
    NodeRun.objects.filter(pk=node_run_id, dispatched_at__isnull=True).update(dispatched_at=timezone.now())
    claimed = script_claim(node_run_id)
    if claimed is None:
        return False
    node_run, job = claimed
    try:
        result = _sandboxed(job, Supervision(node_run).cancelled)
        return _result_apply(node_run_id, result)
    finally:
        _send_next_queued(node_run.run.owner_id)


def script_execute_and_continue(node_run_id: int) -> None:
    """A worker's whole job for one script: run it, then carry its run on."""
    run_id = NodeRun.objects.values_list("run_id", flat=True).get(pk=node_run_id)
    if script_execute(node_run_id):
        engine.drive(run_id, inline_scripts=True)


class _Handoff:
    """Who applies a background script's result: the waiting request, or, once the request has
    stopped waiting, the thread. Decided under one lock, so exactly one of them does (two would
    both drive the run on, and enter its next node twice)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.handed_off = False
        self.result: Result | None = None
        self.finished = threading.Event()
        self.cancel = threading.Event()

    def finish(self, result: Result) -> bool:
        """The thread's script ended; True when the thread must apply the result itself."""
        with self.lock:
            self.result = result
            self.finished.set()
            return self.handed_off

    def give_up(self) -> Result | None:
        """The request stops waiting; the result, when the script ended just in time."""
        with self.lock:
            self.handed_off = self.result is None
            return self.result


def _in_background(node_run_id: int, job: Job, supervision: Supervision, handoff: _Handoff) -> None:
    """The thread that runs a script without a broker. While the request waits, the request does
    every database read and write (on its own connection, so a test's transaction sees them);
    once it stops waiting, this thread supervises, applies the result and carries the run on."""
    try:
        def should_cancel() -> bool:
            return supervision.cancelled() if handoff.handed_off else handoff.cancel.is_set()

        result = _sandboxed(job, should_cancel)
        if handoff.finish(result):
            run_id = NodeRun.objects.values_list("run_id", flat=True).get(pk=node_run_id)
            if _result_apply(node_run_id, result):
                engine.drive(run_id, inline_scripts=True)
            _send_next_queued(Run.objects.values_list("owner_id", flat=True).get(pk=run_id))
    except Exception:
        logger.exception("Script node %s failed in its background thread", node_run_id)
    finally:
        if handoff.handed_off:
            connection.close()


def _run_without_broker(node_run_id: int, deadline: float) -> bool:
    """Run the script on a thread and wait for it until the deadline; True when it ended in time
    and its result was applied here."""
    claimed = script_claim(node_run_id)
    if claimed is None:
        return False
    node_run, job = claimed
    if isinstance(job, CapabilityJob):
        # Its database work is this request's, on this connection (so a test's transaction sees it);
        # a skill it names still runs in the sandbox, supervised by this request.
        try:
            return _result_apply(node_run_id, capability_run(job))
        finally:
            _send_next_queued(node_run.run.owner_id)
    supervision = Supervision(node_run)
    handoff = _Handoff()
    thread = threading.Thread(target=_in_background, args=(node_run_id, job, supervision, handoff),
                              name=f"script-{node_run_id}", daemon=True)
    thread.start()
    while not handoff.finished.wait(timeout=max(min(POLL_SECONDS * 5, deadline - time.monotonic()), 0)):
        if time.monotonic() >= deadline:
            if handoff.give_up() is None:
                return False
            break
        if supervision.cancelled():
            handoff.cancel.set()  # the sandbox kills the script; the result is then discarded
    thread.join()
    try:
        return _result_apply(node_run_id, handoff.result)
    finally:
        _send_next_queued(node_run.run.owner_id)


def script_send(node_run_id: int) -> bool:
    """Hand the script to a worker, once; False when it was already sent or the broker is down
    (it stays unsent, for scripts_reap to send again)."""
    from runs.tasks import script_run

    if not NodeRun.objects.filter(pk=node_run_id, status=NodeRun.Status.RUNNING, dispatched_at__isnull=True,
                                  lease_expires_at__isnull=True).update(dispatched_at=timezone.now()):
        return False
    if script_run.app.conf.task_always_eager:
        threading.Thread(target=_send_eagerly, args=(node_run_id,), daemon=True).start()
        return True
    try:
        script_run.apply_async((node_run_id,), retry_policy={"max_retries": 2, "interval_start": 0,
                                                             "interval_step": 0.5, "interval_max": 1})
    except Exception as exc:  # kombu's OperationalError, or the transport's own connection errors
        logger.warning("Could not send script node %s to a worker (%s); it will be sent again", node_run_id, exc)
        NodeRun.objects.filter(pk=node_run_id).update(dispatched_at=None)
        return False
    return True


def _send_eagerly(node_run_id: int) -> None:
    try:
        script_execute_and_continue(node_run_id)
    except Exception:
        logger.exception("Script node %s failed in its background thread", node_run_id)
    finally:
        connection.close()


def _send_next_queued(owner_id: int) -> None:
    """One of the owner's scripts ended: send the oldest of theirs that waits for a slot."""
    queued = NodeRun.objects.filter(run__owner_id=owner_id, run__status=Run.Status.RUNNING, node_type="script",
                                    status=NodeRun.Status.RUNNING, dispatched_at__isnull=True,
                                    lease_expires_at__isnull=True).order_by("started_at", "pk").first()
    if queued is not None:
        script_send(queued.pk)


def script_dispatch(node_run_id: int, *, deadline: float) -> bool:
    """Start the script and wait for it until `deadline` (a time.monotonic() value). True when it
    ended in time and its result is applied, so the caller carries the run on; False when the
    run is left `running` to whoever runs the script (or to scripts_reap, when the broker is down
    or the owner's slots are full)."""
    from runs.tasks import script_run

    if script_run.app.conf.task_always_eager:
        NodeRun.objects.filter(pk=node_run_id, dispatched_at__isnull=True).update(dispatched_at=timezone.now())
        return _run_without_broker(node_run_id, deadline)
    if not script_send(node_run_id):
        return False
    # The worker carries the run on itself; the request only waits, to report where it got to.
    while time.monotonic() < deadline and \
            NodeRun.objects.filter(pk=node_run_id, status=NodeRun.Status.RUNNING).exists():
        time.sleep(POLL_SECONDS)
    return False


# --- reaping ---------------------------------------------------------------------------------------

def scripts_reap(*, now: datetime | None = None) -> dict[str, int]:
    """Fail the script nodes whose runner was lost (their lease ran out) as `worker_lost`, and send
    again the scripts whose send failed (the broker was down). Runs periodically (runs.tasks)."""
    now = now or timezone.now()
    lost = 0
    expired = NodeRun.objects.filter(node_type="script", status=NodeRun.Status.RUNNING, lease_expires_at__lt=now)
    for node_run_id, run_id in list(expired.values_list("pk", "run_id")):
        with transaction.atomic():
            run = engine.run_locked(run_id)
            node_run = NodeRun.objects.select_for_update().get(pk=node_run_id)
            # Checked again under the lock: the runner may have finished, or renewed, meanwhile.
            if node_run.status != NodeRun.Status.RUNNING or run.status != Run.Status.RUNNING or \
                    node_run.lease_expires_at is None or node_run.lease_expires_at >= now:
                continue
            engine.script_failed(run, node_run, output=None, error=WORKER_LOST, stop_reason="worker_lost")
            lost += 1
        try:
            engine.drive(run_id, inline_scripts=True)
        except Exception:
            # One run that cannot go on must not keep the reaper from the others.
            logger.exception("Run %s could not go on after its script's worker was lost", run_id)
    # A run whose first send failed has no node yet; give the broker a minute before sending it again.
    sent = engine.runs_unstarted_send(older_than=timedelta(seconds=60))
    unsent = NodeRun.objects.filter(node_type="script", status=NodeRun.Status.RUNNING, run__status=Run.Status.RUNNING,
                                    dispatched_at__isnull=True, lease_expires_at__isnull=True)
    for node_run_id in list(unsent.order_by("started_at", "pk").values_list("pk", flat=True)):
        sent += script_send(node_run_id)
    return {"lost": lost, "sent": sent}
