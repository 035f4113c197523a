"""Workflow YAML: reading it (YAML 1.2, so `yes`, `no` and `on` stay strings), writing it, and
editing it in place so a rename or a rewritten reference keeps the author's comments and layout."""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from workflows.errors import InvalidConfig

MAX_YAML_CHARS = 200_000


def _safe() -> YAML:
    return YAML(typ="safe", pure=True)


def _round_trip() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


def yaml_load(text: str) -> Any:
    if len(text) > MAX_YAML_CHARS:
        raise InvalidConfig(f"The workflow is {len(text)} characters; the limit is {MAX_YAML_CHARS}.")
    try:
        return _safe().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise InvalidConfig(f"The YAML does not parse{where}: {exc.problem or exc.context}.") from exc
    except YAMLError as exc:
        raise InvalidConfig(f"The YAML does not parse: {exc}.") from exc


def yaml_dump(data: Any) -> str:
    """Block-style YAML in the mapping's own key order."""
    out = io.StringIO()
    _round_trip().dump(data, out)
    return out.getvalue()


def _edit(text: str, change: Any) -> str:
    yaml = _round_trip()
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
