from celery import shared_task

from runs import engine, scripts


# Not acks_late: a script may have side effects, so a worker lost mid-script must not run it twice.
# Its lease runs out instead, and scripts_reap fails the node as `worker_lost`.
@shared_task(acks_late=False)
def script_run(node_run_id: int) -> None:
    """Run one script node, then carry its run on until it pauses or ends."""
    scripts.script_execute_and_continue(node_run_id)


@shared_task
def scripts_reap() -> dict[str, int]:
    """Fail script nodes whose worker was lost; send again those the broker refused."""
    return scripts.scripts_reap()


@shared_task(acks_late=False)
def run_drive(run_id: str) -> None:
    """Drive a run that was started elsewhere (a playbook's execution) until it pauses or ends."""
    engine.drive(run_id, inline_scripts=True)
