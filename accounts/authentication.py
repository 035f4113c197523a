"""Bearer authentication for /mcp and /api: personal tokens (atr_...) and OAuth access tokens."""

from __future__ import annotations

import hashlib

from django.conf import settings
from oauth2_provider.models import AccessToken
from oauth2_provider.settings import oauth2_settings
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.request import Request

from accounts.caller import Caller
from accounts.models import PersonalToken, User
from accounts.ratelimit import auth_failure_record, auth_retry_after, client_address
from accounts.scopes import ALL_SCOPES
from accounts.services import token_digest, token_touch


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


class BearerAuthentication(BaseAuthentication):
    """`Authorization: Bearer <token>` with either token kind, rate-limited on failure."""

    def authenticate(self, request: Request) -> tuple[User, PersonalToken | AccessToken] | None:
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

    def authenticate_header(self, request: Request) -> str:
        return f'Bearer resource_metadata="{protected_resource_metadata_url()}"'


def caller_from_request(request: Request, *, via: str) -> Caller:
    """The Caller for an authenticated DRF request (token or signed-in session)."""
    token = request.auth
    if isinstance(token, PersonalToken):
        scopes = frozenset(token.scopes.values_list("name", flat=True))
    elif isinstance(token, AccessToken):
        scopes = frozenset(token.scope.split()) & ALL_SCOPES
    else:
        return Caller.trusted(request.user, via=via)
    return Caller(user=request.user, scopes=scopes, via=via, token=token)
