"""A real Celery worker with its beat on a real broker (Redis in CI, in both of its passes) fires a
due schedule trigger: the execution it starts runs to completion on that worker."""

import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from config.celery import app as celery_app
from core.caller import Caller
from elements.models import MemoryEntry
from elements.services import element_create
from elements.types import ElementType
from integrations.services import catalogue_sync
from runs.models import Run
from tests.conftest import make_member
from tests.live.conftest import BASE_DIR, child_env
from tests.playbook_helpers import playbook_make
from workflows import triggers
from workflows.models import Trigger, TriggerFiring

pytestmark = [
    pytest.mark.live,
    pytest.mark.uses_broker,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PLAN = {
    "input": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
    "steps": [{"id": "remember", "title": "Remember the note", "kind": "capability",
               "capability": "atrium_tools.add_memory_entry",
               "input": {"memory": "standup", "content": "{{ context.note }}"}}],
    "output": {"value": "{{ remember.entryId }}"},
}


def test_beat_fires_a_due_schedule_and_a_worker_runs_its_execution_to_the_end(tmp_path, broker_url, monkeypatch):
    queue = f"test-{uuid.uuid4().hex[:8]}"
    # This process's own tasks (the events of the writes below) go to this test's worker too.
    monkeypatch.setitem(celery_app.conf, "task_default_queue", queue)
    alice = make_member("alice")
    caller = Caller.trusted(alice.user, via="command")
    catalogue_sync(documents=[])
    element_create(caller=caller, element_type=ElementType.MEMORY, name="standup", params={"description": "Standup"})
    playbook = playbook_make(alice.user, name="Standup notes", plan=PLAN)
    trigger = triggers.trigger_create(caller=caller, playbook=playbook, spec={
        "type": "schedule", "preset": "every weekday at 9", "input": {"note": "Demo on Friday."},
        "enabled": True}).trigger
    Trigger.objects.filter(pk=trigger.pk).update(next_fire_at=timezone.now() - timedelta(minutes=5))
    log = tmp_path / "worker.log"

    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--beat", "-s", str(tmp_path / "beat-schedule"),
             "--pool", "solo", "-Q", queue, "--without-heartbeat", "--without-gossip", "--without-mingle",
             "--loglevel", "INFO"],
            cwd=BASE_DIR, stdout=out, stderr=out,
            env=child_env(CELERY_BROKER_URL=broker_url, CELERY_TASK_DEFAULT_QUEUE=queue,
                          ATRIUM_TRIGGER_TICK_SECONDS="1", ATRIUM_SCRIPT_WAIT_SECONDS="1"),
        )
    try:
        deadline = time.monotonic() + 90
        while (execution := Run.objects.filter(trigger=trigger).first()) is None or not execution.is_terminal:
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no execution ran to its end:\n{log.read_text()}"
            time.sleep(0.25)
    finally:
        worker.terminate()
        worker.wait(timeout=20)

    assert execution.status == "completed", (execution.error, log.read_text())
    assert (execution.playbook, execution.owner, execution.context) == (playbook, alice.user,
                                                                        {"note": "Demo on Friday."})
    entry = MemoryEntry.objects.get(memory__name="standup")
    assert entry.content == "Demo on Friday." and execution.output == entry.entry_id
    firing = TriggerFiring.objects.get(trigger=trigger)
    assert (firing.outcome, firing.run, firing.reason) == ("started", execution,
                                                           "schedule 0 9 * * 1-5 (every weekday at 9)")
    trigger.refresh_from_db()
    assert trigger.next_fire_at > timezone.now() and trigger.last_fired_at == firing.fired_at
    assert "workflows.tasks.triggers_fire_due" in log.read_text()
