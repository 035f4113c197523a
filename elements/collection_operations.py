"""The MCP-AQL operations of the community collection: browse, search, read, install and submit.

Everything reads the cached collection (elements.collection), refreshed from its source when stale;
a source out of reach answers from the cache with a warning. Installing is an import
(elements.collection.collection_install), so a collection file is validated like any portfolio file.
Submitting queues a snapshot for the curators (elements.submissions); approved ones are served too.
"""

from __future__ import annotations

from typing import Any

from core.errors import InvalidInput
from elements import collection, selectors, submissions
from elements.mcpaql import Call, Endpoint, Param, operation
from elements.operations import _search_text
from elements.services import ElementExists
from elements.types import MAX_PAGE, MAX_PAGE_SIZE, ElementType, element_type_parse

PATH = Param("path", "string", True, "Content path in collection (e.g., library/personas/code-reviewer.md; the "
                                     "library/ prefix may be left out)")
SORTS = ("relevance", "name", "date")


def _type(call: Call, key: str) -> ElementType | None:
    value = call.text(key)
    return element_type_parse(value) if value else call.element_type


def _summary(item: Any) -> dict[str, Any]:
    return {"path": item.path, "type": item.element_type, "name": item.name, "description": item.description,
            "author": item.author, "version": item.version, "tags": item.tags,
            **({"category": item.category} if item.category else {}), "origin": item.origin}


@operation("browse_collection", Endpoint.READ,
           "Browse the DollhouseMCP community collection by section and type. Without a section, lists the sections; "
           "with section library and no type, the types with their counts; with a type, its items (path, name, "
           "description, author, version, tags, category). Atrium extends the reference with origin: community for the "
           "source's files, submission for elements curators approved from submit_collection_content.", params=(
               Param("section", "string", False, "Collection section to browse (library)"),
               Param("type", "string", False, "Element type filter (personas, skills, templates, agents, memories, "
                                               "ensembles)"),
           ), returns="{section?, type?, sections?, types?, items?, total}")
def browse_collection(call: Call) -> dict[str, Any]:
    cache = collection.collection_cache(warnings=call.warnings)
    section = (call.text("section") or "").strip()
    element_type = _type(call, "type")
    items = collection.served_items(cache, element_type=element_type)
    if not section and element_type is None:
        return {"sections": [{"name": collection.LIBRARY, "count": len(items)}], "total": len(items)}
    if section and section != collection.LIBRARY:
        raise InvalidInput(f"Unknown collection section {section!r:.60}. Sections: {collection.LIBRARY}.",
                           code="invalid_section")
    if element_type is None:
        counts = {t.plural: 0 for t in ElementType}
        for item in items:
            counts[element_type_parse(item.element_type).plural] += 1
        return {"section": collection.LIBRARY, "types": [{"type": t, "count": n} for t, n in counts.items()],
                "total": len(items)}
    listed = [_summary(i) for i in sorted(items, key=lambda i: (i.name, i.path))]
    return {"section": collection.LIBRARY, "type": element_type.plural, "items": listed, "total": len(listed)}


@operation("search_collection", Endpoint.READ,
           "Search the community collection by keywords: every word must occur in the name, description or tags "
           "(case-insensitive). Best matches first. Each result's origin (Atrium's) is community or submission.",
           params=(Param("query", "string", True, "Search query"),),
           returns="{query, results: [{path, type, name, description, author, version, tags, origin, matchedIn}], "
                   "total}")
def search_collection(call: Call) -> dict[str, Any]:
    text = _search_text(call)
    cache = collection.collection_cache(warnings=call.warnings)
    found = sorted(collection.items_matching(cache, text=text), key=lambda m: (-m[2], m[0].name.lower()))
    results = [{**_summary(item), "matchedIn": where} for item, where, _ in found]
    return {"query": text, "results": results, "total": len(results)}


@operation("search_collection_enhanced", Endpoint.READ,
           "Advanced collection search with pagination, filtering, and sorting. query '*' lists everything the "
           "filters keep. sortBy relevance (default), name or date (newest first).", params=(
               Param("query", "string", True, "Search query"),
               Param("elementType", "string", False, "Filter by element type"),
               Param("category", "string", False, "Filter by category"),
               Param("page", "number", False, "Page number, from 1", 1),
               Param("pageSize", "number", False, f"Items per page (max {MAX_PAGE_SIZE})", 25),
               Param("sortBy", "string", False, "relevance, name or date", "relevance"),
           ), returns="{query, items, pagination: {page, pageSize, totalItems, totalPages, hasNextPage, "
                      "hasPrevPage}, filters, sorting}")
def search_collection_enhanced(call: Call) -> dict[str, Any]:
    text = _search_text(call)
    sort = call.text("sortBy") or "relevance"
    if sort not in SORTS:
        raise InvalidInput(f"sortBy must be one of {', '.join(SORTS)}.", code="invalid_parameter")
    page = call.number("page", 1, low=1, high=MAX_PAGE)
    size = call.number("pageSize", 25, low=1, high=MAX_PAGE_SIZE)
    element_type = _type(call, "elementType")
    category = (call.text("category") or "").strip()
    cache = collection.collection_cache(warnings=call.warnings)
    found = collection.items_matching(cache, text="" if text == "*" else text, element_type=element_type,
                                      category=category)
    found.sort(key=lambda m: m[0].name.lower())
    if sort == "relevance":
        found.sort(key=lambda m: -m[2])
    elif sort == "date":
        found.sort(key=lambda m: m[0].created, reverse=True)
    window = found[(page - 1) * size: page * size]
    return {"query": text, "items": [{**_summary(item), "matchedIn": where, "score": score}
                                     for item, where, score in window],
            "pagination": selectors.pagination(page, size, len(found)),
            "filters": {"elementType": element_type.value if element_type else None, "category": category or None},
            "sorting": {"sortBy": sort}}


