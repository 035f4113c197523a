"""The MCP-AQL operations: parse a call's params, call a service or selector, shape the answer.

Each handler is registered in the route table (elements.mcpaql.ROUTES) by `operation`, with the
parameters introspection reports.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import django
from django.db import connection

from core.errors import DomainError, InvalidInput
from elements import (
    collection,
    ensembles,
    introspection,
    portfolio_sync,
    selectors,
    services,
    similarity,
    skill_format,
    templating,
)
from elements.fields import clean_fields, split_params
from elements.gatekeeper import POLICY_CHANGE, SETTINGS_CHANGE, Level, decide, matches
from elements.mcpaql import ROUTES, Call, Endpoint, Param, operation
from elements.models import Element
from elements.packages import element_data, element_package, entry_data, package_load
from elements.portfolio import package_from_markdown, yaml_dump
from elements.types import (
    DEFAULT_PAGE_SIZE,
    MAX_FILE_BYTES,
    MAX_OFFSET,
    MAX_PAGE,
    MAX_PAGE_SIZE,
    MAX_SEARCH_QUERY,
    ElementType,
    datetime_parse,
    element_type_parse,
)
from workflows.scoping import server_paths_allowed

NAME = Param("element_name", "string", True, "Element name (case-sensitive)")
TYPE = Param("element_type", "string", True, "persona, skill, template, agent, memory or ensemble")
TYPE_OPTIONAL = Param("element_type", "string", False, "Filter by element type")
FIELDS = Param("fields", "string|array", False, "Field selection: minimal, standard, full, or a list of fields")
PAGE = Param("page", "number", False, "Page number, from 1", 1)
PAGE_SIZE = Param("pageSize", "number", False, f"Items per page (max {MAX_PAGE_SIZE})", DEFAULT_PAGE_SIZE)
CURSOR = Param("cursor", "string", False, "Atrium extension: the pagination.nextCursor of the previous page, "
               "sent with the same element type, filters and sort and without page or offset; the next page is "
               "read by keyset, as fast at any depth")

FIELD_PRESETS = {
    "minimal": ("element_name", "description"),
    "standard": ("element_name", "description", "tags", "triggers"),
}


# --- shaping -------------------------------------------------------------------------------

def list_item(element: Element) -> dict[str, Any]:
    return {"element_name": element.name, "description": element.description, "type": element.element_type,
            "version": element.version, "tags": element.tags, "created": element.created.isoformat(),
            "author": element.author}


def _pick(item: dict[str, Any], path: str) -> tuple[bool, Any]:
    value: Any = item
    for part in path.split("."):
        if part in {"__proto__", "constructor", "prototype"} or not isinstance(value, dict) or part not in value:
            # "metadata.tags" and friends: the original kept shared fields under metadata.
            if path.startswith("metadata.") and path.count(".") == 1 and path[9:] in item:
                return True, item[path[9:]]
            return False, None
        value = value[part]
    return True, value


def select_fields(data: Any, fields: object) -> Any:
    """Apply a `fields` selection to one element, or to each of `items`/`results`."""
    if fields in (None, "full"):
        return data
    if isinstance(fields, str):
        paths = FIELD_PRESETS.get(fields, (fields,))
    elif isinstance(fields, list) and all(isinstance(f, str) for f in fields):
        paths = tuple(fields)
    else:
        raise InvalidInput("fields must be minimal, standard, full or a list of field names.",
                           code="invalid_parameter")
    paths = tuple("element_name" if p == "name" else p for p in paths)

    def one(item: dict[str, Any]) -> dict[str, Any]:
        picked: dict[str, Any] = {}
        for path in paths:
            found, value = _pick(item, path)
            if found:
                picked[path] = value
        return picked

    if isinstance(data, dict) and isinstance(data.get("items"), list):
        return {**data, "items": [one(i) for i in data["items"]]}
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        return {**data, "results": [one(i) for i in data["results"]]}
    return one(data) if isinstance(data, dict) else data


def _page_params(call: Call, source: dict[str, Any], cursor: str | None = None) -> tuple[int, int]:
    return selectors.page_window(
        page=call.number("page", None, low=1, high=MAX_PAGE, container=source),
        page_size=call.number("pageSize", None, low=1, high=MAX_PAGE_SIZE, container=source),
        limit=call.number("limit", None, low=1, high=MAX_PAGE_SIZE, container=source),
        offset=call.number("offset", None, low=0, high=MAX_OFFSET, container=source), cursor=cursor,
    )


def _list_query(call: Call, element_type: ElementType | None) -> selectors.ListQuery:
    filters = {**call.params, **(call.obj("filters") or {}), **(call.obj("filter") or {})}
    paging = {**call.params, **(call.obj("pagination") or {})}
    sort = {**call.params, **(call.obj("sort") or {})}
    cursor = call.filter_text("cursor", paging, limit=selectors.MAX_CURSOR_LENGTH) or None
    page, size = _page_params(call, paging, cursor)

    def when(key: str) -> Any:
        value = filters.get(key)
        return None if value is None else datetime_parse(value, field=key, code="invalid_filter")

    query = selectors.ListQuery(
        element_type=element_type, name_contains=call.filter_text("nameContains", filters),
        description_contains=call.filter_text("descriptionContains", filters),
        tags_all=call.strings("tags", filters), tags_any=call.strings("tagsAny", filters),
        author=call.filter_text("author", filters), category=call.filter_text("category", filters),
        status=call.filter_text("status", filters) or "all", created_after=when("createdAfter"),
        created_before=when("createdBefore"), sort_by=str(sort.get("sortBy") or "name"),
        sort_order=str(sort.get("sortOrder") or "asc"), page=page, page_size=size,
    )
    return query if cursor is None else selectors.list_query_resume(query, cursor)


def _listing(call: Call, element_type: ElementType) -> dict[str, Any]:
    query = _list_query(call, element_type)
    aggregate = call.obj("aggregate")
    if aggregate and aggregate.get("count"):
        return selectors.element_aggregate(caller=call.caller, query=query, group_by=aggregate.get("group_by"))
    items, paging = selectors.element_list(caller=call.caller, query=query)
    data: dict[str, Any] = {
        "items": [list_item(e) for e in items], "pagination": paging,
        "sorting": {"sortBy": query.sort_by, "sortOrder": query.sort_order}, "element_type": element_type.value,
    }
    if query.applied:
        data["filters"] = {"applied": {**query.applied, "count": paging["totalItems"]}}
    return select_fields(data, call.params.get("fields"))


def _full(element: Element) -> dict[str, Any]:
    entries = selectors.memory_entries(memory=element) if element.element_type == ElementType.MEMORY else None
    return element_data(element, entries=entries)


def _flag_invisible(call: Call, element: Element) -> None:
    """Bidi overrides and zero-width characters are kept but reported: they can hide text."""
    from elements.validation import normalize_text

    for field in ("description", "instructions", "content"):
        _, flags = normalize_text(getattr(element, field))
        call.warnings.extend(f"{field}: {flag}" for flag in flags)


def _get(call: Call) -> Element:
    return selectors.element_get(caller=call.caller, element_type=call.type_required(), name=call.name())


# --- calls that need an explicit confirmation -----------------------------------------------

def _carries_policy(fields: object) -> bool:
    """Whether element fields from a client set a gatekeeper policy, top-level or under metadata."""
    if not isinstance(fields, dict):
        return False
    metadata = fields.get("metadata")
    return "gatekeeper" in fields or (isinstance(metadata, dict) and "gatekeeper" in metadata)


def _package_has_policy(data: object) -> bool:
    """Whether an import's data (an object, JSON text or the YAML export) carries a policy."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            try:
                data = package_load(data)
            except DomainError:
                return False  # the operation itself reports what is wrong with it
    if not isinstance(data, dict):
        return False
    metadata = data.get("metadata")
    return bool(data.get("gatekeeper") or (isinstance(metadata, dict) and metadata.get("gatekeeper")))


