"""An element as clients see it (get_element's shape) and as a portable package (export/import)."""

from __future__ import annotations

import json
from typing import Any

from core.errors import InvalidInput
from elements.models import Element, MemoryEntry
from elements.types import ElementType, element_type_parse

PACKAGE_VERSION = "1.0"
_SHARED = ("description", "instructions", "content", "tags", "triggers", "category", "author", "version",
           "format_version")


def entry_data(entry: MemoryEntry) -> dict[str, Any]:
    return {
        "id": entry.entry_id,
        "timestamp": entry.timestamp.isoformat(),
        "content": entry.content,
        "tags": entry.tags,
        "metadata": entry.metadata,
        "expiresAt": entry.expires_at.isoformat() if entry.expires_at else None,
        "privacyLevel": entry.privacy_level,
        "trustLevel": entry.trust_level,
        "source": entry.source or None,
    }


def element_data(element: Element, *, entries: list[MemoryEntry] | None = None) -> dict[str, Any]:
    """get_element's `data`: the shared fields, and `metadata` with the type-specific ones."""
    metadata = {**element.metadata, "unique_id": element.unique_id}
    if element.gatekeeper:
        metadata["gatekeeper"] = element.gatekeeper
    data = {
        "element_name": element.name,
        "element_type": element.element_type,
        **{field: getattr(element, field) for field in _SHARED},
        "created": element.created.isoformat(),
        "modified": element.modified.isoformat(),
        "metadata": metadata,
    }
    if entries is not None:
        data["entries"] = [entry_data(e) for e in entries]
        metadata["entryCount"] = len(entries)
    return data


def element_package(element: Element, *, entries: list[MemoryEntry] | None = None) -> dict[str, Any]:
    """A self-contained export that import_element accepts unchanged."""
    package = {
        "exportVersion": PACKAGE_VERSION,
        "element_type": element.element_type,
        "element_name": element.name,
        "unique_id": element.unique_id,
        **{field: getattr(element, field) for field in _SHARED},
        "gatekeeper": element.gatekeeper,
        "metadata": element.metadata,
        "created": element.created.isoformat(),
        "modified": element.modified.isoformat(),
    }
    if element.element_type == ElementType.MEMORY:
        package["entries"] = [entry_data(e) for e in entries or []]
    return package


def package_load(data: object) -> dict[str, Any]:
    """A package from import_element's `data`: an object, a JSON string or the YAML export."""
    from elements.validation import safe_yaml_load

    if isinstance(data, str):
        text = data.strip()
        if not text:
            raise InvalidInput("data is empty: pass the package export_element produced.", code="invalid_package")
        try:
            data = json.loads(text)
        except ValueError:
            data = safe_yaml_load(text, max_bytes=4 * 1024 * 1024)
    if not isinstance(data, dict):
        raise InvalidInput("data must be an export package: an object, or its JSON or YAML text.",
                           code="invalid_package")
    if "element_name" not in data and "name" in data:
        data = {**data, "element_name": data["name"]}
    missing = [key for key in ("element_type", "element_name") if not data.get(key)]
    if missing:
        raise InvalidInput(f"The package lacks {', '.join(missing)}.", code="invalid_package")
    element_type_parse(data["element_type"])
    return data
