"""GitHub sign-in by the OAuth device flow (RFC 8628, as GitHub implements it).

github_auth_start asks GitHub for a device code and answers at once with the user code; the
polls (github_auth_poll, driven by accounts.tasks.github_auth_poll_task, or by a status read when
tasks run eagerly) ask for the token until the user grants or denies it or the code expires. The
token is sealed with the vault's keys and leaves this module only through github_token_for.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import AuditEvent, GitHubAuth, User
from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError, InvalidInput
from integrations.crypto import seal, unseal

log = logging.getLogger(__name__)

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
SLOW_DOWN_SECONDS = 5  # RFC 8628 section 3.5: each slow_down adds five seconds to the interval
# GitHub's client ids: "Iv1." and hex for GitHub Apps, "Ov23" and letters for newer OAuth apps,
# twenty characters for the older OAuth apps.
CLIENT_ID = re.compile(r"(?:Iv1\.[0-9a-fA-F]{8,32}|Iv23[A-Za-z0-9]{8,32}|Ov23[A-Za-z0-9]{8,32}|[A-Za-z0-9.]{20})")
MAX_CLIENT_ID = 40


class GitHubUnavailable(DomainError):
    code = "github_unavailable"
    http_status = 502


def endpoints() -> dict[str, str]:
    return {"deviceCode": f"{settings.ATRIUM_GITHUB_URL}/login/device/code",
            "accessToken": f"{settings.ATRIUM_GITHUB_URL}/login/oauth/access_token",
            "user": f"{settings.ATRIUM_GITHUB_API_URL}/user"}


def client_id_of(row: GitHubAuth | None) -> tuple[str, str]:
    """The client id the user signs in through, and where it comes from: user, server or none."""
    if row is not None and row.client_id:
        return row.client_id, "user"
    if settings.ATRIUM_GITHUB_CLIENT_ID:
        return settings.ATRIUM_GITHUB_CLIENT_ID, "server"
    return "", "none"


def _post(url: str, form: dict[str, str]) -> dict[str, Any]:
    """GitHub's JSON answer to a form POST. Its device-flow errors (authorization_pending…) come as
    JSON with an `error`, on 200 or 4xx alike; anything else is GitHubUnavailable."""
    try:
        response = httpx.post(url, data=form, headers={"Accept": "application/json"},
                              timeout=settings.ATRIUM_HTTP_TIMEOUT_SECONDS, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise GitHubUnavailable(f"GitHub could not be reached ({type(exc).__name__}); try again later.") from None
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or (response.status_code >= 400 and "error" not in answer):
        raise GitHubUnavailable(f"GitHub answered HTTP {response.status_code} without a usable answer; "
                                "try again later.")
    return answer


def _login_of(token: str) -> str:
    try:
        response = httpx.get(endpoints()["user"], headers={"Authorization": f"Bearer {token}",
                                                           "Accept": "application/vnd.github+json"},
                             timeout=settings.ATRIUM_HTTP_TIMEOUT_SECONDS, follow_redirects=False)
        login = response.json().get("login") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        login = None
    if not isinstance(login, str) or not login:
        raise GitHubUnavailable("GitHub granted a token but did not say whose it is (GET /user failed).")
    return login[:100]


def _row_locked(user: User) -> GitHubAuth:
    GitHubAuth.objects.get_or_create(user=user)
    return GitHubAuth.objects.select_for_update().get(user=user)


def _expired(row: GitHubAuth, now: Any) -> bool:
    return row.expires_at is not None and row.expires_at <= now


def github_auth_start(*, caller: Caller) -> GitHubAuth:
    """Start the device flow, or answer the one already waiting for the user. The row stays locked
    while GitHub is asked for a device code, so concurrent starts make one request between them."""
    with transaction.atomic():
        row = _row_locked(caller.user)
        now = timezone.now()
        if row.state == GitHubAuth.State.PENDING and not _expired(row, now):
            return row
        if row.state == GitHubAuth.State.CONNECTED:
            return row
        client_id, _source = client_id_of(row)
        if not client_id:
            raise InvalidInput("GitHub sign-in has no OAuth client id: call configure_oauth with your OAuth app's "
                               "client_id, or ask the operator to set ATRIUM_GITHUB_CLIENT_ID.",
                               code="github_not_configured")
        answer = _post(endpoints()["deviceCode"], {"client_id": client_id, "scope": settings.ATRIUM_GITHUB_SCOPES})
        if answer.get("error") or not all(answer.get(k) for k in ("device_code", "user_code", "verification_uri")):
            refused = str(answer.get("error", ""))[:80] or "no device code"
            raise GitHubUnavailable(f"GitHub refused to start the device flow: {refused}. Check the OAuth app's "
                                    "client id and that it has the device flow enabled.")
        row.state = GitHubAuth.State.PENDING
        row.sealed_device_code = seal(str(answer["device_code"]))
        row.user_code = str(answer["user_code"])[:32]
        row.verification_uri = str(answer["verification_uri"])[:300]
        interval = answer.get("interval")
        row.interval = min(interval, 300) if isinstance(interval, int) and interval >= 0 else 5
        row.started_at, row.last_polled_at, row.polls, row.error = now, None, 0, ""
        expires_in = answer.get("expires_in")
        row.expires_at = now + timedelta(seconds=expires_in if isinstance(expires_in, int) and expires_in > 0 else 900)
        row.save()
        audit_record(caller=caller, action="github_auth.start", target=caller.user.get_username(),
                     detail={"expiresAt": row.expires_at.isoformat()})
        transaction.on_commit(lambda: _poll_schedule(caller.user.pk, row.interval))
    return row


def _poll_schedule(user_id: int, countdown: int) -> None:
    from accounts.tasks import github_auth_poll_schedule

    github_auth_poll_schedule(user_id, countdown)


def poll_due(row: GitHubAuth, now: Any) -> bool:
    return row.state == GitHubAuth.State.PENDING and next_poll_at(row) <= now


def next_poll_at(row: GitHubAuth) -> Any:
    # The first poll waits an interval too: GitHub answers slow_down to one sent sooner.
    return (row.last_polled_at or row.started_at or timezone.now()) + timedelta(seconds=row.interval)


def _finish(row: GitHubAuth, state: str, error: str = "") -> None:
    row.state, row.error, row.sealed_device_code = state, error, ""
    row.save()
    audit_record(action=f"github_auth.{state}", target=row.user.get_username(), via=AuditEvent.Via.TASK,
                 detail={"login": row.login, "scopes": row.scopes} if state == GitHubAuth.State.CONNECTED else {})


def github_auth_poll(*, user: User) -> GitHubAuth | None:
    """Ask GitHub once for the token, if the flow is pending and its interval has passed; store what
    it answers. The poll is claimed (last_polled_at) under the row lock and GitHub is asked outside
    it, so a worker's poll and a status read's never ask twice in one interval."""
    with transaction.atomic():
        row = GitHubAuth.objects.select_for_update().filter(user=user).first()
        now = timezone.now()
        if row is None or not poll_due(row, now):
            return row
        if _expired(row, now):
            _finish(row, GitHubAuth.State.EXPIRED, "The code expired before it was entered; call setup_github_auth "
                                                   "again.")
            return row
        row.last_polled_at, row.polls = now, row.polls + 1
        row.save(update_fields=["last_polled_at", "polls", "updated_at"])
        sealed, (client_id, _source) = row.sealed_device_code, client_id_of(row)
    try:
        answer = _post(endpoints()["accessToken"], {"client_id": client_id, "device_code": unseal(sealed),
                                                    "grant_type": DEVICE_GRANT})
        token = answer.get("access_token")
        login = _login_of(token) if isinstance(token, str) and token else ""
    except GitHubUnavailable as exc:
        answer, token, login = {"error": "unavailable", "error_description": exc.message}, None, ""
    with transaction.atomic():
        row = GitHubAuth.objects.select_for_update().get(pk=row.pk)
        if row.state != GitHubAuth.State.PENDING or row.sealed_device_code != sealed:
            return row  # cleared or restarted while GitHub answered
        error = str(answer.get("error") or "")
        if login:
            row.sealed_token, row.login, row.connected_at = seal(token), login, timezone.now()
            row.scopes = [s for s in re.split(r"[,\s]+", str(answer.get("scope") or "")) if s][:50]
            row.user_code = row.verification_uri = ""
            _finish(row, GitHubAuth.State.CONNECTED)
        elif error == "authorization_pending":
            row.error = ""
            row.save(update_fields=["error", "updated_at"])
        elif error == "slow_down":
            row.interval += SLOW_DOWN_SECONDS
            row.error = "GitHub asked to poll more slowly."
            row.save(update_fields=["interval", "error", "updated_at"])
        elif error == "expired_token":
            _finish(row, GitHubAuth.State.EXPIRED, "The code expired before it was entered; call setup_github_auth "
                                                   "again.")
        elif error == "access_denied":
            _finish(row, GitHubAuth.State.DENIED, "The sign-in was denied on GitHub.")
        elif error == "unavailable":
            row.error = str(answer["error_description"])[:300]
            row.save(update_fields=["error", "updated_at"])
        else:
            _finish(row, GitHubAuth.State.DENIED, f"GitHub refused the device code: {error[:80] or 'no token'}.")
        log.info("GitHub sign-in poll for user %s: %s", user.pk, row.state)
    return row


def github_auth_clear(*, caller: Caller) -> bool:
    """Forget the user's token and any flow under way (their own client id stays). True if there
    was a sign-in or a flow to forget."""
    with transaction.atomic():
        row = GitHubAuth.objects.select_for_update().filter(user=caller.user).first()
        if row is None or row.state == GitHubAuth.State.NONE:
            return False
        was = row.state
        row.state, row.sealed_token, row.login, row.scopes = GitHubAuth.State.NONE, "", "", []
        row.sealed_device_code = row.user_code = row.verification_uri = row.error = ""
        row.started_at = row.expires_at = row.last_polled_at = row.connected_at = None
        row.polls = 0
        row.save()
        audit_record(caller=caller, action="github_auth.clear", target=caller.user.get_username(),
                     detail={"was": was})
    return True


def github_client_configure(*, caller: Caller, client_id: str) -> GitHubAuth:
    client_id = client_id.strip()
    if len(client_id) > MAX_CLIENT_ID or not CLIENT_ID.fullmatch(client_id):
        raise InvalidInput("client_id must be a GitHub OAuth client id: 'Iv1.' or 'Ov23' followed by its letters, "
                           "or the 20 characters of an older OAuth app's id.", code="invalid_parameter")
    with transaction.atomic():
        row = _row_locked(caller.user)
        row.client_id = client_id
        row.save(update_fields=["client_id", "updated_at"])
        audit_record(caller=caller, action="github_auth.configure", target=caller.user.get_username(),
                     detail={"clientId": client_id})
    return row


def github_auth_status(*, caller: Caller) -> GitHubAuth | None:
    """The caller's sign-in, after the poll that is due (which, with tasks run eagerly, no worker makes)."""
    row = GitHubAuth.objects.filter(user=caller.user).first()
    if row is not None and poll_due(row, timezone.now()):
        row = github_auth_poll(user=caller.user)
    return row


def github_token_for(user: User) -> str | None:
    """The user's GitHub token, for the calls made on their behalf; None when not connected."""
    row = GitHubAuth.objects.filter(user=user, state=GitHubAuth.State.CONNECTED).first()
    return unseal(row.sealed_token) if row is not None and row.sealed_token else None
