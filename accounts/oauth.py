"""OAuth 2.1 for MCP clients, on django-oauth-toolkit: scopes from the database, tokens only for
this server's MCP endpoint (RFC 8707), S256 PKCE only, revocation on authorization-code reuse,
dynamic client registration limited to loopback and https redirects and throttled per address,
failed token requests throttled per address, and audit records."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from oauth2_provider import oauth2_validators
from oauth2_provider import views as oauth2_views
from oauth2_provider.exceptions import FatalClientError, OAuthToolkitError
from oauth2_provider.models import RefreshToken
from oauth2_provider.scopes import BaseScopes
from oauthlib.oauth2.rfc6749 import errors as oauth_errors

from accounts.models import Scope
from accounts.ratelimit import auth_failure_record, auth_retry_after, client_address, registration_retry_after
from accounts.scopes import scopes_by_product
from accounts.services import audit_record, code_redemption_record, code_reuse_revoke, token_digest
from core.caller import Caller

LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}


class DatabaseScopes(BaseScopes):
    """Scopes are rows of accounts.Scope, so curators can read their descriptions in admin."""

    def get_all_scopes(self) -> dict[str, str]:
        return dict(Scope.objects.values_list("name", "description"))

    def get_available_scopes(self, application: Any = None, request: Any = None, *args: Any,
                             **kwargs: Any) -> list[str]:
        return list(Scope.objects.values_list("name", flat=True))

    def get_default_scopes(self, application: Any = None, request: Any = None, *args: Any,
                           **kwargs: Any) -> list[str]:
        # A client that asks for nothing in particular asks for what the user can grant; the
        # consent page lists every scope before the user agrees.
        return self.get_available_scopes()


def resource_problem(resources: list[str]) -> str | None:
    """Why these RFC 8707 resource indicators are refused, or None: this server issues tokens for
    one resource only, its MCP endpoint, so a token it issues is never good anywhere else."""
    for resource in resources:
        if resource != settings.ATRIUM_MCP_URL:
            return f"The resource '{resource}' is not served here; the only resource is {settings.ATRIUM_MCP_URL}."
    return None


def too_many_requests(retry_after: int, description: str) -> JsonResponse:
    response = JsonResponse({"error": "temporarily_unavailable",
                             "error_description": f"{description} Retry after {retry_after} seconds."}, status=429)
    response["Retry-After"] = str(retry_after)
    return response


class OAuth2Validator(oauth2_validators.OAuth2Validator):
    """Remembers which tokens each authorization code produced, so a second use revokes them."""

    def save_bearer_token(self, token: dict[str, Any], request: Any, *args: Any, **kwargs: Any) -> None:
        super().save_bearer_token(token, request, *args, **kwargs)
        if request.grant_type == "authorization_code" and token.get("refresh_token"):
            family = (RefreshToken.objects.filter(token_checksum=token_digest(token["refresh_token"]))
                      .values_list("token_family", flat=True).first())
            if family is not None:
                code_redemption_record(code=request.code, client_id=request.client.client_id, token_family=family)

    def validate_code(self, client_id: str, code: str, client: Any, request: Any, *args: Any, **kwargs: Any) -> bool:
        if super().validate_code(client_id, code, client, request, *args, **kwargs):
            return True
        code_reuse_revoke(code=code, client_id=client.client_id)
        return False

    def invalidate_authorization_code(self, client_id: str, code: str, request: Any, *args: Any,
                                      **kwargs: Any) -> None:
        try:
            super().invalidate_authorization_code(client_id, code, request, *args, **kwargs)
        except oauth_errors.InvalidGrantError:
            # A concurrent exchange of the same code deleted the grant first: both got past
            # validate_code and both were issued tokens, so this is a reuse too.
            code_reuse_revoke(code=code, client_id=request.client.client_id)
            raise


class AuthorizationView(oauth2_views.AuthorizationView):
    """The consent page, listing each requested scope in words.

    Requests the server would refuse anyway (PKCE `plain`, a resource other than /mcp) are
    refused before the user is asked, with an error redirect the client sees.
    """

    def validate_authorization_request(self, request: HttpRequest) -> tuple[list[str], dict[str, Any]]:
        scopes, credentials = super().validate_authorization_request(request)
        # The redirect URI is the client's registered one by now, so errors may go back to it.
        state = credentials.get("state")
        if credentials.get("code_challenge_method") != "S256":
            error: oauth_errors.OAuth2Error = oauth_errors.InvalidRequestError(
                description="code_challenge_method must be S256; plain PKCE is not accepted.", state=state)
            raise OAuthToolkitError(error=error, redirect_uri=credentials["redirect_uri"])
        problem = resource_problem(request.GET.getlist("resource"))
        if problem is not None:
            error = oauth_errors.CustomOAuth2Error(error="invalid_target", description=problem, state=state)
            raise OAuthToolkitError(error=error, redirect_uri=credentials["redirect_uri"])
        return scopes, credentials

    def form_valid(self, form: Any) -> HttpResponse:
        # The consent form's hidden fields come back from the browser and could have been edited.
        problem = resource_problem(form.cleaned_data.get("resource", "").split())
        if problem is not None:
            error = oauth_errors.CustomOAuth2Error(error="invalid_target", description=problem)
            return self.error_response(FatalClientError(error=error), None)
        return super().form_valid(form)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(consent_summary(context.get("scopes") or [], context.get("redirect_uri") or ""))
        return context


def consent_summary(requested: list[str], redirect_uri: str) -> dict[str, Any]:
    """What the consent page shows: the requested scopes that gate something today, grouped by
    product, how many others were asked for, and the host the client is sent back to."""
    from accounts.api import scopes_of_api
    from core.tools import scopes_of_tools

    gating = scopes_of_tools() | scopes_of_api()
    wanted = set(requested)
    groups = [(product, [(name, words) for name, words in scopes if name in wanted and name in gating])
              for product, scopes in scopes_by_product()]
    return {"scope_groups": [(product, scopes) for product, scopes in groups if scopes],
            "scopes_inert": len(wanted - gating), "redirect_host": urlsplit(redirect_uri).netloc}


class TokenView(oauth2_views.TokenView):
    """The token endpoint: failures count against the client address like a bad bearer token."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        address = client_address(request)
        retry_after = auth_retry_after(address)
        if retry_after is not None:
            return too_many_requests(retry_after, "Too many failed token requests from this address.")
        problem = resource_problem(request.POST.getlist("resource"))
        if problem is not None:
            response: HttpResponse = JsonResponse({"error": "invalid_target", "error_description": problem},
                                                  status=400)
        else:
            response = super().post(request, *args, **kwargs)
        if response.status_code in (400, 401):
            auth_failure_record(address)
        return response


