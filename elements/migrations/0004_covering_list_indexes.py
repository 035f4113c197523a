"""PostgreSQL: covering indexes (INCLUDE id) for the list orders, so a deep page skips its offset in
the index without visiting the table. SQLite's indexes carry the rowid already."""

from django.db import migrations

FORWARD = [
    "CREATE INDEX IF NOT EXISTS element_list_by_name ON elements_element (owner_id, element_type, name) INCLUDE (id)",
    "CREATE INDEX IF NOT EXISTS element_list_by_modified ON elements_element (owner_id, element_type, modified) "
    "INCLUDE (id)",
    "CREATE INDEX IF NOT EXISTS element_list_by_created ON elements_element (owner_id, element_type, created) "
    "INCLUDE (id)",
]
BACKWARD = [
    "DROP INDEX IF EXISTS element_list_by_name",
    "DROP INDEX IF EXISTS element_list_by_modified",
    "DROP INDEX IF EXISTS element_list_by_created",
]


def run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return apply


class Migration(migrations.Migration):
    dependencies = [("elements", "0003_sqlite_search_index")]

    operations = [migrations.RunPython(run(FORWARD), run(BACKWARD))]
