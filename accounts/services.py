"""Writes for accounts: tokens, MCP sessions, the audit log. Every adapter calls these."""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Q
from django.db.models.sql import InsertQuery
from django.utils import timezone
from oauth2_provider.models import AccessToken, RefreshToken

from accounts.models import AuditEvent, McpSession, PersonalToken, RedeemedCode, Scope, ToolCall, User
from accounts.selectors import sessions_forget
from core.caller import Caller
from core.errors import Forbidden, InvalidInput
from core.process_cache import ProcessCache

logger = logging.getLogger(__name__)


def token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def audit_record(
    *,
    action: str,
    target: str = "",
    detail: dict[str, Any] | None = None,
    caller: Caller | None = None,
    via: str | None = None,
) -> AuditEvent:
    """Record one write. `caller` is None only for anonymous writes (OAuth client registration)."""
    event = _audit_event(action=action, target=target, detail=detail, caller=caller, via=via)
    event.save()
    return event


def audits_record(*, action: str, targets: list[str], caller: Caller) -> None:
    """Record one write of `action` to each of `targets`, in one statement (an import's batch)."""
    AuditEvent.objects.bulk_create([_audit_event(action=action, target=target, caller=caller) for target in targets])


def _audit_event(*, action: str, target: str, caller: Caller | None, detail: dict[str, Any] | None = None,
                 via: str | None = None) -> AuditEvent:
    return AuditEvent(
        actor=caller.user if caller else None,
        actor_name=caller.user.get_username() if caller else "",
        credential=caller.credential if caller else "",
        via=via or (caller.via if caller else AuditEvent.Via.WEB),
        action=action,
        target=target[:255],
        detail=detail or {},
    )


def _scopes_resolve(*, caller: Caller, names: Iterable[str] | None) -> list[Scope]:
    wanted = set(caller.scopes) if names is None else {n.strip() for n in names if n.strip()}
    found = list(Scope.objects.filter(name__in=wanted))
    unknown = wanted - {s.name for s in found}
    if unknown:
        known = ", ".join(Scope.objects.order_by("name").values_list("name", flat=True))
        raise InvalidInput(f"Unknown scope(s): {', '.join(sorted(unknown))}. Known scopes: {known}.",
                           code="unknown_scope")
    beyond = wanted - caller.scopes
    if beyond:
        raise Forbidden(
            f"A token cannot grant more than its maker holds; you lack: {', '.join(sorted(beyond))}.",
            code="scope_escalation",
        )
    return found


@transaction.atomic
def token_create(
    *,
    caller: Caller,
    user: User,
    label: str,
    scopes: Iterable[str] | None = None,
    expires_at: datetime | None = None,
) -> tuple[PersonalToken, str]:
    """Make a personal access token for `user`. Returns the row and the raw token, shown once.

    `scopes=None` grants every scope the caller holds.
    """
    if user.pk != caller.user.pk and not (caller.via == AuditEvent.Via.ADMIN and caller.user.is_staff):
        raise Forbidden("You can only make tokens for yourself.")
    label = (label or "").strip()
    if not label:
        raise InvalidInput("A token needs a label, e.g. the client it is for.", code="label_required")
    if len(label) > 100:
        raise InvalidInput("A token label is at most 100 characters.", code="label_too_long")
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidInput("expires_at must be in the future.", code="expiry_in_past")
    scope_rows = _scopes_resolve(caller=caller, names=scopes)

    raw = PersonalToken.PREFIX + secrets.token_urlsafe(32)
    token = PersonalToken.objects.create(
        user=user, label=label, prefix=raw[:12], digest=token_digest(raw), expires_at=expires_at
    )
    token.scopes.set(scope_rows)
    audit_record(
        caller=caller,
        action="token.create",
        target=f"personal token {token.pk} '{label}' of {user.get_username()}",
        detail={"scopes": sorted(s.name for s in scope_rows),
                "expires_at": expires_at.isoformat() if expires_at else None},
    )
    return token, raw


@transaction.atomic
def token_revoke(*, caller: Caller, token: PersonalToken) -> PersonalToken:
    """Revoke a personal token. Revoking a revoked token changes nothing."""
    if token.user_id != caller.user.pk and not (caller.via == AuditEvent.Via.ADMIN and caller.user.is_staff):
        raise Forbidden("You can only revoke your own tokens.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(caller=caller, action="token.revoke",
                     target=f"personal token {token.pk} '{token.label}' of {token.user.get_username()}")
    return token