def redirect_uri_problem(uri: str) -> str | None:
    """Why a client may not register this redirect URI, or None.

    https anywhere (hosted clients such as claude.ai); plain http only on loopback, where
    RFC 8252 lets native clients pick any port at authorization time.
    """
    if any(c.isspace() for c in uri):
        # The registration is stored space-separated: whitespace would smuggle in a second URI.
        return f"{uri!r}: a redirect URI may not contain whitespace"
    parts = urlsplit(uri)
    if "#" in uri:
        return f"{uri}: a redirect URI may not have a fragment"
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return None
    return f"{uri}: only https redirect URIs, or http on a loopback address (127.0.0.1, [::1], localhost), are accepted"


def _redirect_uris_refusal(request: HttpRequest) -> JsonResponse | None:
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return None  # the package's own parser answers malformed JSON
    uris = body.get("redirect_uris") if isinstance(body, dict) else None
    if not isinstance(uris, list):
        return None
    problems = [p for p in (redirect_uri_problem(u) for u in uris if isinstance(u, str)) if p]
    if problems:
        return JsonResponse({"error": "invalid_redirect_uri", "error_description": "; ".join(problems)},
                            status=400)
    return None


def _registration_client_uri_public(response: HttpResponse) -> dict[str, Any]:
    """Point registration_client_uri at ATRIUM_PUBLIC_URL. The package builds it from the request's
    Host, which behind a proxy is an internal name and in any case is the client's to choose."""
    registered = json.loads(response.content)
    path = reverse("oauth2_provider:dcr-register-management", kwargs={"client_id": registered["client_id"]})
    registered["registration_client_uri"] = f"{settings.ATRIUM_PUBLIC_URL}{path}"
    response.content = json.dumps(registered)
    return registered


class RegistrationView(oauth2_views.DynamicClientRegistrationView):
    """RFC 7591 registration, open to anonymous MCP clients, limited per address per hour."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            retry_after = registration_retry_after(client_address(request))
            if retry_after is not None:
                return too_many_requests(retry_after, "Too many client registrations from this address.")
        refusal = _redirect_uris_refusal(request)
        if refusal is not None:
            return refusal
        response = super().post(request, *args, **kwargs)
        if response.status_code == 201:
            registered = _registration_client_uri_public(response)
            audit_record(action="oauth.client_register", via="web",
                         target=f"OAuth client {registered['client_id']} '{registered.get('client_name', '')}'",
                         detail={"redirect_uris": registered.get("redirect_uris", [])})
        return response


class RegistrationManagementView(oauth2_views.DynamicClientRegistrationManagementView):
    """RFC 7592 client configuration, with the same redirect rules on update."""

    def get(self, request: HttpRequest, client_id: str, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().get(request, client_id, *args, **kwargs)
        if response.status_code == 200:
            _registration_client_uri_public(response)
        return response

    def put(self, request: HttpRequest, client_id: str, *args: Any, **kwargs: Any) -> HttpResponse:
        refusal = _redirect_uris_refusal(request)
        if refusal is not None:
            return refusal
        response = super().put(request, client_id, *args, **kwargs)
        if response.status_code == 200:
            _registration_client_uri_public(response)
        return response


def record_authorization(sender: Any, request: HttpRequest, token: Any, **kwargs: Any) -> None:
    """Audit the first token of a grant (the user's consent), not every refresh."""
    if request.POST.get("grant_type") != "authorization_code" or token.user is None:
        return
    caller = Caller(user=token.user, scopes=frozenset(token.scope.split()), via="web", token=token)
    audit_record(caller=caller, action="oauth.authorize",
                 target=f"OAuth client {token.application.client_id} '{token.application.name}'",
                 detail={"scopes": token.scope.split()})
