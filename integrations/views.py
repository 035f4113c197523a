"""The vault's pages: a connect link (a form for an API key, token or password, or a button on to
the provider's OAuth consent) and the OAuth redirect back. They are where secrets are typed, so that
nobody pastes one into a chat; every write goes through integrations.vault."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.caller import Caller
from core.errors import DomainError, InvalidInput, NotFound
from integrations import vault
from integrations.models import AuthScheme, ConnectRequest, Integration

# How much of a provider's error text a page repeats.
PROVIDER_TEXT_CHARS = 200


def _notice(request: HttpRequest, heading: str, message: str, *, status: int) -> HttpResponse:
    return render(request, "integrations/notice.html", {"heading": heading, "message": message}, status=status)


def _not_found(request: HttpRequest) -> HttpResponse:
    return _notice(request, "Connect link not found",
                   "It does not exist, or it belongs to someone else. Ask your client to connect again while signed "
                   "in as the account it uses.", status=404)


def _gone(request: HttpRequest, message: str) -> HttpResponse:
    return _notice(request, message, "Ask your client to connect again for a new link.", status=410)


def _failure(request: HttpRequest, exc: DomainError) -> HttpResponse:
    if isinstance(exc, NotFound):
        return _not_found(request)
    if isinstance(exc, vault.ConnectLinkGone):
        return _gone(request, exc.message)
    return _notice(request, "The connection could not be made", exc.message, status=exc.http_status)


def _connected(request: HttpRequest, integration: Integration) -> HttpResponse:
    return render(request, "integrations/connected.html", {"integration": integration})


def _caller(request: HttpRequest) -> Caller:
    return Caller.trusted(request.user, via="web")


def _form(request: HttpRequest, link: ConnectRequest, *, error: str = "", status: int = 200) -> HttpResponse:
    integration = link.integration
    return render(request, "integrations/connect.html", {
        "link": link,
        "integration": integration,
        "oauth": integration.auth_scheme == AuthScheme.OAUTH2,
        "fields": vault.credential_fields(integration),
        "error": error,
    }, status=status)


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def connect_page(request: HttpRequest, token: str) -> HttpResponse:
    link = vault.connect_link_for(user=request.user, token=token)
    if link is None:
        return _not_found(request)
    if (problem := vault.connect_link_problem(link)) is not None:
        return _gone(request, problem)
    if link.integration.auth_scheme != AuthScheme.OAUTH2 and not vault.credential_fields(link.integration):
        return _notice(request, f"{link.integration.name} needs nothing from you",
                       "Ask your client to connect again: it can connect this integration on its own.", status=400)
    if request.method == "GET":
        return _form(request, link)
    if link.integration.auth_scheme == AuthScheme.OAUTH2:
        return redirect("vault:connect", token=link.pk)
    entered = {f.name: request.POST.get(f.name, "") for f in vault.credential_fields(link.integration)}
    try:
        vault.connect_link_complete(caller=_caller(request), token=link.pk, credentials=entered)
    except InvalidInput as exc:
        return _form(request, link, error=exc.message, status=400)
    except DomainError as exc:
        return _failure(request, exc)
    return _connected(request, link.integration)


@never_cache
@login_required
@require_POST
def connect_authorize(request: HttpRequest, token: str) -> HttpResponse:
    """The OAuth page's button: on to the provider's consent page."""
    try:
        url = vault.connect_link_authorization_url(caller=_caller(request), token=token)
    except DomainError as exc:
        return _failure(request, exc)
    return redirect(url)


@never_cache
@login_required
@require_GET
def oauth_callback(request: HttpRequest) -> HttpResponse:
    """Where the provider sends the browser back, with ?code&state or ?error&state."""
    state = request.GET.get("state", "")
    if "error" in request.GET:
        link = vault.connect_link_by_state(user=request.user, state=state)
        provider = link.integration.name if link else "The provider"
        reason = request.GET.get("error_description") or request.GET.get("error") or "no reason given"
        return _notice(request, f"{provider} did not grant access",
                       f"It answered: {reason[:PROVIDER_TEXT_CHARS]}. Nothing was stored. Open the connect link "
                       "again to retry, or ask your client for a new one.", status=400)
    try:
        connection = vault.oauth_callback_complete(caller=_caller(request), state=state,
                                                   code=request.GET.get("code", ""))
    except DomainError as exc:
        # A state that matches no usable link of this user's is the client's or an attacker's
        # request, not a missing page: 400, whatever the reason.
        status = exc.http_status if isinstance(exc, vault.ProviderUnavailable) else 400
        return _notice(request, "The connection could not be made", exc.message, status=status)
    return _connected(request, connection.integration)
