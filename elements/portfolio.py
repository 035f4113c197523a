"""DollhouseMCP's on-disk portfolio, converted to and from Atrium's export packages.

Nothing here touches the database: import_portfolio hands the packages read here to
services.element_import, and export_portfolio writes the files made here from element_package.
Exporting and importing again gives back every package field.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import safeyaml
from core.errors import InvalidInput
from elements.types import MAX_FILE_BYTES, MAX_FRONTMATTER_BYTES, ElementType, element_type_parse
from elements.validation import safe_yaml_load

MARKDOWN_SUFFIX = ".md"
MEMORY_SUFFIXES = (".yaml", ".yml")
# Front matter keys that are package fields; every other key is type-specific or free-form metadata.
_SHARED_KEYS = ("unique_id", "description", "tags", "triggers", "category", "author", "version", "gatekeeper",
                "created", "modified")
_KNOWN_KEYS = frozenset({*_SHARED_KEYS, "name", "type", "format_version", "instructions", "content", "metadata"})
_MEMORY_DOCUMENT_KEYS = frozenset({"metadata", "instructions", "content", "entries", "stats"})
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
# Plain scalars that the YAML 1.2 core schema (what safe_yaml_load reads) takes for null, booleans or
# numbers although PyYAML's YAML 1.1 rules would write them unquoted, such as "0o17" and "1e5".
_CORE_NON_STRING = re.compile(
    r"~|null|Null|NULL|true|True|TRUE|false|False|FALSE|[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+"
    r"|[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)
_TOP_TAGS = 10


def _string_style(value: str) -> str | None:
    if _CORE_NON_STRING.fullmatch(value):
        return "'"
    # Instructions read best as a literal block; the emitter falls back to quotes where a block
    # would not keep the text exactly (carriage returns, trailing spaces).
    return "|" if "\n" in value else None


def yaml_dump(data: dict[str, Any]) -> str:
    """YAML that safe_yaml_load reads back to the same values (strings that look like numbers quoted,
    and no anchors, which safe_yaml_load refuses: a value used twice is written twice)."""
    return safeyaml.dump(data, string_style=_string_style, sort_keys=True)


def filename_for(name: str) -> str:
    """The original's file name for an element: 'Debug Detective' -> 'debug-detective'."""
    slug = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", name)
    slug = re.sub(r"[\s_]+", "-", slug).lower()
    slug = re.sub(r"[^a-z0-9-]", "-", slug)
    return re.sub(r"-+", "-", slug).strip("-") or "unnamed"


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def _is_empty(value: object) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _front_matter(package: dict[str, Any], element_type: ElementType) -> dict[str, Any]:
    """The package's identity and shared fields, and its metadata keys beside them, as the original writes them."""
    matter = {key: package.get(key) for key in _SHARED_KEYS}
    matter.update(name=package["element_name"], type=element_type.value,
                  format_version=package.get("format_version") or "v2")
    # An empty author is kept: left out, the import would fill in the owner's username.
    matter = {key: value for key, value in matter.items()
              if not _is_empty(value) or (key == "author" and value == "")}
    metadata = package.get("metadata") or {}
    matter.update((key, value) for key, value in metadata.items() if key not in _KNOWN_KEYS)
    # Metadata keys that would pass for package fields at the top level stay under `metadata:`.
    clashing = {key: value for key, value in metadata.items() if key in _KNOWN_KEYS}
    if clashing:
        matter["metadata"] = clashing
    return matter


def markdown_from_package(package: dict[str, Any]) -> str:
    """The `.md` file of a persona, skill, template, agent or ensemble: YAML front matter and a body."""
    element_type = element_type_parse(package["element_type"])
    matter = _front_matter(package, element_type)
    instructions, content = package.get("instructions") or "", package.get("content") or ""
    if element_type is ElementType.PERSONA and matter["format_version"] == "v1" and not content:
        body = instructions  # a v1 persona's one body is its instructions
    else:
        # A v1 element holding instructions keeps them in the front matter too, so they read back
        # as instructions; its explicit format_version keeps it v1.
        if instructions:
            matter["instructions"] = instructions
        body = content
        if element_type is ElementType.PERSONA:
            body = f"# {package['element_name']}\n\n{content or package.get('description') or ''}"
    text = f"---\n{yaml_dump(matter)}---\n"
    return f"{text}\n{body}\n" if body else text


def _memory_stats(entries: list[dict[str, Any]]) -> dict[str, Any]:
    timestamps = [entry["timestamp"] for entry in entries if entry.get("timestamp")]
    tags = Counter(tag for entry in entries for tag in entry.get("tags") or [])
    stats = {
        "totalEntries": len(entries),
        "totalSize": sum(len(entry.get("content") or "") for entry in entries),
        "oldestEntry": min(timestamps, default=None),
        "newestEntry": max(timestamps, default=None),
        "topTags": [{"tag": tag, "count": count} for tag, count in tags.most_common(_TOP_TAGS)],
    }
    return {key: value for key, value in stats.items() if value is not None}


