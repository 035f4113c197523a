from celery import shared_task

from runs import answerers, engine, scripts


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


@shared_task(bind=True, max_retries=answerers.BACKEND_RETRIES)
def step_answer(self, run_id: str) -> None:
    """Have the model backend answer the run's paused step, and the model steps after it. A backend
    that is down is tried again with backoff; after the last try the step is left to a host."""
    try:
        answerers.pending_answer(run_id)
    except answerers.BackendUnavailable as exc:
        if self.request.retries >= self.max_retries:
            answerers.backend_gave_up(exc.run_id, step_id=exc.step_id, error=exc.message)
            return
        raise self.retry(args=(exc.run_id,), countdown=answerers.backoff_seconds(self.request.retries)) from exc


@shared_task
def model_steps_resend() -> int:
    """Send again the model's steps whose task was lost."""
    return answerers.model_steps_resend()
