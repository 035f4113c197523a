"""Aident's vault: each user's connections to integrations, their credentials sealed at rest, the
single-use connect links where a person types a secret or goes through OAuth consent, and the
credentials an executor gets on use, with an OAuth access token refreshed when it is about to expire.

Secrets reach this module from a connect page, an OAuth token endpoint or a `vault connect` call
with `credentials`, and leave it only through connection_credentials(), to an executor. No answer,
audit row or error here carries any part of one.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError, InvalidInput, NotFound
from core.input_bounds import text_problem
from integrations.crypto import SealBroken, reseal, seal, unseal
from integrations.models import AuthScheme, Connection, ConnectRequest, Integration, Skill

# An access token this close to its expiry is refreshed before use, so it cannot lapse on its way
# to the provider.
REFRESH_MARGIN = timedelta(seconds=60)
# last_used_at is written at most this often per connection: it is for people, and a write on
# every execution would cost more than the execution's own bookkeeping.
LAST_USED_PRECISION = timedelta(seconds=60)
MAX_CREDENTIAL_CHARS = 8192
# webhook_tools signs what it sends with a shared secret: an api_key integration whose key is
# stored, and entered, as `secret` (`apiKey` is taken as another name for it).
WEBHOOK_INTEGRATION = "webhook_tools"


@dataclass(frozen=True)
class CredentialField:
    name: str
    label: str
    secret: bool = True


# What each scheme's credentials are made of, in the order a connect page asks for them. The
# sealed JSON uses the same names, which are what the executors read.
SCHEME_FIELDS: dict[str, tuple[CredentialField, ...]] = {
    AuthScheme.API_KEY: (CredentialField("apiKey", "API key"),),
    AuthScheme.BEARER: (CredentialField("token", "Token"),),
    AuthScheme.BASIC: (CredentialField("username", "User name", secret=False), CredentialField("password", "Password")),
}
WEBHOOK_FIELDS = (CredentialField("secret", "Signing secret"),)
FIELD_ALIASES: dict[str, dict[str, str]] = {WEBHOOK_INTEGRATION: {"apiKey": "secret"}}

# How a connect link's instructions name what to do there.
SCHEME_TASKS = {
    AuthScheme.API_KEY: "enter the API key",
    AuthScheme.BEARER: "enter the token",
    AuthScheme.BASIC: "enter the user name and password",
}


class ConnectionExpired(DomainError):
    code = "connection_expired"
    http_status = 409


class ProviderUnavailable(DomainError):
    """The provider's token endpoint could not be reached or failed on its side: try again later."""

    code = "provider_unavailable"
    http_status = 502


class ConnectLinkGone(DomainError):
    code = "connect_link_gone"
    http_status = 410


class OAuthFailed(DomainError):
    code = "oauth_failed"


class ProviderRefused(Exception):
    """The token endpoint answered and refused the grant (invalid_grant, a revoked refresh token...)."""


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _close_ids(wanted: str, known: Iterable[str]) -> list[str]:
    """Up to three ids like `wanted`, compared without the `_tools` most ids end in (which would
    otherwise make every id look alike)."""
    stem = wanted.removesuffix("_tools")
    scored = [(difflib.SequenceMatcher(None, stem, pk.removesuffix("_tools")).ratio(), pk) for pk in known]
    return [pk for score, pk in sorted(scored, key=lambda pair: (-pair[0], pair[1])) if score >= 0.6][:3]


def integration_find(*, integration_id: str) -> Integration:
    """An enabled integration by id; NotFound suggesting the nearest ids otherwise."""
    integration = Integration.objects.filter(pk=integration_id, enabled=True).first()
    if integration is not None:
        return integration
    close = _close_ids(integration_id, Integration.objects.filter(enabled=True).values_list("pk", flat=True))
    hint = f" Did you mean: {', '.join(close)}?" if close else " Call vault with action 'status' to list them."
    raise NotFound(f"No integration '{integration_id}'.{hint}", code="integration_not_found",
                   extra={"suggestions": close})


def credential_fields(integration: Integration) -> tuple[CredentialField, ...]:
    """The fields a person enters for this integration (none for OAuth and for no auth)."""
    if integration.pk == WEBHOOK_INTEGRATION and integration.auth_scheme == AuthScheme.API_KEY:
        return WEBHOOK_FIELDS
    return SCHEME_FIELDS.get(integration.auth_scheme, ())