def memory_yaml_from_package(package: dict[str, Any]) -> str:
    """A memory's `.yaml` file: `metadata:`, `instructions:`, `stats:` and `entries:`."""
    entries = [{key: value for key, value in entry.items() if not _is_empty(value)}
               for entry in package.get("entries") or []]
    document: dict[str, Any] = {"metadata": _front_matter(package, ElementType.MEMORY), "entries": entries,
                                "stats": _memory_stats(entries)}
    for key in ("instructions", "content"):
        if package.get(key):
            document[key] = package[key]
    return yaml_dump(document)


def text_from_package(package: dict[str, Any]) -> str:
    """The file's text for the package's type."""
    if element_type_parse(package["element_type"]) is ElementType.MEMORY:
        return memory_yaml_from_package(package)
    return markdown_from_package(package)


def package_path(package: dict[str, Any]) -> Path:
    """Where the original keeps the element, relative to the portfolio root."""
    element_type = element_type_parse(package["element_type"])
    stem = filename_for(package["element_name"])
    if element_type is not ElementType.MEMORY:
        return Path(element_type.plural, stem + MARKDOWN_SUFFIX)
    created = package.get("created")
    day = datetime.fromisoformat(created) if isinstance(created, str) else datetime.now(UTC)
    return Path(element_type.plural, day.date().isoformat(), stem + MEMORY_SUFFIXES[0])


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _check_size(size: int, filename: str) -> None:
    if size > MAX_FILE_BYTES:
        raise InvalidInput(f"{filename}: file too large: at most {MAX_FILE_BYTES:,} bytes (got {size:,}).",
                           code="too_large")


def _load_yaml(text: str, *, filename: str, max_bytes: int) -> object:
    try:
        return safe_yaml_load(text, max_bytes=max_bytes)
    except InvalidInput as exc:
        raise InvalidInput(f"{filename}: {exc.message}", code=exc.code) from exc


def _timestamp(value: object, *, field: str, filename: str) -> object:
    """An ISO 8601 time as Atrium writes it; a date alone is midnight UTC, as is a time without a zone."""
    if not isinstance(value, str):
        return value
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidInput(f"{filename}: {field} is not an ISO 8601 date and time ({value[:40]!r}).",
                           code="invalid_timestamp") from exc
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def _package(matter: dict[str, Any], *, element_type: ElementType, filename: str) -> dict[str, Any]:
    """The package fields and metadata of a front matter (or a memory's `metadata:`), without the bodies."""
    declared = matter.get("type")
    if declared is not None:
        try:
            matches = element_type_parse(declared) is element_type
        except InvalidInput:
            matches = False
        if not matches:
            raise InvalidInput(f"{filename}: type {declared!r} does not match its folder, {element_type.plural}/.",
                               code="type_mismatch")
    nested = matter.get("metadata", {})
    if not isinstance(nested, dict):
        raise InvalidInput(f"{filename}: metadata must be a mapping.", code="invalid_metadata")
    declared_version = matter.get("format_version")
    package: dict[str, Any] = {
        "element_type": element_type.value,
        "element_name": matter.get("name") or PurePosixPath(filename).stem,
        **{key: matter[key] for key in _SHARED_KEYS if key in matter},
        # Without an explicit format_version, an `instructions` key is what makes an element v2.
        "format_version": declared_version if declared_version in ("v1", "v2")
        else "v2" if "instructions" in matter else "v1",
        "metadata": {**{key: value for key, value in matter.items() if key not in _KNOWN_KEYS}, **nested},
    }
    for key in ("created", "modified"):
        if key in package:
            package[key] = _timestamp(package[key], field=key, filename=filename)
    return package


def _split_markdown(text: str, *, filename: str) -> tuple[dict[str, Any], str]:
    """The front matter and the body of a `.md` file."""
    _check_size(len(text.encode("utf-8", "surrogatepass")), filename)
    text = text.removeprefix("\ufeff")
    match = _FRONT_MATTER.match(text)
    if match is None:
        raise InvalidInput(f"{filename}: no YAML front matter (a '---' line, the YAML, then another '---' line).",
                           code="invalid_file")
    front = match.group(1)
    size = len(front.encode("utf-8", "surrogatepass"))
    if size > MAX_FRONTMATTER_BYTES:
        raise InvalidInput(f"{filename}: front matter too large: at most {MAX_FRONTMATTER_BYTES:,} bytes "
                           f"(got {size:,}).", code="too_large")
    matter = _load_yaml(front, filename=filename, max_bytes=MAX_FRONTMATTER_BYTES)
    if matter is None:
        matter = {}
    if not isinstance(matter, dict):
        raise InvalidInput(f"{filename}: the front matter must be a YAML mapping of fields.", code="invalid_file")
    # The blank line after the front matter and the file's final newline are layout, not body.
    body = text[match.end():].removeprefix("\n").removesuffix("\n")
    if not body and isinstance(matter.get("content"), str):
        body = matter["content"]
    return matter, body


