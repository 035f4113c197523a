"""Script nodes never hold a request or a run hostage: a request waits at most
ATRIUM_SCRIPT_WAIT_SECONDS, one user's scripts run a few at a time, a script holds a lease whose
end fails the node as worker_lost, and a script the broker refused is sent again later."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client

from core.caller import Caller
from runs import engine, scripts
from runs.models import NodeRun, Run
from tests.conftest import make_member
from workflows.scoping import Scope
from workflows.services import workflow_save

SLOW = """\
name: Slow
start: work
nodes:
  work: {type: script, script: 'sleep SECONDS; echo "{\\"slept\\": SECONDS}"', timeout: 30, TRANSITIONS}
  review: {type: ai_agent, prompt: "Slept {{ work.slept }}", transitions: {done: done}}
  handle: {type: ai_agent, prompt: "The script failed", transitions: {done: done}}
  done: {type: end}
"""


def flow(seconds: float, *, failure_path: bool = False) -> str:
    transitions = "transitions: {success: review" + (", failure: handle}" if failure_path else "}")
    return SLOW.replace("SECONDS", str(seconds)).replace("TRANSITIONS", transitions)


def start(user, config: str, workflow_id: str = "slow") -> Run:
    caller = Caller.trusted(user, via="command")
    scope = Scope(owner=user, project=None)
    workflow_save(caller=caller, scope=scope, workflow_id=workflow_id, source="global", config=config, overwrite=True)
    return engine.run_start(caller=caller, scope=scope, workflow_id=workflow_id, source=None, context=None,
                            host=None, caps=engine.Caps())


def settled(run: Run, *, status: str = "paused", within: float = 60) -> Run:
    deadline = time.monotonic() + within
    while (run := Run.objects.get(pk=run.pk)).status != status:
        assert time.monotonic() < deadline, f"the run is still {run.status}"
        time.sleep(0.1)
    return run


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_script_that_outlasts_the_wait_goes_on_in_the_background(settings):
    settings.ATRIUM_SCRIPT_WAIT_SECONDS = 0.5
    user = make_member("alice").user

    run = start(user, flow(3))

    assert run.status == "running" and run.current_node == "work"
    work = NodeRun.objects.get(run=run, node_id="work")
    assert work.status == "running" and work.dispatched_at is not None and work.lease_expires_at is not None
    run = settled(run)
    assert run.current_node == "review"
    assert NodeRun.objects.get(run=run, node_id="work").output == {"slept": 3}


def test_a_script_within_the_wait_is_applied_by_the_request_itself(alice):
    run = start(alice.user, flow(0))

    assert (run.status, run.current_node) == ("paused", "review")
    work = NodeRun.objects.get(run=run, node_id="work")
    assert (work.status, work.output) == ("completed", {"slept": 0})


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_users_scripts_beyond_the_limit_wait_their_turn(settings):
    settings.ATRIUM_SCRIPT_WAIT_SECONDS = 0.5
    settings.ATRIUM_SCRIPT_CONCURRENCY_PER_USER = 1
    user = make_member("alice").user
    first = start(user, flow(2), "first")

    second = start(user, flow(0), "second")

    # The first holds the only slot: the second is left unsent, its run `running`.
    assert second.status == "running"
    queued = NodeRun.objects.get(run=second, node_id="work")
    assert (queued.status, queued.dispatched_at, queued.lease_expires_at) == ("running", None, None)
    assert settled(first).current_node == "review"
    assert settled(second).current_node == "review"
    assert NodeRun.objects.get(run=second, node_id="work").output == {"slept": 0}


def lost_script(user, monkeypatch, *, failure_path: bool = False) -> NodeRun:
    """A run whose script a worker claimed and then never reported on, as when it is killed."""
    with monkeypatch.context() as patched:
        patched.setattr(scripts, "script_dispatch",
                        lambda node_run_id, *, deadline: not scripts.script_claim(node_run_id))
        run = start(user, flow(0, failure_path=failure_path))
    return NodeRun.objects.get(run=run, node_id="work")


def test_a_script_whose_worker_was_lost_fails_the_run_once_its_lease_runs_out(alice, monkeypatch):
    work = lost_script(alice.user, monkeypatch)
    assert work.status == "running" and work.lease_expires_at is not None

    assert scripts.scripts_reap(now=work.lease_expires_at - timedelta(seconds=1)) == {"lost": 0, "sent": 0}
    assert scripts.scripts_reap(now=work.lease_expires_at + timedelta(seconds=1)) == {"lost": 1, "sent": 0}

    run = Run.objects.get(pk=work.run_id)
    assert (run.status, run.stop_reason) == ("failed", "worker_lost")
    assert run.error == f"Script 'work' failed: {scripts.WORKER_LOST}"
    work.refresh_from_db()
    assert (work.status, work.error) == ("failed", scripts.WORKER_LOST)
    client = Client()
    client.force_login(alice.user)
    page = client.get(f"/open/runs/{run.pk}?project=global").content.decode()
    assert "<dt>Stop reason</dt><dd><code>worker_lost</code></dd>" in page
    assert "The worker running this script stopped before the script ended" in page


def test_a_lost_worker_follows_the_scripts_failure_path(alice, monkeypatch):
    work = lost_script(alice.user, monkeypatch, failure_path=True)

    scripts.scripts_reap(now=work.lease_expires_at + timedelta(seconds=1))

    run = Run.objects.get(pk=work.run_id)
    assert (run.status, run.current_node) == ("paused", "handle")
    work.refresh_from_db()
    assert (work.status, work.event, work.error) == ("failed", "failure", scripts.WORKER_LOST)


def test_a_lease_renewed_by_a_live_runner_is_not_reaped(alice, monkeypatch):
    work = lost_script(alice.user, monkeypatch)
    later = work.lease_expires_at + timedelta(minutes=5)
    NodeRun.objects.filter(pk=work.pk).update(lease_expires_at=later)

    assert scripts.scripts_reap(now=later - timedelta(seconds=1))["lost"] == 0

    assert Run.objects.get(pk=work.run_id).status == "running"


def test_a_script_whose_env_does_not_evaluate_fails_at_once_instead_of_waiting_for_a_worker(alice):
    config = ("name: Bad env\nstart: work\nnodes:\n  work: {type: script, script: 'true', env: {N: '{{ len(3) }}'}, "
              "transitions: {success: done}}\n  done: {type: end}\n")

    run = start(alice.user, config, "bad_env")

    assert (run.status, run.stop_reason) == ("failed", "error")
    assert "len() needs a string, list or object" in run.error
    work = NodeRun.objects.get(run=run, node_id="work")
    assert work.status == "failed" and work.lease_expires_at is None


def test_a_job_the_sandbox_refuses_fails_the_node_instead_of_leaving_it_running(alice, monkeypatch):
    def refuse(job, *, should_cancel=None):
        raise ValueError("bundled file path escapes the workflow directory: ../x")

    monkeypatch.setattr(scripts.sandbox, "script_run", refuse)

    run = start(alice.user, flow(0, failure_path=True))

    assert (run.status, run.current_node) == ("paused", "handle")
    work = NodeRun.objects.get(run=run, node_id="work")
    assert (work.status, work.event) == ("failed", "failure")
    assert work.error == "The script could not start: bundled file path escapes the workflow directory: ../x"


def unclaimed_script(user, monkeypatch, workflow_id: str) -> NodeRun:
    """A run waiting at a script that nobody has claimed yet."""
    with monkeypatch.context() as patched:
        patched.setattr(scripts, "script_dispatch", lambda node_run_id, *, deadline: False)
        run = start(user, flow(0), workflow_id)
    return NodeRun.objects.get(run=run, node_id="work")


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_of_racing_claims_on_a_users_last_slot_exactly_one_wins(settings, monkeypatch):
    settings.ATRIUM_SCRIPT_CONCURRENCY_PER_USER = 1
    user = make_member("alice").user
    waiting = [unclaimed_script(user, monkeypatch, f"flow{index}") for index in range(8)]
    go = threading.Barrier(len(waiting), timeout=30)
    won: list[int] = []

    def claim(node_run: NodeRun) -> None:
        try:
            go.wait()
            if scripts.script_claim(node_run.pk) is not None:
                won.append(node_run.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(node_run,)) for node_run in waiting]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(won) == 1
    leased = NodeRun.objects.filter(pk__in=[n.pk for n in waiting], lease_expires_at__isnull=False)
    assert list(leased.values_list("pk", flat=True)) == won


def test_the_reaper_is_scheduled(settings):
    from config.celery import app

    task = settings.CELERY_BEAT_SCHEDULE["reap-scripts"]["task"]

    assert task == "runs.tasks.scripts_reap" and task in app.tasks
