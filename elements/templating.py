"""Template elements: placeholders, sections, variable declarations and rendering.

Pure functions over a template's content and its declared variables, so that saving,
validating and rendering a template all read the content the same way.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Callable
from contextlib import suppress
from datetime import date, datetime
from typing import Any

import re2

from core.errors import InvalidInput
from elements.types import (
    MAX_TEMPLATE_ARRAY_ITEMS,
    MAX_TEMPLATE_CONTENT,
    MAX_TEMPLATE_OBJECT_KEYS,
    MAX_TEMPLATE_STRING_VALUE,
    MAX_TEMPLATE_VARIABLES,
)

# ASCII, like the `\w` of the original's JavaScript, so a template means the same thing in both.
PLACEHOLDER = re.compile(r"\{\{\s*([a-zA-Z_]\w*(?:\.[a-zA-Z_]\w*)*)\s*\}\}", re.ASCII)

_NAME = re.compile(r"[a-zA-Z_]\w*", re.ASCII)
# Bare tags only: `<template id="row">` is ordinary HTML inside a page, not a section marker.
_SECTION = re.compile(r"<(template|style|script)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
# `?` is left out: an optional part is rarely what makes a pattern backtrack exponentially.
MAX_VALIDATION_PATTERN = 1_000
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # an author's mistake is reported to the author, not to the server log

_VARIABLE_TYPES = ("string", "number", "boolean", "date", "array", "object")
_RAW_SECTIONS = ("style", "script")


def split_sections(content: str) -> dict[str, str] | None:
    """The template, style and script sections, or None when the content is not in section mode."""
    found = {match.group(1).lower(): match.group(2) for match in _SECTION.finditer(content)}
    if not found:
        return None
    return {name: found.get(name, "") for name in ("template", "style", "script")}


def placeholders(content: str) -> list[str]:
    """Variable names the content uses (the first segment of `user.name`), in order of first use."""
    roots = (match.group(1).split(".", 1)[0] for match in PLACEHOLDER.finditer(_template_body(content)))
    return list(dict.fromkeys(roots))


def derive_variables(content: str, declared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The declared variables, then an optional string variable for every placeholder not declared."""
    known = _by_name(declared)
    missing = [name for name in placeholders(content) if name not in known]
    return [*declared, *({"name": name, "type": "string", "required": False} for name in missing)]


def validate_template(content: str, declared: list[dict[str, Any]]) -> list[str]:
    """Every problem with the content and its declarations; an empty list means the template is valid."""
    problems: list[str] = []
    if len(content) > MAX_TEMPLATE_CONTENT:
        problems.append(f"Template content is {len(content)} characters; the limit is {MAX_TEMPLATE_CONTENT}.")
    # Style and script sections are never substituted, so their CSS and JS braces need not pair up.
    body = _template_body(content)
    opens, closes = body.count("{{"), body.count("}}")
    if opens != closes:
        problems.append(f"Unmatched template tokens: {opens} '{{{{' and {closes} '}}}}'.")
    if len(declared) > MAX_TEMPLATE_VARIABLES:
        problems.append(f"Template declares {len(declared)} variables; the limit is {MAX_TEMPLATE_VARIABLES}.")
    seen: set[str] = set()
    for position, variable in enumerate(declared, start=1):
        if not isinstance(variable, dict):
            problems.append(f"Variable #{position} must be an object with a name and a type.")
            continue
        name = variable.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            problems.append(
                f"Variable #{position} has an invalid name {name!r}: use letters, digits and underscores, "
                "starting with a letter or underscore."
            )
        elif name in seen:
            problems.append(f"Duplicate variable name '{name}'.")
        else:
            seen.add(name)
        label = f"'{name}'" if isinstance(name, str) else f"#{position}"
        problems.extend(_declaration_problems(label, variable))
    return problems


