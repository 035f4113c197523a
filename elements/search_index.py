"""SQLite's full-text tables for element search, and the triggers that keep them in step.

SQLite rebuilds a table to alter it, which drops the table's triggers, so after every migrate the
triggers are checked and, if one is missing, recreated and the index refilled. PostgreSQL's
indexes (migration 0002) need none of this.
"""

from django.db.backends.base.base import BaseDatabaseWrapper

DOCUMENT = "{t}.name || ' ' || {t}.description || ' ' || {t}.instructions || ' ' || {t}.content"

TABLES = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS element_document USING fts5(document, prefix='2 3')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS entry_document USING fts5(document, prefix='2 3')",
]
TRIGGERS = {
    "element_document_insert": f"""CREATE TRIGGER element_document_insert AFTER INSERT ON elements_element BEGIN
        INSERT INTO element_document(rowid, document) VALUES (new.id, {DOCUMENT.format(t='new')}); END""",
    "element_document_delete": """CREATE TRIGGER element_document_delete AFTER DELETE ON elements_element BEGIN
        DELETE FROM element_document WHERE rowid = old.id; END""",
    "element_document_update": f"""CREATE TRIGGER element_document_update AFTER UPDATE ON elements_element BEGIN
        UPDATE element_document SET document = {DOCUMENT.format(t='new')} WHERE rowid = old.id; END""",
    "entry_document_insert": """CREATE TRIGGER entry_document_insert AFTER INSERT ON elements_memoryentry BEGIN
        INSERT INTO entry_document(rowid, document) VALUES (new.id, new.content); END""",
    "entry_document_delete": """CREATE TRIGGER entry_document_delete AFTER DELETE ON elements_memoryentry BEGIN
        DELETE FROM entry_document WHERE rowid = old.id; END""",
    "entry_document_update": """CREATE TRIGGER entry_document_update AFTER UPDATE ON elements_memoryentry BEGIN
        UPDATE entry_document SET document = new.content WHERE rowid = old.id; END""",
}
REFILL = [
    "DELETE FROM element_document",
    f"INSERT INTO element_document(rowid, document) SELECT id, {DOCUMENT.format(t='elements_element')} "
    "FROM elements_element",
    "DELETE FROM entry_document",
    "INSERT INTO entry_document(rowid, document) SELECT id, content FROM elements_memoryentry",
]


def sqlite_index_ensure(connection: BaseDatabaseWrapper, *, source_table: str, tables: list[str],
                        triggers: dict[str, str], refill: list[str]) -> bool:
    """Create the tables and the triggers over `source_table` that are missing, refilling the
    tables when a trigger was; returns whether they were refilled. The same for every table SQLite
    keeps by triggers: each app's full-text index, and the element counts (elements.counts)."""
    if connection.vendor != "sqlite":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = %s", [source_table])
        if cursor.fetchone() is None:
            return False  # the app is not migrated yet
        for statement in tables:
            cursor.execute(statement)
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        present = {row[0] for row in cursor.fetchall()}
        missing = [name for name in triggers if name not in present]
        for name in missing:
            cursor.execute(triggers[name])
        if missing:
            for statement in refill:
                cursor.execute(statement)
    return bool(missing)


def ensure_sqlite_search_index(connection: BaseDatabaseWrapper) -> bool:
    """Create what is missing; returns whether the index had to be refilled."""
    return sqlite_index_ensure(connection, source_table="elements_element", tables=TABLES, triggers=TRIGGERS,
                               refill=REFILL)
