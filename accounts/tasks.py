from celery import shared_task
from django.utils import timezone

from accounts.services import expired_purge


@shared_task
def purge_expired() -> dict[str, int]:
    return expired_purge()


# Why a task that polls once and schedules the next poll, not one that loops: a loop would hold a
# worker for up to the code's fifteen minutes, and with tasks run eagerly (tests, `make run`
# without a broker) it would run inside the setup_github_auth request. So with a broker each poll
# is its own task, sent with countdown=interval; eagerly nothing is sent at all (an eager send
# would run at once and, rescheduling itself, recurse until the code expired), and the status
# reads (check_github_auth, oauth_helper_status) make the poll that is due instead. Tests drive
# accounts.github.github_auth_poll directly.
def github_auth_poll_schedule(user_id: int, countdown: int) -> None:
    from config.celery import app

    if not app.conf.task_always_eager:
        github_auth_poll_task.apply_async(args=(user_id,), countdown=countdown)


@shared_task
def github_auth_poll_task(user_id: int) -> str | None:
    """One poll of a user's GitHub device flow; the next one is scheduled while it is pending."""
    from accounts.github import github_auth_poll, next_poll_at
    from accounts.models import GitHubAuth, User

    user = User.objects.filter(pk=user_id).first()
    row = github_auth_poll(user=user) if user is not None else None
    if row is None:
        return None
    if row.state == GitHubAuth.State.PENDING:
        wait = (next_poll_at(row) - timezone.now()).total_seconds()
        github_auth_poll_schedule(user_id, max(int(wait + 0.999), 0))
    return row.state
