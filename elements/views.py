"""The approvals pages: danger-zone codes and pending CLI requests, for their signed-in owner."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse


@login_required
def approvals_page(request: HttpRequest) -> HttpResponse:
    raise Http404


@login_required
def challenge_page(request: HttpRequest, challenge_id: object) -> HttpResponse:
    raise Http404
