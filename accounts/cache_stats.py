"""Hit and miss counts of the server's caches, per worker process (read by elements.cache_report)."""

from __future__ import annotations

import threading
from collections import Counter

_counts: Counter[str] = Counter()
_lock = threading.Lock()


def record(name: str, *, hit: bool) -> None:
    """Count one lookup of cache `name` in this process."""
    with _lock:
        _counts[f"{name}:{'hits' if hit else 'misses'}"] += 1


def counts(name: str) -> tuple[int, int]:
    """(hits, misses) of cache `name` since this process started."""
    with _lock:
        return _counts[f"{name}:hits"], _counts[f"{name}:misses"]
