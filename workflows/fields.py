"""A JSON column that keeps mappings in their written order on every database."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models


class OrderedJSONField(models.TextField):
    """JSON stored as text. PostgreSQL's jsonb sorts object keys, and a workflow's order is the
    author's: the nodes as written, transitions in the order a person is offered them, verdicts
    listed first winning ties. Nothing queries inside these values, so text loses nothing."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(value)

    def to_python(self, value: Any) -> Any:
        # Only serialized data (fixtures, the test database's serialized rollback) arrives as text.
        return json.loads(value) if isinstance(value, str) else value

    def get_prep_value(self, value: Any) -> str | None:
        return None if value is None else json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)

    def value_to_string(self, obj: models.Model) -> str | None:
        return self.get_prep_value(self.value_from_object(obj))
