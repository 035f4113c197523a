"""PostgreSQL indexes behind element search: trigram GIN indexes that serve the case-insensitive
substring match (ILIKE '%word%') on an element's text and on memory entries. SQLite has no such
index type; its search scans the caller's elements instead."""

from django.db import migrations

ELEMENT_DOCUMENT = "(name || ' ' || description || ' ' || instructions || ' ' || content)"

FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"CREATE INDEX IF NOT EXISTS element_document_trgm ON elements_element USING gin ({ELEMENT_DOCUMENT} gin_trgm_ops)",
    "CREATE INDEX IF NOT EXISTS element_name_trgm ON elements_element USING gin (name gin_trgm_ops)",
    "CREATE INDEX IF NOT EXISTS memoryentry_content_trgm ON elements_memoryentry USING gin (content gin_trgm_ops)",
]
BACKWARD = [
    "DROP INDEX IF EXISTS element_document_trgm",
    "DROP INDEX IF EXISTS element_name_trgm",
    "DROP INDEX IF EXISTS memoryentry_content_trgm",
]


def run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return apply


class Migration(migrations.Migration):
    dependencies = [("elements", "0001_initial")]

    operations = [migrations.RunPython(run(FORWARD), run(BACKWARD))]
