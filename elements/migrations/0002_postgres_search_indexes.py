"""PostgreSQL indexes behind element search: full-text (GIN over to_tsvector('simple', ...)) on an
element's text and on memory entries, and a trigram index on names for similarity ranking. SQLite
gets its counterpart in 0003."""

from django.db import migrations

ELEMENT_DOCUMENT = "(name || ' ' || description || ' ' || instructions || ' ' || content)"

FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"CREATE INDEX IF NOT EXISTS element_document_fts ON elements_element "
    f"USING gin (to_tsvector('simple', {ELEMENT_DOCUMENT}))",
    "CREATE INDEX IF NOT EXISTS element_name_trgm ON elements_element USING gin (name gin_trgm_ops)",
    "CREATE INDEX IF NOT EXISTS memoryentry_content_fts ON elements_memoryentry "
    "USING gin (to_tsvector('simple', content))",
]
BACKWARD = [
    "DROP INDEX IF EXISTS element_document_fts",
    "DROP INDEX IF EXISTS element_name_trgm",
    "DROP INDEX IF EXISTS memoryentry_content_fts",
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
