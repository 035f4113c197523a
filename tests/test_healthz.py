"""/healthz checks the database, the cache and the broker, each with a short timeout, and names
whichever failed."""

import socket

import pytest

pytestmark = pytest.mark.django_db


def closed_port() -> int:
    """A port nothing listens on: bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_everything_configured_answers_and_a_missing_broker_is_not_configured(client, settings):
    settings.CELERY_BROKER_URL = ""

    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "cache": "ok", "broker": "not configured"}


def test_a_broken_database_is_named(client, settings, monkeypatch):
    from django.db.backends.utils import CursorWrapper

    def broken(self, sql, params=None):
        raise RuntimeError("database is gone")

    settings.CELERY_BROKER_URL = ""
    monkeypatch.setattr(CursorWrapper, "execute", broken)

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json() == {"status": "error", "database": "error: database is gone", "cache": "ok",
                               "broker": "not configured", "failed": ["database"]}


def test_an_unreachable_broker_is_named(client, settings):
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"

    response = client.get("/healthz")

    body = response.json()
    assert response.status_code == 503
    assert body["failed"] == ["broker"] and body["broker"].startswith("error")
    assert (body["status"], body["database"], body["cache"]) == ("error", "ok", "ok")


def test_an_unreachable_cache_is_named(client, settings):
    settings.CELERY_BROKER_URL = ""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{closed_port()}/0"}}

    response = client.get("/healthz")

    body = response.json()
    assert response.status_code == 503
    assert body["failed"] == ["cache"] and body["cache"].startswith("error")
    assert body["database"] == "ok"
