"""Writes for elements. Every adapter (MCP-AQL, the REST API, admin, commands) calls these."""

from __future__ import annotations

import operator
import secrets
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import McpSession, User
from accounts.services import audit_record, audits_record
from core.caller import Caller
from core.errors import DomainError, Forbidden, InvalidInput, NotFound
from core.versions import version_check
from elements import validation
from elements.fields import BODY_IS_INSTRUCTIONS, clean_fields, split_params
from elements.models import Activation, Confirmation, Element, ElementRevision, MemoryEntry, UserSettings
from elements.packages import element_package
from elements.portfolio import filename_for
from elements.selectors import SETTINGS, element_version, user_settings
from elements.types import (
    MAX_ENTRY_CONTENT,
    MAX_ENTRY_METADATA_KEYS,
    MAX_ENTRY_METADATA_VALUE,
    MAX_ENTRY_TAGS,
    MAX_MEMORY_ENTRIES,
    MAX_MEMORY_TOTAL,
    ElementType,
    datetime_parse,
    element_type_parse,
)
from workflows.events import event_emit, events_emit


def _portfolio_changed(owner_id: int) -> None:
    """Once the change commits, queue the owner's auto-sync push (if they turned auto_sync on)."""

    def queue() -> None:
        from elements.portfolio_sync import auto_sync_queue

        auto_sync_queue(owner_id)

    transaction.on_commit(queue)


class ElementExists(DomainError):
    code = "element_exists"
    http_status = 409


def _unique_id(element_type: ElementType, name: str, when: datetime) -> str:
    # The random tail keeps two names with the same file name, made in one second, apart.
    return f"{element_type.value}_{filename_for(name)}_{when:%Y%m%d-%H%M%S}_{secrets.token_hex(3)}"


def _default_author(owner: User) -> str:
    return user_settings(user=owner)["elements.default_author"] or owner.get_username()


def _check_owner(caller: Caller, owner_id: int) -> None:
    """Users change their own elements; staff curate anyone's, but only through admin."""
    if owner_id != caller.user.pk and not (caller.via == "admin" and caller.user.is_staff):
        raise Forbidden("That element is not yours.")


def element_lock(element: Element) -> Element:
    """The element as stored now, locked until the transaction ends. Every read-modify-write starts
    here: merging into the copy a caller read earlier would silently drop whatever another request
    saved in between (two concurrent edits adding different metadata keys would keep only one)."""
    locked = Element.objects.select_for_update().filter(pk=element.pk).first()
    if locked is None:
        raise NotFound(f"{element.element_type.capitalize()} '{element.name}' was deleted meanwhile.",
                       code="element_not_found")
    return locked


def _revision(*, caller: Caller, element: Element, action: str) -> ElementRevision:
    entries = list(element.entries.all()) if element.element_type == ElementType.MEMORY else None
    revision = _revision_new(caller=caller, element=element, action=action, entries=entries)
    revision.save()
    return revision


def _revision_new(*, caller: Caller, element: Element, action: str,
                  entries: list[MemoryEntry] | None) -> ElementRevision:
    return ElementRevision(
        element=element, owner=element.owner, element_type=element.element_type, name=element.name,
        action=action, snapshot=element_package(element, entries=entries), credential=caller.credential[:200],
    )


def _audit(caller: Caller, action: str, element: Element, **detail: Any) -> None:
    audit_record(caller=caller, action=f"element.{action}", target=_audit_target(element), detail=detail)


def _audit_target(element: Element) -> str:
    return f"{element.element_type} '{element.name}'"


def _emit(name: str, element: Element, **data: Any) -> None:
    # The element's owner's event, also when a curator made the change in admin.
    event_emit(owner_id=element.owner_id, name=name, data={**_event_data(element), **data})


def _event_data(element: Element) -> dict[str, Any]:
    return {"type": element.element_type, "name": element.name, "uniqueId": element.unique_id,
            "tags": list(element.tags or [])}


