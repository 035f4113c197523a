"""Each owner's number of elements per type, kept exact by the database itself.

Triggers on elements_element add one to the owner's row of elements_elementcount for an insert,
take one off for a delete, and move one across for a change of owner or type, so the count holds
whatever wrote the row: a service, admin, bulk_create, a cascade. On PostgreSQL a TRUNCATE empties
the counts too. SQLite drops a table's triggers when a migration rebuilds it, so after every
migrate they are checked like the search index's, and the counts recomputed when one was missing.
"""

from django.db.backends.base.base import BaseDatabaseWrapper

from elements.search_index import sqlite_index_ensure

COUNTS = "elements_elementcount"
_ADD = (f"INSERT INTO {COUNTS} (owner_id, element_type, count) VALUES ({{row}}.owner_id, {{row}}.element_type, 1) "
        f"ON CONFLICT (owner_id, element_type) DO UPDATE SET count = {COUNTS}.count + 1")
_TAKE = (f"UPDATE {COUNTS} SET count = count - 1 "
         "WHERE owner_id = {row}.owner_id AND element_type = {row}.element_type")
_MOVED = "old.owner_id != new.owner_id OR old.element_type != new.element_type"

RECOUNT = [
    f"DELETE FROM {COUNTS}",
    f"INSERT INTO {COUNTS} (owner_id, element_type, count) "
    "SELECT owner_id, element_type, COUNT(*) FROM elements_element GROUP BY owner_id, element_type",
]

SQLITE_TRIGGERS = {
    "element_count_insert": "CREATE TRIGGER element_count_insert AFTER INSERT ON elements_element BEGIN "
                            f"{_ADD.format(row='new')}; END",
    "element_count_delete": "CREATE TRIGGER element_count_delete AFTER DELETE ON elements_element BEGIN "
                            f"{_TAKE.format(row='old')}; END",
    "element_count_update": "CREATE TRIGGER element_count_update AFTER UPDATE OF owner_id, element_type ON "
                            f"elements_element WHEN {_MOVED} BEGIN {_TAKE.format(row='old')}; "
                            f"{_ADD.format(row='new')}; END",
}

POSTGRES_FORWARD = [
    "CREATE OR REPLACE FUNCTION element_count_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"IF TG_OP IN ('DELETE', 'UPDATE') THEN {_TAKE.format(row='OLD')}; END IF; "
    f"IF TG_OP IN ('INSERT', 'UPDATE') THEN {_ADD.format(row='NEW')}; END IF; "
    "RETURN NULL; END $$",
    f"CREATE OR REPLACE FUNCTION element_count_truncate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"DELETE FROM {COUNTS}; RETURN NULL; END $$",
    "CREATE TRIGGER element_count AFTER INSERT OR DELETE ON elements_element "
    "FOR EACH ROW EXECUTE FUNCTION element_count_row()",
    "CREATE TRIGGER element_count_update AFTER UPDATE OF owner_id, element_type ON elements_element "
    "FOR EACH ROW WHEN (OLD.owner_id IS DISTINCT FROM NEW.owner_id OR OLD.element_type IS DISTINCT FROM "
    "NEW.element_type) EXECUTE FUNCTION element_count_row()",
    "CREATE TRIGGER element_count_truncate AFTER TRUNCATE ON elements_element "
    "FOR EACH STATEMENT EXECUTE FUNCTION element_count_truncate()",
    *RECOUNT,
]
POSTGRES_BACKWARD = [
    "DROP TRIGGER IF EXISTS element_count ON elements_element",
    "DROP TRIGGER IF EXISTS element_count_update ON elements_element",
    "DROP TRIGGER IF EXISTS element_count_truncate ON elements_element",
    "DROP FUNCTION IF EXISTS element_count_row()",
    "DROP FUNCTION IF EXISTS element_count_truncate()",
]


def ensure_sqlite_counts(connection: BaseDatabaseWrapper) -> bool:
    """Create the SQLite triggers that are missing; returns whether the counts had to be recomputed."""
    return sqlite_index_ensure(connection, source_table="elements_element", tables=[], triggers=SQLITE_TRIGGERS,
                               refill=RECOUNT)