def _without_heading(body: str, name: str, description: str) -> str:
    """A v2 persona's content: its body less the `# <name>` heading, which the original writes over it.

    The original writes the description there when there is no content, so that reads as no content.
    """
    heading = f"# {name}"
    text = body.lstrip("\n")
    if text != heading and not text.startswith(heading + "\n"):
        return body
    content = text[len(heading) + 1:].removeprefix("\n")
    return "" if content == description else content


def package_from_markdown(text: str, *, element_type: ElementType, filename: str) -> dict[str, Any]:
    """The package of a `.md` element file. A memory's body (the legacy format) becomes one more entry."""
    matter, body = _split_markdown(text, filename=filename)
    package = _package(matter, element_type=element_type, filename=filename)
    if "instructions" in matter:
        instructions, content = matter["instructions"], body
        if element_type is ElementType.PERSONA and isinstance(package["element_name"], str):
            description = package.get("description")
            content = _without_heading(body, package["element_name"].strip(),
                                       description if isinstance(description, str) else "")
    elif element_type is ElementType.PERSONA:
        instructions, content = body, ""
    else:
        instructions, content = "", body
    if element_type is ElementType.MEMORY:
        when = package.get("modified") or package.get("created")
        package["entries"] = [{"content": content, **({"timestamp": when} if when else {})}] if content else []
        content = ""
    return {**package, "instructions": instructions, "content": content}


def _entries(value: object, *, filename: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(f"{filename}: entries must be a list.", code="invalid_entries")
    entries = []
    for number, entry in enumerate(value, start=1):
        where = f"entry {number}"
        if not isinstance(entry, dict):
            raise InvalidInput(f"{filename}: {where} must be a mapping.", code="invalid_entries")
        if not isinstance(entry.get("tags") or [], list):
            raise InvalidInput(f"{filename}: {where}: tags must be a list.", code="invalid_entries")
        if not isinstance(entry.get("metadata") or {}, dict):
            raise InvalidInput(f"{filename}: {where}: metadata must be a mapping.", code="invalid_entries")
        entry = dict(entry)
        for key in ("timestamp", "expiresAt"):
            if key in entry:
                entry[key] = _timestamp(entry[key], field=f"{where} {key}", filename=filename)
        entries.append(entry)
    return entries


def package_from_memory_yaml(text: str, *, filename: str) -> dict[str, Any]:
    """The package of a memory's `.yaml` file. Its `stats:` are derived from the entries, so they are not read."""
    _check_size(len(text.encode("utf-8", "surrogatepass")), filename)
    document = _load_yaml(text, filename=filename, max_bytes=MAX_FILE_BYTES)
    if not isinstance(document, dict) or not isinstance(document.get("metadata"), dict):
        raise InvalidInput(f"{filename}: a memory file needs a `metadata:` mapping (name, description, ...).",
                           code="invalid_file")
    matter = dict(document["metadata"])
    if "instructions" in document:
        matter["instructions"] = document["instructions"]
    package = _package(matter, element_type=ElementType.MEMORY, filename=filename)
    # Top-level sections Atrium does not model (the original's `extensions:`) are kept as metadata.
    package["metadata"].update((key, value) for key, value in document.items() if key not in _MEMORY_DOCUMENT_KEYS)
    return {**package, "instructions": document.get("instructions") or "", "content": document.get("content") or "",
            "entries": _entries(document.get("entries"), filename=filename)}


def _element_files(folder: Path, element_type: ElementType) -> list[Path]:
    if element_type is not ElementType.MEMORY:
        return sorted(p for p in folder.iterdir()
                      if p.suffix == MARKDOWN_SUFFIX and not p.name.startswith(".") and p.is_file())
    # Memories live in date folders; backups/ holds superseded copies and _index.json is a cache.
    return sorted(p for p in folder.rglob("*")
                  if p.suffix in (*MEMORY_SUFFIXES, MARKDOWN_SUFFIX) and p.is_file()
                  and not any(part.startswith(".") or part == "backups" for part in p.relative_to(folder).parts))


def _read(path: Path, *, element_type: ElementType, filename: str) -> dict[str, Any] | str:
    try:
        _check_size(path.stat().st_size, filename)
        text = path.read_bytes().decode("utf-8")
        if element_type is ElementType.MEMORY and path.suffix in MEMORY_SUFFIXES:
            return package_from_memory_yaml(text, filename=filename)
        return package_from_markdown(text, element_type=element_type, filename=filename)
    except InvalidInput as exc:
        return exc.message
    except UnicodeDecodeError:
        return f"{filename}: not UTF-8 text."
    except OSError as exc:
        return f"{filename}: could not be read ({exc.strerror})."


def iter_portfolio(root: Path) -> Iterator[tuple[Path, dict[str, Any] | str]]:
    """Every element file under the portfolio's six folders, with its package or, if it cannot be
    read, a message that names the file. One bad file never stops the rest."""
    for element_type in ElementType:
        folder = root / element_type.plural
        if not folder.is_dir():
            continue
        for path in _element_files(folder, element_type):
            yield path, _read(path, element_type=element_type, filename=path.relative_to(root).as_posix())