@transaction.atomic
def element_create(
    *, caller: Caller, element_type: ElementType, name: object, params: dict[str, Any], action: str = "create",
    unique_id: str | None = None, created: datetime | None = None, format_version: str = "v2",
    owner: User | None = None, entries: list[Any] | None = None,
) -> Element:
    """Create an element from a client's params (shared fields, type fields, metadata), owned by
    the caller or, for a curator in admin, by `owner`; a memory with its imported `entries`, which
    its first revision holds."""
    owner = owner or caller.user
    _check_owner(caller, owner.pk)
    name = validation.clean_name(name, element_type=element_type)
    if Element.objects.filter(owner=owner, element_type=element_type, name=name).exists():
        raise ElementExists(f"A {element_type.value} named '{name}' already exists: edit that one, or choose "
                            "another name.")
    element = _element_new(owner=owner, element_type=element_type, name=name, params=params,
                           author=_default_author(owner), unique_id=unique_id, created=created,
                           format_version=format_version)
    try:
        with transaction.atomic():
            element.save(force_insert=True)
    except IntegrityError as exc:  # a concurrent create of the same name won the race
        raise ElementExists(f"A {element_type.value} named '{name}' already exists.") from exc
    if entries:
        _entries_import(element, entries)
    _revision(caller=caller, element=element, action=action)
    _audit(caller, action, element)
    _emit("element.created", element)
    _portfolio_changed(element.owner_id)
    return element


def _element_new(*, owner: User, element_type: ElementType, name: str, params: dict[str, Any], author: str,
                 unique_id: str | None, created: datetime | None, format_version: str) -> Element:
    """An element made from a client's params (its name already clean), checked whole, not saved."""
    common, metadata = split_params(element_type, params)
    common.setdefault("author", author)
    values = clean_fields(element_type, common, metadata)
    now = timezone.now()
    return Element(owner=owner, element_type=element_type, name=name,
                   unique_id=unique_id or _unique_id(element_type, name, now), format_version=format_version,
                   created=created or now, modified=now, **values)


def _deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in changes.items():
        if key in {"__proto__", "constructor", "prototype"}:
            raise InvalidInput(f"The key {key} is not allowed.", code="invalid_input")
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def element_fields(element: Element) -> dict[str, Any]:
    """An element's shared and type-specific fields, as a client would send them."""
    return {
        "description": element.description, "instructions": element.instructions, "content": element.content,
        "tags": element.tags, "triggers": element.triggers, "category": element.category, "author": element.author,
        "version": element.version, "gatekeeper": element.gatekeeper, "metadata": dict(element.metadata),
    }


@transaction.atomic
def element_edit(
    *, caller: Caller, element: Element, changes: dict[str, Any], replace: frozenset[str] = frozenset(),
    if_match: Collection[str] | None = None,
) -> Element:
    """Deep-merge `changes` into the element as stored now, validate the whole, and save a revision.

    Fields named in `replace` ("metadata", "gatekeeper") take the given value whole instead, so an
    editor that shows the complete object (admin) can remove keys from it. With `if_match` (the
    versions the caller's copy may be at), an element changed since it was read is refused."""
    _check_owner(caller, element.owner_id)
    element_type = ElementType(element.element_type)
    if not isinstance(changes, dict) or not changes:
        raise InvalidInput("input must be an object with the fields to change.", code="invalid_input")
    if element_type is ElementType.MEMORY and "content" in changes:
        raise InvalidInput("Memory content cannot be modified via edit_element. Memory uses an append-only "
                           "architecture. Use the 'addEntry' operation to add entries.", code="memory_append_only")
    if "name" in changes or "element_name" in changes:
        raise InvalidInput("An element cannot be renamed with edit_element: export it, import it under the new name "
                           "and delete the old one.", code="rename_unsupported")
    element = element_lock(element)
    version_check(current=element_version(element), accepted=if_match, what=f"{element_type.value} '{element.name}'")
    current = element_fields(element)
    common, metadata = split_params(element_type, changes)
    merged = _deep_merge({k: v for k, v in current.items() if k != "metadata"}, common)
    merged_metadata = metadata if "metadata" in replace else _deep_merge(current["metadata"], metadata)
    if "gatekeeper" in common and ("gatekeeper" in replace or common["gatekeeper"] in (None, {})):
        merged["gatekeeper"] = common["gatekeeper"]  # removing or replacing a policy does not merge
    values = clean_fields(element_type, merged, merged_metadata)
    for field, value in values.items():
        setattr(element, field, value)
    element.modified = timezone.now()
    element.save()
    _revision(caller=caller, element=element, action=ElementRevision.Action.UPDATE)
    _audit(caller, "update", element, fields=sorted(changes))
    _emit("element.changed", element, fields=sorted(changes))
    _portfolio_changed(element.owner_id)
    return element


