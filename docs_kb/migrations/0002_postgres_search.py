"""PostgreSQL behind docs search: a stored, generated tsvector per section weighing the page title
(A) over the heading (B) over the body (C), with a GIN index, and a trigram index on the docs'
words for typo correction. SQLite needs neither: its search reads the in-memory index."""

from django.db import migrations

from elements.db import vendor_sql

SECTION_VECTOR = (
    "setweight(to_tsvector('english', page_title), 'A') || "
    "setweight(to_tsvector('english', heading_text), 'B') || "
    "setweight(to_tsvector('english', text), 'C')"
)

FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"ALTER TABLE docs_kb_docsection ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ({SECTION_VECTOR}) STORED",
    "CREATE INDEX IF NOT EXISTS docsection_search_vector ON docs_kb_docsection USING gin (search_vector)",
    "CREATE INDEX IF NOT EXISTS docterm_term_trgm ON docs_kb_docterm USING gin (term gin_trgm_ops)",
]
BACKWARD = [
    "DROP INDEX IF EXISTS docterm_term_trgm",
    "ALTER TABLE docs_kb_docsection DROP COLUMN IF EXISTS search_vector",
]


class Migration(migrations.Migration):
    dependencies = [("docs_kb", "0001_initial")]

    operations = [migrations.RunPython(vendor_sql("postgresql", FORWARD), vendor_sql("postgresql", BACKWARD))]
