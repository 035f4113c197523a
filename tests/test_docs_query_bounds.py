"""search_docs, ask_docs and answer_docs refuse a query of more than 1,000 characters or 100 words
with a clear invalid-argument error, over MCP and REST, instead of ranking it for a minute or
overflowing PostgreSQL's stack."""

import pytest

from tests.conftest import Api
from tests.test_docs_tools import Docs

pytestmark = pytest.mark.django_db

MANY_WORDS = " ".join(["workflow"] * 20_000)
HUNDRED_AND_ONE = " ".join(["run"] * 101)


@pytest.fixture
def docs(kb) -> Docs:
    return Docs()


def test_a_query_of_a_hundred_words_is_answered(docs):
    assert isinstance(docs.ok("search_docs", query=" ".join(["run"] * 100)), list)


@pytest.mark.parametrize(("tool", "argument"), [("search_docs", "query"), ("ask_docs", "question"),
                                                ("answer_docs", "question")])
def test_the_tools_refuse_a_query_past_the_word_limit(docs, tool, argument):
    error = docs.err(tool, **{argument: HUNDRED_AND_ONE})

    noun = "query" if argument == "query" else "question"
    assert error == {"error": f"The {noun} has 101 words; the limit is 100.", "code": "invalid_input"}


@pytest.mark.parametrize(("tool", "argument"), [("search_docs", "query"), ("ask_docs", "question")])
def test_the_tools_refuse_a_query_past_the_length_limit(docs, tool, argument):
    error = docs.err(tool, **{argument: MANY_WORDS})

    assert error == {"error": f"Invalid arguments for {tool}: {argument} is {len(MANY_WORDS):,} characters long; "
                              "the limit is 1,000.", "code": "invalid_arguments"}


def test_the_schema_states_the_length_limit(docs):
    tools = {t["name"]: t for t in docs.client.post("tools/list").json()["result"]["tools"]}

    assert tools["search_docs"]["inputSchema"]["properties"]["query"]["maxLength"] == 1_000
    assert tools["ask_docs"]["inputSchema"]["properties"]["question"]["maxLength"] == 1_000


def test_rest_search_and_ask_refuse_them_too(kb, alice):
    api = Api(alice)

    searched = api.get("/api/kb/search/", {"q": MANY_WORDS})
    asked = api.get("/api/kb/ask/", {"question": HUNDRED_AND_ONE})

    assert (searched.status_code, searched.json()) == (400, {
        "error": f"The query is {len(MANY_WORDS):,} characters long; the limit is 1,000.", "code": "invalid_input"})
    assert (asked.status_code, asked.json()) == (400, {"error": "The question has 101 words; the limit is 100.",
                                                       "code": "invalid_input"})
