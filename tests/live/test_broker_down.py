"""With the broker down, starting a run that reaches a script neither fails nor strands the run: it
answers `running`, the script waits unsent, and it is sent once the broker answers again."""

import time

import httpx
import pytest

from core.caller import Caller
from runs import scripts
from runs.models import NodeRun, Run
from tests.conftest import make_member
from tests.live.conftest import free_port, serve
from workflows.scoping import Scope
from workflows.services import workflow_save

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

FLOW = """\
name: Measure
start: measure
nodes:
  measure: {type: script, script: 'echo "{\\"n\\": 3}"', timeout: 30, transitions: {success: review}}
  review: {type: ai_agent, prompt: "Review {{ measure.n }}", transitions: {done: done}}
  done: {type: end}
"""


def test_a_run_started_while_the_broker_is_down_waits_and_goes_on_when_it_is_back(tmp_path):
    alice = make_member("alice")
    workflow_save(caller=Caller.trusted(alice.user, via="command"), scope=Scope(owner=alice.user, project=None),
                  workflow_id="measure", source="global", config=FLOW, overwrite=False)
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there

    with serve(tmp_path, ready=(503,), CELERY_BROKER_URL=down, ATRIUM_SCRIPT_WAIT_SECONDS="1") as server:
        health = httpx.get(f"{server.url}/healthz", timeout=10)
        started = httpx.post(f"{server.url}/api/runs/", json={"workflow_id": "measure", "global": True},
                             headers={"Authorization": f"Bearer {alice.token}"}, timeout=30)

    assert health.status_code == 503 and health.json()["failed"] == ["broker"]
    assert started.status_code == 201, started.text
    body = started.json()
    assert (body["status"], "pendingStep" in body, "error" in body) == ("running", False, False)
    measure = NodeRun.objects.get(run_id=body["runId"], node_id="measure")
    assert (measure.status, measure.dispatched_at, measure.lease_expires_at) == ("running", None, None)

    # The broker is back (here: tasks run in this process): the reaper sends what was left unsent.
    assert scripts.scripts_reap()["sent"] == 1
    deadline = time.monotonic() + 30
    while (run := Run.objects.get(pk=body["runId"])).status == "running":
        assert time.monotonic() < deadline, "the script was never sent"
        time.sleep(0.1)
    assert (run.status, run.current_node) == ("paused", "review")
    assert NodeRun.objects.get(pk=measure.pk).output == {"n": 3}
