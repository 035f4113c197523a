"""PostgreSQL behind element search: a stored, generated tsvector of each element's text (so ranking
reads it instead of re-parsing the text) with a GIN index, the same for memory entries, and a
trigram index on names for similarity ranking. SQLite gets its counterpart in 0003."""

from django.db import migrations

from elements.db import vendor_sql

ELEMENT_DOCUMENT = "(name || ' ' || description || ' ' || instructions || ' ' || content)"

FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"ALTER TABLE elements_element ADD COLUMN search_vector tsvector "
    f"GENERATED ALWAYS AS (to_tsvector('simple', {ELEMENT_DOCUMENT})) STORED",
    "CREATE INDEX IF NOT EXISTS element_search_vector ON elements_element USING gin (search_vector)",
    "CREATE INDEX IF NOT EXISTS element_name_trgm ON elements_element USING gin (name gin_trgm_ops)",
    "ALTER TABLE elements_memoryentry ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED",
    "CREATE INDEX IF NOT EXISTS memoryentry_search_vector ON elements_memoryentry USING gin (search_vector)",
]
BACKWARD = [
    "ALTER TABLE elements_element DROP COLUMN IF EXISTS search_vector",
    "DROP INDEX IF EXISTS element_name_trgm",
    "ALTER TABLE elements_memoryentry DROP COLUMN IF EXISTS search_vector",
]


class Migration(migrations.Migration):
    dependencies = [("elements", "0001_initial")]

    operations = [migrations.RunPython(vendor_sql("postgresql", FORWARD), vendor_sql("postgresql", BACKWARD))]
