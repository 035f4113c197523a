"""Conversion between open Agent Skills (SKILL.md plus files) and Dollhouse v2 skills.

Mirrors DollhouseMCP's `convert_skill_format`. Importing an Agent Skill hands back a
`roundtrip_state` holding the original SKILL.md text and files; exporting with that state
reproduces them byte for byte as long as the Dollhouse fields have not been edited since.

Without a state, the two mappings are still inverse on the Dollhouse side: every Dollhouse field
the Agent Skill format has no place for travels in the SKILL.md `metadata` map, and `content`
becomes files and back again exactly.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import unicodedata
from typing import Any

import safeyaml
from core.errors import InvalidInput
from elements.types import MAX_DESCRIPTION_LENGTH, MAX_FRONTMATTER_BYTES

DIRECTIONS = ("agent_to_dollhouse", "dollhouse_to_agent")
AGENT_NAME_MAX = 64
AGENT_DESCRIPTION_MAX = 1024
ROUNDTRIP_FORMAT = "atrium.skill-roundtrip.v1"
# Dollhouse content that is not made of `## File:` sections is exported as this file, and read
# back verbatim (not fenced) on import, so free-form reference text survives both directions.
CONTENT_FILE = "references/dollhouse-content.md"

# Optional SKILL.md frontmatter keys from the spec, with the agent_skill key each one uses.
_OPTIONAL_AGENT_FIELDS = {"license": "license", "compatibility": "compatibility", "allowed-tools": "allowed_tools",
                          "metadata": "metadata"}
_AGENT_SKILL_KEYS = ("name", "description", "body", *_OPTIONAL_AGENT_FIELDS.values(), "extra_frontmatter", "files")
_DOLLHOUSE_FIELDS = ("element_name", "description", "instructions", "content", "tags", "triggers", "category",
                     "author", "version", "metadata")
# Agent Skill `metadata` keys that carry Dollhouse fields the Agent Skill format has no place for.
# author and version use the plain keys the Agent Skills spec itself shows in its examples.
_CARRIED_TEXT = {"element_name": "dollhouse-element-name", "description": "dollhouse-description",
                 "category": "dollhouse-category", "author": "author", "version": "version"}
_CARRIED_JSON = {"tags": "dollhouse-tags", "triggers": "dollhouse-triggers", "metadata": "dollhouse-metadata"}

_AGENT_NAME_RULE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_FRONTMATTER = re.compile(r"---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
# One file of content: a heading, a blank line, then a fenced block closed by the same fence.
_FILE_SECTION = re.compile(r"## File: (?P<path>[^\n]+)\n\n(?P<fence>`{3,})\n(?P<text>(?:[^\n]*\n)*?)(?P=fence)\n")

ConversionWarning = dict[str, str]


def convert(direction: str, **params: Any) -> dict[str, Any]:
    """The `convert_skill_format` operation: check the direction and its parameters, then convert."""
    params_by_direction = {"agent_to_dollhouse": {"agent_skill"},
                           "dollhouse_to_agent": {"dollhouse", "dollhouse_markdown", "roundtrip_state"}}
    accepted = params_by_direction.get(direction) if isinstance(direction, str) else None
    if accepted is None:
        raise InvalidInput(f"Unknown direction {direction!r:.60}. Valid directions: {', '.join(DIRECTIONS)}.",
                           code="unknown_direction")
    given = {key: value for key, value in params.items() if value is not None}
    stray = sorted(set(given) - accepted)
    if stray:
        raise InvalidInput(f"{', '.join(stray)} cannot be used with direction {direction!r:.60}; "
                           f"it takes {', '.join(sorted(accepted))}.")
    if direction == "dollhouse_to_agent":
        return dollhouse_to_agent(given.get("dollhouse"), dollhouse_markdown=given.get("dollhouse_markdown"),
                                  roundtrip_state=given.get("roundtrip_state"))
    if "agent_skill" not in given:
        raise InvalidInput("agent_skill is required for direction 'agent_to_dollhouse'.")
    return agent_to_dollhouse(given["agent_skill"])


def agent_to_dollhouse(agent_skill: dict[str, Any]) -> dict[str, Any]:
    agent, skill_md = _read_agent_skill(agent_skill)
    dollhouse, warnings = _dollhouse_from_agent(agent)
    state = {"format": ROUNDTRIP_FORMAT, "skill_md": skill_md, "files": dict(agent["files"]),
             "fields_sha256": _fields_digest(dollhouse)}
    return {"dollhouse": dollhouse, "dollhouse_markdown": _render_dollhouse_markdown(dollhouse),
            "roundtrip_state": state, "warnings": warnings}


def dollhouse_to_agent(dollhouse: dict[str, Any] | None = None, *, dollhouse_markdown: str | None = None,
                       roundtrip_state: dict[str, Any] | None = None) -> dict[str, Any]:
    if (dollhouse is None) == (dollhouse_markdown is None):
        raise InvalidInput("dollhouse_to_agent needs exactly one of dollhouse or dollhouse_markdown.")
    if dollhouse_markdown is None:
        fields = _checked_dollhouse(dollhouse, "dollhouse")
    else:
        fields = _dollhouse_from_markdown(dollhouse_markdown)
    warnings: list[ConversionWarning] = []
    if roundtrip_state is not None:
        state = _checked_state(roundtrip_state)
        if state["fields_sha256"] == _fields_digest(fields):
            return {"agent_skill": _agent_from_skill_md(state["skill_md"], state["files"], "roundtrip_state"),
                    "skill_md": state["skill_md"], "warnings": []}
        warnings.append(_warning("roundtrip_state_stale",
                                 "The Dollhouse fields changed since roundtrip_state was made, so SKILL.md was "
                                 "rebuilt from the current fields and the original's exact formatting is not kept."))
    agent, export_warnings = _agent_from_dollhouse(fields)
    return {"agent_skill": agent, "skill_md": _render_skill_md(agent), "warnings": warnings + export_warnings}


# --- Agent Skill side -------------------------------------------------------------------------


def _read_agent_skill(agent_skill: object) -> tuple[dict[str, Any], str]:
    """The checked Agent Skill and the SKILL.md text a lossless export must reproduce."""
    if not isinstance(agent_skill, dict):
        raise InvalidInput("agent_skill must be an object: name, description and body, or skill_md, plus files.")
    unknown = sorted(set(agent_skill) - {*_AGENT_SKILL_KEYS, "skill_md"})
    if unknown:
        raise InvalidInput(f"agent_skill has unknown keys: {', '.join(unknown)}. "
                           f"Expected: skill_md or {', '.join(_AGENT_SKILL_KEYS)}.")
    skill_md = agent_skill.get("skill_md")
    if skill_md is None:
        agent = _checked_agent(agent_skill, "agent_skill")
        return agent, _render_skill_md(agent)
    if not isinstance(skill_md, str):
        raise InvalidInput("agent_skill.skill_md must be the SKILL.md text.")
    # Both forms at once could disagree, and nothing says which one wins.
    mixed = sorted(key for key, value in agent_skill.items() if key not in ("skill_md", "files") and value is not None)
    if mixed:
        raise InvalidInput(f"agent_skill gives skill_md together with {', '.join(mixed)}; send either the whole "
                           "SKILL.md text or its separate fields, not both.")
    return _agent_from_skill_md(skill_md, agent_skill.get("files"), "agent_skill.skill_md"), skill_md


def _agent_from_skill_md(text: str, files: object, where: str) -> dict[str, Any]:
    frontmatter, rest = _split_frontmatter(text, where)
    # The blank line after the closing `---` separates, it is not part of the body.
    body = rest[2:] if rest.startswith("\r\n") else rest.removeprefix("\n")
    fields: dict[str, Any] = {"name": frontmatter.pop("name", None),
                              "description": frontmatter.pop("description", None), "body": body, "files": files}
    for yaml_key, key in _OPTIONAL_AGENT_FIELDS.items():
        if yaml_key in frontmatter:
            fields[key] = frontmatter.pop(yaml_key)
    fields["extra_frontmatter"] = frontmatter or None
    return _checked_agent(fields, where)


def _checked_agent(fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The Agent Skill in its output shape; optional fields appear only when given."""
    agent: dict[str, Any] = {"name": _required_text(fields, "name", where),
                             "description": _required_text(fields, "description", where),
                             "body": _optional_text(fields, "body", where) or ""}
    for key in ("license", "compatibility"):
        if fields.get(key) is not None:
            agent[key] = _optional_text(fields, key, where)
    if fields.get("allowed_tools") is not None:
        agent["allowed_tools"] = _allowed_tools_text(fields["allowed_tools"], where)
    for key in ("metadata", "extra_frontmatter"):
        if fields.get(key) is not None:
            agent[key] = _mapping(fields[key], f"{where}.{key}")
    clashing = sorted(set(agent.get("extra_frontmatter", {})) & {"name", "description", *_OPTIONAL_AGENT_FIELDS})
    if clashing:
        raise InvalidInput(f"{where}.extra_frontmatter repeats spec fields: {', '.join(clashing)}.")
    agent["files"] = _checked_files(fields.get("files"), f"{where}.files")
    return agent