def render(
    content: str,
    declared: list[dict[str, Any]],
    values: dict[str, Any] | None,
    *,
    section: str | None = None,
    all_sections: bool = False,
) -> dict[str, Any]:
    """Substitute the declared variables into the template (section) and report what was left out."""
    values = {} if values is None else values
    if not isinstance(values, dict):
        raise InvalidInput("Variables must be an object mapping variable names to values.", code="invalid_variables")
    parts = split_sections(content)
    raw = None if section is None else _raw_section(parts, section)
    if raw is not None and not all_sections:
        # Style and script are passed through untouched: there is nothing to substitute or check.
        return {"content": raw, "warnings": []}
    rendered, warnings = _substitute(parts["template"] if parts else content, declared, values)
    result: dict[str, Any] = {"content": rendered if raw is None else raw, "warnings": warnings}
    if all_sections:
        style, script = (parts["style"], parts["script"]) if parts else ("", "")
        result["sections"] = {"template": rendered, "style": style, "script": script}
    return result


def _template_body(content: str) -> str:
    """The text that takes part in substitution: the template section in section mode, else everything."""
    parts = split_sections(content)
    return parts["template"] if parts else content


def _by_name(declared: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Declarations by name; the first wins, as the original looks variables up with `find`."""
    by_name: dict[str, dict[str, Any]] = {}
    for variable in declared:
        if isinstance(variable, dict) and isinstance(variable.get("name"), str):
            by_name.setdefault(variable["name"], variable)
    return by_name


def _declaration_problems(label: str, variable: dict[str, Any]) -> list[str]:
    """What is wrong with one declaration apart from its name; render refuses the same things."""
    problems: list[str] = []
    kind = variable.get("type", "string")
    if kind not in _VARIABLE_TYPES:
        problems.append(f"Variable {label} has unknown type {kind!r:.60}. Valid types: {', '.join(_VARIABLE_TYPES)}.")
    if not isinstance(variable.get("required", False), bool):
        problems.append(f"Variable {label}: required must be true or false.")
    pattern = variable.get("validation")
    if pattern is not None and (problem := _pattern_problem(pattern)):
        problems.append(f"Variable {label} {problem}")
    if variable.get("options") is not None and not isinstance(variable["options"], list):
        problems.append(f"Variable {label}: options must be a list.")
    return problems


def _pattern_problem(pattern: object) -> str | None:
    if not isinstance(pattern, str):
        return "has a validation pattern that is not text."
    if len(pattern) > MAX_VALIDATION_PATTERN:
        return f"has a validation pattern of {len(pattern)} characters; the limit is {MAX_VALIDATION_PATTERN}."
    try:
        _compiled(pattern)
    except re2.error as error:
        reason = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        return (f"has an invalid validation pattern: {reason} (patterns use RE2 syntax, which has no "
                "backreferences or lookaround).")
    return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """The pattern in RE2, which matches in time linear in the text: a pattern such as (a|a)*b would
    make Python's backtracking `re` run for minutes over a long value."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _raw_section(parts: dict[str, str] | None, section: str) -> str:
    if section not in _RAW_SECTIONS:
        raise InvalidInput(
            f"Unknown section {section!r:.60}. Valid sections: {', '.join(_RAW_SECTIONS)}.", code="unknown_section"
        )
    if parts is None:
        raise InvalidInput(
            "Template is not in section mode: it has no <template>, <style> or <script> sections.",
            code="not_section_mode",
        )
    return parts[section]


def _substitute(body: str, declared: list[dict[str, Any]], values: dict[str, Any]) -> tuple[str, list[str]]:
    by_name = _by_name(declared)
    warnings: list[str] = []
    ignored = [str(name) for name in values if name not in by_name]
    if ignored:
        warnings.append(f"Ignored undeclared variable(s): {', '.join(ignored)}")
    resolved = {name: _value_for(name, variable, values) for name, variable in by_name.items()}
    missed: list[str] = []

    def replace(match: re.Match[str]) -> str:
        path = match.group(1)
        if path.split(".", 1)[0] not in by_name:
            missed.append(path)
            return match.group(0)
        value = _resolve(path, resolved)
        if value is None:
            missed.append(path)
            return ""
        return _format(value)

    rendered = PLACEHOLDER.sub(replace, body)
    distinct = list(dict.fromkeys(missed))
    if distinct:
        warnings.append(f"{len(distinct)} placeholder(s) were not substituted: {', '.join(distinct)}")
    return rendered, warnings


def _value_for(name: str, variable: dict[str, Any], values: dict[str, Any]) -> Any:
    """The checked value of one declared variable, its default, or None for an optional one left out."""
    problems = _declaration_problems(f"'{name}'", variable)
    if problems:
        raise InvalidInput(problems[0], code="invalid_variable")
    # JSON null counts as not provided, so a client can clear a value and get the default.
    value = values.get(name)
    if value is None:
        value = variable.get("default")
    if value is None:
        if variable.get("required", False):
            raise InvalidInput(f"Required variable '{name}' not provided", code="missing_variable")
        return None
    kind = variable.get("type", "string")
    # Only strings have rules of their own (validation, options); the other types are checked by type alone.
    return _check_string(name, variable, value) if kind == "string" else _CHECKS[kind](name, value)


def _check_string(name: str, variable: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict | list) and variable.get("validation") is None and variable.get("options") is None:
        # Placeholders are declared as strings when saved, yet `{{user.name}}` needs a mapping under
        # `user`: structured values keep their shape, within the limits of declared arrays and objects.
        return _check_object(name, value) if isinstance(value, dict) else _check_array(name, value)
    text = unicodedata.normalize("NFC", value if isinstance(value, str) else _format(value))
    if len(text) > MAX_TEMPLATE_STRING_VALUE:
        raise _bad_value(f"Variable '{name}' is {len(text)} characters; the limit is {MAX_TEMPLATE_STRING_VALUE}")
    pattern = variable.get("validation")
    if pattern is not None and _compiled(pattern).fullmatch(text) is None:
        raise _bad_value(f"Variable '{name}' does not match its validation pattern {pattern}")
    options = variable.get("options")
    if options is not None and text not in options:
        raise _bad_value(f"Variable '{name}' must be one of: {', '.join(map(str, options))}")
    return text


def _check_number(name: str, value: Any) -> int | float:
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        try:
            value = int(value.strip())
        except ValueError:  # a fraction, an exponent, or more digits than int() converts
            value = float(value.strip())
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not is_number or (isinstance(value, float) and not math.isfinite(value)):
        raise _bad_value(f"Variable '{name}' must be a number")
    return value


def _check_boolean(name: str, value: Any) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise _bad_value(f"Variable '{name}' must be true or false")
    return value


def _check_date(name: str, value: Any) -> date:
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        # A bare date stays a date; anything with a time becomes a datetime.
        for parse in (date.fromisoformat, datetime.fromisoformat):
            with suppress(ValueError):
                return parse(value.strip())
    raise _bad_value(f"Variable '{name}' must be an ISO 8601 date, like 2024-05-01 or 2024-05-01T09:30:00Z")


def _check_array(name: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _bad_value(f"Variable '{name}' must be an array")
    if len(value) > MAX_TEMPLATE_ARRAY_ITEMS:
        raise _bad_value(f"Variable '{name}' has {len(value)} items; the limit is {MAX_TEMPLATE_ARRAY_ITEMS}")
    return value


def _check_object(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad_value(f"Variable '{name}' must be an object")
    if len(value) > MAX_TEMPLATE_OBJECT_KEYS:
        raise _bad_value(f"Variable '{name}' has {len(value)} keys; the limit is {MAX_TEMPLATE_OBJECT_KEYS}")
    return value


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "number": _check_number,
    "boolean": _check_boolean,
    "date": _check_date,
    "array": _check_array,
    "object": _check_object,
}


def _bad_value(message: str) -> InvalidInput:
    return InvalidInput(message, code="invalid_variable_value")


def _resolve(path: str, values: dict[str, Any]) -> Any:
    """The value at a dotted path, or None where the path leads nowhere."""
    found: Any = values
    for part in path.split("."):
        if not isinstance(found, dict) or part not in found:
            return None
        found = found[part]
    return found


def _format(value: Any) -> str:
    """Text for a value, following the original's JavaScript output."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    # JavaScript prints whole numbers without `.0` until it switches to exponents at 1e21.
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list):
        return ", ".join(_format(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, indent=2, ensure_ascii=False, default=_json_default)
    return str(value)


def _json_default(value: object) -> str:
    """Dates nested in objects print as ISO text, as JSON.stringify prints them."""
    return value.isoformat() if isinstance(value, date) else str(value)