def _credentials_checked(integration: Integration, credentials: dict[str, Any]) -> dict[str, str]:
    """The credentials under their stored names, or InvalidInput naming the fields accepted."""
    scheme = integration.auth_scheme
    if scheme == AuthScheme.OAUTH2:
        raise InvalidInput(f"{integration.name} connects through OAuth consent, not with credentials: call connect "
                           "without credentials and open the link it answers with.", code="credentials_not_accepted")
    fields = credential_fields(integration)
    if not fields:
        raise InvalidInput(f"{integration.name} takes no credentials: call connect without them.",
                           code="credentials_not_accepted")
    aliases = FIELD_ALIASES.get(integration.pk, {})
    wanted = [f.name for f in fields]
    accepted = ", ".join(wanted + [f"{alias} (for {name})" for alias, name in aliases.items()])
    values: dict[str, str] = {}
    for key, value in credentials.items():
        name = aliases.get(key, key)
        if name not in wanted:
            # Not named back: a secret typed where its field's name belongs would be echoed.
            raise InvalidInput(f"Unknown credential field for {integration.name}; it takes: {accepted}.",
                               code="invalid_credentials")
        if name in values:
            raise InvalidInput(f"Credential '{name}' is given twice; it takes: {accepted}.",
                               code="invalid_credentials")
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"Credential '{key}' must be a non-empty string.", code="invalid_credentials")
        if (problem := text_problem(value, MAX_CREDENTIAL_CHARS)) is not None:
            # The problem names lengths and character positions, never the value.
            raise InvalidInput(f"Credential '{key}' {problem}.", code="invalid_credentials")
        values[name] = value
    missing = [name for name in wanted if name not in values]
    if missing:
        raise InvalidInput(f"Missing credential field(s) for {integration.name}: {', '.join(missing)}; it takes: "
                           f"{accepted}.", code="invalid_credentials")
    return values


def _connection_store(*, caller: Caller, integration: Integration, credentials: dict[str, Any] | None,
                      confirmed_usage: bool, expires_at: datetime | None = None,
                      granted_scopes: str = "") -> Connection:
    """Create or replace the caller's connection. update_or_create locks an existing row and, when
    two connects create the same one at once, lets the unique constraint pick one and updates it."""
    connection, _ = Connection.objects.update_or_create(
        user=caller.user, integration=integration,
        defaults={"state": Connection.State.CONNECTED, "sealed_credentials": seal(credentials),
                  "expires_at": expires_at, "granted_scopes": granted_scopes[:500],
                  "confirmed_usage": confirmed_usage, "connected_at": timezone.now()},
    )
    audit_record(caller=caller, action="vault.connect", target=integration.pk,
                 detail={"integrationId": integration.pk, "authScheme": integration.auth_scheme,
                         "fields": sorted(credentials or {}), "confirmedUsage": confirmed_usage})
    return connection


def _visible_state(connection: Connection | None) -> str:
    if connection is None:
        return "not_connected"
    if connection.state == Connection.State.EXPIRED:
        return "expired"
    if (connection.integration.auth_scheme == AuthScheme.OAUTH2 and connection.expires_at is not None
            and connection.expires_at <= timezone.now()
            and not (unseal(connection.sealed_credentials) or {}).get("refreshToken")):
        return "expired"  # lapsed, with nothing to refresh it with
    return "connected"


def vault_status(*, caller: Caller, integration_id: str | None = None) -> dict[str, Any]:
    """Every enabled integration (or the one asked for) and the caller's connection to it."""
    if integration_id is not None:
        integrations = [integration_find(integration_id=integration_id)]
    else:
        integrations = list(Integration.objects.filter(enabled=True))
    connections = {c.integration_id: c for c in Connection.objects.filter(
        user=caller.user, integration__in=integrations).select_related("integration")}
    rows = []
    for integration in integrations:
        connection = connections.get(integration.pk)
        state = _visible_state(connection)
        rows.append({
            "integrationId": integration.pk,
            "name": integration.name,
            "authScheme": integration.auth_scheme,
            "firstParty": integration.first_party,
            "connectionRequired": integration.connection_required,
            "connected": state == "connected",
            "state": state,
            "connectedAt": _iso(connection.connected_at) if connection else None,
            "lastUsedAt": _iso(connection.last_used_at) if connection else None,
            "expiresAt": _iso(connection.expires_at) if connection else None,
        })
    return {"integrations": rows}


