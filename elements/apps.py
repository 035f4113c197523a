from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


def _search_index(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    from elements.counts import ensure_sqlite_counts
    from elements.search_index import ensure_sqlite_search_index

    ensure_sqlite_search_index(connections[using])
    ensure_sqlite_counts(connections[using])


class ElementsConfig(AppConfig):
    name = "elements"
    verbose_name = "Elements"

    def ready(self) -> None:
        post_migrate.connect(_search_index, sender=self, dispatch_uid="elements.search_index")
