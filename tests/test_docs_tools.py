"""The docs tools over /mcp: the catalogue, pages, search (prefix and typo tolerant), ask_docs'
packing limits and answer_docs' prompt and failures. They take no cwd."""

import json
from typing import Any

import pytest

from docs_kb.models import DocPage, DocSection
from tests.conftest import McpClient, make_member

pytestmark = pytest.mark.django_db


class Docs:
    def __init__(self) -> None:
        self.client = McpClient(make_member("reader", scopes=["docs:read"]).token)
        self.client.initialize()

    def call(self, tool: str, **arguments: Any) -> tuple[bool, Any]:
        result = self.client.call(tool, arguments)
        return result["isError"], json.loads(result["content"][0]["text"])

    def ok(self, tool: str, **arguments: Any) -> Any:
        is_error, payload = self.call(tool, **arguments)
        assert is_error is False, payload
        return payload

    def err(self, tool: str, **arguments: Any) -> dict[str, Any]:
        is_error, payload = self.call(tool, **arguments)
        assert is_error is True, payload
        return payload


@pytest.fixture
def docs(kb) -> Docs:
    return Docs()


def test_list_docs_is_the_catalogue_of_every_page(docs):
    listed = docs.ok("list_docs")
    assert {row["slug"] for row in listed} == set(DocPage.objects.values_list("slug", flat=True))
    assert {"workflows", "runs", "workflow-format"} <= {row["slug"] for row in listed}
    assert all(set(row) == {"slug", "title", "description"} and row["title"] for row in listed)


def test_get_doc_returns_front_matter_and_the_whole_page(docs):
    page = docs.ok("get_doc", slug="runs")
    assert page["frontmatter"]["title"] == DocPage.objects.get(slug="runs").title
    assert "## The handback protocol, for hosts" in page["markdown"]
    assert not page["markdown"].startswith("---")
    assert docs.ok("get_doc", slug="/runs.md") == page  # a leading slash or .md is forgiven
    assert docs.err("get_doc", slug="no-such-page") == {
        "error": "No doc page 'no-such-page'. list_docs lists every slug.", "code": "doc_not_found"}


def test_the_docs_tools_take_no_cwd(docs):
    assert docs.err("list_docs", cwd="/home/x")["code"] == "invalid_arguments"


@pytest.mark.parametrize("query", ["subwork", "subworkflw", "SUBWORKFLOWS"])
def test_search_matches_prefixes_and_typos(docs, query):
    hits = docs.ok("search_docs", query=query)
    assert ("workflow-format", "subworkflows") in {(h["slug"], h["headingId"]) for h in hits[:3]}


def test_search_hits_carry_a_short_snippet_around_the_match(docs):
    hits = docs.ok("search_docs", query="spending cap")
    assert hits and set(hits[0]) == {"slug", "title", "headingId", "headingText", "snippet", "score"}
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    for hit in hits:
        assert len(hit["snippet"].strip("…")) <= 160
    assert "cap" in hits[0]["snippet"].lower()


def test_search_respects_its_limit(docs):
    assert len(docs.ok("search_docs", query="workflow")) == 20
    assert len(docs.ok("search_docs", query="workflow", limit=3)) == 3
    assert len(docs.ok("search_docs", query="workflow", limit=50)) > 20
    for bad in (0, 51):
        assert docs.err("search_docs", query="workflow", limit=bad)["code"] == "invalid_arguments"
    assert docs.err("search_docs", query="   ")["code"] == "empty_question"
    assert docs.ok("search_docs", query="qzxv wplk") == []


def test_ask_returns_whole_sections_within_the_budget(docs):
    asked = docs.ok("ask_docs", question="How do I cancel a workflow run?")
    assert asked["question"] == "How do I cancel a workflow run?"
    first = asked["sections"][0]
    assert (first["slug"], first["headingId"]) == ("runs", "cancelling")
    section = DocSection.objects.get(page__slug="runs", heading_id="cancelling")
    assert first["text"] == section.markdown
    assert asked["totalChars"] == sum(len(s["text"]) for s in asked["sections"]) <= 6000
    assert len(asked["sections"]) <= 5


@pytest.mark.parametrize(("max_sections", "max_chars"), [(1, 500), (2, 1500), (20, 20000), (3, 6000)])
def test_ask_never_exceeds_max_sections_or_max_chars(docs, max_sections, max_chars):
    asked = docs.ok("ask_docs", question="workflow run scripts subworkflow costs", maxSections=max_sections,
                    maxChars=max_chars)
    assert len(asked["sections"]) <= max_sections
    assert asked["totalChars"] <= max_chars
    assert asked["totalChars"] == sum(len(s["text"]) for s in asked["sections"])


def test_ask_reports_truncated_when_sections_did_not_fit(docs):
    tight = docs.ok("ask_docs", question="the handback protocol for hosts", maxSections=5, maxChars=500)
    assert tight["truncated"] is True
    roomy = docs.ok("ask_docs", question="How do I cancel a workflow run?", maxSections=1, maxChars=20000)
    assert roomy["truncated"] is False and len(roomy["sections"]) == 1


def test_ask_keeps_code_blocks_whole(docs):
    asked = docs.ok("ask_docs", question="workflow yaml example review loop draft judge", maxChars=20000,
                    maxSections=20)
    for section in asked["sections"]:
        assert section["text"].count("```") % 2 == 0


def test_ask_limits_are_checked(docs):
    for arguments in ({"maxSections": 0}, {"maxSections": 21}, {"maxChars": 499}, {"maxChars": 20001}):
        assert docs.err("ask_docs", question="runs", **arguments)["code"] == "invalid_arguments"
    assert docs.err("ask_docs", question="")["code"] == "empty_question"
    nothing = docs.ok("ask_docs", question="qzxv wplk")
    assert nothing == {"question": "qzxv wplk", "sections": [], "truncated": False, "totalChars": 0}


def test_answer_docs_packages_a_citation_required_prompt(docs):
    answer = docs.ok("answer_docs", question="How do I cancel a workflow run?")
    assert answer["action"] == "answer_prompt"
    assert answer["model"] == "claude-haiku-4-5"
    assert answer["citations"][0] == {"slug": "runs", "title": DocPage.objects.get(slug="runs").title,
                                      "headingId": "cancelling", "headingText": "Cancelling"}
    assert "[1]" in answer["prompt"] and "How do I cancel a workflow run?" in answer["prompt"]
    assert DocSection.objects.get(page__slug="runs", heading_id="cancelling").markdown in answer["prompt"]
    assert "cite" in answer["instructions"].lower()
    assert docs.ok("answer_docs", question="cancel a run", model="claude-sonnet-4-5")["model"] == "claude-sonnet-4-5"


def test_answer_docs_refuses_an_empty_question_or_an_empty_retrieval(docs):
    assert docs.err("answer_docs", question="  ")["code"] == "empty_question"
    assert docs.err("answer_docs", question="qzxv wplk fjdk")["code"] == "no_relevant_sections"