def _creates_policy(params: dict[str, Any]) -> str:
    metadata = params.get("metadata")
    policy = params.get("gatekeeper") or (isinstance(metadata, dict) and metadata.get("gatekeeper"))
    return POLICY_CHANGE if policy else ""


def _edits_policy(params: dict[str, Any]) -> str:
    return POLICY_CHANGE if _carries_policy(params.get("input")) else ""


def _imports_policy(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda params: POLICY_CHANGE if _package_has_policy(params.get(key)) else ""


def _changes_settings(params: dict[str, Any]) -> str:
    return SETTINGS_CHANGE if params.get("action") in SETTINGS_WRITES else ""


# --- CREATE --------------------------------------------------------------------------------

@operation("create_element", Endpoint.CREATE, "Create a new element of any type.", params=(
    NAME, TYPE, Param("description", "string", True, "Short summary (1-2 sentences)"),
    Param("instructions", "string", False, "Behavioural directives in command voice; required for personas"),
    Param("content", "string", False, "Reference material or template body; required for skills and templates"),
    Param("tags", "array", False, "Categorisation tags"), Param("triggers", "array", False, "Action verbs"),
    Param("category", "string", False, "Category label"),
    Param("gatekeeper", "object", False, "Policy: {allow?, confirm?, deny?, scopeRestrictions?}"),
    Param("metadata", "object", False, "Type-specific fields (template variables, agent goal, ensemble elements)"),
), returns="The created element, as get_element returns it", examples=(
    '{"operation": "create_element", "element_type": "persona", "params": {"element_name": "code-reviewer", '
    '"description": "Reviews code", "instructions": "You ARE a careful reviewer."}}',
), explicit=_creates_policy)
def create_element(call: Call) -> dict[str, Any]:
    element_type = call.type_required()
    if call.text("description") is None:
        raise InvalidInput("Missing required parameter 'description' for create_element.", code="missing_parameter")
    params = {k: v for k, v in call.params.items() if k not in ("element_name", "name", "element_type",
                                                                "elementType")}
    element = services.element_create(caller=call.caller, element_type=element_type, name=call.name(),
                                      params=params)
    _flag_invisible(call, element)
    return _full(element)


@operation("import_element", Endpoint.CREATE, "Import an element from an export package.", params=(
    Param("data", "string|object", True, "The export package (object, JSON or YAML text) from export_element"),
    Param("overwrite", "boolean", False, "Replace an element of the same name (default false)", False),
), explicit=_imports_policy("data"))
def import_element(call: Call) -> dict[str, Any]:
    if "data" not in call.params:
        raise InvalidInput("Missing required parameter 'data' for import_element.", code="missing_parameter")
    element, created = services.element_import(caller=call.caller, package=package_load(call.params["data"]),
                                               overwrite=call.flag("overwrite"))
    return {"imported": True, "created": created, "element": _full(element)}


@operation("import_persona", Endpoint.CREATE, "Import a persona from a file path (where this server may read "
           "your disk: a local or stdio server) or from JSON text (an export package or persona fields).", params=(
    Param("source", "string", True, "An absolute path to a persona file (.md or .json), or the persona as JSON"),
    Param("overwrite", "boolean", False, "Replace a persona of the same name", False),
), explicit=_imports_policy("source"))
def import_persona(call: Call) -> dict[str, Any]:
    source = call.text("source", required=True)
    if source.lstrip().startswith("{"):
        package = {"element_type": "persona", **_json_object(source)}
    else:
        package = _persona_file(call, source.strip())
    package = package_load(package)
    if element_type_parse(package["element_type"]) is not ElementType.PERSONA:
        raise InvalidInput("import_persona imports personas; use import_element for other types.",
                           code="invalid_source")
    element, created = services.element_import(caller=call.caller, package=package,
                                               overwrite=call.flag("overwrite"))
    return {"imported": True, "created": created, "element": _full(element)}


def _persona_file(call: Call, source: str) -> dict[str, Any]:
    """The package of the persona file at `source`, on a server that runs on the caller's machine."""
    if not server_paths_allowed(call.caller):
        raise InvalidInput("source looks like a file path, and this is a shared server: it reads no files from "
                           "its own disk for callers, and cannot reach your machine's. Pass the persona as JSON "
                           'text instead: an export package, or {"name", "description", "instructions"}.',
                           code="server_paths_disabled")
    path = Path(source).expanduser()
    if not path.is_absolute():
        raise InvalidInput(f"source {source!r} is not an absolute path: pass the persona file's full path.",
                           code="invalid_source")
    try:
        if not path.is_file():
            raise InvalidInput(f"No persona file at {path}.", code="invalid_source")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InvalidInput(f"{path.name}: file too large: at most {MAX_FILE_BYTES:,} bytes.", code="too_large")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path.name}: not UTF-8 text.", code="invalid_source") from exc
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} could not be read: {getattr(exc, 'strerror', None) or exc}.",
                           code="invalid_source") from exc
    if path.suffix.lower() == ".json":
        return {"element_type": "persona", **_json_object(text)}
    return package_from_markdown(text, element_type=ElementType.PERSONA, filename=path.name)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"source is not valid JSON: {exc}.", code="invalid_source") from exc
    if not isinstance(value, dict):
        raise InvalidInput("source must be a JSON object.", code="invalid_source")
    return value


