"""Reads for elements, always scoped to the caller's own elements."""

from __future__ import annotations

import hashlib
import json
import operator
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from functools import reduce
from pathlib import PurePosixPath
from typing import Any

from django.core import signing
from django.db import connection
from django.db.models import (
    BooleanField,
    CharField,
    Exists,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Value,
)
from django.db.models.expressions import RawSQL

from accounts.models import AuditEvent, McpSession, ToolCall
from accounts.selectors import audit_category, audit_events, tool_calls
from core.caller import Caller
from core.errors import InvalidInput, NotFound
from core.versions import row_version
from elements.gatekeeper import Held, Policy, policy_from, policy_from_tools
from elements.models import Activation, Confirmation, Element, ElementCount, ElementRevision, MemoryEntry, UserSettings
from elements.types import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, ElementType

SORT_FIELDS = {"name": "name", "created": "created", "modified": "modified", "version": "version_key"}
GROUP_BY_FIELDS = ("author", "category", "status", "tags", "version")
# Types whose active elements' gatekeeper policies count (memories and templates never do).
POLICY_TYPES = (ElementType.PERSONA, ElementType.SKILL, ElementType.AGENT, ElementType.ENSEMBLE)


def element_get(*, caller: Caller, element_type: ElementType, name: str) -> Element:
    element = Element.objects.filter(owner=caller.user, element_type=element_type, name=name).first()
    if element is None:
        raise NotFound(f"{element_type.value.capitalize()} '{name}' not found. Use list_elements to see available "
                       f"{element_type.plural}.", code="element_not_found")
    return element


def element_version(element: Element) -> str:
    """The element's version for ETag / If-Match: it changes with every write."""
    return row_version(element.pk, element.modified)


def element_find(*, caller: Caller, name: str, element_type: ElementType | None = None) -> Element:
    """The caller's element named `name`; the type may be left out when the name is unique."""
    elements = Element.objects.filter(owner=caller.user, name=name)
    if element_type is not None:
        elements = elements.filter(element_type=element_type)
    found = list(elements[:2])
    if not found:
        raise NotFound(f"No element named '{name}'.", code="element_not_found")
    if len(found) > 1:
        raise InvalidInput(f"Several elements are named '{name}': pass element_type.", code="ambiguous_name")
    return found[0]


def elements_recent(*, caller: Caller, limit: int) -> list[Element]:
    """The caller's most recently changed elements."""
    return list(Element.objects.filter(owner=caller.user).order_by("-modified", "pk")[:limit])


def elements_all(*, caller: Caller) -> QuerySet[Element]:
    """All of the caller's elements, by type and name (for export)."""
    return Element.objects.filter(owner=caller.user).order_by("element_type", "name")


def memory_entries(*, memory: Element) -> list[MemoryEntry]:
    return list(memory.entries.order_by("timestamp", "id"))


def revisions(*, caller: Caller, element_type: ElementType, name: str) -> QuerySet[ElementRevision]:
    return ElementRevision.objects.filter(owner=caller.user, element_type=element_type, name=name)


def element_sessions(*, caller: Caller, element: Element) -> list[Any]:
    """The caller's open MCP sessions the element is active in."""
    from accounts.models import McpSession

    return list(McpSession.objects.filter(user=caller.user, closed_at__isnull=True, activations__element=element)
                .distinct().order_by("-last_seen_at"))


