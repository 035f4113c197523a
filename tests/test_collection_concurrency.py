"""Refreshing the community collection from many workers at once, on real connections: one worker
reads the source, every caller gets a filled cache, and the cache is one consistent copy."""

import pytest

from elements import collection
from elements.models import CollectionCache, CollectionItem
from tests.conftest import THREADS, in_threads
from tests.test_collection import PERSONA, library

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_twenty_first_uses_at_once_fill_the_cache_once(settings, tmp_path, monkeypatch):
    files = {f"personas/helper-{n}.md": PERSONA.replace("Git Helper", f"Helper {n}") for n in range(5)}
    settings.ATRIUM_COLLECTION_SOURCE = str(library(tmp_path, files))
    reads = []
    read = collection.source_read
    monkeypatch.setattr(collection, "source_read", lambda source: reads.append(source) or read(source))

    caches = in_threads(lambda _: collection.collection_cache(warnings=[]).item_count)

    assert caches == [5] * THREADS
    assert len(reads) == 1
    cache = CollectionCache.objects.get()
    assert cache.claimed_until is None and cache.item_count == 5
    assert sorted(CollectionItem.objects.values_list("path", flat=True)) == sorted(
        f"library/{path}" for path in files)


def test_twenty_forced_refreshes_at_once_leave_one_consistent_cache(settings, tmp_path):
    settings.ATRIUM_COLLECTION_SOURCE = str(library(tmp_path, {"personas/git-helper.md": PERSONA}))
    collection.collection_refresh()
    library(tmp_path, {f"skills/s{n}.md": PERSONA.replace("Git Helper", f"Skill {n}") for n in range(3)})

    in_threads(lambda _: collection.collection_refresh())
    collection.collection_refresh()

    cache = CollectionCache.objects.get()
    assert cache.item_count == 4 == CollectionItem.objects.filter(cache=cache).count()
    assert cache.claimed_until is None and cache.last_error == ""
