"""Bounds on what a request may carry, checked once for every app: JSON nesting, and the text of
every argument (MCP tool arguments in core.tools, REST input in accounts.api).

PostgreSQL cannot store a NUL character in text, and a lone surrogate (JSON's "\\ud800") cannot be
encoded to UTF-8 for either database: both would otherwise surface as internal errors deep in a
service. Text past its length limit is refused before any service sees it.
"""

from __future__ import annotations

import json
from typing import Any

# Far past any real document (a workflow, an element, a tool call), and far short of Python's
# recursion limit, which anything walking the value recursively would otherwise hit.
MAX_JSON_DEPTH = 64
# A JSON-RPC message wraps a tool's arguments a few levels deep (a batch, params, arguments): a
# message is allowed those levels on top, so an argument nested too deeply reaches the tool layer,
# which refuses it in the tool's own error shape, naming it.
MAX_MESSAGE_DEPTH = MAX_JSON_DEPTH + 8
# Every text argument that declares no limit of its own: a whole element import fits.
MAX_TEXT_CHARS = 5_000_000


class JsonRefused(ValueError):
    """A body that is not JSON, or JSON nested past MAX_JSON_DEPTH."""


def json_parse(body: bytes | str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of `body`, nested at most `max_depth` deep."""
    try:
        value = json.loads(body)
    except RecursionError as exc:
        raise JsonRefused(f"JSON nested more than {max_depth} levels deep.") from exc
    except ValueError as exc:  # also UnicodeDecodeError
        raise JsonRefused(f"Invalid JSON: {exc}.") from exc
    if json_depth(value, max_depth) > max_depth:
        raise JsonRefused(f"JSON nested more than {max_depth} levels deep.")
    return value


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply lists and objects nest in `value` (a scalar is 0), walked without recursion and
    given up on past `limit`."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def text_problem(text: str, limit: int | None = None) -> str | None:
    """What is wrong with one piece of text, as the end of a sentence naming it; None if nothing."""
    limit = MAX_TEXT_CHARS if limit is None else limit
    if len(text) > limit:
        return f"is {len(text):,} characters long; the limit is {limit:,}"
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which text may not hold"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"contains a lone surrogate (\\u{ord(text[exc.start]):04x}) at character {exc.start}, "
                "which is not text")
    return None


def first_text_problem(value: Any, field: str, limit: int | None = None) -> tuple[str, str] | None:
    """The first (field, problem) among every string in `value`, mapping keys included.

    `limit` applies to `value` itself when it is text; text nested inside it gets MAX_TEXT_CHARS.
    Fields are named as `params.items[2].name`.
    """
    stack: list[tuple[str, Any, int | None]] = [(field, value, limit)]
    while stack:
        where, item, bound = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item, bound)
            if problem is not None:
                return where, problem
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and (problem := text_problem(key)) is not None:
                    return f"{where} key {key[:40]!r}", problem
                stack.append((f"{where}.{key}" if where else str(key), child, None))
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}[{index}]", child, None) for index, child in enumerate(item))
    return None