@operation("addEntry", Endpoint.CREATE, "Add an entry to a memory element.", params=(
    NAME, Param("content", "string", True, "Entry text"), Param("tags", "array", False, "Entry tags (max 20)"),
    Param("metadata", "object", False, "Structured metadata for correlation"),
    Param("privacyLevel", "string", False, "public, private (default) or sensitive"),
))
def add_entry(call: Call) -> dict[str, Any]:
    memory = selectors.element_get(caller=call.caller, element_type=ElementType.MEMORY, name=call.name())
    entry = services.memory_entry_add(
        caller=call.caller, memory=memory, content=call.params.get("content", call.params.get("entry")),
        tags=call.params.get("tags"), metadata=call.params.get("metadata"),
        privacy_level=call.params.get("privacyLevel"),
    )
    return entry_data(entry)


# --- READ ----------------------------------------------------------------------------------

@operation("list_elements", Endpoint.READ, "List elements with pagination, filtering, sorting and aggregation.",
           params=(TYPE, PAGE, PAGE_SIZE, CURSOR,
                   Param("sortBy", "string", False, "name, created, modified or version", "name"),
                   Param("sortOrder", "string", False, "asc or desc", "asc"),
                   Param("nameContains", "string", False, "Partial name match (case-insensitive)"),
                   Param("tags", "array", False, "Must have ALL of these tags"),
                   Param("tagsAny", "array", False, "Must have ANY of these tags"),
                   Param("author", "string", False, "Filter by author"),
                   Param("status", "string", False, "active, inactive or all"),
                   Param("category", "string", False, "Filter by category"),
                   Param("aggregate", "object", False, "{count: true, group_by?} for counts only"), FIELDS),
           examples=('{"operation": "list_elements", "element_type": "persona", "params": {"pageSize": 10}}',))
