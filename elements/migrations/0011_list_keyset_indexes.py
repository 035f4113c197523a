"""Indexes that give every list order with its tie-breaker, so a page read by cursor starts in the
index: (owner, type, column, id). On PostgreSQL they replace 0004's covering indexes for the dates
(id was only included, not ordered); SQLite's indexes end with the rowid already, and version
gets one on both."""

from django.db import migrations

from elements.db import vendor_sql

POSTGRESQL_FORWARD = [
    "DROP INDEX IF EXISTS element_list_by_modified",
    "CREATE INDEX element_list_by_modified ON elements_element (owner_id, element_type, modified, id)",
    "DROP INDEX IF EXISTS element_list_by_created",
    "CREATE INDEX element_list_by_created ON elements_element (owner_id, element_type, created, id)",
    "CREATE INDEX IF NOT EXISTS element_list_by_version ON elements_element (owner_id, element_type, version_key, id)",
]
POSTGRESQL_BACKWARD = [
    "DROP INDEX IF EXISTS element_list_by_version",
    "DROP INDEX IF EXISTS element_list_by_created",
    "CREATE INDEX element_list_by_created ON elements_element (owner_id, element_type, created) INCLUDE (id)",
    "DROP INDEX IF EXISTS element_list_by_modified",
    "CREATE INDEX element_list_by_modified ON elements_element (owner_id, element_type, modified) INCLUDE (id)",
]
SQLITE_FORWARD = [
    "CREATE INDEX IF NOT EXISTS element_list_by_version ON elements_element (owner_id, element_type, version_key)",
]
SQLITE_BACKWARD = ["DROP INDEX IF EXISTS element_list_by_version"]


def forward(apps, schema_editor):
    vendor_sql("postgresql", POSTGRESQL_FORWARD)(apps, schema_editor)
    vendor_sql("sqlite", SQLITE_FORWARD)(apps, schema_editor)


def backward(apps, schema_editor):
    vendor_sql("postgresql", POSTGRESQL_BACKWARD)(apps, schema_editor)
    vendor_sql("sqlite", SQLITE_BACKWARD)(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("elements", "0010_element_counts")]

    operations = [migrations.RunPython(forward, backward)]