def token_touch(token: PersonalToken) -> None:
    """Note that a token was used, writing at most once every few minutes per token."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.ATRIUM_TOKEN_LAST_USED_PRECISION)
    if token.last_used_at is None or token.last_used_at < stale:
        # Conditional, so concurrent requests on one token write once rather than each.
        PersonalToken.objects.filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=stale), pk=token.pk
        ).update(last_used_at=now)
        token.last_used_at = now


@transaction.atomic
def credential_revoke(*, caller: Caller) -> str:
    """Log out: revoke the token the caller presented and close its MCP session. For a minute the
    token may still list the tools that need no scope (accounts.authentication.logout_mark)."""
    from accounts.authentication import logout_mark

    kind = caller.token_kind
    if kind == "personal":
        token_revoke(caller=caller, token=caller.token)
    elif kind == "oauth":
        access: AccessToken = caller.token
        audit_record(caller=caller, action="oauth.logout",
                     target=f"OAuth token {access.pk} of client '{access.application.name}'")
        # Revoke the refresh token too, or the client would just mint a new access token.
        refresh = RefreshToken.objects.filter(access_token=access).first()
        if refresh is not None:
            refresh.revoke()
        access.revoke()
    else:
        raise InvalidInput(
            "This connection has no token to revoke: it is a stdio process or a signed-in browser session. "
            "Stop the process or sign out instead.",
            code="no_token",
        )
    if caller.session is not None:
        mcp_session_close(caller=caller, session=caller.session)
    transaction.on_commit(lambda: logout_mark(caller.token))
    return kind


def mcp_session_open(
    *,
    caller: Caller,
    transport: str,
    protocol_version: str = "",
    client_name: str = "",
    client_version: str = "",
    elicitation_modes: str = "",
) -> McpSession:
    session = McpSession.objects.create(
        id=secrets.token_urlsafe(32),
        user=caller.user,
        transport=transport,
        credential=caller.credential[:200],
        protocol_version=protocol_version[:20],
        client_name=client_name[:200],
        client_version=client_version[:50],
        elicitation_modes=elicitation_modes[:20],
    )
    # A stdio session is its process's own: only that process's calls, one at a time, activate
    # elements in it (HTTP refuses its id, accounts.selectors.mcp_session_find), and it starts
    # with none. Elsewhere another process may activate one at any time.
    session.known_without_activations = transport == McpSession.Transport.STDIO
    return session


def credential_key(caller: Caller) -> str:
    """What names the caller's credential across its tokens: a personal token itself; for OAuth,
    the client and the user, so a refreshed access token keeps its standing session."""
    token = caller.token
    if isinstance(token, PersonalToken):
        return f"personal:{token.pk}"
    return f"oauth:{token.application_id}:{caller.user.pk}"


# Standing sessions this process has looked up, for a second (as accounts.authentication keeps
# tokens): one closed here is forgotten at once, one closed elsewhere within the second.
_standing = ProcessCache(1.0)


def mcp_session_of_credential(*, caller: Caller, protocol_version: str, client_name: str = "",
                              client_version: str = "") -> McpSession:
    """The caller's standing session for requests that carry no session id (2026-07-28): one open
    session per credential, opened on first use and shared by every process (one row, unique
    while open), closed by auth_logout like any other."""
    key = credential_key(caller)
    session = _standing.get(key)
    if session is None or session.user_id != caller.user.pk:
        session = _standing_find(caller, key, protocol_version, client_name, client_version)
        _standing.set(key, session)
    mcp_session_touch(session)
    return session


def standing_forget() -> None:
    """Forget the sessions this process has looked up, standing ones and by id."""
    _standing.forget()
    sessions_forget()


def _standing_find(caller: Caller, key: str, protocol_version: str, client_name: str,
                   client_version: str) -> McpSession:
    session = McpSession.objects.filter(credential_key=key, closed_at__isnull=True, user=caller.user).first()
    if session is None:
        try:
            with transaction.atomic():
                session = McpSession.objects.create(
                    id=secrets.token_urlsafe(32), user=caller.user, transport=McpSession.Transport.HTTP,
                    credential=caller.credential[:200], protocol_version=protocol_version[:20],
                    client_name=client_name[:200], client_version=client_version[:50], credential_key=key)
        except IntegrityError:  # another request opened it first
            session = McpSession.objects.get(credential_key=key, closed_at__isnull=True, user=caller.user)
    return session


def mcp_session_describe(*, session: McpSession, protocol_version: str, client_name: str, client_version: str,
                         elicitation_modes: str) -> None:
    """Record what a stdio client said of itself at initialize on the process's session."""
    session.protocol_version = protocol_version[:20]
    session.client_name = client_name[:200]
    session.client_version = client_version[:50]
    session.elicitation_modes = elicitation_modes[:20]
    session.save(update_fields=["protocol_version", "client_name", "client_version", "elicitation_modes"])


def mcp_session_touch(session: McpSession) -> None:
    now = timezone.now()
    if now - session.last_seen_at > timedelta(minutes=1):
        McpSession.objects.filter(pk=session.pk).update(last_seen_at=now)
        session.last_seen_at = now


def mcp_session_close(*, caller: Caller, session: McpSession) -> None:
    if session.user_id != caller.user.pk:
        raise Forbidden("That MCP session is not yours.")
    McpSession.objects.filter(pk=session.pk, closed_at__isnull=True).update(closed_at=timezone.now())
    session.closed_at = timezone.now()
    sessions_forget(session.pk)
    if session.credential_key:
        _standing.forget(session.credential_key)