def list_elements(call: Call) -> dict[str, Any]:
    return _listing(call, call.type_required())


@operation("query_elements", Endpoint.READ, "Structured filtering by tags, category, author and more.", params=(
    TYPE, Param("filters", "object", False, "{nameContains, tags, tagsAny, author, status, category}"),
    Param("sort", "object", False, "{sortBy, sortOrder}"),
    Param("pagination", "object", False, "{page, pageSize} or {cursor, pageSize?} (cursor: Atrium extension, "
          "the previous answer's pagination.nextCursor)"),
    Param("aggregate", "object", False, "{count?, group_by?}"), FIELDS,
))
def query_elements(call: Call) -> dict[str, Any]:
    if call.element_type is None:
        raise InvalidInput("query_elements needs an element type: pass element_type (or elementType).",
                           code="element_type_required")
    return _listing(call, call.element_type)


@operation("get_element", Endpoint.READ, "Get an element by name and type, with its content and metadata.",
           params=(NAME, TYPE, FIELDS))
def get_element(call: Call) -> dict[str, Any]:
    return select_fields(_full(_get(call)), call.params.get("fields"))


@operation("get_element_details", Endpoint.READ, "Get an element with its revision count and, for policies, "
           "what its gatekeeper section allows.", params=(NAME, TYPE, FIELDS))
def get_element_details(call: Call) -> dict[str, Any]:
    element = _get(call)
    data = _full(element)
    data["details"] = {
        "revisions": selectors.revisions(caller=call.caller, element_type=ElementType(element.element_type),
                                         name=element.name).count(),
        "active": element in selectors.active_elements(caller=call.caller),
        "gatekeeper": element.gatekeeper,
    }
    return select_fields(data, call.params.get("fields"))


def _search_text(call: Call) -> str:
    text = (call.text("query", required=True) or "").strip()
    if not text:
        raise InvalidInput("Search query is required", code="query_required")
    if len(text) >= MAX_SEARCH_QUERY:
        raise InvalidInput(f"Search query must be under {MAX_SEARCH_QUERY} characters", code="query_too_long")
    return text


def _search_items(call: Call, text: str, element_type: ElementType | None, page: int, size: int
                  ) -> tuple[list[dict[str, Any]], int]:
    found, total = selectors.element_search(caller=call.caller, text=text, element_type=element_type, page=page,
                                            page_size=size)
    return [{"type": e.element_type, "element_name": e.name, "description": e.description, "matchedIn": where}
            for e, where in found], total


@operation("search_elements", Endpoint.READ, "Full-text search across element names, descriptions, content and "
           "memory entries.", params=(Param("query", "string", True, "Search query (under 1000 characters)"),
                                      TYPE_OPTIONAL, PAGE, PAGE_SIZE, FIELDS))
def search_elements(call: Call) -> dict[str, Any]:
    text = _search_text(call)
    page, size = _page_params(call, {**call.params, **(call.obj("pagination") or {})})
    items, total = _search_items(call, text, call.element_type, page, size)
    data = {"items": items, "pagination": selectors.pagination(page, size, total), "query": text,
            "sorting": {"sortBy": "relevance", "sortOrder": "desc"}}
    return select_fields(data, call.params.get("fields"))


SEARCH_SCOPES = ("local", "github", "collection", "all")


@operation("search", Endpoint.READ, "Unified search. Scope local searches your elements, collection the "
           "elements curators published for the team and the community collection (each result's origin: published "
           "or community/submission, with the path to install), github the files at the head of your GitHub "
           "portfolio repository (init_portfolio; each result with its path), all every one of them.", params=(
    Param("query", "string", True, "Search query ('*' with filters lists your elements)"),
    Param("scope", "string|array", False, "local (default), collection, all, github"),
    Param("type", "string", False, "Filter by element type"), PAGE, Param("limit", "number", False, "Page size"),
    Param("filters", "object", False, "{tags, author, createdAfter, createdBefore} (local listing)"), FIELDS,
))
def search(call: Call) -> dict[str, Any]:
    scopes = call.strings("scope") or ("local",)
    unknown = [s for s in scopes if s not in SEARCH_SCOPES]
    if unknown:
        raise InvalidInput(f"Unknown scope {', '.join(unknown)}. Scopes: {', '.join(SEARCH_SCOPES)}.",
                           code="invalid_scope")
    github = portfolio_sync.remote_get(caller=call.caller) is not None
    if "github" in scopes and not github:
        raise InvalidInput("The GitHub portfolio source is not configured on this server yet, so scope github "
                           "cannot be searched. Search with scope local, collection or all.",
                           code="source_not_configured")
    searched = ("local", "collection", "github") if github else ("local", "collection")
    sources = list(searched) if "all" in scopes else [s for s in searched if s in scopes]
    if "all" in scopes and not github:
        call.warnings.append("The GitHub portfolio source is not configured on this server yet: scope all searched "
                             "local and collection.")
    element_type = element_type_parse(call.params["type"]) if call.params.get("type") else call.element_type
    page, size = _page_params(call, call.params)
    text = (call.text("query", required=True) or "").strip()
    items: list[dict[str, Any]] = []
    total = 0
    for source in sources:
        if source == "github":
            found_github = _github_search(call, "" if text in ("", "*") else _search_text(call), element_type,
                                          required="all" not in scopes)
            total += len(found_github)
            items += found_github[(page - 1) * size: page * size]
            continue
        if text in ("", "*") and source == "local":
            call.params.setdefault("filters", {})
            elements, count = selectors.element_page(caller=call.caller, query=_list_query(call, element_type))
            found = [(e, []) for e in elements]
        elif text in ("", "*"):
            elements, count = selectors.collection_page(element_type=element_type, page=page, page_size=size)
            found = [(e, []) for e in elements]
        else:
            found, count = selectors.element_search(caller=call.caller, text=_search_text(call),
                                                    element_type=element_type, page=page, page_size=size,
                                                    collection=source == "collection")
        total += count
        items += [{"type": e.element_type, "element_name": e.name, "description": e.description,
                   "source": source, "matchedIn": where,
                   **({"author": e.author, "origin": "published"} if source == "collection" else {})}
                  for e, where in found]
        if source == "collection":
            community, count = _community_search(call, "" if text in ("", "*") else _search_text(call), element_type,
                                                 page, size)
            total += count
            items += community
    data = {"results": items, "pagination": selectors.pagination(page, size, total), "query": text,
            "scopes": sources}
    return select_fields(data, call.params.get("fields"))


