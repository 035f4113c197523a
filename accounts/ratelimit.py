"""Who the client is, and how often it may fail or call, counted in the shared cache.

`client_address` is the one place that decides a request's client address: the failure limits,
registration limits and allauth's own limits all read it. Counters live in the Django cache
(Redis in production, so every web process shares them) and are incremented atomically.
Failure limits are checked before any token lookup or password check, so a client guessing
credentials costs us one cache read per try once it is blocked.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _networks(tuple(settings.ATRIUM_TRUSTED_PROXIES)))


def client_address(request: HttpRequest | Any) -> str:
    """The client's address: REMOTE_ADDR, or behind trusted proxies the nearest untrusted hop.

    Each proxy appends the address it received the request from to X-Forwarded-For, so the list
    is read from the right, skipping trusted proxies: what a client writes there itself stays to
    the left of the first untrusted hop and is never believed. From anyone else the header is
    ignored, so no client can choose its address, or someone else's.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    if not _trusted(remote):
        return remote
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop):
            return hop[:64]
    return hops[0] if hops else remote


def _count(bucket: str, ident: str, window: int, *, increment: bool) -> tuple[int, int]:
    """The hits on `ident` in its current window (after adding one if `increment`), and the
    seconds until that window ends.

    A window opens at the first hit and lasts `window` seconds, so a client cannot double its
    allowance by straddling a clock boundary. The count's key and the window's start expire together.
    """
    key = f"{bucket}:{ident}"
    now = time.time()
    if increment:
        # add() is a no-op when the key exists and incr() is atomic on Redis and locmem, so
        # concurrent hits from several web processes are all counted.
        cache.add(f"{key}:start", now, timeout=window)
        cache.add(key, 0, timeout=window)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.add(key, 1, timeout=window)
            count = 1
        start = cache.get(f"{key}:start", now)
    else:
        found = cache.get_many([key, f"{key}:start"])
        count, start = found.get(key, 0), found.get(f"{key}:start", now)
    return count, max(1, math.ceil(start + window - now))


def auth_retry_after(ident: str) -> int | None:
    """Seconds until `ident` may try to authenticate again, or None if it is not blocked."""
    failures, retry_after = _count("authfail", ident, settings.ATRIUM_AUTH_FAILURE_WINDOW, increment=False)
    return retry_after if failures >= settings.ATRIUM_AUTH_FAILURE_LIMIT else None


def auth_failure_record(ident: str) -> None:
    _count("authfail", ident, settings.ATRIUM_AUTH_FAILURE_WINDOW, increment=True)


def login_failure_record(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None,
                         **kwargs: Any) -> None:
    """`user_login_failed` receiver: a wrong password counts like a wrong token."""
    if request is not None:
        auth_failure_record(client_address(request))


def refuse_blocked_address(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Answer a sign-in form's POST with 429 while its address is blocked, before any password check."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            retry_after = auth_retry_after(client_address(request))
            if retry_after is not None:
                response = HttpResponse(
                    f"Too many failed sign-ins from this address. Try again in {retry_after} seconds.\n",
                    status=429, content_type="text/plain; charset=utf-8",
                )
                response["Retry-After"] = str(retry_after)
                return response
        return view(request, *args, **kwargs)

    return wrapped


def registration_retry_after(ident: str) -> int | None:
    """Count one client registration from `ident`; seconds to wait if it is over the hourly limit."""
    count, retry_after = _count("dcr", ident, 3600, increment=True)
    return retry_after if count > settings.ATRIUM_REGISTRATIONS_PER_HOUR else None


def tool_call_retry_after(token: Any) -> int | None:
    """Count one tool call on `token`; seconds to wait if it is over ATRIUM_TOOL_CALLS_PER_MINUTE.

    Per token, not per address: one user's busy agent must not slow down a colleague behind the
    same office NAT, and a token is what a runaway client keeps presenting.
    """
    limit = settings.ATRIUM_TOOL_CALLS_PER_MINUTE
    if not limit or token is None:
        return None
    count, retry_after = _count("toolcalls", f"{type(token).__name__}:{token.pk}", 60, increment=True)
    return retry_after if count > limit else None


def capability_execution_retry_after(user_id: int) -> int | None:
    """Count one capability execution by this user; seconds to wait if it is over
    ATRIUM_CAPABILITY_EXECUTIONS_PER_MINUTE. Per user, across all their tokens and adapters: each
    execution reaches a third party (or the operator's mail server) in the user's name."""
    limit = settings.ATRIUM_CAPABILITY_EXECUTIONS_PER_MINUTE
    if not limit:
        return None
    count, retry_after = _count("capexec", str(user_id), 60, increment=True)
    return retry_after if count > limit else None


def permission_prompt_retry_after(ident: str) -> int | None:
    """Count one permission_prompt evaluation for `ident` (an MCP session); seconds to wait if it is
    over ATRIUM_PERMISSION_PROMPTS_PER_MINUTE. Per session: a client asks about every tool call it
    makes, so one runaway agent must not use up the allowance of the user's other sessions."""
    limit = settings.ATRIUM_PERMISSION_PROMPTS_PER_MINUTE
    if not limit:
        return None
    count, retry_after = _count("cliprompt", ident, 60, increment=True)
    return retry_after if count > limit else None