@dataclass(frozen=True)
class ListQuery:
    element_type: ElementType | None = None
    name_contains: str = ""
    description_contains: str = ""
    tags_all: tuple[str, ...] = ()
    tags_any: tuple[str, ...] = ()
    author: str = ""
    category: str = ""
    status: str = "all"
    created_after: datetime | None = None
    created_before: datetime | None = None
    sort_by: str = "name"
    sort_order: str = "asc"
    page: int = 1
    page_size: int = DEFAULT_PAGE_SIZE
    # A page read by keyset (list_query_resume): how many rows come before it, and the sort value
    # and id of the last of them.
    after: tuple[int, Any, int] | None = None

    @property
    def start(self) -> int:
        """How many rows of the listing come before this page."""
        return self.after[0] if self.after else (self.page - 1) * self.page_size

    @property
    def listing_key(self) -> str:
        """What a cursor belongs to: the type, the filters and the order, not the page size."""
        key = json.dumps([self.element_type.value if self.element_type else None, self.applied, self.sort_by,
                          self.sort_order], sort_keys=True, default=str)
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def applied(self) -> dict[str, Any]:
        """The filters in use, by the names clients send them under."""
        values = {"nameContains": self.name_contains, "descriptionContains": self.description_contains,
                  "tags": list(self.tags_all), "tagsAny": list(self.tags_any), "author": self.author,
                  "category": self.category, "status": self.status if self.status != "all" else "",
                  "createdAfter": self.created_after.isoformat() if self.created_after else "",
                  "createdBefore": self.created_before.isoformat() if self.created_before else ""}
        return {key: value for key, value in values.items() if value}

    def __post_init__(self) -> None:
        if self.sort_by not in SORT_FIELDS:
            raise InvalidInput(f"sortBy must be one of {', '.join(SORT_FIELDS)}.", code="invalid_sort")
        if self.sort_order not in ("asc", "desc"):
            raise InvalidInput("sortOrder must be asc or desc.", code="invalid_sort")
        if self.status not in ("active", "inactive", "all"):
            raise InvalidInput("status must be active, inactive or all.", code="invalid_filter")
        if self.page < 1 or not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise InvalidInput(f"page starts at 1 and pageSize is 1 to {MAX_PAGE_SIZE}.", code="invalid_pagination")


def page_window(*, page: int | None, page_size: int | None, limit: int | None, offset: int | None,
                cursor: str | None = None) -> tuple[int, int]:
    """(page, page size) from page/pageSize or limit/offset; page and offset together conflict, and
    so does either with a cursor, which names its page itself."""
    if page is not None and offset is not None:
        raise InvalidInput("Conflicting pagination: cannot use both 'page' and 'offset'. Use page/pageSize or "
                           "limit/offset.", code="invalid_pagination")
    if cursor is not None and (page is not None or offset is not None):
        raise InvalidInput("Conflicting pagination: a cursor names its own page; send it without 'page' or "
                           "'offset'.", code="invalid_pagination")
    size = page_size or limit or DEFAULT_PAGE_SIZE
    if offset is not None:
        if offset % size:
            raise InvalidInput(f"offset must be a multiple of the page size ({size}).", code="invalid_pagination")
        page = offset // size + 1
    return page or 1, size


