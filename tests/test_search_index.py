"""SQLite's search index survives migrations that rebuild the element table."""

import pytest
from django.db import connection

from accounts.caller import Caller
from elements.search_index import ensure_sqlite_search_index
from elements.selectors import element_search
from elements.services import element_create
from elements.types import ElementType

pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(connection.vendor != "sqlite", reason="PostgreSQL indexes need no triggers")]


def test_lost_triggers_are_restored_and_the_index_refilled(alice):
    caller = Caller.trusted(alice.user, via="command")
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER element_document_insert")  # what a table rebuild does
    element_create(caller=caller, element_type=ElementType.SKILL, name="tracing", params={
        "description": "Follow requests", "content": "Distributed tracing with spans."})
    assert element_search(caller=caller, text="spans")[1] == 0

    assert ensure_sqlite_search_index(connection) is True

    assert element_search(caller=caller, text="spans")[1] == 1
    assert ensure_sqlite_search_index(connection) is False
