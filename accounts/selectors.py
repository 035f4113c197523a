"""Reads for accounts, always through the caller."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Avg, Count, Q, QuerySet
from django.utils import timezone

from accounts import cache_stats
from accounts.models import AuditEvent, McpSession, PersonalToken, Scope, ToolCall
from core.caller import Caller
from core.errors import InvalidInput, NotFound
from core.process_cache import ProcessCache


def caller_describe(*, caller: Caller) -> dict[str, Any]:
    """Who the caller is and what its credential allows: auth_status and /api/me."""
    user = caller.user
    token = caller.token
    kind = caller.token_kind
    described: dict[str, Any] = {
        "authenticated": True,
        "user": {"id": user.pk, "username": user.get_username(), "email": user.email,
                 "is_staff": user.is_staff},
        "token": {"kind": kind, "description": caller.credential},
        "scopes": sorted(caller.scopes),
        "mcp_url": settings.ATRIUM_MCP_URL,
    }
    if kind == "personal":
        described["token"].update(
            id=token.pk, label=token.label, prefix=token.prefix,
            created_at=token.created_at.isoformat(),
            expires_at=token.expires_at.isoformat() if token.expires_at else None,
        )
    elif kind == "oauth":
        described["token"].update(
            client_id=token.application.client_id, client_name=token.application.name,
            expires_at=token.expires.isoformat(),
        )
    if caller.session is not None:
        described["session"] = {"id": caller.session.id, "transport": caller.session.transport,
                                "client": caller.session.client_name or None,
                                "protocol_version": caller.session.protocol_version or None}
    return described


def token_list(*, caller: Caller, include_revoked: bool = False) -> QuerySet[PersonalToken]:
    tokens = PersonalToken.objects.filter(user=caller.user).prefetch_related("scopes")
    if not include_revoked:
        tokens = tokens.filter(revoked_at__isnull=True)
    return tokens


def token_get(*, caller: Caller, token_id: int) -> PersonalToken:
    token = PersonalToken.objects.filter(user=caller.user, pk=token_id).first()
    if token is None:
        raise NotFound(f"You have no token with id {token_id}.", code="token_not_found")
    return token


def scope_list() -> QuerySet[Scope]:
    return Scope.objects.order_by("name")


# Open sessions this process has found, by id, for a second: a client's burst of calls in one
# session is served by one lookup. A session closed here is forgotten at once
# (accounts.services.mcp_session_close), one closed by another process within the second.
SESSION_CACHE_SECONDS = 1.0
_sessions = ProcessCache(SESSION_CACHE_SECONDS)


def mcp_session_find(*, caller: Caller, session_id: str) -> McpSession | None:
    """The caller's open, unexpired MCP session with that id, or None.

    A session id presented by another user is treated as unknown: ids are bearer-like and
    must not let one user ride on another's connection. So is a stdio process's session, which
    only its process serves.
    """
    session = _sessions.get(session_id)
    if session is not None and session.user_id == caller.user.pk:
        cache_stats.record("sessions", hit=True)
        return session
    idle = timezone.now() - timedelta(days=settings.ATRIUM_MCP_SESSION_IDLE_DAYS)
    session = McpSession.objects.filter(
        pk=session_id, user=caller.user, transport=McpSession.Transport.HTTP, closed_at__isnull=True,
        last_seen_at__gte=idle,
    ).first()
    cache_stats.record("sessions", hit=session is not None)
    if session is not None:
        _sessions.set(session_id, session)
    return session


def sessions_forget(session_id: str | None = None) -> None:
    """Forget one session this process has found (a closed one), or every one."""
    _sessions.forget(session_id)


SECURITY_ACTIONS = ("token", "oauth", "gatekeeper")


def audit_category(action: str) -> str:
    return "security" if action.split(".")[0] in SECURITY_ACTIONS else "application"


def audit_events(
    *, caller: Caller, category: str = "all", text: str = "", since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """The caller's own audit trail, newest first."""
    events = AuditEvent.objects.filter(actor=caller.user)
    security = Q(action__regex=rf"^({'|'.join(SECURITY_ACTIONS)})\.")
    if category == "security":
        events = events.filter(security)
    elif category == "application":
        events = events.exclude(security)
    elif category != "all":
        raise InvalidInput("category must be all, security or application.", code="invalid_parameter")
    if text:
        events = events.filter(Q(action__icontains=text) | Q(target__icontains=text))
    if since:
        events = events.filter(at__gt=since)
    if until:
        events = events.filter(at__lt=until)
    return events.order_by("-at", "-id")


def tool_calls(*, caller: Caller, text: str = "", failed_only: bool = False, since: datetime | None = None,
               until: datetime | None = None) -> QuerySet[ToolCall]:
    """The caller's own MCP tool calls, newest first; `text` is matched within the tool, the
    operation and the error code."""
    calls = ToolCall.objects.filter(user=caller.user)
    if text:
        calls = calls.filter(Q(tool__icontains=text) | Q(operation__icontains=text) | Q(error_code__icontains=text))
    if failed_only:
        calls = calls.filter(outcome=ToolCall.Outcome.ERROR)
    if since:
        calls = calls.filter(at__gt=since)
    if until:
        calls = calls.filter(at__lt=until)
    return calls.order_by("-at", "-id")


def tool_call_stats(*, caller: Caller, since: datetime, limit: int = 20) -> list[dict[str, Any]]:
    """Per tool (the `limit` most called since `since`): calls, failed calls, and the mean and 95th
    percentile of their durations in milliseconds."""
    calls = tool_calls(caller=caller, since=since).order_by()
    rows = list(calls.values("tool").annotate(
        calls=Count("id"), errors=Count("id", filter=Q(outcome=ToolCall.Outcome.ERROR)),
        mean_ms=Avg("duration_ms")).order_by("-calls", "tool")[:limit])
    for row in rows:
        # The percentile by its rank, read in the database: one short query per tool shown.
        rank = min(row["calls"] - 1, int(row["calls"] * 0.95))
        row["p95_ms"] = calls.filter(tool=row["tool"]).order_by("duration_ms").values_list(
            "duration_ms", flat=True)[rank]
    return rows
