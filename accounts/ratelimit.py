"""Failed-authentication limits per client address, kept in the shared cache.

Checked before any token lookup, so a client guessing tokens costs us one cache read per try
once it is blocked. Fixed windows: simple, and good enough against guessing.
"""

import time

from django.conf import settings
from django.core.cache import cache


def _window() -> tuple[int, int]:
    size = settings.ATRIUM_AUTH_FAILURE_WINDOW
    start = int(time.time()) // size * size
    return start, start + size


def _key(ident: str, start: int) -> str:
    return f"authfail:{ident}:{start}"


def auth_retry_after(ident: str) -> int | None:
    """Seconds until `ident` may try again, or None if it is not blocked."""
    start, end = _window()
    failures = cache.get(_key(ident, start), 0)
    if failures >= settings.ATRIUM_AUTH_FAILURE_LIMIT:
        return max(1, end - int(time.time()))
    return None


def auth_failure_record(ident: str) -> None:
    start, end = _window()
    key = _key(ident, start)
    # add() then incr() is atomic on Redis; add only succeeds for the first failure in a window.
    if not cache.add(key, 1, timeout=end - start + 1):
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.add(key, 1, timeout=end - start + 1)
