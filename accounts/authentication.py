"""Bearer authentication for /mcp and /api: personal tokens (atr_...) and OAuth access tokens."""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from oauth2_provider.models import AccessToken
from oauth2_provider.settings import oauth2_settings
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.request import Request

from accounts.models import PersonalToken, User
from accounts.ratelimit import auth_failure_record, auth_retry_after, client_address
from accounts.scopes import ALL_SCOPES
from accounts.services import token_digest, token_touch
from core.caller import Caller
from core.process_cache import ProcessCache


def protected_resource_metadata_url() -> str:
    return f"{settings.ATRIUM_PUBLIC_URL}/.well-known/oauth-protected-resource/mcp"


def _personal_token_resolve(raw: str) -> tuple[User, PersonalToken]:
    token = PersonalToken.objects.select_related("user").filter(digest=token_digest(raw)).first()
    if token is None or token.revoked_at is not None:
        raise AuthenticationFailed("Invalid or revoked token.")
    if token.is_expired:
        raise AuthenticationFailed("Token expired.")
    if not token.user.is_active:
        raise AuthenticationFailed("User inactive.")
    token_touch(token)
    return token.user, token


def _audience_ok(token: AccessToken) -> bool:
    """RFC 8707: a token bound to resources must name this server; an unbound one is accepted."""
    if not token.resource:
        return True
    ours = {settings.ATRIUM_MCP_URL, settings.ATRIUM_PUBLIC_URL, settings.ATRIUM_PUBLIC_URL + "/"}
    return bool(ours.intersection(token.resource))


def _oauth_token_resolve(raw: str) -> tuple[User, AccessToken]:
    checksum = hashlib.sha256(raw.encode()).hexdigest()
    token = AccessToken.objects.select_related("user", "application").filter(token_checksum=checksum).first()
    # Tokens without a user are client-credential or client-registration tokens: not for /mcp.
    if token is None or token.user is None or oauth2_settings.DCR_REGISTRATION_SCOPE in token.scope.split():
        raise AuthenticationFailed("Invalid or revoked token.")
    if token.is_expired():
        raise AuthenticationFailed("Token expired.")
    if not _audience_ok(token):
        raise AuthenticationFailed("Token was not issued for this server.")
    if not token.user.is_active:
        raise AuthenticationFailed("User inactive.")
    return token.user, token


def bearer_resolve(request: HttpRequest | Request) -> tuple[User, PersonalToken | AccessToken] | None:
    """The user and token of `Authorization: Bearer <token>` (either kind), None without one;
    AuthenticationFailed for a bad token, Throttled for an address with too many of those."""
    header = get_authorization_header(request).split()
    if not header or header[0].lower() != b"bearer":
        return None
    ident = client_address(request)
    retry_after = auth_retry_after(ident)
    if retry_after is not None:
        raise Throttled(wait=retry_after, detail="Too many failed authentications from this address.")
    try:
        if len(header) != 2:
            raise AuthenticationFailed("Malformed Authorization header: expected 'Bearer <token>'.")
        raw = header[1].decode("ascii")
        if raw.startswith(PersonalToken.PREFIX):
            return _personal_token_resolve(raw)
        return _oauth_token_resolve(raw)
    except (AuthenticationFailed, UnicodeDecodeError) as exc:
        auth_failure_record(ident)
        if isinstance(exc, UnicodeDecodeError):
            raise AuthenticationFailed("Malformed token.") from exc
        raise


# A token's user, row and scopes, kept in this process for a second: a client's burst of calls
# is authenticated by one lookup, and a token revoked, expired or whose user was deactivated is
# refused by every process within a second of it (at once by the process that revoked it).
AUTH_CACHE_SECONDS = 1.0
_authenticated = ProcessCache(AUTH_CACHE_SECONDS)


def bearer_authenticate(request: HttpRequest, *, via: str) -> Caller | None:
    """The Caller of a request's bearer token (see bearer_resolve), None without one."""
    header = hashlib.sha256(request.META.get("HTTP_AUTHORIZATION", "").encode(errors="surrogateescape")).digest()
    known = _authenticated.get(header)
    if known is not None:
        user, token, scopes = known
        return Caller(user=user, scopes=scopes, via=via, token=token)
    resolved = bearer_resolve(request)
    if resolved is None:
        return None
    caller = token_caller(*resolved, via=via)
    _authenticated.set(header, (caller.user, caller.token, caller.scopes))
    return caller


def authenticated_forget(**_: Any) -> None:
    """Forget every token this process has authenticated: a token, or a user, was changed here.
    (Connected to the saves and deletes of tokens and users in accounts.apps.)"""
    _authenticated.forget()


# How long a token that logged out may still list the tools that need no scope and end its session.
LOGOUT_GRACE_SECONDS = 60


def _logout_key(presented: str) -> str:
    return f"auth:logged-out:{presented}"


def _presented_digest(raw: str) -> str:
    """How the token `raw` is looked up: a personal token's digest, an OAuth token's checksum."""
    if raw.startswith(PersonalToken.PREFIX):
        return token_digest(raw)
    return hashlib.sha256(raw.encode()).hexdigest()


def logout_mark(token: PersonalToken | AccessToken) -> None:
    """Remember for a minute, on every process (through the cache), that `token` logged out."""
    presented = token.digest if isinstance(token, PersonalToken) else token.token_checksum
    cache.set(_logout_key(presented), token.user_id, LOGOUT_GRACE_SECONDS)


def logged_out_caller(request: HttpRequest, *, via: str) -> Caller | None:
    """A caller with no scopes for a token that logged out within the last minute, else None."""
    header = get_authorization_header(request).split()
    if len(header) != 2 or header[0].lower() != b"bearer":
        return None
    try:
        raw = header[1].decode("ascii")
    except UnicodeDecodeError:
        return None
    user_id = cache.get(_logout_key(_presented_digest(raw)))
    user = User.objects.filter(pk=user_id, is_active=True).first() if user_id is not None else None
    return Caller(user=user, scopes=frozenset(), via=via) if user is not None else None


class BearerAuthentication(BaseAuthentication):
    """`Authorization: Bearer <token>` with either token kind, rate-limited on failure."""

    def authenticate(self, request: Request) -> tuple[User, PersonalToken | AccessToken] | None:
        return bearer_resolve(request)

    def authenticate_header(self, request: Request) -> str:
        return f'Bearer resource_metadata="{protected_resource_metadata_url()}"'


def token_caller(user: User, token: Any, *, via: str) -> Caller:
    """The Caller presenting `token` (personal or OAuth): the token's scopes, no more."""
    if isinstance(token, PersonalToken):
        scopes = frozenset(token.scopes.values_list("name", flat=True))
    else:
        scopes = frozenset(token.scope.split()) & ALL_SCOPES
    return Caller(user=user, scopes=scopes, via=via, token=token)


def caller_from_request(request: Request, *, via: str) -> Caller:
    """The Caller for an authenticated DRF request (token or signed-in session)."""
    if isinstance(request.auth, PersonalToken | AccessToken):
        return token_caller(request.user, request.auth, via=via)
    return Caller.trusted(request.user, via=via)