def _github_search(call: Call, text: str, element_type: ElementType | None, *, required: bool
                   ) -> list[dict[str, Any]]:
    """The portfolio repository's matches. Out of reach, scope github fails; scope all warns and goes on."""
    try:
        return portfolio_sync.remote_search(caller=call.caller, text=text, element_type=element_type)
    except DomainError as exc:
        if required:
            raise
        call.warnings.append(f"The GitHub portfolio could not be searched: {exc.message}")
        return []


def _community_search(call: Call, text: str, element_type: ElementType | None, page: int,
                      size: int) -> tuple[list[dict[str, Any]], int]:
    """One page of the community collection's matches (the source's files and the approved
    submissions), beside the elements curators published: scope collection reads them all, each
    result's origin (community, submission or published) saying which."""
    try:
        cache = collection.collection_cache(warnings=call.warnings)
    except DomainError as exc:
        call.warnings.append(exc.message)
        return [], 0
    found = sorted(collection.items_matching(cache, text=text, element_type=element_type),
                   key=lambda m: (-m[2], m[0].name.lower()))
    return [{"type": item.element_type, "element_name": item.name, "description": item.description,
             "source": "collection", "origin": item.origin, "path": item.path, "matchedIn": where,
             "author": item.author} for item, where, _ in found[(page - 1) * size: page * size]], len(found)


@operation("search_portfolio", Endpoint.READ, "Search your portfolio by name, keywords or tags.", params=(
    Param("query", "string", True, "Search query"), Param("type", "string", False, "Filter by element type"),
    FIELDS))
def search_portfolio(call: Call) -> dict[str, Any]:
    element_type = element_type_parse(call.params["type"]) if call.params.get("type") else call.element_type
    items, total = _search_items(call, _search_text(call), element_type, 1, MAX_PAGE_SIZE)
    return select_fields({"results": items, "total": total}, call.params.get("fields"))


@operation("search_all", Endpoint.READ, "Search across sources (legacy; prefer search).", params=(
    Param("query", "string", True, "Search query"), Param("sources", "array", False, "local, github, collection"),
    Param("type", "string", False, "Filter by element type"), FIELDS))
def search_all(call: Call) -> dict[str, Any]:
    call.params["scope"] = list(call.strings("sources") or ("local",))
    return search(call)


@operation("activate_element", Endpoint.READ, "Activate an element in this MCP session. An ensemble activates its "
           "members by its strategy.", params=(NAME, TYPE), writes=True)
def activate_element(call: Call) -> dict[str, Any]:
    element = _get(call)
    if element.element_type == ElementType.ENSEMBLE:
        members, warnings = ensembles.resolve(caller=call.caller, ensemble=element)
        services.activation_set(caller=call.caller, elements=[element])
        services.activation_set(caller=call.caller, elements=members, via=element)
        call.warnings.extend(warnings)
        return {"activated": element.name, "element_type": element.element_type,
                "members": [{"element_name": m.name, "element_type": m.element_type} for m in members]}
    services.activation_set(caller=call.caller, elements=[element])
    return {"activated": element.name, "element_type": element.element_type, "element": _full(element)}


@operation("deactivate_element", Endpoint.READ, "Deactivate an element in this MCP session. Element policies never "
           "block it, so an activated policy can always be lifted.", params=(NAME, TYPE), gated=False, writes=True)
def deactivate_element(call: Call) -> dict[str, Any]:
    element = _get(call)
    removed = services.activation_clear(caller=call.caller, element=element)
    return {"deactivated": element.name, "element_type": element.element_type, "was_active": removed > 0}


