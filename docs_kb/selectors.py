"""Reads for the docs knowledge base: the catalogue, one page, ranked search, whole sections packed
for a question (ask), and that packing as a citation-required prompt (answer). No model is ever
called on the server."""

from __future__ import annotations

from typing import Any

from core.errors import DomainError, InvalidInput, NotFound
from docs_kb import search
from docs_kb.models import DocPage

DEFAULT_ANSWER_MODEL = "claude-haiku-4-5"
# Below this a section shares no more than a stray common word with the question.
MIN_RELEVANCE = 1.5
# How many ranked candidates ask_docs considers per section it may return.
CANDIDATES_PER_SECTION = 4


def slug_clean(slug: str) -> str:
    return slug.strip().strip("/").removesuffix(".md")


def docs_list() -> list[dict[str, str]]:
    return [{"slug": slug, "title": title, "description": description}
            for slug, title, description in DocPage.objects.values_list("slug", "title", "description")]


MAX_QUESTION_CHARS = 1_000
MAX_QUESTION_WORDS = 100


def doc_get(*, slug: str) -> DocPage:
    page = DocPage.objects.filter(slug=slug_clean(slug)).first()
    if page is None:
        raise NotFound(f"No doc page {slug!r}. list_docs lists every slug.", code="doc_not_found")
    return page


def _question(text: str, what: str = "question") -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"The {what} is empty.", code="empty_question")
    # Every word is looked up, and on PostgreSQL becomes a term of one tsquery: thousands of them
    # take seconds to rank and overflow PostgreSQL's stack.
    if len(text) > MAX_QUESTION_CHARS:
        raise InvalidInput(f"The {what} is {len(text):,} characters long; the limit is {MAX_QUESTION_CHARS:,}.")
    count = len(search.WORD.findall(text.lower()))
    if count > MAX_QUESTION_WORDS:
        raise InvalidInput(f"The {what} has {count} words; the limit is {MAX_QUESTION_WORDS}.")
    return text.strip()


def docs_search(*, query: str, limit: int = 20) -> list[dict[str, Any]]:
    query = _question(query, "query")
    return [
        {"slug": hit.entry.slug, "title": hit.entry.title, "headingId": hit.entry.heading_id,
         "headingText": hit.entry.heading_text, "snippet": search.snippet(hit.entry.text, hit.matched),
         "score": round(hit.score, 3)}
        for hit in search.rank(query)[:limit]
    ]


def _overlaps(a: search.Entry, b: search.Entry) -> bool:
    """One section holds the other (a heading's section includes its subsections)."""
    return a.slug == b.slug and (a.markdown in b.markdown or b.markdown in a.markdown)


def docs_ask(*, question: str, max_sections: int = 5, max_chars: int = 6000) -> dict[str, Any]:
    question = _question(question)
    candidates = [hit for hit in search.rank(question) if hit.score >= MIN_RELEVANCE]
    chosen: list[tuple[search.Hit, str]] = []
    total, truncated = 0, False
    for hit in candidates[: max_sections * CANDIDATES_PER_SECTION]:
        if len(chosen) == max_sections:
            break
        if any(_overlaps(hit.entry, kept.entry) for kept, _ in chosen):
            continue
        # The whole section if it fits, else its own part (to its first subheading); code and
        # diagrams are never cut in half.
        text = next((t for t in (hit.entry.markdown, hit.entry.own_markdown) if total + len(t) <= max_chars), None)
        if text is None:
            truncated = True
            continue
        if text != hit.entry.markdown:
            truncated = True
        chosen.append((hit, text))
        total += len(text)
    return {
        "question": question,
        "sections": [{"slug": hit.entry.slug, "title": hit.entry.title, "headingId": hit.entry.heading_id,
                      "headingText": hit.entry.heading_text, "text": text, "score": round(hit.score, 3)}
                     for hit, text in chosen],
        "truncated": truncated,
        "totalChars": total,
    }


ANSWER_INSTRUCTIONS = ("Answer the question yourself from the sources in `prompt` alone, and cite them. Show the "
                       "user your answer with the citations listed. If the sources do not answer it, say so.")


def docs_answer(*, question: str, model: str | None = None, max_sections: int = 5,
                max_chars: int = 6000) -> dict[str, Any]:
    asked = docs_ask(question=question, max_sections=max_sections, max_chars=max_chars)
    if not asked["sections"]:
        raise DomainError("No section of the docs is relevant to that question, so there is nothing to answer "
                          "from. Rephrase it, or look with search_docs or ask_docs.", code="no_relevant_sections")
    sources = "\n\n".join(
        f"[{number}] {s['title']}{' > ' + s['headingText'] if s['headingText'] else ''} "
        f"(/docs/{s['slug']}{'#' + s['headingId'] if s['headingId'] else ''})\n{s['text']}"
        for number, s in enumerate(asked["sections"], 1)
    )
    prompt = (
        "Answer the question using only the numbered sources below from Atrium's documentation. Cite every claim "
        "with its source number in brackets, like [1]. If the sources do not contain the answer, say that the "
        "documentation does not cover it instead of guessing.\n\n"
        f"Question: {asked['question']}\n\nSources:\n\n{sources}\n"
    )
    return {
        "action": "answer_prompt",
        "instructions": ANSWER_INSTRUCTIONS,
        "prompt": prompt,
        "model": model or DEFAULT_ANSWER_MODEL,
        "citations": [{"slug": s["slug"], "title": s["title"], "headingId": s["headingId"],
                       "headingText": s["headingText"]} for s in asked["sections"]],
    }
