"""The REST API's request parsing, for every app: bounded JSON and sound text (see
core.input_bounds). Kept apart from accounts.api, which DRF's settings cannot import while
rest_framework.views is loading."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

from core.input_bounds import JsonRefused, first_text_problem, json_parse


def refuse_unsound_text(data: Any, field: str = "") -> None:
    """400 {error, code, fields} naming the first string (at any depth) that is too long, holds a
    NUL character or a lone surrogate, before a serializer or PostgreSQL sees it."""
    found = first_text_problem(data, field)
    if found is not None:
        where, problem = found
        raise ValidationError({where or "body": [f"{where or 'The body'} {problem}."]})


class BoundedJSONParser(JSONParser):
    """Every app's JSON request bodies: nested at most MAX_JSON_DEPTH deep, every string sound."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        try:
            data = json_parse(stream.read())
        except JsonRefused as exc:
            raise ParseError(str(exc)) from exc
        refuse_unsound_text(data)
        return data
