"""open_portfolio_browser and friends answer the console page's URL with checked deep-link parameters, and
each link lands on a page that applies them; get_cache_budget_report sizes the server's caches."""

from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from accounts.models import AuditEvent, User
from core.caller import Caller
from elements import collection
from elements.services import element_create
from elements.types import ElementType

pytestmark = pytest.mark.django_db

READ = "mcp_aql_read"


def link(aql, op, **params):
    data = aql.ok(READ, op, **params)
    parts = urlsplit(data["url"])
    return data, parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()}


def page(member, path, query):
    client = Client()
    client.force_login(member.user)
    return client.get(path, query)


def skill(member, name, description="A skill."):
    return element_create(caller=Caller.trusted(member.user, via="mcp"), element_type=ElementType.SKILL, name=name,
                          params={"description": description, "content": "How to."})


def test_open_portfolio_browser_links_the_portfolio_with_its_filters(alice, portfolio, settings):
    data, path, query = link(portfolio(alice), "open_portfolio_browser", q="review", type="skills")

    assert data["url"].startswith(settings.ATRIUM_PUBLIC_URL + "/portfolio/")
    assert (data["tab"], data["opened"], path) == ("portfolio", False, "/portfolio/")
    assert query == data["params"] == {"q": "review", "type": "skill"}


@pytest.mark.parametrize(("op", "tab", "path"), [
    ("open_logs", "logs", "/logs/"), ("open_metrics", "metrics", "/metrics/"),
    ("open_permissions", "permissions", "/approvals/"), ("open_setup", "setup", "/connect/"),
    ("open_console", "portfolio", "/portfolio/"),
])
def test_each_open_operation_links_its_tab(alice, portfolio, op, tab, path):
    data, linked, _ = link(portfolio(alice), op)

    assert (data["tab"], linked) == (tab, path)
    assert page(alice, linked, {}).status_code == 200


def test_a_tab_chosen_by_parameter_gets_that_tabs_parameters_only(alice, portfolio):
    aql = portfolio(alice)
    envelope = aql.call(READ, "open_portfolio_browser", tab="logs", level="warn", since="1h", type="skill")

    assert envelope["success"], envelope
    assert envelope["data"]["params"] == {"level": "warn", "since": "1h"}
    assert envelope["data"]["warnings"] == ["The logs tab does not read type: left out of the link."]


@pytest.mark.parametrize(("op", "params", "words"), [
    ("open_portfolio_browser", {"tab": "admin"}, "tab must be one of"),
    ("open_portfolio_browser", {"type": "widget"}, "widget"),
    ("open_logs", {"level": "loud"}, "level must be one of"),
    ("open_logs", {"category": "gossip"}, "category must be one of"),
    ("open_logs", {"since": "yesterday"}, "since must be an ISO 8601"),
    ("open_logs", {"since": "9999d"}, "at most 366 days"),
    ("open_metrics", {"refresh": 100000}, "between 0 and 3,600"),
    ("open_portfolio_browser", {"q": "x" * 201}, "at most 200 characters"),
])
def test_a_bad_deep_link_parameter_is_refused_by_name(alice, portfolio, op, params, words):
    assert words in portfolio(alice).fails(READ, op, **params)


def test_the_portfolio_link_lands_on_the_matching_elements_only(alice, bob, portfolio):
    skill(alice, "code-review", "Reviews pull requests.")
    skill(alice, "release-notes", "Writes release notes.")
    skill(bob, "bobs-review", "Bob's own review skill.")
    _, path, query = link(portfolio(alice), "open_portfolio_browser", q="review", type="skill")

    html = page(alice, path, query).content.decode()

    assert "code-review" in html
    assert "release-notes" not in html and "bobs-review" not in html