def code_redemption_record(*, code: str, client_id: str, token_family: uuid.UUID) -> RedeemedCode:
    return RedeemedCode.objects.create(digest=token_digest(code), client_id=client_id, token_family=token_family)


@transaction.atomic
def code_reuse_revoke(*, code: str, client_id: str) -> int:
    """An authorization code came back after it was exchanged: someone else has it too, so every
    token issued from it is revoked (RFC 6749 section 4.1.2). The number of token families revoked."""
    families = set(RedeemedCode.objects.filter(digest=token_digest(code), client_id=client_id)
                   .values_list("token_family", flat=True))
    for family in families:
        # The whole family: refresh rotation may have minted newer tokens from the first ones.
        RefreshToken.revoke_family(family)
    if families:
        audit_record(action="oauth.code_reuse", via=AuditEvent.Via.WEB, target=f"OAuth client {client_id}",
                     detail={"revoked_token_families": len(families)})
    return len(families)


# The records of this thread's tool calls that wait for their answer to go out (records_defer).
_deferred = threading.local()


def records_defer() -> None:
    """From now on, this thread's tool calls keep their records until records_write(): a transport
    calls it once the answer has gone out, so the client does not wait for the insert."""
    _deferred.records = []


def records_write() -> None:
    """Write the records kept since records_defer(), and write each later one at once again."""
    records, _deferred.records = getattr(_deferred, "records", None), None
    for fields in records or ():
        _tool_call_insert(fields)


def tool_call_record(*, caller: Caller, server: str, tool: str, operation: str, error_code: str | None,
                     duration_ms: float) -> None:
    """Record one MCP tool call, at once or, after records_defer(), when its answer has gone out.
    The answer is already made: a record that cannot be written is logged and dropped rather than
    turning that answer into a failure."""
    transport = caller.session.transport if caller.session is not None else McpSession.Transport.HTTP
    fields = {"user": caller.user, "server": server[:16], "transport": transport, "tool": tool[:64],
              "operation": operation[:64], "error_code": (error_code or "")[:64],
              "outcome": ToolCall.Outcome.OK if error_code is None else ToolCall.Outcome.ERROR,
              "duration_ms": round(duration_ms, 3), "at": timezone.now()}
    records = getattr(_deferred, "records", None)
    if records is not None:
        records.append(fields)
    else:
        _tool_call_insert(fields)


def _tool_call_insert(fields: dict[str, Any]) -> None:
    tool, operation = fields["tool"], fields["operation"]
    try:
        if connection.in_atomic_block:
            # A savepoint, so that a failed insert inside a caller's transaction leaves it usable.
            with transaction.atomic():
                ToolCall.objects.create(**fields)
        elif connection.vendor == "postgresql":
            _tool_call_insert_async(fields)
        else:  # one statement, committed on its own
            ToolCall.objects.create(**fields)
    except DatabaseError:
        logger.warning("tool call not recorded: %s %s", tool, operation, exc_info=True)


def _tool_call_insert_async(fields: dict[str, Any]) -> None:
    """The record as one statement on PostgreSQL whose commit does not wait for the write-ahead
    log to reach the disk: a third of a read's database time went to that wait. Should the
    database itself crash, the calls of its last fraction of a second may go unrecorded; nothing
    else is affected (the setting is the statement's own transaction's: the two statements of one
    message are one transaction). Django's PostgreSQL cursor binds parameters client-side, so both
    go in one round trip; the INSERT is the one the ORM would send."""
    query = InsertQuery(ToolCall)
    query.insert_values([f for f in ToolCall._meta.local_concrete_fields if not f.primary_key], [ToolCall(**fields)])
    [(sql, params)] = query.get_compiler(connection=connection).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL synchronous_commit TO OFF; {sql}", params)


def expired_purge() -> dict[str, int]:
    """Delete MCP sessions idle past their lifetime and closed a day ago, expired OAuth tokens, and
    redeemed-code records older than any refresh token issued from them."""
    from oauth2_provider.models import clear_expired
    from oauth2_provider.settings import oauth2_settings

    now = timezone.now()
    idle = now - timedelta(days=settings.ATRIUM_MCP_SESSION_IDLE_DAYS)
    sessions, _ = McpSession.objects.filter(last_seen_at__lt=idle).delete()
    closed, _ = McpSession.objects.filter(closed_at__lt=now - timedelta(days=1)).delete()
    clear_expired()
    if oauth2_settings.REFRESH_TOKEN_EXPIRE_SECONDS:
        lifetime = timedelta(seconds=oauth2_settings.REFRESH_TOKEN_EXPIRE_SECONDS)
        RedeemedCode.objects.filter(redeemed_at__lt=now - lifetime).delete()
    calls, _ = ToolCall.objects.filter(at__lt=now - timedelta(days=settings.ATRIUM_TOOL_CALL_RETENTION_DAYS)).delete()
    return {"sessions": sessions + closed, "toolCalls": calls}