@operation("get_collection_content", Endpoint.READ,
           "Get detailed information about content from the collection: its metadata and the file's text. Atrium "
           "extends the reference with origin (community, or submission for an approved submission).",
           params=(PATH,), returns="{path, type, name, description, author, version, category, tags, unique_id, "
                                   "created, size, sha, origin, content}")
def get_collection_content(call: Call) -> dict[str, Any]:
    cache = collection.collection_cache(warnings=call.warnings)
    item = collection.item_get(cache, call.params.get("path"))
    return {**collection.item_data(item), "content": item.text}


@operation("install_collection_content", Endpoint.CREATE,
           "Install an element from the community collection to the local portfolio. The file is validated as "
           "import_portfolio validates a portfolio file. Atrium extends the reference with overwrite: an element of "
           "the same type and name is refused unless overwrite is true, and then its current version is kept as a "
           "revision.", params=(
               Param("path", "string", True, "Content path (e.g., personas/creative-writer.md)"),
               Param("overwrite", "boolean", False, "Replace an element of the same name (a revision is kept)",
                     False),
           ), returns="{installed: true, path, element_type, element_name, created, version, message}")
def install_collection_content(call: Call) -> dict[str, Any]:
    overwrite = call.flag("overwrite")
    cache = collection.collection_cache(warnings=call.warnings)
    item = collection.item_get(cache, call.params.get("path"))
    try:
        element, created = collection.collection_install(caller=call.caller, item=item, overwrite=overwrite)
    except ElementExists as exc:
        raise InvalidInput(exc.message, code="already_exists") from exc
    verb = "Installed" if created else "Replaced (the previous version is kept as a revision)"
    return {"installed": True, "path": item.path, "element_type": element.element_type,
            "element_name": element.name, "created": created, "version": element.version,
            "message": f"{verb} {element.element_type} '{element.name}' from {item.path}."}


@operation("get_collection_cache_health", Endpoint.READ,
           "Get health status and statistics for the collection cache: source, fetchedAt, ageSeconds, ttlSeconds, "
           "stale, item counts by type, total bytes, files skipped as invalid, and the last error reading the source. "
           "Atrium extends the reference with failures (failed reads in a row) and retryAfter (until when a source "
           "that failed is left alone, the cached copy answering).",
           returns="{source, cached, fetchedAt, ageSeconds, ttlSeconds, stale, itemCount, countsByType, totalBytes, "
                   "skipped, lastError, lastErrorAt?, failures?, retryAfter?}")
def get_collection_cache_health(call: Call) -> dict[str, Any]:
    return collection.cache_health()


@operation("submit_collection_content", Endpoint.CREATE,
           "Submit a local element to the community collection. content names the element: its name (with "
           "element_type when several types share it) or type/name, e.g. personas/code-reviewer. Atrium queues it "
           "for the server's curators instead of opening a GitHub issue: the element's collection file is validated "
           "as import_portfolio validates a file and against the collection's rules (an invalid element is "
           "refused), scanned for injection, and kept as a snapshot; a memory takes only its public entries. "
           "Submitting again while it is pending replaces the snapshot. Once a curator approves it, browse, search, "
           "get and install_collection_content serve it at its path (origin submission). Atrium extends the "
           "reference with the answer's submission (submission_id, status, path; reason once rejected), "
           "validation, scan and submissions (your latest submissions and their status: pending, approved, "
           "rejected or withdrawn), and with status: true, which only lists your submissions.", params=(
               Param("content", "string", True, "Element reference to submit: its name, or type/name"),
               Param("status", "boolean", False, "List your submissions and their status, submitting nothing",
                     False),
           ), returns="{submitted, message, submission: {submission_id, status, element_type, element_name, path, "
                      "submitted_at, decided_at, reason?, branch?}, replaced, validation, scan, submissions}")
def submit_collection_content(call: Call) -> dict[str, Any]:
    if call.flag("status"):
        return {"submitted": False,
                "submissions": [submissions.submission_data(s) for s in submissions.submissions_of(caller=call.caller)]}
    element = submissions.element_resolve(caller=call.caller, content=call.params.get("content"),
                                          element_type=call.element_type)
    submission, replaced = submissions.submission_create(caller=call.caller, element=element)
    call.warnings.extend(submission.validation.get("warnings", []))
    verb = "Replaced the pending snapshot of" if replaced else "Submitted"
    return {"submitted": True, "replaced": replaced, "submission": submissions.submission_data(submission),
            "validation": submission.validation, "scan": submission.scan,
            "message": f"{verb} {submission.element_type} '{submission.name}' for {submission.path}: pending a "
                       "curator's review. Call submit_collection_content with status: true to follow it.",
            "submissions": [submissions.submission_data(s) for s in submissions.submissions_of(caller=call.caller)]}
