"""Building blocks for the output schemas that every tool declares: JSON Schema (2020-12) for the
structuredContent of its answers that are not errors. A schema says what a client may rely on: the
fields always present (required), those present when they apply (optional), and their types. It
stays open to fields added later (additionalProperties is not closed) unless `closed` says so.

An error answer (isError) carries no structuredContent, so no schema covers it; a product whose
documented user errors are answers without isError (Roscoe's run tools: `{error}`) declares them
as one of the shapes with `or_error`."""

from __future__ import annotations

from typing import Any

TEXT: dict[str, Any] = {"type": "string"}
TEXT_OR_NULL: dict[str, Any] = {"type": ["string", "null"]}
INTEGER: dict[str, Any] = {"type": "integer"}
INTEGER_OR_NULL: dict[str, Any] = {"type": ["integer", "null"]}
NUMBER: dict[str, Any] = {"type": "number"}
NUMBER_OR_NULL: dict[str, Any] = {"type": ["number", "null"]}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
NULL: dict[str, Any] = {"type": "null"}
# DjangoJSONEncoder writes datetimes as ISO 8601 text.
DATETIME: dict[str, Any] = {"type": "string", "format": "date-time"}
DATETIME_OR_NULL: dict[str, Any] = {"type": ["string", "null"], "format": "date-time"}
OBJECT: dict[str, Any] = {"type": "object"}
OBJECT_OR_NULL: dict[str, Any] = {"type": ["object", "null"]}
ARRAY: dict[str, Any] = {"type": "array"}
TEXTS: dict[str, Any] = {"type": "array", "items": TEXT}
# Any JSON value: what a tool passes through from user data (a run's context, a step's output).
ANY: dict[str, Any] = {}


def obj(required: dict[str, Any] | None = None, optional: dict[str, Any] | None = None, *,
        closed: bool = False, description: str | None = None) -> dict[str, Any]:
    """An object with these fields: `required` always there, `optional` when they apply."""
    schema: dict[str, Any] = {"type": "object", "properties": {**(required or {}), **(optional or {})}}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


def array_of(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def one_of(*schemas: dict[str, Any]) -> dict[str, Any]:
    """Any of these shapes. The result is an object schema, as MCP requires an outputSchema to be."""
    return {"type": "object", "anyOf": list(schemas)}


def enum(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


# A user error answered as a result rather than with isError, in Roscoe's run tools' shape.
ERROR = obj({"error": TEXT}, {"code": TEXT})


def or_error(schema: dict[str, Any]) -> dict[str, Any]:
    """The tool's shape, or a user error `{error}` answered without isError."""
    return one_of(schema, ERROR)