@transaction.atomic
def element_upgrade(
    *, caller: Caller, element: Element, instructions: str | None = None, content: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """v1 (one body) to v2 (instructions and content). Returns the before and after."""
    element_type = ElementType(element.element_type)
    if not dry_run:
        _check_owner(caller, element.owner_id)
        element = element_lock(element)
    before = {"format_version": element.format_version, "instructions": element.instructions,
              "content": element.content}
    if element.format_version == Element.FormatVersion.V2 and instructions is None and content is None:
        return {"upgraded": False, "dry_run": dry_run, "message": f"'{element.name}' is already v2.",
                "before": before, "after": before}
    body = element.content or element.instructions
    after = {"format_version": "v2",
             "instructions": element.instructions or (body if element_type in BODY_IS_INSTRUCTIONS else ""),
             "content": element.content if element_type not in BODY_IS_INSTRUCTIONS else
             ("" if not element.instructions else element.content)}
    if instructions is not None:
        after["instructions"] = instructions
    if content is not None:
        after["content"] = content
    if not dry_run:
        element = element_edit(caller=caller, element=element,
                               changes={"instructions": after["instructions"], "content": after["content"]}
                               if element_type is not ElementType.MEMORY else {"instructions": after["instructions"]})
        Element.objects.filter(pk=element.pk).update(format_version="v2")
        element.format_version = "v2"
    return {"upgraded": not dry_run, "dry_run": dry_run, "before": before, "after": after}


@transaction.atomic
def element_publish(*, caller: Caller, element: Element, published: bool) -> Element:
    """Put an element in the team's collection, or take it out. Curators do this in admin."""
    if not (caller.via == "admin" and caller.user.is_staff):
        raise Forbidden("Only curators publish to the collection, in admin.")
    element = element_lock(element)
    if element.published != published:
        element.published = published
        element.save(update_fields=["published"])
        _audit(caller, "publish" if published else "withdraw", element)
    return element


@transaction.atomic
def element_delete(*, caller: Caller, element: Element) -> ElementRevision:
    """Delete an element, keeping a backup revision it can be restored from."""
    _check_owner(caller, element.owner_id)
    element = element_lock(element)  # the backup holds what is stored now, not the caller's copy
    backup = _revision(caller=caller, element=element, action=ElementRevision.Action.DELETE)
    _audit(caller, "delete", element, backup_revision=backup.pk)
    _portfolio_changed(element.owner_id)
    element.delete()
    return backup


@transaction.atomic
def element_restore(*, caller: Caller, revision: ElementRevision) -> Element:
    """Bring an element back to a revision: recreate it if deleted, else overwrite it."""
    _check_owner(caller, revision.owner_id)
    element, _ = element_import(caller=caller, package=revision.snapshot, overwrite=True,
                                action=ElementRevision.Action.RESTORE, owner=revision.owner)
    return element


def _entry_clean(*, content: object, tags: object = None, metadata: object = None, privacy_level: object = None,
                 trust_level: object = None) -> dict[str, Any]:
    """The checked fields of one memory entry, from addEntry or an imported package."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput("Missing required parameter 'content': the text of the entry.", code="content_required")
    content, _flags = validation.normalize_text(content)
    if len(content) > MAX_ENTRY_CONTENT:
        raise InvalidInput(f"An entry is at most {MAX_ENTRY_CONTENT:,} characters (got {len(content):,}).",
                           code="entry_too_large")
    metadata = metadata or {}
    if not isinstance(metadata, dict) or len(metadata) > MAX_ENTRY_METADATA_KEYS:
        raise InvalidInput(f"Entry metadata must be an object with at most {MAX_ENTRY_METADATA_KEYS} keys.",
                           code="invalid_metadata")
    for key, value in metadata.items():
        if not isinstance(value, str | int | float | bool | type(None)):
            raise InvalidInput(f"metadata.{key} must be a string, number, boolean or null.", code="invalid_metadata")
        if isinstance(value, str) and len(value) > MAX_ENTRY_METADATA_VALUE:
            raise InvalidInput(f"metadata.{key} is longer than {MAX_ENTRY_METADATA_VALUE} characters.",
                               code="invalid_metadata")
    for value, allowed, field in ((privacy_level, MemoryEntry.Privacy.values, "privacyLevel"),
                                  (trust_level, MemoryEntry.Trust.values, "trustLevel")):
        if value is not None and value not in allowed:
            raise InvalidInput(f"{field} must be one of {', '.join(allowed)}.", code="invalid_input")
    return {"content": content, "tags": validation.clean_tags(tags or [])[:MAX_ENTRY_TAGS], "metadata": metadata,
            "privacy_level": privacy_level or MemoryEntry.Privacy.PRIVATE,
            "trust_level": trust_level or MemoryEntry.Trust.UNTRUSTED}


def _imported_entry(memory: Element, entry: object) -> MemoryEntry:
    if not isinstance(entry, dict):
        raise InvalidInput("Each entry must be an object.", code="invalid_package")

    def when(key: str) -> datetime | None:
        value = entry.get(key)
        return None if value in (None, "") else datetime_parse(value, field=f"Entry {key}", code="invalid_package")

    fields = _entry_clean(content=entry.get("content"), tags=entry.get("tags"), metadata=entry.get("metadata"),
                          privacy_level=entry.get("privacyLevel"), trust_level=entry.get("trustLevel"))
    return MemoryEntry(memory=memory, entry_id=str(entry.get("id") or _entry_id())[:40],
                       timestamp=when("timestamp") or timezone.now(), expires_at=when("expiresAt"),
                       source=str(entry.get("source") or "")[:100], **fields)


@transaction.atomic
def element_import(
    *, caller: Caller, package: dict[str, Any], overwrite: bool = False, action: str = ElementRevision.Action.IMPORT,
    owner: User | None = None,
) -> tuple[Element, bool]:
    """Create (or with `overwrite`, replace in place) an element from an export package.
    Returns (element, created). A replaced element keeps its id, activations and history."""
    owner = owner or caller.user
    _check_owner(caller, owner.pk)
    read = _package_read(package)
    element_type, name, params = read.element_type, read.name, read.params
    format_version, entries = read.format_version, read.entries
    existing = Element.objects.select_for_update().filter(owner=owner, element_type=element_type, name=name).first()
    if existing is not None and not overwrite:
        raise ElementExists(f"A {element_type.value} named '{name}' already exists. Pass overwrite: true to replace "
                            "it (its current version is kept as a revision).")
    if existing is None:
        element = element_create(caller=caller, element_type=element_type, name=name, params=params, action=action,
                                 unique_id=read.unique_id, created=read.created, format_version=format_version,
                                 owner=owner, entries=entries)
    else:
        element = existing
        common, metadata = split_params(element_type, params)
        common.setdefault("author", _default_author(owner))
        for field, value in clean_fields(element_type, common, metadata).items():
            setattr(element, field, value)
        element.format_version = format_version
        element.modified = timezone.now()
        element.save()
        element.entries.all().delete()
        _entries_import(element, entries)
        _revision(caller=caller, element=element, action=action)
        _audit(caller, action, element, replaced=True)
        _emit("element.changed", element, fields=sorted(params))
        _portfolio_changed(element.owner_id)
    return element, existing is None


def _entries_import(element: Element, entries: list[Any]) -> None:
    """Write a memory's entries from its package (another type has none)."""
    if element.element_type == ElementType.MEMORY:
        MemoryEntry.objects.bulk_create([_imported_entry(element, entry) for entry in entries])


@dataclass(frozen=True)
class PackageRead:
    """An export package's fields, checked as far as they can be without the database."""

    element_type: ElementType
    name: str
    params: dict[str, Any]
    format_version: str
    entries: list[Any]
    unique_id: str | None
    created: datetime | None


def _package_read(package: dict[str, Any]) -> PackageRead:
    element_type = element_type_parse(package["element_type"])
    name = validation.clean_name(package["element_name"], element_type=element_type)
    params = {key: package[key] for key in ("description", "instructions", "content", "tags", "triggers",
                                            "category", "author", "version", "gatekeeper") if key in package}
    params["metadata"] = package.get("metadata") or {}
    entries = package.get("entries") or []
    if element_type is ElementType.MEMORY and (not isinstance(entries, list) or len(entries) > MAX_MEMORY_ENTRIES):
        raise InvalidInput(f"entries must be a list of at most {MAX_MEMORY_ENTRIES}.", code="invalid_package")
    created = package.get("created")
    return PackageRead(
        element_type=element_type, name=name, params=params, entries=entries,
        format_version=package.get("format_version") if package.get("format_version") in ("v1", "v2") else "v2",
        unique_id=str(package.get("unique_id") or "") or None,
        created=datetime_parse(created, field="created", code="invalid_package") if created else None)


IMPORTED, REPLACED, SKIPPED, REFUSED = "created", "updated", "skipped", "refused"
# How many names one lookup of a batch's existing elements asks for (SQLite nests expressions at
# most 1,000 deep).
LOOKUP_SLICE = 250


def _import_one(caller: Caller, package: dict[str, Any], *, overwrite: bool) -> tuple[str, str]:
    """Import one package in a savepoint of its own: (outcome, why it was refused)."""
    try:
        with transaction.atomic():
            _, created = element_import(caller=caller, package=package, overwrite=overwrite)
    except ElementExists:
        return SKIPPED, ""
    except DomainError as exc:
        return REFUSED, exc.message
    return (IMPORTED if created else REPLACED), ""


@transaction.atomic
def elements_import(*, caller: Caller, packages: list[dict[str, Any]], overwrite: bool = False,
                    dry_run: bool = False) -> list[tuple[str, str]]:
    """Import a batch of export packages as the caller's elements, in one transaction: for each
    package in order, (outcome, why it was refused) with outcome created, updated, skipped or
    refused, as element_import would decide it.

    The new elements are written together: one statement each for the elements, their revisions,
    their audit events and their memories' entries, and one question whether any trigger listens.
    A package that names an element already there (or one an earlier package of the batch
    names), and every package of a batch that meets a concurrent write of the same name, goes
    through element_import one at a time, each in a savepoint: a refused package takes nothing
    else with it. `dry_run` checks everything and writes nothing."""
    owner = caller.user
    author = _default_author(owner)
    outcomes: list[tuple[str, str]] = [("", "")] * len(packages)
    fresh: dict[tuple[str, str], tuple[int, Element, list[MemoryEntry]]] = {}
    one_at_a_time: list[int] = []
    for index, package in enumerate(packages):
        try:
            read = _package_read(package)
            element = _element_new(owner=owner, element_type=read.element_type, name=read.name, params=read.params,
                                   author=author, unique_id=read.unique_id, created=read.created,
                                   format_version=read.format_version)
            # Made before anything is written, so a bad entry refuses its package alone; each takes
            # its memory's id when the memory is inserted.
            entries = ([_imported_entry(element, entry) for entry in read.entries]
                       if read.element_type is ElementType.MEMORY else [])
        except DomainError as exc:
            outcomes[index] = (REFUSED, exc.message)
            continue
        key = (element.element_type, element.name)
        if key in fresh:
            one_at_a_time.append(index)
        else:
            fresh[key] = (index, element, entries)
    if fresh:
        # One (owner, type, name) triple per branch, each a lookup in the unique index. A list of
        # names leads PostgreSQL to the names' trigram index instead, whose cost grows with the
        # table: an import slowed from 1,500 to 270 files a second over 10,000 files.
        # In slices: SQLite bounds how deep an expression nests, and each triple is one level.
        keys, present = list(fresh), set()
        for start in range(0, len(keys), LOOKUP_SLICE):
            wanted = reduce(operator.or_, (Q(owner=owner, element_type=t, name=n)
                                           for t, n in keys[start:start + LOOKUP_SLICE]))
            present |= set(Element.objects.select_for_update().filter(wanted).values_list("element_type", "name"))
        for key in present & fresh.keys():
            one_at_a_time.append(fresh.pop(key)[0])
    if fresh:
        try:
            with transaction.atomic():
                _elements_insert(caller, list(fresh.values()))
            for index, _, _ in fresh.values():
                outcomes[index] = (IMPORTED, "")
        except IntegrityError:  # a concurrent write of one of the names: each goes on its own
            one_at_a_time.extend(index for index, _, _ in fresh.values())
    for index in sorted(one_at_a_time):
        outcomes[index] = _import_one(caller, packages[index], overwrite=overwrite)
    if dry_run:
        transaction.set_rollback(True)
    return outcomes


def _elements_insert(caller: Caller, fresh: list[tuple[int, Element, list[MemoryEntry]]]) -> None:
    """Insert new elements with their entries, revisions and audit events, a statement per table."""
    elements = Element.objects.bulk_create([element for _, element, _ in fresh])
    entries = {element.pk: batch for element, (_, _, batch) in zip(elements, fresh, strict=True)
               if element.element_type == ElementType.MEMORY}
    MemoryEntry.objects.bulk_create([entry for batch in entries.values() for entry in batch])
    action = ElementRevision.Action.IMPORT
    ElementRevision.objects.bulk_create([_revision_new(caller=caller, element=element, action=action,
                                                       entries=entries.get(element.pk)) for element in elements])
    audits_record(caller=caller, action=f"element.{action}", targets=[_audit_target(element) for element in elements])
    events_emit(owner_id=caller.user.pk, name="element.created", data=[_event_data(element) for element in elements])
    _portfolio_changed(caller.user.pk)


def _entry_id() -> str:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return f"mem_{int(time.time() * 1000)}_{''.join(secrets.choice(alphabet) for _ in range(9))}"


@transaction.atomic
def memory_entry_add(
    *, caller: Caller, memory: Element, content: object, tags: object = None, metadata: object = None,
    privacy_level: str | None = None, expires_at: datetime | None = None, source: str = "",
) -> MemoryEntry:
    """Append an entry to a memory. Past the entry cap or the size cap, the oldest entries go."""
    _check_owner(caller, memory.owner_id)
    fields = _entry_clean(content=content, tags=tags, metadata=metadata, privacy_level=privacy_level)
    # Lock the memory row: two concurrent adds must not both evict, or both skip eviction.
    memory = element_lock(memory)
    entry = MemoryEntry.objects.create(memory=memory, entry_id=_entry_id(), expires_at=expires_at,
                                       source=source[:100], **fields)
    _evict_oldest(memory)
    Element.objects.filter(pk=memory.pk).update(modified=timezone.now())
    _audit(caller, "add_entry", memory, entry=entry.entry_id)
    _portfolio_changed(memory.owner_id)
    event_emit(owner_id=memory.owner_id, name="memory.entry_added", data={
        "memory": memory.name, "entryId": entry.entry_id, "content": entry.content, "tags": list(entry.tags or []),
        "source": entry.source})
    return entry


def _evict_oldest(memory: Element) -> None:
    entries = list(MemoryEntry.objects.filter(memory=memory).order_by("-timestamp", "-id").values_list("id", "content"))
    keep, total = 0, 0
    for keep, (_, content) in enumerate(entries, start=1):
        total += len(content)
        if keep > MAX_MEMORY_ENTRIES or total > MAX_MEMORY_TOTAL:
            keep -= 1
            break
    else:
        return
    MemoryEntry.objects.filter(pk__in=[pk for pk, _ in entries[keep:]]).delete()


@transaction.atomic
def memory_clear(*, caller: Caller, memory: Element) -> int:
    _check_owner(caller, memory.owner_id)
    # Locked as memory_entry_add locks it, so an entry added meanwhile is either in the backup or kept.
    memory = element_lock(memory)
    _revision(caller=caller, element=memory, action=ElementRevision.Action.CLEAR)
    cleared, _ = MemoryEntry.objects.filter(memory=memory).delete()
    Element.objects.filter(pk=memory.pk).update(modified=timezone.now())
    _audit(caller, "clear", memory, entries=cleared)
    _portfolio_changed(memory.owner_id)
    return cleared


def _session(caller: Caller) -> McpSession:
    if caller.session is None:
        raise InvalidInput("Activation and confirmations belong to an MCP session; this call has none.",
                           code="no_session")
    return caller.session


@transaction.atomic
def activation_set(*, caller: Caller, elements: list[Element], via: Element | None = None) -> list[Activation]:
    """Make elements active in the caller's MCP session (already active ones stay as they are)."""
    session = _session(caller)
    for element in elements:
        if element.owner_id != caller.user.pk:
            raise Forbidden("That element is not yours.")
    session.known_without_activations = False
    Activation.objects.bulk_create(
        [Activation(session=session, element=e, via=via) for e in elements], ignore_conflicts=True
    )
    return list(Activation.objects.filter(session=session, element__in=elements))


@transaction.atomic
def activation_clear(*, caller: Caller, element: Element) -> int:
    """Deactivate an element, and what its activation brought in if it is an ensemble."""
    session = _session(caller)
    removed, _ = Activation.objects.filter(session=session, element=element).delete()
    brought, _ = Activation.objects.filter(session=session, via=element).delete()
    return removed + brought


def _session_locked(caller: Caller) -> McpSession:
    """The caller's MCP session row, locked: confirmation changes of one session happen one at a time."""
    session = _session(caller)
    McpSession.objects.select_for_update().filter(pk=session.pk).first()
    return session


@transaction.atomic
def confirmation_request(*, caller: Caller, operation: str, element_type: str, level: str) -> None:
    """Note that a call was refused for want of this confirmation, so confirm_operation grants it."""
    session = _session_locked(caller)
    Confirmation.objects.filter(session=session, operation=operation, pending=True).delete()
    Confirmation.objects.create(session=session, operation=operation, element_type=element_type, level=level,
                                pending=True)


@transaction.atomic
def confirmation_grant(*, caller: Caller, operation: str, element_type: str, level: str) -> Confirmation:
    """Record a confirmation. A pending request for the same operation decides its level, so a
    confirmation given after a refusal always fits the call that was refused."""
    session = _session_locked(caller)
    pending = Confirmation.objects.filter(session=session, operation=operation, pending=True).first()
    if pending is not None:
        level = pending.level if pending.level == Confirmation.Level.SINGLE_USE else level
        pending.delete()
    confirmation = Confirmation.objects.create(session=session, operation=operation, element_type=element_type,
                                               level=level)
    audit_record(caller=caller, action="gatekeeper.confirm", target=operation,
                 detail={"element_type": element_type or "all", "level": level})
    return confirmation


def confirmation_consume(*, confirmation_id: int) -> bool:
    """Spend a single-use confirmation. False when a concurrent call spent it first: the delete is
    the claim (the database lets only one delete of the row count), so one confirmation lets
    exactly one call through however many race for it."""
    deleted, _ = Confirmation.objects.filter(pk=confirmation_id, level=Confirmation.Level.SINGLE_USE).delete()
    return deleted > 0


def _setting_value(key: str, value: object) -> Any:
    if key not in SETTINGS:
        raise InvalidInput(f"Unknown setting '{key}'. Settings: {', '.join(SETTINGS)}.", code="unknown_setting")
    kind = SETTINGS[key][0]
    if kind is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, kind):
        raise InvalidInput(f"{key} takes a {kind.__name__}.", code="invalid_setting")
    return value