def pagination(page: int, page_size: int, total: int) -> dict[str, Any]:
    pages = max(1, -(-total // page_size))
    return {"page": page, "pageSize": page_size, "totalItems": total, "totalPages": pages,
            "hasNextPage": page < pages, "hasPrevPage": page > 1}


CURSOR_SALT = "elements.list-cursor"
# Under this many characters: a cursor holds its last row's sort value, at most a 100-character
# name, about 680 characters when every one is an emoji.
MAX_CURSOR_LENGTH = 1_000
CURSOR_PATTERN = r"^[A-Za-z0-9_.-]+$"  # base64url and the signature's separator: nothing to escape in a URL
BAD_CURSOR = ("cursor is not one this server gave for this listing: send pagination.nextCursor back as it came, "
              "with the same element type, filters and sort, or list from page 1 without it.")


class _Utf8Json:
    """JSON in UTF-8, not escaped: an emoji of a name takes 4 bytes of a cursor, not 12."""

    def dumps(self, obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data.decode())


def _cursor_signer() -> signing.Signer:
    return signing.Signer(salt=CURSOR_SALT, sep=".")


def page_cursor(query: ListQuery, last: Element, start: int) -> str:
    """The cursor of the page that starts after `last`, the listing's row number `start`."""
    value = getattr(last, SORT_FIELDS[query.sort_by])
    if isinstance(value, datetime):
        value = value.isoformat()
    return _cursor_signer().sign_object([query.listing_key, start, value, last.pk], serializer=_Utf8Json)


def list_query_resume(query: ListQuery, cursor: str) -> ListQuery:
    """The query for the page a cursor names. Signed, so a cursor is read only as this server wrote
    it; it must come back with the listing it was given for, and may change the page size."""
    if len(cursor) >= MAX_CURSOR_LENGTH:
        raise InvalidInput(BAD_CURSOR, code="invalid_cursor")
    try:
        key, start, value, pk = _cursor_signer().unsign_object(cursor, serializer=_Utf8Json)
        if query.sort_by in ("created", "modified"):
            value = datetime.fromisoformat(value)
    except (signing.BadSignature, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise InvalidInput(BAD_CURSOR, code="invalid_cursor") from exc
    if key != query.listing_key:
        raise InvalidInput(BAD_CURSOR, code="invalid_cursor")
    return replace(query, page=start // query.page_size + 1, after=(start, value, pk))


def _json_array_has(column: str, values: tuple[str, ...], *, every: bool) -> Q:
    """Elements whose JSON list `column` holds all (or any) of `values`, on either database."""
    if connection.vendor == "postgresql":
        return Q(**{f"{column}__contains": list(values)}) if every else Q(**{f"{column}__has_any_keys": list(values)})
    clauses = [Q(RawSQL(f"EXISTS (SELECT 1 FROM json_each(elements_element.{column}) WHERE value = %s)", (v,),
                        output_field=BooleanField())) for v in values]
    return reduce(operator.and_ if every else operator.or_, clauses)


def _filtered(caller: Caller, query: ListQuery) -> QuerySet[Element]:
    elements = Element.objects.filter(owner=caller.user)
    if query.element_type is not None:
        elements = elements.filter(element_type=query.element_type)
    if query.name_contains:
        elements = elements.filter(name__icontains=query.name_contains)
    if query.description_contains:
        elements = elements.filter(description__icontains=query.description_contains)
    if query.tags_all:
        elements = elements.filter(_json_array_has("tags", query.tags_all, every=True))
    if query.tags_any:
        elements = elements.filter(_json_array_has("tags", query.tags_any, every=False))
    if query.author:
        elements = elements.filter(author__iexact=query.author)
    if query.category:
        elements = elements.filter(category__iexact=query.category)
    if query.created_after:
        elements = elements.filter(created__gte=query.created_after)
    if query.created_before:
        elements = elements.filter(created__lt=query.created_before)
    if query.status != "all":
        active = Exists(Activation.objects.filter(session=caller.session, element=OuterRef("pk")))
        elements = elements.filter(active if query.status == "active" else ~active)
    return elements


DEEP_PAGE = 1000  # offsets from which a page is read in two steps
LIST_COLUMNS = ("element_type", "name", "description", "version", "version_key", "tags", "created", "author",
                "category", "modified")


def element_page(*, caller: Caller, query: ListQuery) -> tuple[list[Element], int]:
    """One page of elements (list columns only) and the exact total."""
    return _page(caller, query, query.page_size)


def element_list(*, caller: Caller, query: ListQuery) -> tuple[list[Element], dict[str, Any]]:
    """One page of a listing and its pagination: hasNextPage from the row after the page, and then
    nextCursor, which reads the next page by keyset however deep it is."""
    rows, total = _page(caller, query, query.page_size + 1)
    items, more = rows[:query.page_size], len(rows) > query.page_size
    data = pagination(query.page, query.page_size, total)
    data["hasNextPage"] = more
    data["hasPrevPage"] = query.start > 0
    if more:
        data["nextCursor"] = page_cursor(query, items[-1], query.start + len(items))
    return items, data


def _page(caller: Caller, query: ListQuery, limit: int) -> tuple[list[Element], int]:
    """Up to `limit` rows from the query's start, and the exact number of elements it matches.
    Without filters that is the owner's count the database keeps (elements.counts), one raw
    statement, which on PostgreSQL the page's own statement reads (a round trip fewer; on SQLite
    the ORM's building of that costs more than the count); with filters, COUNT(*) (a separate count
    beats COUNT(*) OVER (), whose window makes the database read every row)."""
    elements = _filtered(caller, query)
    if query.applied:
        return _rows(query, elements, limit), elements.count()
    sql = f"SELECT COALESCE(SUM(count), 0) FROM {ElementCount._meta.db_table} WHERE owner_id = %s"
    params: list[Any] = [caller.user.pk]
    if query.element_type is not None:
        sql += " AND element_type = %s"
        params.append(query.element_type.value)
    if connection.vendor == "postgresql":
        elements = elements.annotate(kept_count=RawSQL(sql, params, output_field=IntegerField()))
    rows = _rows(query, elements, limit)
    if rows and hasattr(rows[0], "kept_count"):
        return rows, rows[0].kept_count
    # SQLite, past the last page, or a deep page read by id: the count on its own.
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return rows, int(cursor.fetchone()[0])


def _rows(query: ListQuery, elements: QuerySet[Element], limit: int) -> list[Element]:
    column = SORT_FIELDS[query.sort_by]
    ascending = query.sort_order == "asc"
    order = [column if ascending else f"-{column}"]
    unique = query.sort_by == "name" and query.element_type is not None  # names are unique per type
    if not unique:
        # Anything else needs a tie-breaker, in the same direction, so that one index (owner, type,
        # column, id) gives the order either way (migration 0011).
        order.append("pk" if ascending else "-pk")
    if query.after is not None:
        # Keyset: the rows after the cursor's, found in that index however deep the page is.
        _, value, pk = query.after
        beyond, reached = ("gt", "gte") if ascending else ("lt", "lte")
        if unique:
            elements = elements.filter(**{f"{column}__{beyond}": value})
        else:
            elements = elements.filter(**{f"{column}__{reached}": value}).filter(
                Q(**{f"{column}__{beyond}": value}) | Q(**{f"pk__{beyond}": pk}))
        return list(elements.only(*LIST_COLUMNS).order_by(*order)[:limit])
    start = (query.page - 1) * query.page_size
    window = slice(start, start + limit)
    if start < DEEP_PAGE:
        return list(elements.only(*LIST_COLUMNS).order_by(*order)[window])
    # Deep pages by number skip their offset in the index alone, then read just the rows they show.
    ids = list(elements.order_by(*order).values_list("pk", flat=True)[window])
    found = Element.objects.only(*LIST_COLUMNS).in_bulk(ids)
    return [found[pk] for pk in ids]


def element_aggregate(*, caller: Caller, query: ListQuery, group_by: str | None) -> dict[str, Any]:
    elements = _filtered(caller, query)
    result: dict[str, Any] = {"count": elements.count(),
                              "element_type": query.element_type.value if query.element_type else None}
    if group_by is None:
        return result
    if group_by not in GROUP_BY_FIELDS:
        raise InvalidInput(f"Invalid group_by field '{group_by!s:.50}'. Allowed fields: "
                           f"{', '.join(GROUP_BY_FIELDS)}",
                           code="invalid_group_by")
    groups: Counter[str] = Counter()
    if group_by == "status":
        active = set(Activation.objects.filter(session=caller.session).values_list("element_id", flat=True))
        for pk in elements.values_list("pk", flat=True):
            groups["active" if pk in active else "inactive"] += 1
    elif group_by == "tags":
        for tags in elements.values_list("tags", flat=True):
            groups.update(set(tags) or {"unknown"})
    else:
        groups.update(value or "unknown" for value in elements.values_list(group_by, flat=True))
    result["groups"] = dict(sorted(groups.items()))
    return result


def _words(text: str) -> list[str]:
    """Search terms: the words of `text`, lowercased, split on anything but letters and digits."""
    return [w for w in re.split(r"[\W_]+", text.lower()) if w]


def _has_terms(text: str, words: list[str]) -> bool:
    """The search contract: every term starts a word of the text (the text split as _words splits
    it), found by a regular expression rather than by splitting the whole text for each field."""
    lowered = text.lower()
    return all(re.search(r"(?:^|[\W_])" + re.escape(w), lowered) for w in words)


def _matched_in(element: Element, words: list[str], entry_hit: bool) -> list[str]:
    fields = {"name": element.name, "description": element.description,
              "content": f"{element.instructions}\n{element.content}"}
    found = [label for label, text in fields.items() if _has_terms(text, words)]
    if entry_hit:
        found.append("entries")
    return found


# PostgreSQL's stored, indexed tsvector of each element's text (migration 0002).
ELEMENT_VECTOR = "elements_element.search_vector"


def _tsquery(words: list[str]) -> str:
    return " & ".join(f"{w}:*" for w in words)


def _fts5_query(words: list[str]) -> str:
    return " AND ".join(f'"{w}"*' for w in words)


# A WHERE clause and its parameters.
Visible = tuple[str, list[Any]]
# What the adapters show of a search's hits (the MCP tools, the REST API, the console, the atrium
# actions) and what tells where each matched: the sort carries no more.
SEARCH_COLUMNS = ("element_type", "name", "description", "version", "tags", "author", "instructions", "content")


def element_search(
    *, caller: Caller, text: str, element_type: ElementType | None = None, page: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE, collection: bool = False,
) -> tuple[list[tuple[Element, list[str]]], int]:
    """The caller's elements (or, with `collection`, everyone's published ones) with a word
    starting with every term of `text` in their name, description, instructions, content or
    memory entries. Ordered by relevance: name matches first, then (PostgreSQL) full-text rank and
    name similarity, then name."""
    words = _words(text)
    if not words:
        raise InvalidInput("Search query is required", code="query_required")
    visible: Visible = ("published = %s", [True]) if collection else ("owner_id = %s", [caller.user.pk])
    # Only memories have entries: a search of another type skips them.
    with_entries = _entry_hits(visible, words) if element_type in (None, ElementType.MEMORY) else set()
    items, total = _search_page(visible, element_type, words, with_entries, (page - 1) * page_size, page_size)
    return [(e, _matched_in(e, words, e.pk in with_entries)) for e in items], total


def _entry_hits(visible: Visible, words: list[str]) -> set[int]:
    """The visible memories with an entry that has every term. Raw SQL, on its own: the memories
    by id, not a join (joined, SQLite walks all of the owner's elements looking for entries of
    each: 4.6 ms at 100,000 skills and no memory at all)."""
    if connection.vendor == "postgresql":
        match, term = "me.search_vector @@ to_tsquery('simple', %s)", _tsquery(words)
    else:
        match, term = "me.id IN (SELECT rowid FROM entry_document WHERE entry_document MATCH %s)", _fts5_query(words)
    where, params = visible
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT me.memory_id FROM {MemoryEntry._meta.db_table} me WHERE {match} AND "
                       f"me.memory_id IN (SELECT id FROM {Element._meta.db_table} WHERE {where} AND element_type = %s)",
                       [term, *params, ElementType.MEMORY.value])
        return {row[0] for row in cursor.fetchall()}


def _search_page(visible: Visible, element_type: ElementType | None, words: list[str], with_entries: set[int],
                 start: int, page_size: int) -> tuple[list[Element], int]:
    """One page of the matches, in order, and their total. Raw SQL: the ORM's building of these
    queries cost more than the databases' answering them. Name matches (every term within the
    name, as the ORM's icontains compares) come first; then, on PostgreSQL, full-text rank and name
    similarity; then name."""
    postgresql = connection.vendor == "postgresql"
    where, where_params = [visible[0]], list(visible[1])
    if element_type is not None:
        where.append("element_type = %s")
        where_params.append(element_type.value)
    if postgresql:
        match, term = f"{ELEMENT_VECTOR} @@ to_tsquery('simple', %s)", _tsquery(words)
        listed, ids = "id = ANY(%s)", sorted(with_entries)
        in_name = "UPPER(name::text) LIKE UPPER(%s)"
    else:
        match, term = "id IN (SELECT rowid FROM element_document WHERE element_document MATCH %s)", _fts5_query(words)
        listed, ids = "id IN (SELECT value FROM json_each(%s))", json.dumps(sorted(with_entries))
        in_name = "name LIKE %s"  # case-insensitive for ASCII, as icontains is on SQLite
    match_params: list[Any] = [term]
    if with_entries:
        match = f"({match} OR {listed})"
        match_params.append(ids)
    condition, params = " AND ".join([*where, match]), [*where_params, *match_params]
    # Words are letters and digits only (_words): nothing in them for LIKE to escape.
    name_hit = " AND ".join(in_name for _ in words)
    hit_params = [f"%{w}%" for w in words]
    table = Element._meta.db_table
    columns = ", ".join(f"e.{column}" for column in ("id", *SEARCH_COLUMNS))
    with connection.cursor() as cursor:
        if postgresql:
            # Ranking reads every match anyway, so the total comes with it (a round trip fewer),
            # and the sort carries ids rather than whole rows; the page's rows are read by id after.
            cursor.execute(
                f"SELECT id, COUNT(*) OVER () FROM {table} WHERE {condition} ORDER BY ({name_hit}) DESC, "
                f"ts_rank({ELEMENT_VECTOR}, to_tsquery('simple', %s)) + similarity(name, %s) DESC, name, id "
                "LIMIT %s OFFSET %s", [*params, *hit_params, _tsquery(words), " ".join(words), page_size, start])
            ranks = cursor.fetchall()
            if ranks:
                rows = {e.pk: e for e in Element.objects.raw(f"SELECT {columns} FROM {table} e WHERE e.id = ANY(%s)",
                                                              [[pk for pk, _ in ranks]])}
                return [rows[pk] for pk, _ in ranks], ranks[0][1]
        # On SQLite a count beats COUNT(*) OVER ().
        cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE {condition}", params)
        total = int(cursor.fetchone()[0])
    if postgresql or total <= start:
        return [], total
    # The page is sorted on ids and names alone, and its rows read after: sorting the whole rows
    # (content included) of 1,000 matches took half again as long. CROSS JOIN keeps SQLite to the
    # matches first: asked for ids and names alone, it would scan the owner's whole name index.
    matches = "SELECT rowid AS id FROM element_document WHERE element_document MATCH %s"
    if with_entries:
        matches += " UNION SELECT value FROM json_each(%s)"
    page = (f"SELECT e.id AS pid, e.name AS pname, ({name_hit}) AS hit FROM ({matches}) m CROSS JOIN {table} e "
            f"ON e.id = m.id WHERE {' AND '.join(where)} ORDER BY hit DESC, pname, pid LIMIT %s OFFSET %s")
    return list(Element.objects.raw(
        f"SELECT {columns} FROM ({page}) p CROSS JOIN {table} e ON e.id = p.pid ORDER BY p.hit DESC, p.pname, p.pid",
        [*hit_params, *match_params, *where_params, page_size, start])), total


def collection_page(*, element_type: ElementType | None, page: int, page_size: int) -> tuple[list[Element], int]:
    """Published elements, by name: what the collection holds."""
    elements = Element.objects.filter(published=True)
    if element_type is not None:
        elements = elements.filter(element_type=element_type)
    start = (page - 1) * page_size
    return list(elements.only(*LIST_COLUMNS).order_by("name", "pk")[start:start + page_size]), elements.count()


def active_elements(*, caller: Caller, element_type: ElementType | None = None) -> list[Element]:
    if caller.session is None:
        return []
    elements = Element.objects.filter(activations__session=caller.session, owner=caller.user)
    if element_type is not None:
        elements = elements.filter(element_type=element_type)
    return list(elements.order_by("element_type", "name").distinct())


def session_policies(*, caller: Caller) -> list[Policy]:
    """The gatekeeper policies of the session's active personas, skills, agents and ensembles. An
    agent without a gatekeeper section of its own has its `tools` as its policy."""
    if caller.session is None or caller.session.known_without_activations:
        return []
    if connection.vendor == "postgresql":
        tools, is_object = "e.metadata -> 'tools'", "jsonb_typeof(e.metadata -> 'tools') = 'object'"
    else:
        tools, is_object = "json_extract(e.metadata, '$.tools')", "json_type(e.metadata, '$.tools') = 'object'"
    # Raw SQL, one statement: this runs before every operation, and the ORM's query building costs
    # more than the query itself.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.element_type, e.name, e.gatekeeper, CASE WHEN e.gatekeeper IS NULL THEN {tools} END "
            "FROM elements_activation a JOIN elements_element e ON e.id = a.element_id "
            "WHERE a.session_id = %s AND e.element_type IN (%s, %s, %s, %s) "
            f"AND (e.gatekeeper IS NOT NULL OR (e.element_type = %s AND {is_object}))",
            [caller.session.pk, *POLICY_TYPES, ElementType.AGENT],
        )
        rows = cursor.fetchall()
    policies = (policy_from(t, n, _json(g)) if g is not None else policy_from_tools(n, _json(tools_value))
                for t, n, g, tools_value in rows)
    return [p for p in policies if p is not None]


def _json(value: object) -> Any:
    """A JSON column as a raw query returns it: text on SQLite, decoded already on PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value


def session_confirmations(*, caller: Caller) -> list[tuple[int, Held]]:
    if caller.session is None:
        return []
    rows = Confirmation.objects.filter(session=caller.session, pending=False)
    return [(c.pk, Held(operation=c.operation, element_type=c.element_type, level=c.level)) for c in rows]


def confirmation_pending(*, caller: Caller, operation: str) -> bool:
    """Whether a call of `operation` was refused in this session for want of a confirmation."""
    return caller.session is not None and Confirmation.objects.filter(
        session=caller.session, operation=operation, pending=True).exists()


# Each per-user setting: its type, its default and what it does.
SETTINGS: dict[str, tuple[type, Any, str]] = {
    "gatekeeper.auto_confirm": (bool, False, "Let your MCP host's own approval prompt stand in for "
                                             "confirm_operation (never for deletes or gatekeeper policy changes)"),
    "elements.default_author": (str, "", "Author recorded on elements you create (default: your username)"),
}


def user_settings(*, user: Any) -> dict[str, Any]:
    """Every setting of `user`: what they set, and the defaults for the rest."""
    stored = UserSettings.objects.filter(user=user).values_list("values", flat=True).first() or {}
    return {key: stored.get(key, default) for key, (_, default, _) in SETTINGS.items()}


LOG_LEVELS = ("debug", "info", "warn", "error")
LOG_CATEGORIES = ("all", "application", "security", "performance", "telemetry")
# Every audit entry is a record of something done, at info level; a tool call is info when it was
# answered and warn when it ended in an error.
AUDIT_LEVEL = "info"
TOOL_CALL_CATEGORY = "performance"


@dataclass(frozen=True)
class LogEntry:
    at: datetime
    level: str
    category: str
    source: str
    message: str
    data: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"timestamp": self.at.isoformat(), "level": self.level, "category": self.category,
                "source": self.source, "message": self.message, "data": self.data}


def _audit_entry(event: AuditEvent) -> LogEntry:
    return LogEntry(at=event.at, level=AUDIT_LEVEL, category=audit_category(event.action), source=event.via,
                    message=f"{event.action} {event.target}".strip(), data=event.detail)


def _call_entry(call: ToolCall) -> LogEntry:
    failed = call.outcome == ToolCall.Outcome.ERROR
    words = " ".join(part for part in (call.tool, call.operation) if part)
    return LogEntry(at=call.at, level="warn" if failed else "info", category=TOOL_CALL_CATEGORY,
                    source=_call_source(call.transport),
                    message=f"{words} {'failed: ' + call.error_code if failed else 'answered'} in "
                            f"{call.duration_ms:.1f} ms",
                    data={"tool": call.tool, "operation": call.operation, "outcome": call.outcome,
                          "errorCode": call.error_code, "durationMs": call.duration_ms, "server": call.server,
                          "transport": call.transport})


def _call_source(transport: str) -> str:
    return "stdio" if transport == "stdio" else "mcp"


def log_page(*, caller: Caller, category: str = "all", level: str = "debug", source: str = "", text: str = "",
             since: datetime | None = None, until: datetime | None = None, offset: int = 0,
             limit: int = 50) -> tuple[list[LogEntry], int]:
    """query_logs over the caller's own records, newest first: the audit log of writes (application
    and security) and every MCP tool call (performance), and the total that match. `level` is the
    minimum level; `source` is matched within the entry's source (mcp, stdio, api, admin, command...).
    Telemetry is not recorded, so that category lists nothing."""
    if category not in LOG_CATEGORIES:
        raise InvalidInput(f"category must be one of {', '.join(LOG_CATEGORIES)}.", code="invalid_parameter")
    if level not in LOG_LEVELS:
        raise InvalidInput(f"level must be one of {', '.join(LOG_LEVELS)}.", code="invalid_parameter")
    rank = LOG_LEVELS.index(level)
    events = AuditEvent.objects.none()
    if category in ("all", "application", "security") and rank <= LOG_LEVELS.index(AUDIT_LEVEL):
        events = audit_events(caller=caller, category=category, text=text, since=since, until=until)
        events = events.filter(via__icontains=source) if source else events
    calls = ToolCall.objects.none()
    if category in ("all", TOOL_CALL_CATEGORY) and rank <= LOG_LEVELS.index("warn"):
        calls = tool_calls(caller=caller, text=text, failed_only=rank > LOG_LEVELS.index("info"), since=since,
                           until=until)
        if source:
            transports = [t for t in McpSession.Transport.values if source.lower() in _call_source(t)]
            calls = calls.filter(transport__in=transports)
    # One ordered page across both tables: their (time, kind, id) rows unioned in the database, then
    # the rows of that page read by id.
    keys = [events.order_by().annotate(kind=Value("audit", output_field=CharField())).values_list("at", "kind", "id"),
            calls.order_by().annotate(kind=Value("call", output_field=CharField())).values_list("at", "kind", "id")]
    page = list(keys[0].union(keys[1], all=True).order_by("-at", "-id")[offset:offset + limit])
    audits = AuditEvent.objects.in_bulk([pk for _, kind, pk in page if kind == "audit"])
    recorded = ToolCall.objects.in_bulk([pk for _, kind, pk in page if kind == "call"])
    # A row purged between the two reads is left out of the page.
    entries = [_audit_entry(audits[pk]) if kind == "audit" else _call_entry(recorded[pk])
               for _, kind, pk in page if pk in (audits if kind == "audit" else recorded)]
    return entries, events.count() + calls.count()


def portfolio_files(*, caller: Caller) -> Iterator[tuple[PurePosixPath, bytes]]:
    """The caller's elements as DollhouseMCP's portfolio files (the layout import_portfolio reads):
    path and bytes, a name that two elements would share taking -2, -3... after its stem."""
    from elements.packages import element_package
    from elements.portfolio import package_path, text_from_package

    taken: set[PurePosixPath] = set()
    for element in elements_all(caller=caller).iterator(chunk_size=100):
        is_memory = element.element_type == ElementType.MEMORY
        package = element_package(element, entries=memory_entries(memory=element) if is_memory else None)
        path, number = PurePosixPath(package_path(package).as_posix()), 1
        candidate = path
        while candidate in taken:
            number += 1
            candidate = path.with_stem(f"{path.stem}-{number}")
        taken.add(candidate)
        # Bytes, so line endings inside a body are kept exactly as stored.
        yield candidate, text_from_package(package).encode("utf-8")