def _allowed_tools_text(value: object, where: str) -> str:
    # The spec writes allowed-tools as one space-separated string; a list is accepted for convenience.
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(tool, str) and tool and not tool.isspace() for tool in value):
        return " ".join(value)
    raise InvalidInput(f"{where}: allowed_tools must be a space-separated string or a list of tool names.")


def _checked_files(files: object, where: str) -> dict[str, str]:
    if files is None:
        return {}
    if not isinstance(files, dict):
        raise InvalidInput(f"{where} must map relative paths to file text.")
    for path, text in files.items():
        if not _is_safe_path(path):
            raise InvalidInput(f"{where}: {path!r} is not a usable relative path inside the skill folder.")
        if not isinstance(text, str):
            raise InvalidInput(f"{where}: {path!r} must be text.")
    return dict(files)


def _is_safe_path(path: object) -> bool:
    # Exported files end up written into a skill folder: nothing may escape it or replace SKILL.md.
    if not isinstance(path, str) or path == "SKILL.md" or path.startswith("/") or re.search(r"[\r\n\\\x00]", path):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def _render_skill_md(agent: dict[str, Any]) -> str:
    frontmatter = {"name": agent["name"], "description": agent["description"]}
    for yaml_key, key in _OPTIONAL_AGENT_FIELDS.items():
        if key in agent:
            frontmatter[yaml_key] = agent[key]
    frontmatter.update(agent.get("extra_frontmatter", {}))
    body = agent["body"]
    return f"---\n{_dump_yaml(frontmatter)}---\n" + (f"\n{body}" if body else "")


