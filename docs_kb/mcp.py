"""Roscoe's docs tools over Atrium's own documentation. They take no cwd: the docs are the same for
every project."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from core.output_schemas import BOOLEAN, INTEGER, NUMBER, TEXT, TEXT_OR_NULL, array_of, enum, obj
from core.tools import Toolset, tool
from docs_kb import selectors
from docs_kb.selectors import MAX_QUESTION_CHARS, MAX_QUESTION_WORDS

READ = "docs:read"
Question = Annotated[str, Field(max_length=MAX_QUESTION_CHARS, description="A natural-language question, "
                                                                          f"at most {MAX_QUESTION_WORDS} words.")]
MaxSections = Annotated[int, Field(ge=1, le=20, description="At most this many sections (default 5).")]
MaxChars = Annotated[int, Field(ge=500, le=20000, description="Total characters of section text (default 6000).")]

# Where a hit or a section is: its page, and its heading (both null for the page's lede).
PLACE = {"slug": TEXT, "title": TEXT, "headingId": TEXT_OR_NULL, "headingText": TEXT_OR_NULL}
# A list is answered as {result: [...]} (core.tools.success_result).
LIST_OUTPUT = obj({"result": array_of(obj({"slug": TEXT, "title": TEXT, "description": TEXT}))})
DOC_OUTPUT = obj({"frontmatter": obj({"title": TEXT, "description": TEXT}), "markdown": TEXT})
SEARCH_OUTPUT = obj({"result": array_of(obj({**PLACE, "snippet": TEXT, "score": NUMBER}))})
ASK_OUTPUT = obj({"question": TEXT, "sections": array_of(obj({**PLACE, "text": TEXT, "score": NUMBER})),
                  "truncated": BOOLEAN, "totalChars": INTEGER})
ANSWER_OUTPUT = obj({"action": enum("answer_prompt"), "instructions": TEXT, "prompt": TEXT, "model": TEXT,
                     "citations": array_of(obj(PLACE))})


class DocsTools(Toolset):
    @tool(name="list_docs", title="List the docs", scope=READ, read_only=True, destructive=False, idempotent=True,
          open_world=False, output_schema=LIST_OUTPUT)
    def list_docs(self) -> Any:
        """The catalogue of Atrium's documentation: [{slug, title, description}] for every page."""
        return selectors.docs_list()

    @tool(name="get_doc", title="Read a doc page", scope=READ, read_only=True, destructive=False, idempotent=True,
          open_world=False, output_schema=DOC_OUTPUT)
    def get_doc(self, slug: Annotated[str, Field(description="The page's slug from list_docs, with no leading "
                                                             "slash and no .md (e.g. workflow-format).")]) -> Any:
        """One whole page: {frontmatter: {title, description}, markdown}."""
        page = selectors.doc_get(slug=slug)
        return {"frontmatter": {"title": page.title, "description": page.description}, "markdown": page.markdown}

    @tool(name="search_docs", title="Search the docs", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=SEARCH_OUTPUT)
    def search_docs(self, query: Annotated[str, Field(max_length=MAX_QUESTION_CHARS, description=(
                        f"Words to look for (at most {MAX_QUESTION_WORDS}); prefixes and typos are matched too."))],
                    limit: Annotated[int, Field(ge=1, le=50, description="At most this many hits (default 20).")]
                    = 20) -> Any:
        """Ranked hits, each {slug, title, headingId, headingText, snippet, score}, the snippet up to about 80
        characters either side of the match. Use get_doc for a whole page, or ask_docs for whole sections."""
        return selectors.docs_search(query=query, limit=limit)

    @tool(name="ask_docs", title="Ask the docs", scope=READ, read_only=True, destructive=False, idempotent=True,
          open_world=False, output_schema=ASK_OUTPUT)
    def ask_docs(self, question: Question, maxSections: MaxSections = 5, maxChars: MaxChars = 6000) -> Any:
        """The heading sections most relevant to a question, whole (code and diagrams intact), packed within
        maxChars: {question, sections: [{slug, title, headingId, headingText, text, score}], truncated,
        totalChars}. /docs/<slug>#<headingId> links to a section."""
        return selectors.docs_ask(question=question, max_sections=maxSections, max_chars=maxChars)

    @tool(name="answer_docs", title="Answer from the docs", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=ANSWER_OUTPUT)
    def answer_docs(self, question: Question, model: Annotated[str | None, Field(
            description="Suggested model for the answer (default claude-haiku-4-5).")] = None,
            maxSections: MaxSections = 5, maxChars: MaxChars = 6000) -> Any:
        """ask_docs packaged as a citation-required prompt for you to answer: {action: answer_prompt,
        instructions, prompt, model, citations}. No model runs on the server. Fails on an empty question, or
        when no section is relevant."""
        return selectors.docs_answer(question=question, model=model, max_sections=maxSections, max_chars=maxChars)
