"""Workflow YAML: reading it (YAML 1.2, so `yes`, `no` and `on` stay strings), writing it, and
editing it in place so a rename or a rewritten reference keeps the author's comments and layout."""

from __future__ import annotations

import io
import itertools
import math
import re
from typing import Any

from ruamel.yaml import YAML

import safeyaml
from workflows.errors import InvalidConfig

MAX_YAML_CHARS = 200_000
# Far past any real workflow; anchors stay usable for repeated node settings.
YAML_BOUNDS = safeyaml.Bounds(depth=64, values=200_000, aliases=1_000)


def _not_json(value: Any, where: str) -> str | None:
    """Where the loaded data holds a value JSON cannot (binary, a set, infinity), or None."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else where or "the top level"
    if isinstance(value, list):
        return next((w for i, v in enumerate(value) if (w := _not_json(v, f"{where}[{i}]"))), None)
    if isinstance(value, dict):
        return next((w for k, v in value.items() if (w := _not_json(v, f"{where}.{k}" if where else str(k)))), None)
    return where or "the top level"


def _round_trip(layout: tuple[int, int, int] = (2, 4, 2)) -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    mapping, sequence, offset = layout
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.width = 4096
    return yaml


# A block key with nothing after it but a comment: `nodes:` or `  verdicts:   # the events`.
_KEY_ONLY = re.compile(r"^( *)[^\s#\-'\"][^#'\"]*:[ \t]*(#.*)?$")
_CHILD = re.compile(r"^( *)(- +)?\S")


def _layout(text: str) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, dash offset) as the text uses them, so an edit re-emits the
    document in the author's layout; ours (2, 4, 2) for what the text does not show."""
    mapping: int | None = None
    sequence: tuple[int, int] | None = None
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for line, following in itertools.pairwise(lines):
        key = _KEY_ONLY.match(line)
        child = _CHILD.match(following)
        if not key or not child or len(child.group(1)) < len(key.group(1)):
            continue
        parent = len(key.group(1))
        if child.group(2) and sequence is None:
            sequence = (len(child.group(1)) + len(child.group(2)) - parent, len(child.group(1)) - parent)
        elif not child.group(2) and mapping is None and len(child.group(1)) > parent:
            mapping = len(child.group(1)) - parent
    if sequence is None or sequence[0] - sequence[1] < 2:
        sequence = (4, 2)
    return mapping or 2, *sequence


def yaml_load(text: str) -> Any:
    if len(text) > MAX_YAML_CHARS:
        raise InvalidConfig(f"The workflow is {len(text)} characters; the limit is {MAX_YAML_CHARS}.")
    try:
        data = safeyaml.load(text, schema=safeyaml.WORKFLOW, bounds=YAML_BOUNDS)
    except safeyaml.InvalidYAML as exc:
        if exc.unsafe:
            raise InvalidConfig(f"The YAML is refused: {exc.message}") from exc
        where = f" (line {exc.line}, column {exc.column})" if exc.line is not None else ""
        raise InvalidConfig(f"The YAML does not parse{where}: {exc.problem}.") from exc
    where = _not_json(data, "")
    if where is not None:
        raise InvalidConfig(f"The YAML holds a value JSON cannot at {where} (binary data, a set, infinity or NaN); "
                            "quote it to make it text.")
    return data


def yaml_dump(data: Any) -> str:
    """Block-style YAML in the mapping's own key order."""
    out = io.StringIO()
    _round_trip().dump(data, out)
    return out.getvalue()


def _edit(text: str, change: Any) -> str:
    yaml = _round_trip(_layout(text))
    document = yaml.load(text)
    change(document)
    out = io.StringIO()
    yaml.dump(document, out)
    return out.getvalue()


def yaml_set_name(text: str, name: str) -> str:
    def change(document: Any) -> None:
        document["name"] = name

    return _edit(text, change)


def yaml_rewrite_subworkflow(text: str, old_id: str, new_id: str) -> tuple[str, list[str]]:
    """The text with every subworkflow node that names `old_id` pointed at `new_id`, and those nodes' ids."""
    changed: list[str] = []

    def change(document: Any) -> None:
        for node_id, node in (document.get("nodes") or {}).items():
            if isinstance(node, dict) and node.get("type") == "subworkflow" and node.get("workflow") == old_id:
                node["workflow"] = new_id
                changed.append(str(node_id))

    new_text = _edit(text, change)
    return (new_text, changed) if changed else (text, [])
