"""The public docs pages: the index with its search box, and one page rendered with its table of
contents. No sign-in: the docs are the same for everyone. Reads go through docs_kb.selectors."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from core.errors import NotFound
from docs_kb import selectors
from docs_kb.rendering import page_html, starts_with_title

SEARCH_LIMIT = 20


@require_GET
def docs_index(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    hits = selectors.docs_search(query=query, limit=SEARCH_LIMIT) if query else []
    return render(request, "docs_kb/index.html", {"query": query, "hits": hits, "pages": selectors.docs_list()})


@require_GET
def doc_page(request: HttpRequest, slug: str) -> HttpResponse:
    try:
        page = selectors.doc_get(slug=slug)
    except NotFound:
        return render(request, "docs_kb/not_found.html", {"slug": slug}, status=404)
    if slug != page.slug:
        return redirect("docs:page", page.slug)  # /docs/runs.md and /docs/runs/ are /docs/runs
    sections = list(page.sections.all())
    return render(request, "docs_kb/page.html", {
        "page": page,
        "body": page_html(page.markdown, slug=page.slug, sections=sections),
        "show_title": not starts_with_title(page.markdown),
        "contents": [section for section in sections if section.heading_id],
    })
