from typing import Any

from celery import shared_task

from workflows import triggers


@shared_task
def triggers_fire_due() -> dict[str, int]:
    """Beat's tick: start the executions of schedule triggers that are due."""
    return triggers.triggers_fire_due()


# Not acks_late: a worker lost mid-dispatch must not start the executions it already started again.
@shared_task(acks_late=False)
def event_dispatch(owner_id: int, name: str, data: dict[str, Any]) -> dict[str, int]:
    """Fire the owner's event triggers that match one event."""
    return triggers.triggers_fire_for_event(owner_id=owner_id, name=name, data=data)
