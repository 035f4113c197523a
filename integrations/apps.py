from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


def _search_index(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    from integrations.search_index import ensure_sqlite_capability_index

    ensure_sqlite_capability_index(connections[using])


class IntegrationsConfig(AppConfig):
    name = "integrations"
    verbose_name = "Integrations and capabilities"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_search_index, sender=self, dispatch_uid="integrations.search_index")
        # Every executor module registers its executors on import: a process must have them all
        # before it runs its first action, whichever module it happened to import first.
        from integrations import catalogue
        from integrations.executors import openapi  # noqa: F401

        catalogue.builtin_specs()