def _oauth_config_problem(integration: Integration) -> str | None:
    config = integration.auth_config or {}
    missing = [key for key in ("authorizationUrl", "tokenUrl", "clientId") if not config.get(key)]
    return f"its OAuth settings lack {', '.join(missing)}" if missing else None


@transaction.atomic
def vault_connect(*, caller: Caller, integration_id: str, confirmed: bool = False,
                  credentials: dict[str, str] | None = None) -> dict[str, Any]:
    """Connect the caller to an integration: at once with `credentials`, at once for one that needs
    none, and otherwise through a connect link the user opens in a browser."""
    integration = integration_find(integration_id=integration_id)
    if integration.first_party and not confirmed:
        return {"status": "confirmation_required", "integrationId": integration.pk,
                "message": f"{integration.name} runs on this server's own account, so using it costs credits. "
                           "Ask the user; if they agree, call again with confirmed: true."}
    confirmed_usage = integration.first_party and confirmed
    if credentials is not None:
        values = _credentials_checked(integration, credentials)
        _connection_store(caller=caller, integration=integration, credentials=values, confirmed_usage=confirmed_usage)
        return {"status": "connected", "integrationId": integration.pk}
    if integration.auth_scheme == AuthScheme.NONE:
        _connection_store(caller=caller, integration=integration, credentials=None, confirmed_usage=confirmed_usage)
        return {"status": "connected", "integrationId": integration.pk}
    if integration.auth_scheme == AuthScheme.OAUTH2 and (problem := _oauth_config_problem(integration)):
        raise DomainError(f"{integration.name} cannot be connected yet: {problem}. An administrator must set them.",
                          code="integration_not_configured")
    now = timezone.now()
    lifetime = timedelta(minutes=settings.ATRIUM_VAULT_CONNECT_MINUTES)
    # An agent that retries (capabilities_execute answers with a link each time) gets the link it was
    # given while that has most of its life left, rather than a new link and audit row per call.
    link = ConnectRequest.objects.filter(user=caller.user, integration=integration, used_at__isnull=True,
                                         confirmed_usage=confirmed_usage, oauth_state="",
                                         expires_at__gt=now + lifetime / 2).order_by("-created_at").first()
    if link is None:
        link = ConnectRequest.objects.create(user=caller.user, integration=integration,
                                             confirmed_usage=confirmed_usage, created_at=now, expires_at=now + lifetime)
        audit_record(caller=caller, action="vault.connect_link", target=integration.pk,
                     detail={"integrationId": integration.pk, "expiresAt": _iso(link.expires_at)})
    task = SCHEME_TASKS.get(integration.auth_scheme, f"continue to {integration.name} to grant access")
    if integration.pk == WEBHOOK_INTEGRATION:
        task = "enter the signing secret"
    return {
        "status": "pending",
        "integrationId": integration.pk,
        "connectUrl": connect_url(link),
        "expiresAt": _iso(link.expires_at),
        "instructions": f"Open the link, sign in as {caller.user.get_username()}, and {task} there; "
                        "never paste secrets into the chat.",
    }


def connect_url(link: ConnectRequest) -> str:
    return f"{settings.ATRIUM_PUBLIC_URL}{reverse('vault:connect', args=[link.pk])}"


def oauth_redirect_uri() -> str:
    return f"{settings.ATRIUM_PUBLIC_URL}{reverse('vault:oauth-callback')}"


def _skills_needing(caller: Caller, integration: Integration) -> list[str]:
    return sorted(set(Skill.objects.filter(integrations=integration)
                      .filter(Q(owner__isnull=True) | Q(owner=caller.user)).values_list("name", flat=True)))


@transaction.atomic
def vault_disconnect(*, caller: Caller, integration_id: str) -> dict[str, Any]:
    """Forget the caller's connection and its credentials. Nothing is revoked at the provider: a
    token the provider issued stays valid there until it expires or the user revokes it."""
    integration = integration_find(integration_id=integration_id)
    deleted, _ = Connection.objects.filter(user=caller.user, integration=integration).delete()
    if not deleted:
        return {"status": "not_connected", "integrationId": integration.pk,
                "message": f"You have no connection to {integration.name}."}
    audit_record(caller=caller, action="vault.disconnect", target=integration.pk,
                 detail={"integrationId": integration.pk})
    return {"status": "disconnected", "integrationId": integration.pk,
            "affectedSkills": _skills_needing(caller, integration)}


def _expired(integration: Integration) -> ConnectionExpired:
    return ConnectionExpired(f"Your connection to {integration.name} has expired. Connect again: call vault with "
                             f"action 'connect' and integrationId '{integration.pk}'.")


