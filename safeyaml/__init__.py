"""YAML from users, read with its size bounded before anything is built from it; and YAML written
for people (exports, skill files) that reads back to the same values.

Every YAML parse of user input in Atrium goes through `load`. The event stream is walked first,
without recursion, counting what the document would expand to: nesting depth, values (with every
alias counted as the values it stands for) and aliases. A few hundred bytes of nested aliases
("billion laughs") would otherwise build a structure that no walk over it finishes, and a few
thousand brackets would exhaust Python's stack while composing. Only a document inside every bound
is composed and constructed.

Two schemas: `CORE` is the YAML 1.2 core schema as DollhouseMCP reads elements (null, booleans,
numbers, strings, lists, mappings; dates and yes/no stay text, `<<` is an ordinary key, and a
repeated key keeps its last value); `WORKFLOW` is YAML 1.2 as workflows have always been read
(ruamel.yaml's parser and rules, merge keys, repeated keys refused), with dates kept as text.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ruamel.yaml import YAML
from ruamel.yaml.constructor import ConstructorError, SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    NodeEvent,
)
from ruamel.yaml.nodes import MappingNode, ScalarNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.representer import SafeRepresenter
from ruamel.yaml.resolver import VersionedResolver

__all__ = ["CORE", "WORKFLOW", "Bounds", "InvalidYAML", "Schema", "dump", "load"]

_CORE_TAG = "tag:yaml.org,2002:"
_SAFE_VALUES = "only strings, numbers, booleans, null, lists and mappings are"


class InvalidYAML(Exception):
    """Text that is not YAML (`unsafe` False) or that a bound refuses (`unsafe` True)."""

    def __init__(self, problem: str, *, unsafe: bool, line: int | None = None, column: int | None = None) -> None:
        self.problem = problem
        self.unsafe = unsafe
        self.line = line
        self.column = column
        self.message = problem if line is None or unsafe else f"{problem} at line {line}"
        super().__init__(self.message)


@dataclass(frozen=True)
class Bounds:
    """What one document may hold. `values` counts every scalar, list and mapping as it would be
    built, so an alias counts as all the values of the node it names."""

    depth: int = 64
    values: int = 200_000
    aliases: int = 100
    anchors: bool = True
    tags: bool = True


class _CoreResolver(VersionedResolver):
    rules: ClassVar[dict[str, list[tuple[str, re.Pattern[str]]]]] = {}

    @property
    def versioned_resolver(self) -> Any:
        return self.rules


for _tag, _pattern, _first in (
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
    ("float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
     list("-+.0123456789")),
):
    for _char in _first:
        _CoreResolver.rules.setdefault(_char, []).append((_CORE_TAG + _tag, re.compile(rf"^(?:{_pattern})$")))


class _ScalarKeys(SafeConstructor):
    """Mapping keys must be text or numbers: a list or mapping as a key has no JSON form."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> Any:
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode):
                raise ConstructorError("while constructing a mapping", node.start_mark,
                                       "found a list or mapping as a key", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


class _CoreConstructor(_ScalarKeys):
    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = self.construct_scalar(node)
        # The core schema's 0o17 and 0x1F, and decimal 010 (YAML 1.1 would read that as octal 8).
        base = 16 if "x" in text else 8 if "o" in text else 10
        try:
            return int(text, base)
        except ValueError as exc:  # Python refuses to convert integers of more than 4300 digits
            raise ConstructorError(None, None, f"integer too large ({len(text)} digits)", node.start_mark) from exc


_CoreConstructor.add_constructor(_CORE_TAG + "int", _CoreConstructor.construct_yaml_int)


class _WorkflowConstructor(_ScalarKeys):
    """JSON (where definitions are stored) has no dates: an unquoted 2024-01-01 stays the text it is."""


_WorkflowConstructor.add_constructor(_CORE_TAG + "timestamp", SafeConstructor.construct_yaml_str)


@dataclass(frozen=True)
class Schema:
    resolver: type
    constructor: type
    duplicate_keys: bool
    # libyaml's C parser where it is installed (the pure-Python one takes half a minute over a
    # 4 MB import), or ruamel.yaml's own, which parses YAML 1.2 plain scalars such as `{at: 10:00}`
    # as round-trip editing does.
    pure: bool


CORE = Schema(_CoreResolver, _CoreConstructor, duplicate_keys=True, pure=False)
WORKFLOW = Schema(VersionedResolver, _WorkflowConstructor, duplicate_keys=False, pure=True)


def _yaml(schema: Schema) -> YAML:
    yaml = YAML(typ="safe", pure=schema.pure)
    yaml.Resolver = schema.resolver
    yaml.Constructor = schema.constructor
    yaml.allow_duplicate_keys = schema.duplicate_keys
    return yaml


def _show_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_CORE_TAG) if tag.startswith(_CORE_TAG) else tag


