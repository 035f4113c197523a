"""OAuth 2.1 for MCP clients, on django-oauth-toolkit: scopes from the database, dynamic client
registration limited to loopback and https redirects, and audit records."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from django.http import HttpRequest, HttpResponse, JsonResponse
from oauth2_provider import views as oauth2_views
from oauth2_provider.scopes import BaseScopes

from accounts.caller import Caller
from accounts.models import Scope
from accounts.services import audit_record

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


class AuthorizationView(oauth2_views.AuthorizationView):
    """The consent page, listing each requested scope in words."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["scope_pairs"] = list(zip(context.get("scopes", []), context.get("scopes_descriptions", []),
                                          strict=False))
        return context


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


class RegistrationView(oauth2_views.DynamicClientRegistrationView):
    """RFC 7591 registration, open to anonymous MCP clients."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        refusal = _redirect_uris_refusal(request)
        if refusal is not None:
            return refusal
        response = super().post(request, *args, **kwargs)
        if response.status_code == 201:
            registered = json.loads(response.content)
            audit_record(action="oauth.client_register", via="web",
                         target=f"OAuth client {registered['client_id']} '{registered.get('client_name', '')}'",
                         detail={"redirect_uris": registered.get("redirect_uris", [])})
        return response


class RegistrationManagementView(oauth2_views.DynamicClientRegistrationManagementView):
    """RFC 7592 client configuration, with the same redirect rules on update."""

    def put(self, request: HttpRequest, client_id: str, *args: Any, **kwargs: Any) -> HttpResponse:
        refusal = _redirect_uris_refusal(request)
        if refusal is not None:
            return refusal
        return super().put(request, client_id, *args, **kwargs)


def record_authorization(sender: Any, request: HttpRequest, token: Any, **kwargs: Any) -> None:
    """Audit the first token of a grant (the user's consent), not every refresh."""
    if request.POST.get("grant_type") != "authorization_code" or token.user is None:
        return
    caller = Caller(user=token.user, scopes=frozenset(token.scope.split()), via="web", token=token)
    audit_record(caller=caller, action="oauth.authorize",
                 target=f"OAuth client {token.application.client_id} '{token.application.name}'",
                 detail={"scopes": token.scope.split()})
