"""Markdown pages into sections, with heading ids as rehype-slug (github-slugger) makes them, so
`/docs/<slug>#<headingId>` links land on the heading a section starts at."""

from __future__ import annotations

import re
from dataclasses import dataclass

from workflows.skills import frontmatter_split

HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
TAG = re.compile(r"<[^>]+>")
NOT_SLUG = re.compile(r"[^\w\- ]")


@dataclass(frozen=True)
class Section:
    position: int
    heading_id: str | None
    heading_text: str | None
    level: int
    markdown: str
    own_markdown: str


@dataclass(frozen=True)
class Page:
    title: str
    description: str
    markdown: str
    sections: tuple[Section, ...]


def heading_text(raw: str) -> str:
    """The heading as a reader sees it: code and emphasis markup gone, link text kept."""
    text = LINK.sub(r"\1", raw)
    text = TAG.sub("", text)
    text = re.sub(r"(\*\*|__|\*|`)", "", text)
    return text.strip()


def slug_for(text: str, seen: dict[str, int]) -> str:
    """github-slugger: lowercase, drop what is not a letter, digit, space, '-' or '_', spaces to '-';
    a repeat on the same page gets -1, -2, ..."""
    base = NOT_SLUG.sub("", text.lower()).replace(" ", "-")
    slug = base
    while slug in seen:
        seen[base] += 1
        slug = f"{base}-{seen[base]}"
    seen.setdefault(slug, 0)
    return slug


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, raw text) of each heading outside code fences."""
    found = []
    fence: str | None = None
    for index, line in enumerate(lines):
        opening = FENCE.match(line)
        if opening:
            marker = opening.group(1)
            if fence is None:
                fence = marker[0] * len(marker)
            elif marker.startswith(fence):
                fence = None
            continue
        if fence is None:
            match = HEADING.match(line)
            if match:
                found.append((index, len(match.group(1)), match.group(2)))
    return found


def sections_of(markdown: str) -> list[Section]:
    lines = markdown.splitlines()
    headings = _headings(lines)
    # An opening H1 is the page's title: it belongs to the lede.
    if headings and headings[0][1] == 1 and not "".join(lines[:headings[0][0]]).strip():
        headings = headings[1:]
    seen: dict[str, int] = {}
    first = headings[0][0] if headings else len(lines)
    lede = "\n".join(lines[:first]).strip()
    found = [Section(0, None, None, 0, lede, lede)] if lede else []
    for number, (start, level, raw) in enumerate(headings):
        end = next((i for i, lvl, _ in headings[number + 1:] if lvl <= level), len(lines))
        own_end = headings[number + 1][0] if number + 1 < len(headings) else len(lines)
        text = heading_text(raw)
        found.append(Section(len(found), slug_for(text, seen), text, level, "\n".join(lines[start:end]).strip(),
                             "\n".join(lines[start:own_end]).strip()))
    return found


def page_parse(text: str, *, fallback_title: str) -> Page:
    """Front matter (title, description) and sections; without front matter, the H1 is the title."""
    meta, body = frontmatter_split(text)
    meta = meta or {}
    first_heading = next((heading_text(raw) for _, level, raw in _headings(body.splitlines()) if level == 1), None)
    title = str(meta.get("title") or first_heading or fallback_title).strip()
    description = str(meta.get("description") or "").strip()
    return Page(title=title, description=description, markdown=body.strip() + "\n",
                sections=tuple(sections_of(body)))


def plain_words(markdown: str) -> str:
    """The words of some markdown, for search: markup, link targets and fences gone, code kept."""
    text = LINK.sub(r"\1", markdown)
    text = TAG.sub(" ", text)
    text = re.sub(r"^[ \t]{0,3}(`{3,}|~{3,}).*$", " ", text, flags=re.MULTILINE)
    text = re.sub(r"[`*#>|]", " ", text)
    return re.sub(r"\s+", " ", text).strip()
