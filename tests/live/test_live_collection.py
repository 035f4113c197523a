"""The community collection through the official SDK client against a live server: browse the
shipped collection, search it, read a file and install it into the caller's portfolio."""

import asyncio

import pytest

from elements.models import CollectionCache, Element
from tests.conftest import make_member
from tests.live.conftest import sdk_session
from tests.live.test_live_elements import CREATE, READ, Session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

COLLECTION_OPERATIONS = ("browse_collection", "search_collection", "search_collection_enhanced",
                         "get_collection_content", "install_collection_content", "get_collection_cache_health")


async def walk(mcp_url: str, token: str) -> dict:
    async with sdk_session(mcp_url, token) as client:
        s = Session(client)
        types = await s.ok(READ, "browse_collection", section="library")
        found = await s.ok(READ, "search_collection", query="sql tutor")
        paged = await s.ok(READ, "search_collection_enhanced", query="review", elementType="persona", pageSize=2)
        content = await s.ok(READ, "get_collection_content", path=found["results"][0]["path"])
        installed = await s.ok(CREATE, "install_collection_content", path=found["results"][0]["path"])
        health = await s.ok(READ, "get_collection_cache_health")
        return {"types": types, "found": found, "paged": paged, "content": content, "installed": installed,
                "health": health, "seen": s.seen}


def test_the_sdk_client_browses_searches_and_installs_from_the_collection(live_atrium):
    alice = make_member("alice")

    answers = asyncio.run(walk(live_atrium.mcp_url, alice.token))

    assert {t["type"] for t in answers["types"]["types"] if t["count"]} == {
        "personas", "skills", "templates", "agents", "memories", "ensembles"}
    assert answers["found"]["results"][0]["name"] == "SQL Tutor"
    assert answers["paged"]["pagination"]["pageSize"] == 2 and answers["paged"]["items"]
    assert answers["content"]["content"].startswith("---\n")
    assert answers["installed"]["element_name"] == "SQL Tutor" and answers["installed"]["created"]
    assert answers["health"]["cached"] and answers["health"]["itemCount"] >= 30
    assert set(COLLECTION_OPERATIONS) <= set(answers["seen"])
    assert Element.objects.get(owner=alice.user).name == "SQL Tutor"
    assert CollectionCache.objects.get().item_count == answers["health"]["itemCount"]
