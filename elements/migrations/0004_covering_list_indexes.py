"""PostgreSQL: covering indexes (INCLUDE id) for the list orders, so a deep page skips its offset in
the index without visiting the table. SQLite's indexes carry the rowid already."""

from django.db import migrations

from elements.db import vendor_sql

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


class Migration(migrations.Migration):
    dependencies = [("elements", "0003_sqlite_search_index")]

    operations = [migrations.RunPython(vendor_sql("postgresql", FORWARD), vendor_sql("postgresql", BACKWARD))]
