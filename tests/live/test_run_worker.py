"""Script nodes on a real Celery worker over a real broker (Redis in CI, in both of its passes)."""

import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta

import pytest

from config.celery import app as celery_app
from core.caller import Caller
from runs import engine, scripts
from runs.models import NodeRun, Run
from tests.conftest import make_member
from tests.live.conftest import BASE_DIR, child_env
from workflows.scoping import Scope
from workflows.services import workflow_save

pytestmark = [
    pytest.mark.live,
    pytest.mark.uses_broker,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

FLOW = """\
name: On a worker
start: work
nodes:
  work:
    type: script
    script: 'sleep SECONDS; echo "{\\"pid\\": $$}"'
    timeout: TIMEOUT
    transitions: {success: review}
  review: {type: ai_agent, prompt: "Review process {{ work.pid }}", transitions: {done: done}}
  done: {type: end}
"""


@pytest.fixture
def queue(monkeypatch, broker_url):
    """A queue of this test's own, so no other worker on the broker takes its tasks."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setitem(celery_app.conf, "task_default_queue", name)
    return name


@contextmanager
def worker(queue: str, log):
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo", "-Q", queue,
             "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=BASE_DIR, env=child_env(CELERY_BROKER_URL=celery_app.conf.broker_url), stdout=out, stderr=out,
        )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=20)


def start(user, seconds: int, timeout: int) -> Run:
    caller = Caller.trusted(user, via="command")
    scope = Scope(owner=user, project=None)
    config = FLOW.replace("SECONDS", str(seconds)).replace("TIMEOUT", str(timeout))
    workflow_save(caller=caller, scope=scope, workflow_id="flow", source="global", config=config, overwrite=True)
    return engine.run_start(caller=caller, scope=scope, workflow_id="flow", source=None, context=None, host=None,
                            caps=engine.Caps())


def test_a_worker_runs_the_script_and_carries_the_run_to_its_next_pause(queue, tmp_path):
    user = make_member("alice").user
    log = tmp_path / "worker.log"
    with worker(queue, log):
        run = start(user, seconds=0, timeout=60)
        # The request waits a few seconds at most; a worker still starting up answers later.
        deadline = time.monotonic() + 60
        while (run := Run.objects.get(pk=run.pk)).status == "running":
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    assert run.status == "paused", log.read_text()
    assert run.current_node == "review"
    work = NodeRun.objects.get(run=run, node_id="work")
    assert work.status == "completed" and isinstance(work.output["pid"], int)
    assert "runs.tasks.script_run" in log.read_text()


def test_a_run_whose_script_outlasts_the_wait_stays_running_until_the_worker_finishes(queue, tmp_path, settings):
    settings.ATRIUM_SCRIPT_WAIT_SECONDS = 0.5
    user = make_member("alice").user
    # No worker yet: the request waits ATRIUM_SCRIPT_WAIT_SECONDS, then answers `running`.
    run = start(user, seconds=0, timeout=60)
    assert run.status == "running"
    assert NodeRun.objects.get(run=run, node_id="work").dispatched_at is not None
    with worker(queue, tmp_path / "worker.log"):
        deadline = time.monotonic() + 60
        while Run.objects.get(pk=run.pk).status == "running":
            assert time.monotonic() < deadline, "the worker never finished the script"
            time.sleep(0.25)
    run.refresh_from_db()
    assert (run.status, run.current_node) == ("paused", "review")


def test_a_worker_killed_mid_script_leaves_a_run_the_reaper_fails_as_worker_lost(queue, tmp_path, settings):
    settings.ATRIUM_SCRIPT_WAIT_SECONDS = 0.5
    user = make_member("alice").user
    log = tmp_path / "worker.log"
    with worker(queue, log) as process:
        run = start(user, seconds=30, timeout=60)
        deadline = time.monotonic() + 60
        while (work := NodeRun.objects.get(run=run, node_id="work")).lease_expires_at is None:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=20)

    # Nothing will ever report on the script: the run stays `running` until its lease runs out.
    assert Run.objects.get(pk=run.pk).status == "running"
    assert scripts.scripts_reap(now=work.lease_expires_at - timedelta(seconds=1))["lost"] == 0
    assert scripts.scripts_reap(now=work.lease_expires_at + timedelta(seconds=1))["lost"] == 1

    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("failed", "worker_lost")
    work.refresh_from_db()
    assert (work.status, work.error) == ("failed", scripts.WORKER_LOST)
