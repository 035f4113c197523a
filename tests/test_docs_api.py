"""The docs knowledge base over REST: /api/kb/... answers what list_docs, get_doc, search_docs and
ask_docs answer, to anyone, and refuses bad input with 400 {error, code}."""

import pytest
from django.test import Client

from docs_kb import selectors
from docs_kb.models import DocPage

pytestmark = pytest.mark.django_db

KB = "/api/kb/"


def test_the_page_list_is_list_docs(kb, client: Client):
    response = client.get(f"{KB}pages/")
    assert response.status_code == 200
    assert response.json() == selectors.docs_list()
    assert {"runs", "workflow-format"} <= {row["slug"] for row in response.json()}


def test_a_page_has_its_markdown_and_headings(kb, client: Client):
    response = client.get(f"{KB}pages/workflow-format/")
    assert response.status_code == 200
    page = DocPage.objects.get(slug="workflow-format")
    data = response.json()
    assert {k: data[k] for k in ("slug", "title", "description", "markdown")} == {
        "slug": page.slug, "title": page.title, "description": page.description, "markdown": page.markdown}
    assert data["sections"] == [{"headingId": s.heading_id, "headingText": s.heading_text, "level": s.level}
                                for s in page.sections.exclude(heading_id="").order_by("position")]
    assert ("subworkflows", 2) in {(s["headingId"], s["level"]) for s in data["sections"]}


def test_a_page_slug_may_end_in_md(kb, client: Client):
    assert client.get(f"{KB}pages/runs.md/").json()["slug"] == "runs"


def test_an_unknown_page_is_404(kb, client: Client):
    response = client.get(f"{KB}pages/no-such-page/")
    assert response.status_code == 404
    assert response.json()["code"] == "doc_not_found"


def test_search_answers_search_docs_hits(kb, client: Client):
    response = client.get(f"{KB}search/", {"q": "spending cap", "limit": 5})
    assert response.status_code == 200
    assert response.json() == selectors.docs_search(query="spending cap", limit=5)
    assert len(response.json()) == 5
    assert set(response.json()[0]) == {"slug", "title", "headingId", "headingText", "snippet", "score"}


def test_search_forgives_a_typo(kb, client: Client):
    hits = client.get(f"{KB}search/", {"q": "subworkflw"}).json()
    assert ("workflow-format", "subworkflows") in {(h["slug"], h["headingId"]) for h in hits[:3]}


@pytest.mark.parametrize("params", [{}, {"q": ""}, {"q": "   "}])
def test_search_refuses_an_empty_query(kb, client: Client, params):
    response = client.get(f"{KB}search/", params)
    assert response.status_code == 400
    assert response.json() == {"error": "The query is empty.", "code": "empty_question"}


@pytest.mark.parametrize("limit", ["0", "51", "many"])
def test_search_refuses_a_limit_outside_1_to_50(kb, client: Client, limit):
    response = client.get(f"{KB}search/", {"q": "caps", "limit": limit})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input" and "limit" in response.json()["fields"]


def test_ask_answers_ask_docs(kb, client: Client):
    response = client.get(f"{KB}ask/", {"question": "How do I cap spending on a run?", "maxSections": 2,
                                        "maxChars": 3000})
    assert response.status_code == 200
    data = response.json()
    assert data == selectors.docs_ask(question="How do I cap spending on a run?", max_sections=2, max_chars=3000)
    assert set(data) == {"question", "sections", "truncated", "totalChars"}
    assert 1 <= len(data["sections"]) <= 2 and data["totalChars"] <= 3000


def test_ask_refuses_an_empty_question(kb, client: Client):
    response = client.get(f"{KB}ask/", {"question": " "})
    assert (response.status_code, response.json()["code"]) == (400, "empty_question")


@pytest.mark.parametrize(("name", "value"), [("maxSections", 0), ("maxSections", 21), ("maxChars", 499),
                                             ("maxChars", 20001)])
def test_ask_refuses_limits_out_of_range(kb, client: Client, name, value):
    response = client.get(f"{KB}ask/", {"question": "caps", name: value})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input" and name in response.json()["fields"]


def test_ask_accepts_the_edges_of_its_ranges(kb, client: Client):
    for params in ({"maxSections": 1, "maxChars": 500}, {"maxSections": 20, "maxChars": 20000}):
        assert client.get(f"{KB}ask/", {"question": "caps", **params}).status_code == 200


def test_the_api_is_public_and_ignores_credentials(kb):
    anonymous = Client()
    assert anonymous.get(f"{KB}pages/").status_code == 200
    stale = Client(HTTP_AUTHORIZATION="Bearer atr_not-a-real-token")
    assert stale.get(f"{KB}search/", {"q": "caps"}).status_code == 200


def test_the_schema_documents_the_docs_endpoints(db, client: Client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert {"/api/kb/pages/", "/api/kb/pages/{slug}/", "/api/kb/search/", "/api/kb/ask/"} <= schema["paths"].keys()
    search = schema["paths"]["/api/kb/search/"]["get"]
    assert {p["name"] for p in search["parameters"]} == {"q", "limit"}
    assert {"200", "400"} <= search["responses"].keys()
    ask = schema["paths"]["/api/kb/ask/"]["get"]
    assert {p["name"] for p in ask["parameters"]} == {"question", "maxSections", "maxChars"}
