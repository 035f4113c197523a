"""On PostgreSQL every statement carries a timeout (a longer one in Celery workers), and connecting to
a database that is down, directly or through the pool, gives up within 3 seconds."""

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db.backends.signals import connection_created

from config.celery import worker_connections_prepare, worker_statement_timeout

BASE_DIR = Path(__file__).resolve().parents[1]
POSTGRES = "postgres://atrium@127.0.0.1:5432/atrium"


def load_settings(monkeypatch, **env: str):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("settings_under_test", BASE_DIR / "config" / "settings.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "settings_under_test", module)
    spec.loader.exec_module(module)
    return module


def test_postgresql_statements_carry_a_timeout_and_connecting_gives_up_within_3_seconds(monkeypatch):
    settings = load_settings(monkeypatch, DATABASE_URL=POSTGRES, SECRET_KEY="test-only-not-secret")
    unlimited = load_settings(monkeypatch, DATABASE_URL=POSTGRES, SECRET_KEY="test-only-not-secret",
                              ATRIUM_STATEMENT_TIMEOUT_MS="0")

    options = settings.DATABASES["default"]["OPTIONS"]
    assert options["options"] == "-c statement_timeout=15000"
    assert options["connect_timeout"] == 3
    assert options["pool"]["timeout"] == 3
    assert unlimited.DATABASES["default"]["OPTIONS"]["options"] == "-c statement_timeout=0"


class RecordingConnection:
    """Stands in for a worker's new PostgreSQL connection and keeps what is executed on it."""

    vendor = "postgresql"

    def __init__(self) -> None:
        self.executed: list[tuple[str, list[str]]] = []

    @contextmanager
    def cursor(self) -> Iterator["RecordingConnection"]:
        yield self

    def execute(self, sql: str, params: list[str]) -> None:
        self.executed.append((sql, params))


def test_a_worker_gives_each_new_connection_the_workers_statement_timeout(settings):
    settings.ATRIUM_WORKER_STATEMENT_TIMEOUT_MS = 600_000
    worker_connections_prepare()
    new = RecordingConnection()
    try:
        connection_created.send(sender=None, connection=new)
    finally:
        connection_created.disconnect(worker_statement_timeout)

    assert new.executed == [("SELECT set_config('statement_timeout', %s, false)", ["600000"])]
