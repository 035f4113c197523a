"""Script nodes: the job a node describes, where it runs, and what its result does to the run.

The script always runs in a separate process (runs.sandbox). With a broker it runs on a Celery
worker, which then carries the run on; the web request waits for the run to move, up to the
script's timeout, and answers with whatever state it reached. Without a broker the task runs
eagerly, in a subprocess of the web process.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction

from runs import sandbox
from runs.engine import _complete_node, _decide, _fail, _locked, _render_data, _scope, drive
from runs.models import NodeRun, Run, ScriptSettings
from runs.nodes import Step
from workflows.definition import DEFAULT_SCRIPT_TIMEOUT

# How long past a script's own timeout the web request keeps waiting for the worker.
WAIT_GRACE_SECONDS = 5


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


def script_job(run: Run, node: dict[str, Any]) -> sandbox.ScriptJob:
    env = {name: str(_render_data(value, _scope(run))) for name, value in (node.get("env") or {}).items()}
    return sandbox.ScriptJob(script=node.get("script"), command=node.get("command"),
                             timeout=float(node.get("timeout", DEFAULT_SCRIPT_TIMEOUT)), env=env,
                             files=_files(run), memory_mb=_memory_mb(run))


def script_execute(node_run_id: int) -> None:
    """Run the node's script, then apply its result, unless the run moved on meanwhile (cancel)."""
    node_run = NodeRun.objects.select_related("run", "run__revision", "run__workflow").get(pk=node_run_id)
    run = node_run.run
    if node_run.status != NodeRun.Status.RUNNING or run.status != Run.Status.RUNNING:
        return
    node = run.definition["nodes"][node_run.node_id]
    job = script_job(run, node)
    NodeRun.objects.filter(pk=node_run.pk).update(input={
        "script": job.script, "command": job.command, "timeout": job.timeout, "env": job.env})
    result = sandbox.script_run(
        job, should_cancel=lambda: Run.objects.filter(pk=run.pk, status=Run.Status.CANCELLED).exists())
    with transaction.atomic():
        run = _locked(run.pk)
        node_run = NodeRun.objects.select_for_update().get(pk=node_run_id)
        if node_run.status != NodeRun.Status.RUNNING or run.status != Run.Status.RUNNING:
            return
        output = result.output()
        if result.succeeded:
            _decide(run, node_run, Step(event="success", output=output))
            return
        node = run.definition["nodes"][node_run.node_id]
        if "failure" in node.get("transitions", {}):
            _decide(run, node_run, Step(event="failure", output=output))
            node_run.error = result.error() or ""
            node_run.save()
            return
        # No failure path: the run fails, saying why the script did.
        _complete_node(node_run, status=NodeRun.Status.FAILED, output=output, error=result.error() or "")
        run.outputs = {**run.outputs, node_run.node_id: output}
        _fail(run, f"Script {node_run.node_id!r} failed: {result.error()}",
              stop_reason="script_timeout" if result.timed_out else "script_failed")


def script_execute_and_continue(node_run_id: int) -> None:
    run_id = NodeRun.objects.values_list("run_id", flat=True).get(pk=node_run_id)
    script_execute(node_run_id)
    drive(run_id, inline_scripts=True)


def script_dispatch(node_run_id: int) -> None:
    """Hand the script to a worker and wait for the run to move on, up to the script's timeout.
    The worker (or, without a broker, the eager task right here) carries the run on."""
    from runs.tasks import script_run

    node_run = NodeRun.objects.select_related("run").get(pk=node_run_id)
    timeout = float(node_run.run.definition["nodes"][node_run.node_id].get("timeout", DEFAULT_SCRIPT_TIMEOUT))
    script_run.delay(node_run_id)
    if script_run.app.conf.task_always_eager:
        return
    deadline = time.monotonic() + timeout + WAIT_GRACE_SECONDS
    while time.monotonic() < deadline:
        if not Run.objects.filter(pk=node_run.run_id, status=Run.Status.RUNNING).exists():
            return
        time.sleep(0.05)