@operation("get_active_elements", Endpoint.READ, "The elements active in this MCP session, with their content.",
           params=(TYPE_OPTIONAL,))
def get_active_elements(call: Call) -> dict[str, Any]:
    active: dict[str, list[dict[str, Any]]] = {}
    for element in selectors.active_elements(caller=call.caller, element_type=call.element_type):
        active.setdefault(ElementType(element.element_type).plural, []).append(
            {"element_name": element.name, "description": element.description,
             "instructions": element.instructions, "content": element.content})
    return {"active": active, "count": sum(len(v) for v in active.values())}


@operation("validate_element", Endpoint.READ, "Validate a stored element against the current rules.", params=(
    NAME, TYPE, Param("strict", "boolean", False, "Also report warnings as errors", False)))
def validate_element(call: Call) -> dict[str, Any]:
    element = _get(call)
    element_type = ElementType(element.element_type)
    fields = services.element_fields(element)
    common, metadata = split_params(element_type, fields)
    errors: list[str] = []
    try:
        clean_fields(element_type, common, metadata)
    except InvalidInput as exc:
        errors.append(exc.message)
    warnings = []
    if element.format_version == "v1":
        warnings.append("The element uses the v1 single-body format; upgrade_element converts it to v2.")
    if not element.description:
        warnings.append("The element has no description.")
    if call.flag("strict"):
        errors, warnings = errors + warnings, []
    return {"element_name": element.name, "element_type": element_type.value, "valid": not errors,
            "errors": errors, "warnings": warnings}


@operation("render", Endpoint.READ, "Render a template with variables. Section templates render their "
           "<template> section unless section or all_sections says otherwise.", params=(
    NAME, Param("variables", "object", False, "Values for the template's variables"),
    Param("section", "string", False, "style or script: return that raw section"),
    Param("all_sections", "boolean", False, "Return {template, style, script}", False)))
def render(call: Call) -> dict[str, Any]:
    template = selectors.element_get(caller=call.caller, element_type=ElementType.TEMPLATE, name=call.name())
    result = templating.render(template.content, template.metadata.get("variables") or [],
                               call.obj("variables") or {}, section=call.text("section"),
                               all_sections=call.flag("all_sections"))
    return {"element_name": template.name, **result}


@operation("export_element", Endpoint.READ, "Export an element as a portable package that import_element takes "
           "back unchanged.", params=(NAME, TYPE, Param("format", "string", False, "json (default) or yaml",
                                                        "json")))
def export_element(call: Call) -> Any:
    element = _get(call)
    entries = selectors.memory_entries(memory=element) if element.element_type == ElementType.MEMORY else None
    package = element_package(element, entries=entries)
    export_format = call.text("format") or "json"
    if export_format == "json":
        return package
    if export_format == "yaml":
        return yaml_dump(package)
    raise InvalidInput("format must be json or yaml.", code="invalid_parameter")


@operation("introspect", Endpoint.READ, "Describe operations, types, element formats and categories.", params=(
    Param("query", "string", False, "operations (default), types, format or categories", "operations"),
    Param("name", "string", False, "One operation, type or element type")))
def introspect(call: Call) -> dict[str, Any]:
    return introspection.answer(call.text("query") or "operations", call.text("name"))


# Similarity compares texts pairwise, so discovery looks at the most recently changed elements.
DISCOVERY_LIMIT = 500


def _cards(call: Call) -> list[similarity.ElementCard]:
    return [ensembles.card(e) for e in selectors.elements_recent(caller=call.caller, limit=DISCOVERY_LIMIT)]


@operation("find_similar_elements", Endpoint.READ, "Find elements similar to one element.", params=(
    NAME, TYPE_OPTIONAL, Param("limit", "number", False, "Max results", 10),
    Param("threshold", "number", False, "Similarity threshold from 0 to 1", 0.5)))
def find_similar_elements(call: Call) -> dict[str, Any]:
    target = _target(call)
    threshold = call.params.get("threshold", 0.5)
    if not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
        raise InvalidInput("threshold must be a number from 0 to 1.", code="invalid_parameter")
    similar = similarity.find_similar(ensembles.card(target), _cards(call),
                                      limit=call.number("limit", 10, low=1, high=100), threshold=float(threshold))
    return {"element_name": target.name, "element_type": target.element_type, "similar": similar}


def _target(call: Call) -> Element:
    return selectors.element_find(caller=call.caller, name=call.name(), element_type=call.element_type)


@operation("search_by_verb", Endpoint.READ, "Find elements that handle an action verb.", params=(
    Param("verb", "string", True, "Action verb, e.g. debug"), Param("limit", "number", False, "Max results", 20)))
def search_by_verb(call: Call) -> dict[str, Any]:
    call.text("verb", required=True)
    return similarity.search_by_verb(call.filter_text("verb", call.params), _cards(call),
                                     limit=call.number("limit", 20, low=1, high=100))


