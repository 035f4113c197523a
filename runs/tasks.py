from celery import shared_task

from runs import scripts


# Not acks_late: a script may have side effects, so a worker lost mid-script must not run it twice.
# The run stays `running` at that node, visibly, until someone cancels it.
@shared_task(acks_late=False)
def script_run(node_run_id: int) -> None:
    """Run one script node, then carry its run on until it pauses or ends."""
    scripts.script_execute_and_continue(node_run_id)
