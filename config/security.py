"""The Content-Security-Policy header, which Django does not set itself (SecurityMiddleware sends
HSTS, nosniff and the referrer policy)."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    """Adds settings.ATRIUM_CONTENT_SECURITY_POLICY to every response that does not set its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.ATRIUM_CONTENT_SECURITY_POLICY:
            response.headers.setdefault("Content-Security-Policy", settings.ATRIUM_CONTENT_SECURITY_POLICY)
        return response
