"""Atrium's events: what happened to a user's things, which a playbook's event trigger can start on.

A service that changes something calls `event_emit` inside its transaction. Nothing is sent unless
that transaction commits: then a Celery task (workflows.tasks.event_dispatch) fires the owner's
enabled triggers for the event (workflows.triggers.triggers_fire_for_event). Without a broker the
task runs at once, in the emitting process.

An event is a convenience on the side of the write that caused it: emitting never fails the write.
A broker that refuses the task is logged and the event is lost, as a notification would be.

EVENTS is the one list of event names and the keys of their data: trigger specs are checked against
it (an unknown event, a filter on a key the event has not), and the docs list it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)

# Event name -> its data's keys, with what each holds.
EVENTS: dict[str, dict[str, str]] = {
    "element.created": {"type": "the element's type (persona, skill, template, agent, memory, ensemble)",
                        "name": "its name", "uniqueId": "its unique id", "tags": "its tags (a list)"},
    "element.changed": {"type": "the element's type", "name": "its name", "uniqueId": "its unique id",
                        "tags": "its tags (a list)", "fields": "the fields the edit named (a list)"},
    "memory.entry_added": {"memory": "the memory's name", "entryId": "the new entry's id",
                           "content": "the entry's text", "tags": "its tags (a list)",
                           "source": "what added it (e.g. atrium_tools.add_memory_entry), or empty"},
    "run.completed": {"runId": "the run's id", "workflowId": "its workflow's id",
                      "playbookId": "the playbook it is an execution of, or null", "status": "completed"},
    "run.failed": {"runId": "the run's id", "workflowId": "its workflow's id",
                   "playbookId": "the playbook it is an execution of, or null", "status": "failed"},
    "capability.executed": {"name": "the capability (integrationId.action, or a skill's name)",
                            "kind": "action or skill", "status": "succeeded or failed (a skill also refused)"},
}

# Events about a run: one from an execution of playbook P never fires P's own triggers.
RUN_EVENTS = ("run.completed", "run.failed")

# Sending the task waits this little for a broker that does not answer: the write it follows is done.
SEND_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


def _send(owner_id: int, name: str, data: list[dict[str, Any]]) -> None:
    from workflows.models import Trigger
    from workflows.tasks import event_dispatch

    try:
        # Most writes are nobody's trigger: one indexed query here spares the broker a message each.
        if not Trigger.objects.filter(owner_id=owner_id, kind=Trigger.Kind.EVENT, event=name, enabled=True).exists():
            return
        for one in data:
            event_dispatch.apply_async((owner_id, name, one), retry_policy=SEND_RETRY)
    except Exception:
        # Without a broker the task ran here and this is its own failure; with one, the broker's.
        logger.exception("Event %s of user %s was not dispatched", name, owner_id)


def event_emit(*, owner_id: int, name: str, data: dict[str, Any]) -> None:
    """Dispatch the event once the current transaction commits (at once outside one)."""
    events_emit(owner_id=owner_id, name=name, data=[data])


def events_emit(*, owner_id: int, name: str, data: list[dict[str, Any]]) -> None:
    """Dispatch one event `name` of the owner's for each of `data`, once the transaction commits:
    a batch of writes (an import) asks once whether any trigger listens."""
    if name not in EVENTS:
        raise ValueError(f"Unknown event {name!r}")
    if data:
        transaction.on_commit(lambda: _send(owner_id, name, data))
