"""The indexes behind capability search. PostgreSQL: stored, generated tsvectors of each row's name
(its words split at _ and .) and document, the document's with a GIN index. SQLite: the FTS5 table
and triggers of integrations.search_index. Both: an index on updated_at, which every semantic
search reads the newest of to know whether its in-process vectors are still current, and one of
the columns search filters on (see Capability.Meta)."""

from django.db import migrations, models

from elements.db import vendor_sql
from integrations.search_index import ensure_sqlite_capability_index

FORWARD = [
    "ALTER TABLE integrations_capability ADD COLUMN search_name tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', translate(name, '_.', '  '))) STORED",
    "ALTER TABLE integrations_capability ADD COLUMN search_document tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', document)) STORED",
    "CREATE INDEX IF NOT EXISTS capability_search_document ON integrations_capability USING gin (search_document)",
]
BACKWARD = [
    "ALTER TABLE integrations_capability DROP COLUMN IF EXISTS search_document",
    "ALTER TABLE integrations_capability DROP COLUMN IF EXISTS search_name",
]


def create_sqlite(apps, schema_editor):
    ensure_sqlite_capability_index(schema_editor.connection)


def drop_sqlite(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TABLE IF EXISTS capability_document")


class Migration(migrations.Migration):
    dependencies = [("integrations", "0001_initial")]

    operations = [
        migrations.AddIndex(model_name="capability",
                            index=models.Index(fields=["updated_at"], name="capability_updated_at")),
        migrations.AddIndex(model_name="capability",
                            index=models.Index(fields=["id", "owner", "type", "integration", "category"],
                                               name="capability_search_filters")),
        migrations.RunPython(vendor_sql("postgresql", FORWARD), vendor_sql("postgresql", BACKWARD)),
        migrations.RunPython(create_sqlite, drop_sqlite),
    ]
