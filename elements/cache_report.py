"""What get_cache_budget_report answers: each of the server's caches with its size, budget and hit rate.

- The community collection's index (elements.collection), kept in the database: items and bytes
  against the reader's bounds, its age against the TTL; hits and misses counted in this process.
- The shared cache (Django's cache: Redis in production, process memory otherwise), which holds the
  rate-limit counters: Redis reports its own memory, maxmemory and keyspace hits; process memory its
  keys against MAX_ENTRIES.
- The full-text search index: the caller's indexed documents (elements and memory entries). It is an
  index, not a cache: every search reads it, so it has no hit rate.
- MCP sessions (accounts.McpSession): the caller's open sessions, the idle expiry, and how many
  session lookups found their session, in this process.
- The compiled-pattern and parsed-expression caches of this worker process (functools.lru_cache).

Counts "in this process" start at zero when a worker starts; with several workers each answers for its own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache as shared_cache
from django.utils import timezone

from accounts import cache_stats
from accounts.models import McpSession
from core.caller import Caller
from elements import collection
from elements.models import CollectionCache, Element, MemoryEntry


def _rates(hits: int | None, misses: int | None) -> dict[str, Any]:
    if hits is None or misses is None:
        return {"hits": None, "misses": None, "hitRate": None}
    total = hits + misses
    return {"hits": hits, "misses": misses, "hitRate": round(hits / total, 4) if total else None}


def _counted(name: str) -> dict[str, Any]:
    return _rates(*cache_stats.counts(name))


def _utilization(used: int | None, budget: int | None) -> float | None:
    return round(used / budget, 4) if used is not None and budget else None


def _collection() -> dict[str, Any]:
    row = CollectionCache.objects.filter(source=str(settings.ATRIUM_COLLECTION_SOURCE)).first()
    used = row.total_bytes if row else 0
    return {"name": "collection-index", "kind": "database", "description": "The community collection's files, "
            "read from its source and kept for browse, search and install.", "entries": row.item_count if row else 0,
            "budgetEntries": collection.MAX_FILES, "bytes": used, "budgetBytes": collection.MAX_TOTAL_BYTES,
            "utilization": _utilization(used, collection.MAX_TOTAL_BYTES),
            "ttlSeconds": settings.ATRIUM_COLLECTION_TTL_SECONDS,
            "ageSeconds": int((timezone.now() - row.fetched_at).total_seconds()) if row and row.fetched_at else None,
            "stale": collection.cache_stale(row) if row else True, "scope": "server", "countedIn": "process",
            **_counted("collection")}


def _shared() -> dict[str, Any]:
    backend = settings.CACHES["default"]["BACKEND"].rsplit(".", 1)[-1]
    data: dict[str, Any] = {"name": "shared-cache", "kind": backend, "description": "Django's cache: the rate "
                            "limits' counters.", "scope": "server"}
    client = getattr(shared_cache, "_cache", None)
    if backend == "RedisCache":
        info = client.get_client(write=False).info()
        used, budget = info.get("used_memory"), info.get("maxmemory") or None
        entries = sum(v.get("keys", 0) for k, v in info.items() if k.startswith("db") and isinstance(v, dict))
        return {**data, "entries": entries, "budgetEntries": None, "bytes": used, "budgetBytes": budget,
                "utilization": _utilization(used, budget), "countedIn": "server",
                **_rates(info.get("keyspace_hits"), info.get("keyspace_misses"))}
    if isinstance(client, dict):  # LocMemCache: the process's own dict
        budget = getattr(shared_cache, "_max_entries", None)
        return {**data, "entries": len(client), "budgetEntries": budget, "bytes": None, "budgetBytes": None,
                "utilization": _utilization(len(client), budget), "countedIn": "process", **_rates(None, None)}
    return {**data, "entries": None, "budgetEntries": None, "bytes": None, "budgetBytes": None,
            "utilization": None, "countedIn": None, **_rates(None, None)}


def _search(caller: Caller) -> dict[str, Any]:
    elements = Element.objects.filter(owner=caller.user).count()
    entries = MemoryEntry.objects.filter(memory__owner=caller.user).count()
    return {"name": "search-index", "kind": "database", "description": "The full-text index search reads: your "
            "elements and memory entries. An index, not a cache: every search reads it.",
            "entries": elements + entries, "budgetEntries": None, "bytes": None, "budgetBytes": None,
            "utilization": None, "scope": "caller", "countedIn": None, **_rates(None, None)}


def _sessions(caller: Caller) -> dict[str, Any]:
    idle = timedelta(days=settings.ATRIUM_MCP_SESSION_IDLE_DAYS)
    open_sessions = McpSession.objects.filter(user=caller.user, closed_at__isnull=True,
                                              last_seen_at__gte=timezone.now() - idle).count()
    return {"name": "mcp-sessions", "kind": "database", "description": "Your open MCP sessions; one idle for "
            f"{idle.days} days expires.", "entries": open_sessions, "budgetEntries": None, "bytes": None,
            "budgetBytes": None, "utilization": None, "idleExpirySeconds": int(idle.total_seconds()),
            "scope": "caller", "countedIn": "process", **_counted("sessions")}


def _process_caches() -> list[tuple[str, str, Callable[..., Any]]]:
    from elements import templating
    from integrations import schemas
    from workflows import expressions

    return [("template-patterns", "Compiled RE2 patterns of template validation.", templating._compiled),
            ("workflow-expressions", "Parsed workflow expressions.", expressions.parse),
            ("workflow-templates", "Parsed workflow text templates.", expressions.template_parse),
            ("integration-patterns", "Compiled RE2 patterns of integration schemas.", schemas._compiled)]


def _lru(name: str, description: str, function: Callable[..., Any]) -> dict[str, Any]:
    info = function.cache_info()
    return {"name": name, "kind": "process", "description": description, "entries": info.currsize,
            "budgetEntries": info.maxsize, "bytes": None, "budgetBytes": None,
            "utilization": _utilization(info.currsize, info.maxsize), "scope": "process", "countedIn": "process",
            **_rates(info.hits, info.misses)}


def cache_budget_report(*, caller: Caller) -> dict[str, Any]:
    caches = [_collection(), _shared(), _search(caller), _sessions(caller),
              *(_lru(*spec) for spec in _process_caches())]
    over = [c["name"] for c in caches if c["utilization"] is not None and c["utilization"] >= 0.9]
    return {"caches": caches, "nearBudget": over, "generatedAt": timezone.now().isoformat()}
