"""A collection source that is down is tried once per back-off, not on every call: callers answer
from the cached copy at once, and the back-off doubles from a minute up to the TTL."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from elements import collection
from elements.models import CollectionCache
from tests.actions import Reply
from tests.test_collection import PERSONA

pytestmark = pytest.mark.django_db

READ = "mcp_aql_read"
INDEX = {"index": {"personas": [{"path": "library/personas/git-helper.md"}]}}


@pytest.fixture
def http_source(settings, fake_server):
    fake_server.routes[("GET", "/c/collection-index.json")] = lambda _: Reply(body=json.dumps(INDEX).encode())
    fake_server.routes[("GET", "/c/library/personas/git-helper.md")] = lambda _: Reply(body=PERSONA.encode())
    settings.ATRIUM_COLLECTION_SOURCE = f"{fake_server.url}/c/collection-index.json"
    return fake_server


def take_down(server) -> None:
    server.routes[("GET", "/c/collection-index.json")] = lambda _: Reply(status=503, body=b"down")
    server.received.clear()


def expire() -> None:
    CollectionCache.objects.update(fetched_at=timezone.now() - timedelta(days=1))


def index_reads(server) -> int:
    return sum(r.path == "/c/collection-index.json" for r in server.received)


def test_a_source_that_is_down_is_read_once_for_several_calls(portfolio, alice, http_source):
    p = portfolio(alice)
    p.ok(READ, "browse_collection")
    take_down(http_source)
    expire()

    answers = [p.call(READ, "search_collection", query="git") for _ in range(5)]

    assert index_reads(http_source) == 1
    assert all(a["success"] and a["data"]["results"][0]["name"] == "Git Helper" for a in answers)
    assert all("answering from the copy cached" in json.dumps(a["data"]["warnings"]) for a in answers)
    assert "tried again after" in json.dumps(answers[-1]["data"]["warnings"])
    cache = CollectionCache.objects.get()
    assert cache.failures == 1 and cache.retry_after - cache.last_error_at == timedelta(seconds=60)


def test_the_back_off_doubles_up_to_the_ttl_and_a_good_read_resets_it(settings, http_source):
    settings.ATRIUM_COLLECTION_TTL_SECONDS = 300
    collection.collection_refresh()
    take_down(http_source)
    expire()
    delays = []
    for _ in range(5):
        CollectionCache.objects.update(retry_after=timezone.now() - timedelta(seconds=1))  # the back-off has passed
        cache = collection.collection_cache(warnings=[])
        delays.append((cache.retry_after - cache.last_error_at).total_seconds())

    assert delays == [60, 120, 240, 300, 300]
    assert index_reads(http_source) == 5
    http_source.routes[("GET", "/c/collection-index.json")] = lambda _: Reply(body=json.dumps(INDEX).encode())
    CollectionCache.objects.update(retry_after=timezone.now() - timedelta(seconds=1))
    cache = collection.collection_cache(warnings=[])
    assert cache.failures == 0 and cache.retry_after is None and cache.last_error == ""


def test_a_forced_refresh_tries_at_once_despite_the_back_off(http_source):
    collection.collection_refresh()
    take_down(http_source)
    expire()
    collection.collection_cache(warnings=[])

    cache = collection.collection_refresh()

    assert index_reads(http_source) == 2 and cache.failures == 2


def test_with_nothing_cached_the_error_comes_back_without_waiting_on_the_source(portfolio, alice, http_source):
    take_down(http_source)
    p = portfolio(alice)

    errors = [p.fails(READ, "browse_collection") for _ in range(3)]
    health = p.ok(READ, "get_collection_cache_health")

    assert index_reads(http_source) == 1
    assert all("could not be read" in e and "HTTP 503" in e for e in errors)
    assert health["cached"] is False and health["failures"] == 1 and health["retryAfter"]


def test_cache_health_reports_the_failures_and_the_next_attempt(portfolio, alice, http_source):
    p = portfolio(alice)
    p.ok(READ, "browse_collection")
    take_down(http_source)
    expire()
    p.ok(READ, "browse_collection")

    health = p.ok(READ, "get_collection_cache_health")

    assert health["failures"] == 1 and health["retryAfter"] == CollectionCache.objects.get().retry_after.isoformat()
    assert "HTTP 503" in health["lastError"]