@operation("get_element_relationships", Endpoint.READ, "Relationships of one element: uses, used_by, contains, "
           "contained_by, similar_to.", params=(NAME, TYPE_OPTIONAL,
                                                Param("relationship_types", "array", False, "Filter by type")))
def get_element_relationships(call: Call) -> dict[str, Any]:
    target = _target(call)
    return similarity.relationships(ensembles.card(target), _cards(call),
                                    types=call.strings("relationship_types") or None)


@operation("get_relationship_stats", Endpoint.READ, "Statistics about relationships across your elements.")
def get_relationship_stats(call: Call) -> dict[str, Any]:
    return similarity.relationship_stats(_cards(call))


@operation("convert_skill_format", Endpoint.READ, "Convert between Agent Skill (SKILL.md) and Dollhouse skill "
           "formats, losslessly with roundtrip_state.", params=(
    Param("direction", "string", True, "agent_to_dollhouse or dollhouse_to_agent"),
    Param("agent_skill", "object", False, "Agent Skill (for agent_to_dollhouse)"),
    Param("dollhouse", "object", False, "Dollhouse skill (for dollhouse_to_agent)"),
    Param("dollhouse_markdown", "string", False, "Serialized Dollhouse markdown, instead of dollhouse"),
    Param("roundtrip_state", "object", False, "State from an earlier conversion, for a lossless return")))
def convert_skill_format(call: Call) -> dict[str, Any]:
    params = {k: v for k, v in call.params.items() if k != "direction"}
    return skill_format.convert(call.text("direction", required=True), **params)


@operation("get_build_info", Endpoint.READ, "Server build and runtime information.")
def get_build_info(call: Call) -> dict[str, Any]:
    return {"name": "Atrium", "version": version("atrium"), "python": platform.python_version(),
            "django": django.get_version(), "mcp": version("mcp"), "database": connection.vendor,
            "operations": len(ROUTES)}


@operation("query_logs", Endpoint.READ, "Your recent activity: the audit log of writes made with your account "
           "(application, security) and every MCP tool call with how it ended and how long it took (performance).",
           params=(Param("category", "string", False, "all, application, security, performance or telemetry "
                                                      "(telemetry records nothing)", "all"),
                   Param("level", "string", False, "Minimum level: debug, info, warn or error (audit entries and "
                                                   "answered tool calls are info, failed tool calls warn)", "debug"),
                   Param("source", "string", False, "Where the entry came from, matched within: mcp, stdio, api, "
                                                    "admin, command, web, task"),
                   Param("message", "string", False, "Text to find in the action or target, or the tool, "
                                                     "operation or error code"),
                   Param("since", "string", False, "ISO 8601: entries after"),
                   Param("until", "string", False, "ISO 8601: entries before"),
                   Param("limit", "number", False, "1-500", 50), Param("offset", "number", False, "Skip", 0)))
def query_logs(call: Call) -> dict[str, Any]:
    def moment(key: str) -> Any:
        return datetime_parse(call.params[key], field=key) if call.text(key) else None

    limit, offset = call.number("limit", 50, low=1, high=500), call.number("offset", 0, low=0, high=MAX_OFFSET)
    entries, total = selectors.log_page(
        caller=call.caller, category=call.text("category") or "all", level=call.text("level") or "debug",
        source=call.filter_text("source", call.params), text=call.filter_text("message", call.params),
        since=moment("since"), until=moment("until"), offset=offset, limit=limit)
    return {"entries": [entry.as_dict() for entry in entries], "total": total, "limit": limit, "offset": offset}


SETTINGS_WRITES = ("set", "import", "reset")


@operation("dollhouse_config", Endpoint.READ, "Your settings: get, set, reset, export, import or wizard.", params=(
    Param("action", "string", True, "get, set, reset, export, import or wizard"),
    Param("setting", "string", False, "Setting key"), Param("value", "string|boolean", False, "Value for set"),
    Param("data", "object", False, "Settings for import")), explicit=_changes_settings, writes=True)
def dollhouse_config(call: Call) -> dict[str, Any]:
    action = call.text("action", required=True)
    current = selectors.user_settings(user=call.caller.user)
    setting = call.text("setting")
    if setting is not None and setting not in selectors.SETTINGS:
        raise InvalidInput(f"Unknown setting '{setting}'. Settings: {', '.join(selectors.SETTINGS)}.",
                           code="unknown_setting")
    if action == "get":
        return {"settings": {setting: current[setting]} if setting else current}
    if action == "export":
        return {"settings": current}
    if action == "wizard":
        return {"settings": [{"setting": k, "type": t.__name__, "default": d, "description": text,
                              "value": current[k]} for k, (t, d, text) in selectors.SETTINGS.items()]}
    if action == "set":
        if setting is None or "value" not in call.params:
            raise InvalidInput("set needs setting and value.", code="missing_parameter")
        return {"settings": services.settings_set(caller=call.caller, values={setting: call.params["value"]})}
    if action == "import":
        return {"settings": services.settings_set(caller=call.caller, values=call.obj("data", required=True))}
    if action == "reset":
        return {"settings": services.settings_reset(caller=call.caller, keys=[setting] if setting else None)}
    raise InvalidInput("action must be get, set, reset, export, import or wizard.", code="invalid_parameter")


