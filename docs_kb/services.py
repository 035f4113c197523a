"""Writes for the docs knowledge base: importing docs/ and curators' edits. Both rebuild a page's
sections from its markdown, so search always reads what the page says."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from accounts.services import audit_record
from core.caller import Caller
from docs_kb.models import DocPage, DocSection, DocTerm
from docs_kb.parsing import Page, page_parse, plain_words
from docs_kb.search import WORD


@dataclass
class ImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept_edited: list[str] = field(default_factory=list)


def _sections_replace(page: DocPage, parsed: Page) -> None:
    page.sections.all().delete()
    DocSection.objects.bulk_create(
        DocSection(page=page, page_title=page.title, position=s.position, heading_id=s.heading_id or "",
                   heading_text=s.heading_text or "", level=s.level, markdown=s.markdown,
                   own_markdown=s.own_markdown, text=plain_words(s.own_markdown))
        for s in parsed.sections
    )


def _terms_refresh() -> None:
    """The vocabulary typo correction draws on: every word of every section, as written."""
    found: set[str] = set()
    for title, text in DocSection.objects.values_list("page_title", "text"):
        found.update(w for w in WORD.findall(f"{title} {text}".lower()) if len(w) <= 100)
    DocTerm.objects.all().delete()
    DocTerm.objects.bulk_create((DocTerm(term=term) for term in sorted(found)), batch_size=1000)


def _slug(path: Path, root: Path) -> str:
    return path.relative_to(root).with_suffix("").as_posix()


@transaction.atomic
def docs_import(*, directory: Path, force: bool = False, dry_run: bool = False) -> ImportReport:
    """Make the pages match the markdown files under `directory`, by checksum. Pages a curator
    edited are left as they are (reported), unless `force`."""
    report = ImportReport()
    files = {_slug(p, directory): p for p in sorted(directory.rglob("*.md"))}
    existing = {page.slug: page for page in DocPage.objects.all()}
    for slug, path in files.items():
        raw = path.read_text(encoding="utf-8")
        checksum = hashlib.sha256(raw.encode()).hexdigest()
        page = existing.get(slug)
        # An edited page is reported as kept whether or not its file changed: either way the import
        # leaves a curator's words in place.
        if page is not None and page.edited and not force:
            report.kept_edited.append(slug)
            continue
        if page is not None and page.checksum == checksum and not page.edited:
            report.unchanged.append(slug)
            continue
        (report.updated if page is not None else report.created).append(slug)
        if dry_run:
            continue
        parsed = page_parse(raw, fallback_title=slug)
        page = page or DocPage(slug=slug)
        page.title, page.description, page.markdown = parsed.title, parsed.description, parsed.markdown
        page.source_path, page.checksum, page.edited, page.updated = str(path), checksum, False, timezone.now()
        page.save()
        _sections_replace(page, parsed)
    for slug, page in existing.items():
        if slug in files:
            continue
        if page.edited and not force:
            report.kept_edited.append(slug)
            continue
        report.removed.append(slug)
        if not dry_run:
            page.delete()
    if not dry_run and (report.created or report.updated or report.removed):
        _terms_refresh()
    return report


@transaction.atomic
def page_edit(*, caller: Caller, page: DocPage, title: str, description: str, markdown: str) -> DocPage:
    """A curator's edit: the page is marked so the next import does not overwrite it silently."""
    parsed = page_parse(markdown, fallback_title=title)
    page.title, page.description, page.markdown = title, description, parsed.markdown
    page.edited, page.updated = True, timezone.now()
    page.save()
    _sections_replace(page, parsed)
    _terms_refresh()
    audit_record(caller=caller, action="docs.edit", target=f"docs page '{page.slug}'")
    return page
