from typing import Any

from celery import shared_task

from elements import collection


@shared_task
def collection_refresh() -> dict[str, Any]:
    """Read the community collection's source into the cache; beat runs it every TTL."""
    cache = collection.collection_refresh()
    return {"source": cache.source, "items": cache.item_count, "error": cache.last_error}