def _refuse(message: str) -> InvalidYAML:
    return InvalidYAML(message, unsafe=True)


def _check_events(yaml: YAML, text: str, bounds: Bounds) -> None:
    """Walk the events of `text`, refusing it at the first bound it passes."""
    # `built` counts the values composing would build so far, an alias adding every value of the
    # node it names; each open collection remembers `built` at its start and its anchor, so a
    # finished anchor's size is known without building it.
    open_nodes: list[tuple[int, str | None]] = []
    sizes: dict[str, int] = {}
    aliases = 0
    built = 0
    for event in yaml.parse(text):
        if isinstance(event, CollectionEndEvent):
            start, anchor = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = built - start
            continue
        if not isinstance(event, NodeEvent):
            continue
        line = event.start_mark.line + 1
        if isinstance(event, AliasEvent):
            if not bounds.anchors:
                raise _refuse(f"YAML anchors and aliases are not allowed (found *{event.anchor} at line {line}).")
            if any(anchor == event.anchor for _, anchor in open_nodes):
                raise _refuse(f"YAML alias *{event.anchor} at line {line} refers to a node that contains it.")
            aliases += 1
            if aliases > bounds.aliases:
                raise _refuse(f"YAML has more than {bounds.aliases} aliases (at line {line}): repeated aliases "
                              "can expand a small file into a huge one.")
            # An undefined alias is left for the composer to report.
            built += sizes.get(event.anchor, 1)
        else:
            if event.tag is not None and not bounds.tags:
                raise _refuse(f"YAML tag {_show_tag(event.tag)} at line {line} is not allowed: {_SAFE_VALUES}.")
            if event.anchor is not None and not bounds.anchors:
                raise _refuse(f"YAML anchors and aliases are not allowed (found &{event.anchor} at line {line}).")
            if len(open_nodes) >= bounds.depth:
                raise _refuse(f"YAML nested too deeply at line {line}: at most {bounds.depth} levels.")
            if isinstance(event, CollectionStartEvent):
                open_nodes.append((built, event.anchor))
            elif event.anchor is not None:
                sizes[event.anchor] = 1
            built += 1
        if built > bounds.values:
            raise _refuse(f"YAML expands to more than {bounds.values:,} values (at line {line}): "
                          "repeated aliases can expand a small file into a huge one.")


def load(text: str, *, schema: Schema, bounds: Bounds) -> Any:
    """The value of the single YAML document in `text`, or InvalidYAML saying what is wrong."""
    try:
        _check_events(_yaml(schema), text, bounds)
        return _yaml(schema).load(text)
    except ReaderError as exc:
        character = exc.character if isinstance(exc.character, int) else ord(exc.character or "\0")
        line = text.count("\n", 0, max(text.find(chr(character)), 0)) + 1
        raise InvalidYAML(f"character U+{character:04X} at line {line} is not allowed", unsafe=False) from exc
    except MarkedYAMLError as exc:
        problem = ", ".join(part for part in (exc.context, exc.problem) if part)
        mark = exc.problem_mark or exc.context_mark
        if mark is None:
            raise InvalidYAML(problem, unsafe=False) from exc
        raise InvalidYAML(problem, unsafe=False, line=mark.line + 1, column=mark.column + 1) from exc
    except YAMLError as exc:
        raise InvalidYAML(str(exc), unsafe=False) from exc
    except ValueError as exc:  # Python refuses to convert integers of more than 4300 digits
        raise InvalidYAML(str(exc), unsafe=False) from exc


# Carriage returns and the line breaks YAML knows besides \n: any style but double quotes, which
# escapes them, would read back as plain newlines.
_BREAKS_ONLY_QUOTES_KEEP = re.compile("[\r\x85\u2028\u2029]")


def dump(data: Any, *, string_style: Callable[[str], str | None], sort_keys: bool, width: int = 80) -> str:
    """Block-style YAML of `data` (no anchors: a value used twice is written twice), each string in
    the style `string_style` picks for it ("|", "'", '"' or None for plain). Text with a carriage
    return or a Unicode line break is always double-quoted; otherwise the emitter falls back to a
    quoted style by itself where the one picked would not keep the text exactly."""

    class _Representer(SafeRepresenter):
        def ignore_aliases(self, data: Any) -> bool:
            return True

        def represent_str(self, data: str) -> ScalarNode:
            style = '"' if _BREAKS_ONLY_QUOTES_KEEP.search(data) else string_style(data)
            return self.represent_scalar(_CORE_TAG + "str", data, style=style)

    _Representer.add_representer(str, _Representer.represent_str)
    yaml = YAML(typ="safe", pure=True)
    yaml.Representer = _Representer
    yaml.default_flow_style = False
    yaml.allow_unicode = True
    yaml.sort_base_mapping_type_on_output = sort_keys
    yaml.width = width
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()
