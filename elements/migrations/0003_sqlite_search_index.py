"""SQLite's counterpart of the PostgreSQL full-text indexes: FTS5 tables (unicode61 words, with
prefix indexes) kept in step with the element and memory-entry tables by triggers. PostgreSQL
skips this migration."""

from django.db import migrations

ELEMENT_DOCUMENT = "{t}.name || ' ' || {t}.description || ' ' || {t}.instructions || ' ' || {t}.content"

FORWARD = [
    "CREATE VIRTUAL TABLE element_document USING fts5(document, prefix='2 3')",
    f"""CREATE TRIGGER element_document_insert AFTER INSERT ON elements_element BEGIN
        INSERT INTO element_document(rowid, document) VALUES (new.id, {ELEMENT_DOCUMENT.format(t='new')}); END""",
    """CREATE TRIGGER element_document_delete AFTER DELETE ON elements_element BEGIN
        DELETE FROM element_document WHERE rowid = old.id; END""",
    f"""CREATE TRIGGER element_document_update AFTER UPDATE ON elements_element BEGIN
        UPDATE element_document SET document = {ELEMENT_DOCUMENT.format(t='new')} WHERE rowid = old.id; END""",
    f"INSERT INTO element_document(rowid, document) SELECT id, {ELEMENT_DOCUMENT.format(t='elements_element')} "
    "FROM elements_element",
    "CREATE VIRTUAL TABLE entry_document USING fts5(document, prefix='2 3')",
    """CREATE TRIGGER entry_document_insert AFTER INSERT ON elements_memoryentry BEGIN
        INSERT INTO entry_document(rowid, document) VALUES (new.id, new.content); END""",
    """CREATE TRIGGER entry_document_delete AFTER DELETE ON elements_memoryentry BEGIN
        DELETE FROM entry_document WHERE rowid = old.id; END""",
    """CREATE TRIGGER entry_document_update AFTER UPDATE ON elements_memoryentry BEGIN
        UPDATE entry_document SET document = new.content WHERE rowid = old.id; END""",
    "INSERT INTO entry_document(rowid, document) SELECT id, content FROM elements_memoryentry",
]
BACKWARD = [
    "DROP TRIGGER IF EXISTS element_document_insert", "DROP TRIGGER IF EXISTS element_document_delete",
    "DROP TRIGGER IF EXISTS element_document_update", "DROP TABLE IF EXISTS element_document",
    "DROP TRIGGER IF EXISTS entry_document_insert", "DROP TRIGGER IF EXISTS entry_document_delete",
    "DROP TRIGGER IF EXISTS entry_document_update", "DROP TABLE IF EXISTS entry_document",
]


def run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "sqlite":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return apply


class Migration(migrations.Migration):
    dependencies = [("elements", "0002_postgres_search_indexes")]

    operations = [migrations.RunPython(run(FORWARD), run(BACKWARD))]