def _needs_refresh(connection: Connection) -> bool:
    return connection.expires_at is not None and connection.expires_at <= timezone.now() + REFRESH_MARGIN


def connection_credentials(*, caller: Caller, integration: Integration) -> dict[str, Any] | None:
    """The caller's credentials for an integration, unsealed, for an executor; None when the caller
    has no connection. An OAuth access token about to expire is refreshed first.

    Call it outside any transaction of the caller's: a refreshed token must be kept even when the
    action it is used for fails (the provider may have retired the old refresh token).
    """
    connection = Connection.objects.filter(user=caller.user, integration=integration).first()
    if connection is None:
        return None
    if connection.state == Connection.State.EXPIRED:
        raise _expired(integration)
    if integration.auth_scheme == AuthScheme.OAUTH2 and _needs_refresh(connection):
        credentials = _refreshed(integration, connection.pk)
        if credentials is None:
            return None
    else:
        credentials = unseal(connection.sealed_credentials) or {}
    now = timezone.now()
    if connection.last_used_at is None or now - connection.last_used_at >= LAST_USED_PRECISION:
        Connection.objects.filter(pk=connection.pk).update(last_used_at=now)
    return credentials


def _refreshed(integration: Integration, connection_pk: int) -> dict[str, Any] | None:
    """Refresh under the connection's row lock: of many uses at once, the first refreshes and the
    others, once it commits, find a fresh token and use it instead of spending the refresh token again."""
    with transaction.atomic():
        connection = Connection.objects.select_for_update().filter(pk=connection_pk).first()
        if connection is None:
            return None  # disconnected meanwhile
        if connection.state == Connection.State.EXPIRED:
            raise _expired(integration)
        credentials = unseal(connection.sealed_credentials) or {}
        if not _needs_refresh(connection):
            return credentials
        answer = None
        if credentials.get("refreshToken"):
            try:
                answer = _token_request(integration, {"grant_type": "refresh_token",
                                                      "refresh_token": credentials["refreshToken"]})
            except ProviderRefused:
                answer = None
        if answer is not None:
            credentials = _tokens(answer, previous=credentials)
            connection.sealed_credentials = seal(credentials)
            connection.expires_at = _expiry(answer)
            connection.granted_scopes = str(answer.get("scope") or connection.granted_scopes)[:500]
            connection.save(update_fields=["sealed_credentials", "expires_at", "granted_scopes"])
            return credentials
        connection.state = Connection.State.EXPIRED
        connection.save(update_fields=["state"])
    # Raised once the expired state is committed, so the status shows it and later uses stop early.
    raise _expired(integration)


def _client_auth(integration: Integration) -> tuple[dict[str, str], httpx.BasicAuth | None]:
    """The client's credentials for the token endpoint: in the form (client_secret_post, the
    default) or as HTTP Basic (auth_config.tokenAuthMethod = client_secret_basic)."""
    config = integration.auth_config or {}
    client_id = str(config.get("clientId", ""))
    secret = unseal(integration.sealed_client_secret) if integration.sealed_client_secret else None
    if secret and config.get("tokenAuthMethod") == "client_secret_basic":
        return {}, httpx.BasicAuth(client_id, secret)
    form = {"client_id": client_id}
    if secret:
        form["client_secret"] = secret
    return form, None


def _token_request(integration: Integration, form: dict[str, str]) -> dict[str, Any]:
    """POST to the integration's token endpoint; its JSON (or form-encoded) answer.

    ProviderRefused when it answers 4xx or without an access token; ProviderUnavailable when it
    cannot be reached or fails on its side, which says nothing about the grant."""
    client_form, auth = _client_auth(integration)
    try:
        response = httpx.post(str(integration.auth_config["tokenUrl"]), data={**form, **client_form}, auth=auth,
                              headers={"Accept": "application/json"}, timeout=settings.ATRIUM_HTTP_TIMEOUT_SECONDS,
                              follow_redirects=False)
    except httpx.HTTPError as exc:
        raise ProviderUnavailable(f"{integration.name}'s token endpoint could not be reached "
                                  f"({type(exc).__name__}); try again later.") from None
    if response.status_code >= 500:
        raise ProviderUnavailable(f"{integration.name}'s token endpoint failed (HTTP {response.status_code}); "
                                  "try again later.")
    if "json" in response.headers.get("content-type", ""):
        try:
            answer = response.json()
        except ValueError:
            answer = None
    else:
        answer = dict(parse_qsl(response.text))
    if response.status_code >= 400 or not isinstance(answer, dict) or not answer.get("access_token"):
        raise ProviderRefused(str(answer.get("error", ""))[:100] if isinstance(answer, dict) else "")
    return answer


