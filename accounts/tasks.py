from celery import shared_task

from accounts.services import expired_purge


@shared_task
def purge_expired() -> dict[str, int]:
    return expired_purge()
