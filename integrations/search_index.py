"""SQLite's full-text table for capability search, and the triggers that keep it in step.

As for elements (elements.search_index): SQLite rebuilds a table to alter it, which drops its
triggers, so after every migrate they are checked and, if one is missing, recreated and the table
refilled. PostgreSQL's generated tsvector columns (migration 0002) need none of this.

The document is stored already reduced to lower-case words separated by spaces
(integrations.search), so unicode61 here and PostgreSQL's 'simple' configuration split it alike;
diacritics are kept because PostgreSQL keeps them.
"""

from django.db.backends.base.base import BaseDatabaseWrapper

from elements.search_index import sqlite_index_ensure

TABLE = ("CREATE VIRTUAL TABLE IF NOT EXISTS capability_document USING fts5("
         "name, document, prefix='2 3', tokenize='unicode61 remove_diacritics 0')")
TRIGGERS = {
    "capability_document_insert": """CREATE TRIGGER capability_document_insert
        AFTER INSERT ON integrations_capability BEGIN
        INSERT INTO capability_document(rowid, name, document) VALUES (new.id, new.name, new.document); END""",
    "capability_document_delete": """CREATE TRIGGER capability_document_delete
        AFTER DELETE ON integrations_capability BEGIN
        DELETE FROM capability_document WHERE rowid = old.id; END""",
    "capability_document_update": """CREATE TRIGGER capability_document_update
        AFTER UPDATE OF name, document ON integrations_capability BEGIN
        UPDATE capability_document SET name = new.name, document = new.document WHERE rowid = old.id; END""",
}
REFILL = [
    "DELETE FROM capability_document",
    "INSERT INTO capability_document(rowid, name, document) SELECT id, name, document FROM integrations_capability",
]


def ensure_sqlite_capability_index(connection: BaseDatabaseWrapper) -> bool:
    """Create what is missing; returns whether the table had to be refilled."""
    return sqlite_index_ensure(connection, source_table="integrations_capability", tables=[TABLE],
                               triggers=TRIGGERS, refill=REFILL)
