"""Script nodes in runs: a separate sandboxed process, JSON output into later templates, env, bundled
files, failure paths, timeouts, memory, the site and user switches, and cancel mid-script."""

import threading
import time

import pytest
from django.db import connection

from core.caller import Caller
from runs import engine
from runs.models import NodeRun, Run, ScriptSettings
from tests.conftest import make_member
from workflows.scoping import Scope
from workflows.services import Asset, workflow_save


def start(user, config: str, context: dict | None = None, workflow_id: str = "flow",
          assets: list[Asset] | None = None) -> Run:
    caller = Caller.trusted(user, via="command")
    scope = Scope(owner=user, project=None)
    workflow_save(caller=caller, scope=scope, workflow_id=workflow_id, source="global", config=config,
                  overwrite=True, assets=assets)
    return engine.run_start(caller=caller, scope=scope, workflow_id=workflow_id, source=None, context=context,
                            host=None, caps=engine.Caps())


PIPELINE = """\
name: Pipeline
start: measure
nodes:
  measure:
    type: script
    script: 'printf "{\\"count\\": %s, \\"who\\": \\"%s\\"}" "$COUNT" "$WHO"'
    env: {COUNT: "{{ context.count }}", WHO: "{{ context.who }}"}
    timeout: 10
    transitions: {success: check, failure: broken}
  check:
    type: condition
    if: measure.count > 2
    transitions: {true: big, false: small}
  big: {type: end, output: "big for {{ measure.who }}"}
  small: {type: end, output: small}
  broken: {type: end, status: failed}
"""


@pytest.fixture
def alice(db):
    return make_member("alice").user


def test_a_script_runs_and_its_json_output_feeds_later_nodes(alice):
    run = start(alice, PIPELINE, {"count": 5, "who": "ada"})
    assert (run.status, run.output) == ("completed", "big for ada")
    measured = NodeRun.objects.get(run=run, node_id="measure")
    assert measured.output == {"count": 5, "who": "ada"}
    assert measured.input["env"] == {"COUNT": "5", "WHO": "ada"}
    assert measured.event == "success" and measured.duration_ms is not None


def test_a_failing_script_follows_its_failure_transition_with_the_error_kept(alice):
    run = start(alice, PIPELINE.replace("printf", "echo nope >&2; exit 3; printf"), {"count": 1, "who": "x"})
    assert run.status == "failed" and run.stop_reason == "failed_end"
    measured = NodeRun.objects.get(run=run, node_id="measure")
    assert measured.event == "failure"
    assert measured.output == {"stdout": "", "stderr": "nope\n", "exitCode": 3}
    assert "status 3" in measured.error and "nope" in measured.error


def test_a_script_past_its_timeout_is_killed_and_fails_the_run_without_a_failure_path(alice):
    config = ("name: Slow\nstart: slow\nnodes:\n  slow: {type: script, script: 'sleep 30', timeout: 1, "
              "transitions: {success: done}}\n  done: {type: end}\n")
    started = time.monotonic()
    run = start(alice, config)
    assert time.monotonic() - started < 15
    assert (run.status, run.stop_reason) == ("failed", "script_timeout")
    assert "Timed out after 1 s" in run.error


def test_a_script_over_its_memory_limit_fails(alice):
    ScriptSettings.objects.create(user=None, memory_mb=128)
    config = ("name: Greedy\nstart: eat\nnodes:\n  eat: {type: script, command: [python3, -c, "
              "'b = bytearray(1_000_000_000)'], timeout: 20, transitions: {success: done, failure: out}}\n"
              "  done: {type: end}\n  out: {type: end, status: failed}\n")
    run = start(alice, config)
    eaten = NodeRun.objects.get(run=run, node_id="eat")
    assert eaten.event == "failure"
    assert "memory" in eaten.error.lower()


def test_bundled_files_are_reachable_from_the_workflow_dir(alice):
    config = ("name: Bundled\nstart: run\nnodes:\n  run: {type: script, script: 'sh \"$ATRIUM_WORKFLOW_DIR/scripts/"
              "hello.sh\"', transitions: {success: done}}\n  done: {type: end, output: '{{ run.greeting }}'}\n")
    script = Asset("scripts/hello.sh", "#!/bin/sh\necho '{\"greeting\": \"hello from the bundle\"}'\n", True)
    run = start(alice, config, assets=[script])
    assert (run.status, run.output) == ("completed", "hello from the bundle")


def test_the_script_cannot_see_the_servers_environment(alice, monkeypatch):
    monkeypatch.setenv("DATABASE_PASSWORD", "hunter2")
    config = ("name: Env\nstart: env\nnodes:\n  env: {type: script, script: 'env', transitions: {success: done}}\n"
              "  done: {type: end}\n")
    run = start(alice, config)
    printed = NodeRun.objects.get(run=run, node_id="env").output["stdout"]
    assert "hunter2" not in printed and "SECRET_KEY" not in printed
    assert "ATRIUM_WORKFLOW_DIR=" in printed


def test_scripts_can_be_turned_off_for_the_site_or_one_user(alice):
    bob = make_member("bob").user
    ScriptSettings.objects.create(user=None, scripts_enabled=False)
    off = start(alice, PIPELINE, {"count": 1, "who": "a"})
    assert (off.status, off.stop_reason) == ("failed", "scripts_disabled")
    ScriptSettings.objects.create(user=bob, scripts_enabled=True)
    assert start(bob, PIPELINE, {"count": 1, "who": "b"}).status == "completed"


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_cancel_stops_a_running_script_promptly():
    user = make_member("alice").user
    config = ("name: Long\nstart: long\nnodes:\n  long: {type: script, script: 'sleep 60', timeout: 120, "
              "transitions: {success: done}}\n  done: {type: end}\n")
    finished = threading.Event()

    def run_it() -> None:
        try:
            start(user, config)
        finally:
            connection.close()
            finished.set()

    threading.Thread(target=run_it, daemon=True).start()
    deadline = time.monotonic() + 20
    while not NodeRun.objects.filter(node_id="long", status="running").exists():
        assert time.monotonic() < deadline, "the script never started"
        time.sleep(0.05)
    run = Run.objects.get()
    cancelled_at = time.monotonic()
    engine.run_cancel(caller=Caller.trusted(user, via="command"), scope=Scope(owner=user, project=None), run_id=run.pk)
    assert finished.wait(timeout=10), "the script kept running after cancel"
    assert time.monotonic() - cancelled_at < 10
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert NodeRun.objects.get(run=run, node_id="long").status == "cancelled"


def test_a_server_that_cannot_sandbox_fails_the_run_saying_so_even_with_a_failure_path(alice, settings):
    settings.ATRIUM_SCRIPT_SANDBOX, settings.DEBUG = "subprocess", False  # hosted: subprocess is refused

    run = start(alice, PIPELINE, {"count": 5, "who": "ada"})

    assert (run.status, run.stop_reason) == ("failed", "script_sandbox_unavailable")
    assert "ATRIUM_SCRIPT_SANDBOX=subprocess" in run.error
    measured = NodeRun.objects.get(run=run, node_id="measure")
    assert measured.status == NodeRun.Status.FAILED and measured.error
    assert not NodeRun.objects.filter(run=run, node_id="broken").exists()
