from typing import Any

from celery import shared_task

from elements import collection, submissions


@shared_task
def collection_refresh() -> dict[str, Any]:
    """Read the community collection's source into the cache; beat runs it every TTL."""
    cache = collection.collection_refresh()
    return {"source": cache.source, "items": cache.item_count, "error": cache.last_error}


@shared_task
def portfolio_auto_push(user_id: int) -> dict[str, Any] | None:
    """The one queued auto-sync push of a user's portfolio (elements.portfolio_sync.auto_sync_queue)."""
    from elements.portfolio_sync import auto_push

    return auto_push(user_id=user_id)


@shared_task
def collection_submission_push(submission_id: int) -> dict[str, Any]:
    """Commit an approved submission to its branch on the collection's git source."""
    submission = submissions.submission_push(submission_id=submission_id)
    return {"submission": submission.pk, "branch": submission.git_branch, "commit": submission.git_commit,
            "error": submission.git_error}