# --- UPDATE --------------------------------------------------------------------------------

@operation("edit_element", Endpoint.UPDATE, "Edit an element: `input` is deep-merged into it.", params=(
    NAME, TYPE, Param("input", "object", True, "Fields to change: instructions, content, description, tags, "
                                               "triggers, category, gatekeeper, metadata, type fields")),
    examples=('{"operation": "edit_element", "element_type": "skill", "params": {"element_name": "review", '
              '"input": {"tags": ["code"]}}}',), explicit=_edits_policy)
def edit_element(call: Call) -> dict[str, Any]:
    element = services.element_edit(caller=call.caller, element=_get(call), changes=call.obj("input", required=True))
    _flag_invisible(call, element)
    return _full(element)


@operation("upgrade_element", Endpoint.UPDATE, "Upgrade an element from v1 (one body) to v2 (instructions and "
           "content).", params=(NAME, TYPE, Param("dry_run", "boolean", False, "Preview only", False),
                                Param("instructions_override", "string", False, "Instructions to use"),
                                Param("content_override", "string", False, "Content to use")))
def upgrade_element(call: Call) -> dict[str, Any]:
    return services.element_upgrade(caller=call.caller, element=_get(call),
                                    instructions=call.text("instructions_override"),
                                    content=call.text("content_override"), dry_run=call.flag("dry_run"))


# --- DELETE --------------------------------------------------------------------------------

@operation("delete_element", Endpoint.DELETE, "Delete an element. A backup revision is kept.", params=(
    NAME, TYPE, Param("deleteData", "boolean", False, "Accepted for compatibility; memory entries go with the "
                                                     "memory", False)), can_be_elevated=False)
def delete_element(call: Call) -> dict[str, Any]:
    element = _get(call)
    backup = services.element_delete(caller=call.caller, element=element)
    return {"deleted": True, "element_name": backup.name, "element_type": backup.element_type,
            "backup_revision": backup.pk}


@operation("clear", Endpoint.DELETE, "Clear all entries of a memory. A backup revision is kept.", params=(NAME,),
           can_be_elevated=False)
def clear(call: Call) -> dict[str, Any]:
    memory = selectors.element_get(caller=call.caller, element_type=ElementType.MEMORY, name=call.name())
    return {"cleared": services.memory_clear(caller=call.caller, memory=memory), "element_name": memory.name}


# --- EXECUTE -------------------------------------------------------------------------------

@operation("confirm_operation", Endpoint.EXECUTE, "Confirm an operation the gatekeeper asked about, after the user "
           "agreed; then retry it.", params=(
    Param("operation", "string", True, "The operation to confirm, e.g. create_element"),
    Param("element_type", "string", False, "Limit the confirmation to one element type")), level=Level.AUTO_APPROVE,
    gated=False)
def confirm_operation(call: Call) -> dict[str, Any]:
    target = call.text("operation", required=True)
    route = ROUTES.get(target)
    if route is None or route.name == "confirm_operation":
        raise InvalidInput(f'Unknown operation to confirm: "{target}".', code="unknown_operation")
    policies = selectors.session_policies(caller=call.caller)
    sandbox = next((p for p in policies if matches("confirm_operation", p.deny)), None)
    if sandbox is not None:
        raise InvalidInput(f"Operation cannot be confirmed: {sandbox.source} has sandboxed this session.",
                           code="sandboxed")
    type_name = call.element_type.value if call.element_type else ""
    decision = decide(operation=route.name, element_type=type_name or None, default=route.default_level,
                      can_be_elevated=route.can_be_elevated, policies=policies, held=[])
    if decision.level is Level.DENY:
        raise InvalidInput(f'Operation "{target}" is denied by policy and cannot be confirmed. {decision.reason}',
                           code="denied")
    pending = selectors.confirmation_pending(caller=call.caller, operation=route.name)
    if decision.level is Level.AUTO_APPROVE and not pending and route.explicit is None:
        return {"confirmed": True, "message": f'Operation "{target}" is already approved. No confirmation needed.'}
    # An operation approved as such whose calls may still need an explicit confirmation (a
    # settings change) gets a single-use one, so confirming before the call works as after a refusal.
    level = decision.level.confirmation or "single_use"
    confirmation = services.confirmation_grant(caller=call.caller, operation=route.name, element_type=type_name,
                                               level=level)
    return {"confirmed": True, "message": f"Confirmed: {target}.", "level": confirmation.level,
            "scope": f"Scoped to element type: {type_name}" if type_name else "All element types"}


import elements.agent_operations  # noqa: E402
import elements.cli_operations  # noqa: E402
import elements.collection_operations  # noqa: E402
import elements.console_operations  # noqa: E402
import elements.dangerzone_operations  # noqa: E402
import elements.github_operations  # noqa: E402
import elements.portfolio_operations  # noqa: E402,F401