def test_the_name_link_lands_on_the_elements_page_and_not_on_another_users(alice, bob, portfolio):
    skill(alice, "code-review", "Reviews pull requests.")
    _, path, query = link(portfolio(alice), "open_portfolio_browser", type="skill", name="code-review")

    mine = page(alice, path, query)
    theirs = page(bob, path, query)

    assert mine.status_code == 200 and "Reviews pull requests." in mine.content.decode()
    assert theirs.status_code == 404 and "Reviews pull requests." not in theirs.content.decode()


def test_the_logs_link_lands_on_the_same_entries_as_query_logs(alice, bob, portfolio):
    skill(alice, "from-mcp")
    element_create(caller=Caller.trusted(alice.user, via="api"), element_type=ElementType.SKILL, name="from-api",
                   params={"description": "A skill.", "content": "How to."})
    skill(bob, "bobs-skill")
    aql = portfolio(alice)
    _, path, query = link(aql, "open_logs", source="api", since="1h")
    logged = aql.ok(READ, "query_logs", source="api")

    html = page(alice, path, query).content.decode()

    assert [e["message"] for e in logged["entries"]] == ["element.create skill 'from-api'"]
    assert "from-api" in html and "from-mcp" not in html and "bobs-skill" not in html


def test_the_metrics_link_counts_the_users_writes_in_the_window(alice, bob, portfolio):
    skill(alice, "one")
    skill(alice, "two")
    skill(bob, "three")
    _, path, query = link(portfolio(alice), "open_metrics", since="1h", refresh=30)

    html = page(alice, path, query).content.decode()

    assert query == {"since": "1h", "refresh": "30"}
    assert AuditEvent.objects.filter(actor=alice.user).count() == 3  # her token, then two skills
    assert "3 writes" in html and '<meta http-equiv="refresh" content="30">' in html


def test_a_page_given_a_bad_parameter_says_so_and_lists_nothing(alice):
    skill(alice, "code-review")

    response = page(alice, "/portfolio/", {"type": "widget"})

    assert response.status_code == 400
    assert "widget" in response.content.decode() and "code-review" not in response.content.decode()


@pytest.mark.parametrize("path", ["/portfolio/", "/logs/", "/metrics/", "/connect/"])
def test_console_pages_need_a_signed_in_user(path):
    response = Client().get(path)

    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize(("path", "words"), [
    ("/portfolio/", "Your portfolio is empty"), ("/logs/", "No entries"), ("/metrics/", "Nothing in this window"),
])
def test_an_empty_page_says_what_to_do(db, path, words):
    newcomer = User.objects.create_user(username="newcomer", password="pw-newcomer")
    client = Client()
    client.force_login(newcomer)

    assert words in client.get(path).content.decode()


# --- get_cache_budget_report ---------------------------------------------------------------

def test_the_cache_report_sizes_each_cache_against_its_budget(alice, bob, portfolio):
    skill(alice, "mine")
    skill(bob, "theirs")
    aql = portfolio(alice)
    aql.ok(READ, "browse_collection", section="library", type="personas")  # fills the collection cache
    aql.ok(READ, "browse_collection", section="library", type="skills")  # answered from it

    report = aql.ok(READ, "get_cache_budget_report")
    caches = {c["name"]: c for c in report["caches"]}

    assert set(caches) >= {"collection-index", "shared-cache", "search-index", "mcp-sessions", "template-patterns",
                           "workflow-expressions"}
    index = caches["collection-index"]
    assert index["entries"] >= 30 and index["budgetBytes"] == collection.MAX_TOTAL_BYTES
    assert 0 < index["utilization"] < 1 and index["bytes"] > 0
    assert index["hits"] >= 1 and index["misses"] >= 1
    assert caches["search-index"]["entries"] == 1  # alice's one element, not bob's
    assert caches["mcp-sessions"]["entries"] == 1 and caches["mcp-sessions"]["hits"] >= 3
    assert all(set(c) >= {"entries", "budgetEntries", "bytes", "budgetBytes", "utilization", "hitRate"}
               for c in report["caches"])
    assert report["nearBudget"] == []
