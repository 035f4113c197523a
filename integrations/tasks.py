from typing import Any

from celery import shared_task

from integrations import services, skills


# Not acks_late: a skill's actions have side effects, so a worker lost mid-skill must not run it twice.
@shared_task(acks_late=False)
def skill_execute(execution_id: int, input: dict[str, Any], caller: dict[str, Any], call_action: str) -> None:
    """Run one dispatched skill in the sandbox as the caller described, and record its result."""
    skills.skill_execute(execution_id=execution_id, input=input, caller=caller, call_action=call_action)


@shared_task
def executions_reap() -> int:
    """Fail skill executions whose worker was lost."""
    return services.executions_reap()