def settings_set(*, caller: Caller, values: dict[str, Any]) -> dict[str, Any]:
    """Change some of the caller's settings; unknown keys and wrong types change nothing."""
    checked = {key: _setting_value(key, value) for key, value in values.items()}
    with transaction.atomic():
        row, _ = UserSettings.objects.select_for_update().get_or_create(user=caller.user)
        row.values = {**row.values, **checked}
        row.save(update_fields=["values"])
    audit_record(caller=caller, action="settings.update", target="element settings", detail={"keys": sorted(checked)})
    return user_settings(user=caller.user)


def settings_reset(*, caller: Caller, keys: list[str] | None = None) -> dict[str, Any]:
    """Back to the defaults: the named settings, or all of them."""
    unknown = [key for key in keys or [] if key not in SETTINGS]
    if unknown:
        raise InvalidInput(f"Unknown setting(s) {', '.join(unknown)}. Settings: {', '.join(SETTINGS)}.",
                           code="unknown_setting")
    with transaction.atomic():
        row, _ = UserSettings.objects.select_for_update().get_or_create(user=caller.user)
        row.values = {} if keys is None else {k: v for k, v in row.values.items() if k not in keys}
        row.save(update_fields=["values"])
    audit_record(caller=caller, action="settings.reset", target="element settings", detail={"keys": keys or "all"})
    return user_settings(user=caller.user)