def _agent_name(name: str) -> str:
    """The closest name the Agent Skills rule accepts: lowercase letters, digits, single inner hyphens, <= 64."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    hyphenated = re.sub(r"[\s_]+", "-", ascii_name.lower())
    cleaned = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "", hyphenated)).strip("-")
    result = cleaned[:AGENT_NAME_MAX].rstrip("-")
    if not result:
        raise InvalidInput(f"element_name {name!r} has no letters or digits to build an Agent Skill name from.")
    return result


# --- Dollhouse side ---------------------------------------------------------------------------


def _checked_dollhouse(dollhouse: object, where: str) -> dict[str, Any]:
    """All ten Dollhouse fields, defaults filled in, so equal skills always hash alike."""
    if not isinstance(dollhouse, dict):
        raise InvalidInput(f"{where} must be an object with the Dollhouse skill fields.")
    unknown = sorted(set(dollhouse) - set(_DOLLHOUSE_FIELDS))
    if unknown:
        raise InvalidInput(f"{where} has unknown fields: {', '.join(unknown)}. "
                           f"Expected: {', '.join(_DOLLHOUSE_FIELDS)}.")
    fields: dict[str, Any] = {"element_name": _required_text(dollhouse, "element_name", where),
                              "description": _required_text(dollhouse, "description", where)}
    for key in ("instructions", "content"):
        fields[key] = _optional_text(dollhouse, key, where) or ""
    for key in ("tags", "triggers"):
        fields[key] = _text_list(dollhouse.get(key) or [], f"{where}.{key}")
    for key in ("category", "author", "version"):
        fields[key] = _optional_text(dollhouse, key, where) or ""
    fields["metadata"] = _mapping(dollhouse.get("metadata") or {}, f"{where}.metadata")
    if not isinstance(fields["metadata"].get("agent_skill", {}), dict):
        raise InvalidInput(f"{where}.metadata.agent_skill must be an object.")
    return fields


def _dollhouse_from_markdown(text: object) -> dict[str, Any]:
    if not isinstance(text, str):
        raise InvalidInput("dollhouse_markdown must be the serialised skill text.")
    frontmatter, content = _split_frontmatter(text, "dollhouse_markdown")
    kind = frontmatter.pop("type", "skill")
    if kind != "skill":
        raise InvalidInput(f"dollhouse_markdown describes a {kind!r} element, not a skill.")
    frontmatter.pop("format_version", None)
    if "name" not in frontmatter:
        raise InvalidInput("dollhouse_markdown: name is required in the frontmatter.")
    fields: dict[str, Any] = {"element_name": frontmatter.pop("name"), "content": content}
    for key in ("description", "instructions", "tags", "triggers", "category", "author", "version"):
        if key in frontmatter:
            fields[key] = frontmatter.pop(key)
    metadata = _mapping(frontmatter.pop("metadata", None) or {}, "dollhouse_markdown.metadata")
    # Other top-level keys (unique_id, created, ...) are free-form metadata; `metadata` wins a clash.
    fields["metadata"] = {**frontmatter, **metadata}
    return _checked_dollhouse(fields, "dollhouse_markdown")


def _render_dollhouse_markdown(dollhouse: dict[str, Any]) -> str:
    frontmatter = {"name": dollhouse["element_name"], "description": dollhouse["description"], "type": "skill",
                   "format_version": "v2", "instructions": dollhouse["instructions"], "tags": dollhouse["tags"],
                   "triggers": dollhouse["triggers"], "category": dollhouse["category"],
                   "author": dollhouse["author"], "version": dollhouse["version"], "metadata": dollhouse["metadata"]}
    return f"---\n{_dump_yaml(frontmatter)}---\n{dollhouse['content']}"


def _fields_digest(dollhouse: dict[str, Any]) -> str:
    canonical = json.dumps(dollhouse, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _checked_state(state: object) -> dict[str, Any]:
    usable = (isinstance(state, dict) and state.get("format") == ROUNDTRIP_FORMAT
              and isinstance(state.get("skill_md"), str) and isinstance(state.get("fields_sha256"), str))
    if not usable:
        raise InvalidInput(f"roundtrip_state is not one made by agent_to_dollhouse (format {ROUNDTRIP_FORMAT!r} "
                           "with skill_md, files and fields_sha256).")
    return state


# --- The mapping itself ------------------------------------------------------------------------


def _dollhouse_from_agent(agent: dict[str, Any]) -> tuple[dict[str, Any], list[ConversionWarning]]:
    carried = dict(agent.get("metadata", {}))
    fields: dict[str, Any] = {"element_name": agent["name"], "description": agent["description"],
                              "instructions": agent["body"], "content": _render_files(agent["files"]),
                              "category": "", "author": "", "version": ""}
    for field, key in _CARRIED_TEXT.items():
        # Non-string values are not ours to interpret; they stay in the Agent Skill metadata.
        if isinstance(carried.get(key), str):
            fields[field] = carried.pop(key)
    for field, key in _CARRIED_JSON.items():
        fields[field] = _carried_json(carried.pop(key, None), key, field)
    agent_fields = {key: agent[key] for key in ("license", "compatibility", "allowed_tools", "extra_frontmatter")
                    if key in agent}
    if carried:
        agent_fields["metadata"] = carried
    if agent_fields:
        fields["metadata"]["agent_skill"] = agent_fields
    dollhouse = _checked_dollhouse(fields, "agent_skill")
    return dollhouse, _import_warnings(agent, dollhouse)


def _carried_json(raw: object, key: str, field: str) -> Any:
    if raw is None:
        return {} if field == "metadata" else []
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        value = None
    if field == "metadata":
        valid, expected = isinstance(value, dict), "object"
    else:
        valid, expected = isinstance(value, list) and all(isinstance(item, str) for item in value), "list of strings"
    if not valid:
        raise InvalidInput(f"agent_skill metadata {key!r} must be a JSON-encoded {expected} "
                           f"(it carries the Dollhouse {field}).")
    return value


def _import_warnings(agent: dict[str, Any], dollhouse: dict[str, Any]) -> list[ConversionWarning]:
    warnings = []
    if not _is_agent_name(agent["name"]):
        warnings.append(_warning("agent_name_nonstandard",
                                 f"name {agent['name']!r} breaks the Agent Skills naming rule (lowercase letters, "
                                 f"digits and single hyphens, at most {AGENT_NAME_MAX} characters); kept as is."))
    if len(dollhouse["description"]) > MAX_DESCRIPTION_LENGTH:
        warnings.append(_warning("description_too_long",
                                 f"description has {len(dollhouse['description'])} characters; Dollhouse skills "
                                 f"allow {MAX_DESCRIPTION_LENGTH}, so saving it as an element will be refused."))
    return warnings


def _agent_from_dollhouse(dollhouse: dict[str, Any]) -> tuple[dict[str, Any], list[ConversionWarning]]:
    warnings = []
    agent_fields = dollhouse["metadata"].get("agent_skill", {})
    name = _agent_name(dollhouse["element_name"])
    description = dollhouse["description"][:AGENT_DESCRIPTION_MAX]
    # The Dollhouse fields are the truth: drop copies of them an earlier import would have consumed.
    carried_keys = {*_CARRIED_TEXT.values(), *_CARRIED_JSON.values()}
    previous = _mapping(agent_fields.get("metadata") or {}, "dollhouse.metadata.agent_skill.metadata")
    carried = {key: value for key, value in previous.items() if not (key in carried_keys and isinstance(value, str))}
    if name != dollhouse["element_name"]:
        warnings.append(_warning("name_normalised", f"element_name {dollhouse['element_name']!r} became {name!r} "
                                                    "to follow the Agent Skills naming rule."))
    if description != dollhouse["description"]:
        warnings.append(_warning("description_truncated", f"description was cut to the Agent Skills limit of "
                                                          f"{AGENT_DESCRIPTION_MAX} characters."))
    shown = {"element_name": name, "description": description}  # already in the frontmatter, no copy needed
    for field, key in _CARRIED_TEXT.items():
        if dollhouse[field] and dollhouse[field] != shown.get(field):
            carried[key] = dollhouse[field]
    other_metadata = {key: value for key, value in dollhouse["metadata"].items() if key != "agent_skill"}
    for field, value in (("tags", dollhouse["tags"]), ("triggers", dollhouse["triggers"]),
                         ("metadata", other_metadata)):
        if value:
            carried[_CARRIED_JSON[field]] = json.dumps(value, ensure_ascii=False, sort_keys=True)
    fields = {**agent_fields, "name": name, "description": description, "body": dollhouse["instructions"],
              "metadata": carried or None, "files": _files_from_content(dollhouse["content"])}
    return _checked_agent(fields, "dollhouse.metadata.agent_skill"), warnings


def _render_files(files: dict[str, str]) -> str:
    sections = "\n".join(_render_file(path, text) for path, text in files.items() if path != CONTENT_FILE)
    if CONTENT_FILE not in files:
        return sections
    return f"{sections}\n{files[CONTENT_FILE]}" if sections else files[CONTENT_FILE]


def _render_file(path: str, text: str) -> str:
    # A fence longer than any backtick run inside the file cannot be closed early by the file itself.
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    block = text if not text or text.endswith("\n") else f"{text}\n"
    return f"## File: {path}\n\n{fence}\n{block}{fence}\n"


def _files_from_content(content: str) -> dict[str, str]:
    """The inverse of _render_files: _render_files(_files_from_content(c)) == c for every c.

    Leading sections that _render_files would write identically become files; whatever follows them
    (or the whole content, when it does not start that way) becomes CONTENT_FILE verbatim.
    """
    files: dict[str, str] = {}
    position = 0
    while match := _FILE_SECTION.match(content, position):
        path, text = match["path"], match["text"]
        if not _is_safe_path(path) or path in files or path == CONTENT_FILE or _render_file(path, text) != match[0]:
            break
        files[path] = text
        position = match.end()
        if position == len(content):
            return files
        if content[position] != "\n":
            # Text glued to a section is something _render_files never writes: keep it all as one file.
            return {CONTENT_FILE: content}
        position += 1
    if not files:
        return {CONTENT_FILE: content} if content else {}
    files[CONTENT_FILE] = content[position:]
    return files


# --- Shared helpers ---------------------------------------------------------------------------


def _split_frontmatter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """The parsed YAML frontmatter and everything after its closing `---` line."""
    match = _FRONTMATTER.match(text)
    if match is None:
        raise InvalidInput(f"{where} must start with YAML frontmatter between two '---' lines.")
    if len(match[1].encode()) > MAX_FRONTMATTER_BYTES:
        raise InvalidInput(f"{where} frontmatter is larger than {MAX_FRONTMATTER_BYTES // 1024} KB.")
    # Plain frontmatter never needs aliases, which can expand a small document into a huge one.
    bounds = safeyaml.Bounds(anchors=False, tags=False)
    try:
        loaded = safeyaml.load(match[1], schema=safeyaml.CORE, bounds=bounds)
    except safeyaml.InvalidYAML as exc:
        if exc.unsafe:
            raise InvalidInput(f"{where} frontmatter is refused: {exc.message}") from exc
        raise InvalidInput(f"{where} frontmatter is not valid YAML: {exc.message}.") from exc
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise InvalidInput(f"{where} frontmatter must be a mapping of keys to values.")
    return _json_safe(loaded), text[match.end():]


def _json_safe(value: Any) -> Any:
    """Mapping keys as text: YAML keys may be numbers, booleans or null, and results and round-trip
    states travel as JSON."""
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def _dump_yaml(data: dict[str, Any]) -> str:
    # Multi-line strings as `|` blocks, so instructions in frontmatter stay readable; no line width:
    # a folded description would be valid YAML but awkward for people to edit.
    return safeyaml.dump(data, string_style=lambda value: "|" if "\n" in value else None, sort_keys=False,
                         width=sys.maxsize)


def _required_text(fields: dict[str, Any], key: str, where: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{where}: {key} is required and must be non-empty text.")
    return value


def _optional_text(fields: dict[str, Any], key: str, where: str) -> str | None:
    value = fields.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{where}: {key} must be text.")
    return value


def _text_list(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidInput(f"{where} must be a list of strings.")
    return list(value)


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} must be an object.")
    return dict(value)


def _is_agent_name(name: str) -> bool:
    return len(name) <= AGENT_NAME_MAX and _AGENT_NAME_RULE.fullmatch(name) is not None


def _warning(code: str, message: str) -> ConversionWarning:
    return {"code": code, "message": message}
