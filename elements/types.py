"""Element types, their names in every form clients send, and the original's limits."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from django.utils.dateparse import parse_datetime

from core.errors import InvalidInput


class ElementType(StrEnum):
    PERSONA = "persona"
    SKILL = "skill"
    TEMPLATE = "template"
    AGENT = "agent"
    MEMORY = "memory"
    ENSEMBLE = "ensemble"

    @property
    def plural(self) -> str:
        return "memories" if self is ElementType.MEMORY else f"{self.value}s"


_BY_NAME = {t.value: t for t in ElementType} | {t.plural: t for t in ElementType}


def element_type_parse(value: object) -> ElementType:
    """`persona`, `personas`, `Persona`: any of them; anything else is a clear error."""
    if isinstance(value, ElementType):
        return value
    found = _BY_NAME.get(str(value).strip().lower()) if isinstance(value, str) else None
    if found is None:
        raise InvalidInput(
            f"Invalid element_type {value!r:.60}. Valid types: {', '.join(t.value for t in ElementType)} "
            "(singular or plural).",
            code="unknown_element_type",
        )
    return found


def datetime_parse(value: object, *, field: str, code: str = "invalid_parameter") -> datetime:
    """An ISO 8601 date-time from a client, or an error naming `field`. A well-formed but impossible
    date (month 13) is refused too: Django's parser raises for it rather than answering None."""
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise InvalidInput(f"{field} must be an ISO 8601 date-time (got {value!r:.40}).", code=code)
    return parsed


# Limits, as in the original (security/constants.ts).
MAX_NAME_LENGTH = 100
MAX_DESCRIPTION_LENGTH = 500
MAX_CONTENT_LENGTH = 500_000
MAX_TAG_LENGTH = 50
MAX_TAGS = 50
MAX_TRIGGERS = 20
MAX_TRIGGER_LENGTH = 50
MAX_FRONTMATTER_BYTES = 64 * 1024
MAX_FILE_BYTES = 2 * 1024 * 1024

MAX_TEMPLATE_CONTENT = 100_000
MAX_TEMPLATE_VARIABLES = 100
MAX_TEMPLATE_STRING_VALUE = 10_000
MAX_TEMPLATE_ARRAY_ITEMS = 1000
MAX_TEMPLATE_OBJECT_KEYS = 100

MAX_ENTRY_CONTENT = 100_000
MAX_MEMORY_TOTAL = 1_000_000
MAX_MEMORY_ENTRIES = 1000
MAX_ENTRY_TAGS = 20
MAX_ENTRY_METADATA_KEYS = 20
MAX_ENTRY_METADATA_VALUE = 200
MAX_MEMORY_YAML_BYTES = 256 * 1024

MAX_BATCH_OPERATIONS = 50
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
# Past this the offset stops being a page anyone reads; the bound keeps it inside the database's integers.
MAX_PAGE = 1_000_000
MAX_OFFSET = MAX_PAGE * MAX_PAGE_SIZE
MAX_SEARCH_QUERY = 1000
