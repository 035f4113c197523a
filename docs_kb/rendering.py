"""A docs page's markdown as HTML, for the public pages and the admin preview.

Heading ids are the page's section ids (DocSection.heading_id), never recomputed: search hits and
ask_docs cite `/docs/<slug>#<headingId>`, so the anchor must be the stored one. Each section's own
markdown is found in the page's text, in order, and its heading line is tagged with the id; the
tag rides through Python-Markdown's block parser and becomes the heading's id attribute. Headings
that are no section (the page's title) get ids from the same slugger, unique on the page.

Raw HTML in the markdown is shown as text, not passed through (curators can edit pages), and link
targets other than http(s), mailto and relative ones are dropped. Links to other pages' markdown
files (`runs.md#caps`) become links to their pages (`/docs/runs#caps`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from typing import Protocol
from urllib.parse import urlsplit
from xml.etree.ElementTree import Element

import markdown
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from markdown.extensions import Extension
from markdown.extensions.toc import TocExtension
from markdown.postprocessors import Postprocessor
from markdown.treeprocessors import Treeprocessor

from docs_kb.parsing import HEADING, slug_for

# Private-use characters: they never occur in the docs (and are removed from any text that has them).
MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"
HEADING_PREFIX = re.compile(r"#{1,6}[ \t]+")
HEADING_TAGS = frozenset(f"h{level}" for level in range(1, 7))
SCHEME = re.compile(r"^([a-z][a-z0-9+.\-]*):", re.IGNORECASE)
SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
# Browsers ignore these inside a URL, so "java\tscript:" is still javascript.
URL_IGNORED = re.compile(r"[\x00-\x20\x7f]")


class SectionLike(Protocol):
    """A DocSection row, or a parsing.Section of text not saved yet (the admin preview)."""

    @property
    def heading_id(self) -> str | None: ...

    @property
    def own_markdown(self) -> str: ...


class _HeadingIds(Treeprocessor):
    """Runs before inline markup is parsed, while a heading's text still starts with its tag."""

    def run(self, root: Element) -> None:
        for element in root.iter():
            if element.tag in HEADING_TAGS and element.text and element.text.startswith(MARK_OPEN):
                heading_id, _, rest = element.text[1:].partition(MARK_CLOSE)
                element.set("id", heading_id)
                element.text = rest


class _Links(Treeprocessor):
    def __init__(self, md: markdown.Markdown, slug: str) -> None:
        super().__init__(md)
        self.slug = slug

    def run(self, root: Element) -> None:
        for element in root.iter():
            for attribute in ("href", "src"):
                value = element.get(attribute)
                if value is None:
                    continue
                target = link_target(value, slug=self.slug)
                if target is None:
                    del element.attrib[attribute]
                else:
                    element.set(attribute, target)


class _Unmark(Postprocessor):
    """A tagged line that Python-Markdown did not read as a heading (say, in a code block it
    fences differently) keeps its tag: take it out."""

    def run(self, text: str) -> str:
        return text.replace(MARK_OPEN, "").replace(MARK_CLOSE, "")


class _DocsExtension(Extension):
    def __init__(self, slug: str) -> None:
        super().__init__()
        self.slug = slug

    def extendMarkdown(self, md: markdown.Markdown) -> None:
        # Without these two, raw HTML blocks and inline tags go through untouched; without them it
        # is ordinary text, escaped like any other.
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")
        md.treeprocessors.register(_HeadingIds(md), "docs_heading_ids", 30)
        md.treeprocessors.register(_Links(md, self.slug), "docs_links", 15)
        md.postprocessors.register(_Unmark(md), "docs_unmark", 5)


def link_target(href: str, *, slug: str) -> str | None:
    """Where a link on page `slug` should go: None for a scheme that could run script, another
    page's markdown file as that page's URL, anything else as written."""
    scheme = SCHEME.match(URL_IGNORED.sub("", href))
    if scheme:
        return href if scheme.group(1).lower() in SAFE_SCHEMES else None
    parts = urlsplit(href)
    if parts.netloc or not parts.path.endswith(".md"):
        return href
    target = posixpath.normpath(posixpath.join(posixpath.dirname(slug), parts.path)).removesuffix(".md")
    if target.startswith(("../", "/")) or target in ("..", "."):
        return href  # outside docs/: no page of ours
    return reverse("docs:page", args=[target]) + (f"#{parts.fragment}" if parts.fragment else "")


def _tagged(text: str, sections: Iterable[SectionLike]) -> str:
    """The markdown with each section's heading line tagged with its id. The sections' own
    markdown follows each other through the text, so each is looked for after the one before."""
    inserts: list[tuple[int, str]] = []
    cursor = 0
    for section in sections:
        at = text.find(section.own_markdown, cursor)
        if at < 0:
            continue
        cursor = at + len(section.own_markdown)
        prefix = HEADING_PREFIX.match(text, at)
        if section.heading_id and prefix:
            inserts.append((prefix.end(), f"{MARK_OPEN}{section.heading_id}{MARK_CLOSE}"))
    pieces, start = [], 0
    for offset, tag in inserts:
        pieces += [text[start:offset], tag]
        start = offset
    return "".join([*pieces, text[start:]])


def page_html(markdown_text: str, *, slug: str, sections: Iterable[SectionLike]) -> SafeString:
    """The page's markdown as HTML that is safe to show: its sections give the heading ids."""
    text = markdown_text.replace("\r\n", "\n").replace(MARK_OPEN, "").replace(MARK_CLOSE, "")
    renderer = markdown.Markdown(extensions=[
        "fenced_code", "tables",
        TocExtension(slugify=lambda value, separator: slug_for(value, {}), permalink="#",
                     permalink_class="anchor", permalink_title="Link to this section"),
        _DocsExtension(slug),
    ])
    return mark_safe(renderer.convert(_tagged(text, sections)))


def text_html(markdown_text: str) -> SafeString:
    """Markdown that is not a docs page (an element's instructions or content) as HTML that is safe
    to show, by the same rules: raw HTML shown as text, links that could run script dropped."""
    text = markdown_text.replace("\r\n", "\n").replace(MARK_OPEN, "").replace(MARK_CLOSE, "")
    renderer = markdown.Markdown(extensions=["fenced_code", "tables", _DocsExtension("")])
    return mark_safe(renderer.convert(text))


def starts_with_title(markdown_text: str) -> bool:
    """Whether the page opens with its own `# Title`, so the template need not show the title."""
    first = next((line for line in markdown_text.splitlines() if line.strip()), "")
    match = HEADING.match(first)
    return bool(match) and len(match.group(1)) == 1
