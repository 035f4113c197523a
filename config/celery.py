"""The Celery app. Workers run scripts, triggers and maintenance; the web process never does."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("atrium")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def worker_statement_timeout(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Give a worker's PostgreSQL session the workers' statement timeout: syncs and imports run
    statements that the web processes' ATRIUM_STATEMENT_TIMEOUT_MS would cancel."""
    from django.conf import settings

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, false)",
                           [str(settings.ATRIUM_WORKER_STATEMENT_TIMEOUT_MS)])


@worker_init.connect
def worker_connections_prepare(**kwargs: Any) -> None:
    from django.db.backends.signals import connection_created

    connection_created.connect(worker_statement_timeout)
