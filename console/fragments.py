"""The live parts of the console's pages. A page that keeps a part of itself fresh (htmx polling, or a
button that swaps its row in place) asks its own view again with HX-Request, and the view answers
with that part alone: the partial template the whole page includes. One view and one template serve
both answers, so the part cannot drift from the page, and every link and form works without
JavaScript."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers


def fragment_wanted(request: HttpRequest) -> bool:
    """htmx asking for the live part. Not a history restore, which would put what it gets in place of
    the whole body."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def page_or_fragment(request: HttpRequest, page: str, fragment: str, context: dict[str, Any], *,
                     status: int = 200) -> HttpResponse:
    """The whole page, or only its live part when htmx asks for it."""
    response = render(request, fragment if fragment_wanted(request) else page, context, status=status)
    # The same URL answers two bodies: no cache may give the fragment to a browser that loads the page.
    patch_vary_headers(response, ("HX-Request",))
    return response
