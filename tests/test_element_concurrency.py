"""Concurrent writes to one element or one confirmation, from real threads on real connections:
nothing a caller was told succeeded is lost, and a single-use confirmation lets one call through."""

import threading
from typing import Any

import pytest
from django.db import connections

import elements.operations  # noqa: F401  (fills the route table)
from accounts.services import mcp_session_open
from core.caller import Caller
from core.versions import VersionConflict
from elements import selectors, services
from elements.mcpaql import Endpoint, run
from elements.models import Confirmation, Element, MemoryEntry
from elements.types import ElementType
from tests.conftest import THREADS, in_threads

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)



def persona(caller: Caller) -> Element:
    return services.element_create(caller=caller, element_type=ElementType.PERSONA, name="reviewer",
                                   params={"description": "Reviews.", "instructions": "You ARE a reviewer."})


def test_edits_made_from_copies_read_before_any_of_them_saved_all_survive(alice):
    caller = Caller.trusted(alice.user, via="api")
    persona(caller)
    everyone_has_read = threading.Barrier(THREADS, timeout=30)

    def edit(index: int) -> None:
        copy = selectors.element_get(caller=caller, element_type=ElementType.PERSONA, name="reviewer")
        connections.close_all()  # a request ends here; the edit comes in the next one
        everyone_has_read.wait()
        services.element_edit(caller=caller, element=copy, changes={"metadata": {f"key{index}": index}})

    in_threads(edit)

    metadata = Element.objects.get(owner=alice.user, name="reviewer").metadata
    assert {key: metadata.get(key) for key in (f"key{i}" for i in range(THREADS))} == {
        f"key{i}": i for i in range(THREADS)}


def test_twenty_concurrent_edit_element_calls_each_keep_their_key(alice):
    caller = Caller.trusted(alice.user, via="mcp")
    persona(caller)
    services.settings_set(caller=caller, values={"gatekeeper.auto_confirm": True})

    def edit(index: int) -> dict[str, Any]:
        return run(Endpoint.UPDATE, {"operation": "edit_element", "element_type": "persona",
                                     "params": {"element_name": "reviewer",
                                                "input": {"metadata": {f"key{index}": index}}}}, caller)

    answers = in_threads(edit)

    assert [a["success"] for a in answers] == [True] * THREADS, answers
    metadata = Element.objects.get(owner=alice.user, name="reviewer").metadata
    assert sorted(k for k in metadata if k.startswith("key")) == sorted(f"key{i}" for i in range(THREADS))


def test_a_stale_version_is_refused_and_changes_nothing(alice):
    caller = Caller.trusted(alice.user, via="api")
    element = persona(caller)
    read_at = selectors.element_version(element)
    services.element_edit(caller=caller, element=element, changes={"tags": ["first"]})

    with pytest.raises(VersionConflict) as refused:
        services.element_edit(caller=caller, element=element, changes={"tags": ["second"]}, if_match={read_at})

    assert refused.value.code == "version_conflict"
    assert "changed since you read it" in refused.value.message
    assert Element.objects.get(pk=element.pk).tags == ["first"]


def test_a_memory_cleared_while_entries_are_added_keeps_every_entry_in_the_backup_or_the_memory(alice):
    caller = Caller.trusted(alice.user, via="api")
    memory = services.element_create(caller=caller, element_type=ElementType.MEMORY, name="notes",
                                     params={"description": "Notes."})

    def work(index: int) -> None:
        if index == THREADS // 2:
            services.memory_clear(caller=caller, memory=memory)
        else:
            services.memory_entry_add(caller=caller, memory=memory, content=f"entry {index}")

    in_threads(work)

    kept = set(MemoryEntry.objects.filter(memory=memory).values_list("content", flat=True))
    backup = memory.revisions.get(action="clear").snapshot
    backed_up = {entry["content"] for entry in backup.get("entries", [])}
    assert kept | backed_up == {f"entry {i}" for i in range(THREADS) if i != THREADS // 2}
    assert not kept & backed_up


def test_one_single_use_confirmation_lets_exactly_one_of_twenty_racing_calls_through(alice):
    session = mcp_session_open(caller=Caller.trusted(alice.user, via="mcp"), transport="http")
    caller = Caller.trusted(alice.user, via="mcp", session=session)
    persona(caller)
    services.confirmation_grant(caller=caller, operation="edit_element", element_type="", level="single_use")

    def edit(index: int) -> dict[str, Any]:
        return run(Endpoint.UPDATE, {"operation": "edit_element", "element_type": "persona",
                                     "params": {"element_name": "reviewer",
                                                "input": {"metadata": {f"key{index}": index}}}}, caller)

    answers = in_threads(edit)

    assert sum(a["success"] for a in answers) == 1, answers
    refused = [a for a in answers if not a["success"]]
    assert all("requires confirmation each time" in a["error"] for a in refused)
    metadata = Element.objects.get(owner=alice.user, name="reviewer").metadata
    assert len([k for k in metadata if k.startswith("key")]) == 1
    assert not Confirmation.objects.filter(session=session, pending=False).exists()
