"""The element search index keeps up with the table on both databases, whatever rebuilt it."""

import pytest
from django.db import connection

from core.caller import Caller
from elements.search_index import ensure_sqlite_search_index
from elements.selectors import element_search
from elements.services import element_create
from elements.types import ElementType

pytestmark = pytest.mark.django_db


def _create_tracing(caller: Caller) -> None:
    element_create(caller=caller, element_type=ElementType.SKILL, name="tracing", params={
        "description": "Follow requests", "content": "Distributed tracing with spans."})


def test_lost_triggers_are_restored_and_the_index_refilled(alice):
    caller = Caller.trusted(alice.user, via="command")
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER element_document_insert")  # what a table rebuild does
        _create_tracing(caller)
        assert element_search(caller=caller, text="spans")[1] == 0

        assert ensure_sqlite_search_index(connection) is True
    else:
        # PostgreSQL's tsvector is a generated column: no trigger to lose, nothing to refill.
        _create_tracing(caller)
        assert ensure_sqlite_search_index(connection) is False

    assert element_search(caller=caller, text="spans")[1] == 1
    assert ensure_sqlite_search_index(connection) is False


def test_text_changed_behind_the_orm_is_found_by_its_new_words(alice):
    caller = Caller.trusted(alice.user, via="command")
    _create_tracing(caller)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE elements_element SET content = 'Sampling of flamegraphs.' WHERE name = 'tracing'")

    assert element_search(caller=caller, text="flamegraphs")[1] == 1
    assert element_search(caller=caller, text="spans")[1] == 0
