"""What a process has looked up, kept for a second or so: a burst of calls costs one lookup.

Every entry lives at most `seconds`, so a change made by another process is seen within that
time; a change made by this process forgets the entries it makes untrue at once (forget).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from cachetools import TTLCache


class ProcessCache:
    """A thread-safe map whose entries expire `seconds` after they were set."""

    def __init__(self, seconds: float, *, maxsize: int = 4096, timer: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._entries: TTLCache = TTLCache(maxsize=maxsize, ttl=seconds, timer=timer)
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            return self._entries.get(key)

    def set(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._entries[key] = value

    def forget(self, key: Hashable | None = None) -> None:
        """Forget `key`, or every entry."""
        with self._lock:
            if key is None:
                self._entries.clear()
            else:
                self._entries.pop(key, None)
