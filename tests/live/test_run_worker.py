"""Script nodes on a real Celery worker over the broker in CELERY_BROKER_URL (Redis in CI)."""

import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

import pytest
from django.conf import settings

from accounts.caller import Caller
from config.celery import app as celery_app
from runs import engine
from runs.models import NodeRun, Run
from tests.conftest import make_member
from tests.live.conftest import BASE_DIR, child_env
from workflows.scoping import Scope
from workflows.services import workflow_save

pytestmark = [
    pytest.mark.live,
    pytest.mark.uses_broker,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
    pytest.mark.skipif(not settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set: scripts run eagerly"),
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
def queue(monkeypatch):
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
            cwd=BASE_DIR, env=child_env(), stdout=out, stderr=out,
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
    assert run.status == "paused", log.read_text()
    assert run.current_node == "review"
    work = NodeRun.objects.get(run=run, node_id="work")
    assert work.status == "completed" and isinstance(work.output["pid"], int)
    assert "runs.tasks.script_run" in log.read_text()


def test_a_run_whose_script_outlasts_the_wait_stays_running_until_the_worker_finishes(queue, tmp_path):
    user = make_member("alice").user
    started = time.monotonic()
    # No worker yet: the request waits the script's timeout plus a grace, then answers `running`.
    run = start(user, seconds=0, timeout=1)
    assert run.status == "running" and time.monotonic() - started >= 1
    with worker(queue, tmp_path / "worker.log"):
        deadline = time.monotonic() + 60
        while Run.objects.get(pk=run.pk).status == "running":
            assert time.monotonic() < deadline, "the worker never finished the script"
            time.sleep(0.25)
    run.refresh_from_db()
    assert (run.status, run.current_node) == ("paused", "review")
