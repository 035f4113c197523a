"""SQLite's counterpart of the PostgreSQL full-text indexes: FTS5 tables (unicode61 words, with
prefix indexes) kept in step by triggers; see elements.search_index, which also restores them
after any later migration that rebuilds a table. PostgreSQL skips this migration."""

from django.db import migrations

from elements.search_index import ensure_sqlite_search_index


def create(apps, schema_editor):
    ensure_sqlite_search_index(schema_editor.connection)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for statement in ("DROP TABLE IF EXISTS element_document", "DROP TABLE IF EXISTS entry_document"):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("elements", "0002_postgres_search_indexes")]

    operations = [migrations.RunPython(create, drop)]
