"""JSON Schema checks for capability input and output, bounded for schemas users write.

jsonschema evaluates `pattern` and `patternProperties` with Python's backtracking `re`, so a skill's
author could hang a worker with one pattern; here both use RE2, which runs in linear time.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError

from core.errors import InvalidInput
from core.input_bounds import MAX_JSON_DEPTH, json_depth

MAX_SCHEMA_BYTES = 64 * 1024
MAX_PROBLEMS = 10


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern)
    except re2.error as exc:
        raise SchemaError(f"pattern {pattern!r} is not a regular expression RE2 accepts: {exc}") from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _compiled(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                        schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _compiled(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


Validator = validators.extend(Draft202012Validator, {"pattern": _pattern, "patternProperties": _pattern_properties})


def _patterns(node: Any) -> Iterator[str]:
    """Every regular expression a schema holds (pattern values, patternProperties keys), at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from value
            yield from _patterns(value)
    elif isinstance(node, list):
        for item in node:
            yield from _patterns(item)


def schema_check(schema: Any, *, field: str) -> dict[str, Any]:
    """A schema as a capability may declare it: a JSON object, bounded, valid Draft 2020-12."""
    if not isinstance(schema, dict):
        raise InvalidInput(f"{field} must be a JSON Schema object.", code="invalid_schema")
    if json_depth(schema) > MAX_JSON_DEPTH or len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise InvalidInput(f"{field} is too large (at most {MAX_SCHEMA_BYTES // 1024} KB, "
                           f"{MAX_JSON_DEPTH} levels).", code="invalid_schema")
    try:
        Validator.check_schema(schema)
        for pattern in _patterns(schema):
            _compiled(pattern)
    except SchemaError as exc:
        raise InvalidInput(f"{field} is not a valid JSON Schema: {exc.message}", code="invalid_schema") from None
    return schema


def problems(schema: dict[str, Any], value: Any, *, label: str = "input", root: bool = False) -> list[str]:
    """Where `value` breaks `schema`, as "path: message" lines (at most MAX_PROBLEMS); [] when it fits.
    A path is named from inside `label` ("text: ..."), or with `root` from `label` itself
    ("output.text: ...")."""
    if not schema:
        return []
    try:
        found = sorted(Validator(schema).iter_errors(value), key=lambda e: list(map(str, e.path)))
    except SchemaError as exc:
        return [f"the {label} schema itself is invalid: {exc.message}"]
    lines = []
    for error in found[:MAX_PROBLEMS]:
        path = [str(p) for p in error.path]
        where = ".".join([label, *path]) if root else ".".join(path) or label
        lines.append(f"{where}: {error.message}")
    return lines