def _tokens(answer: dict[str, Any], previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """What is sealed from a token answer. A refresh that issues no new refresh token leaves the
    old one in force."""
    previous = previous or {}
    return {"accessToken": str(answer["access_token"]),
            "refreshToken": str(answer.get("refresh_token") or previous.get("refreshToken") or ""),
            "tokenType": str(answer.get("token_type") or previous.get("tokenType") or "Bearer")}


def _expiry(answer: dict[str, Any]) -> datetime | None:
    try:
        seconds = int(answer["expires_in"])
    except (KeyError, TypeError, ValueError):
        return None
    return timezone.now() + timedelta(seconds=max(seconds, 0))


@transaction.atomic
def integration_client_secret_set(*, integration: Integration, secret: str) -> None:
    """Seal an integration's OAuth client secret (empty: a public client, PKCE alone)."""
    Integration.objects.filter(pk=integration.pk).update(sealed_client_secret=seal(secret) if secret else "")
    integration.refresh_from_db(fields=["sealed_client_secret"])


# Connect links, as the pages use them.

def connect_link_for(*, user: User, token: str) -> ConnectRequest | None:
    """The user's own connect link; None for anyone else's, so a page cannot tell them apart from
    links that do not exist."""
    return ConnectRequest.objects.filter(pk=token, user=user).select_related("integration").first()


def connect_link_by_state(*, user: User, state: str) -> ConnectRequest | None:
    """The user's connect link an OAuth redirect's state belongs to."""
    if not state:
        return None
    return ConnectRequest.objects.filter(oauth_state=state, user=user).select_related("integration").first()


def connect_link_problem(link: ConnectRequest) -> str | None:
    if link.used_at is not None:
        return "This connect link has already been used."
    if link.expires_at <= timezone.now() or not link.integration.enabled:
        return "This connect link has expired."
    return None


def _claim(link: ConnectRequest, **changes: Any) -> None:
    """Mark a link used. The conditional update is the single-use check: of two submissions at
    once, the second finds used_at set (after waiting for the first's row lock) and changes nothing."""
    now = timezone.now()
    claimed = ConnectRequest.objects.filter(pk=link.pk, used_at__isnull=True, expires_at__gt=now).update(
        used_at=now, **changes)
    if not claimed:
        raise ConnectLinkGone(connect_link_problem(ConnectRequest.objects.select_related("integration").get(pk=link.pk))
                              or "This connect link has already been used.")


@transaction.atomic
def connect_link_complete(*, caller: Caller, token: str, credentials: dict[str, Any]) -> Connection:
    """A connect page's form: store the credentials typed there and use up the link."""
    link = connect_link_for(user=caller.user, token=token)
    if link is None:
        raise NotFound("No such connect link.", code="connect_link_not_found")
    if (problem := connect_link_problem(link)) is not None:
        raise ConnectLinkGone(problem)
    values = _credentials_checked(link.integration, credentials)
    _claim(link)
    return _connection_store(caller=caller, integration=link.integration, credentials=values,
                             confirmed_usage=link.confirmed_usage)


def _scopes_text(scopes: Any) -> str:
    if isinstance(scopes, dict):  # OpenAPI's flows name scopes as {name: description}
        return " ".join(scopes)
    if isinstance(scopes, list | tuple):
        return " ".join(str(s) for s in scopes)
    return str(scopes or "")


def _code_challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@transaction.atomic
def connect_link_authorization_url(*, caller: Caller, token: str) -> str:
    """Where an OAuth connect page sends the browser: the provider's consent page, with a fresh
    state and PKCE challenge (a new one each time, so only the latest attempt can complete)."""
    link = ConnectRequest.objects.select_for_update().filter(pk=token, user=caller.user).first()
    if link is None:
        raise NotFound("No such connect link.", code="connect_link_not_found")
    if (problem := connect_link_problem(link)) is not None:
        raise ConnectLinkGone(problem)
    integration = link.integration
    if integration.auth_scheme != AuthScheme.OAUTH2 or (problem := _oauth_config_problem(integration)):
        raise OAuthFailed(f"{integration.name} cannot be connected through OAuth"
                          f"{': ' + problem if problem else ''}.", code="integration_not_configured")
    verifier = secrets.token_urlsafe(64)
    link.oauth_state = secrets.token_urlsafe(32)
    link.sealed_verifier = seal(verifier)
    link.save(update_fields=["oauth_state", "sealed_verifier"])
    config = integration.auth_config
    query = urlencode({
        "response_type": "code",
        "client_id": str(config["clientId"]),
        "redirect_uri": oauth_redirect_uri(),
        "scope": _scopes_text(config.get("scopes")),
        "state": link.oauth_state,
        "code_challenge": _code_challenge(verifier),
        "code_challenge_method": "S256",
    })
    url = str(config["authorizationUrl"])
    return f"{url}{'&' if '?' in url else '?'}{query}"


def oauth_callback_complete(*, caller: Caller, state: str, code: str) -> Connection:
    """The provider's redirect back: exchange the code for tokens and store them sealed.

    The link is used up before the exchange (an authorization code is single-use at the provider
    too), and the verifier is forgotten with it; the exchange runs outside any transaction so no
    row stays locked while the provider answers."""
    link = connect_link_by_state(user=caller.user, state=state)
    if link is None:
        raise OAuthFailed("This sign-in does not match a connect link of yours. Start again from the link your "
                          "client gave you.", code="oauth_state_mismatch")
    if (problem := connect_link_problem(link)) is not None:
        raise ConnectLinkGone(problem)
    if not code:
        raise OAuthFailed("The provider sent no authorization code.", code="oauth_no_code")
    verifier = unseal(link.sealed_verifier)
    _claim(link, sealed_verifier="")
    integration = link.integration
    try:
        answer = _token_request(integration, {"grant_type": "authorization_code", "code": code,
                                              "redirect_uri": oauth_redirect_uri(), "code_verifier": verifier})
    except ProviderUnavailable as exc:
        raise ProviderUnavailable(f"{exc.message} This link is used up: ask your client for a new one.") from None
    except ProviderRefused as exc:
        raise OAuthFailed(f"{integration.name} refused to issue tokens ({exc or 'no reason given'}). Ask your "
                          "client for a new connect link and try again.", code="oauth_exchange_failed") from None
    granted = str(answer.get("scope") or _scopes_text(integration.auth_config.get("scopes")))
    with transaction.atomic():
        return _connection_store(caller=caller, integration=integration, credentials=_tokens(answer),
                                 confirmed_usage=link.confirmed_usage, expires_at=_expiry(answer),
                                 granted_scopes=granted)


# Key rotation.

def sealed_columns() -> tuple[tuple[type, str, str], ...]:
    """Every column sealed with the vault's keys, in every app: (model, column, what it holds)."""
    from accounts.models import GitHubAuth
    from elements.models import VerificationChallenge
    from workflows.models import Trigger

    return (
        (Connection, "sealed_credentials", "connection credentials"),
        (ConnectRequest, "sealed_verifier", "PKCE verifiers"),
        (Integration, "sealed_client_secret", "OAuth client secrets"),
        (Trigger, "sealed_secret", "webhook signing secrets"),
        (GitHubAuth, "sealed_token", "GitHub tokens"),
        (GitHubAuth, "sealed_device_code", "GitHub device codes"),
        (VerificationChallenge, "sealed_code", "verification codes"),
    )


def vault_reseal(*, batch_size: int = 200) -> dict[str, int]:
    """Reseal every sealed column under the first key in ATRIUM_VAULT_KEYS: how many rows of each.

    Each batch is one transaction holding its rows' locks, so a connect or a refresh that writes a
    row meanwhile is neither lost nor overwritten with the old secret; a batch that is interrupted
    leaves the ones before it done, and running again finishes the rest."""
    counts: dict[str, int] = {}
    for model, column, label in sealed_columns():
        counts[label] = 0
        pks = list(model.objects.exclude(**{column: ""}).order_by("pk").values_list("pk", flat=True))
        for start in range(0, len(pks), batch_size):
            with transaction.atomic():
                rows = model.objects.select_for_update().filter(pk__in=pks[start:start + batch_size]).only("pk", column)
                for row in rows:
                    sealed = getattr(row, column)
                    if not sealed:
                        continue
                    try:
                        resealed = reseal(sealed)
                    except SealBroken as exc:
                        raise SealBroken(f"{model.__name__} {row.pk}: {exc.message}") from None
                    model.objects.filter(pk=row.pk).update(**{column: resealed})
                    counts[label] += 1
    return counts
