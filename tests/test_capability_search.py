"""Capability search: the index index_refresh keeps, and capabilities_search by keyword (every
operator, on both databases), by meaning, and both fused; who sees what, the filters, the limit and
the refusals."""

import pytest
from django.db import connection

from core.caller import Caller
from core.errors import InvalidInput
from integrations import embeddings
from integrations.models import Action, Capability, Connection, Integration, Skill
from integrations.search import capabilities_search, index_refresh, query_parse
from integrations.search_index import ensure_sqlite_capability_index

pytestmark = pytest.mark.django_db

ACTIONS = {
    "github_tools": [("create_issue", "Open a new issue in a repository."), ("close_issue", "Close an open issue."),
                     ("list_pull_requests", "List the pull requests of a repository.")],
    "gmail_tools": [("send_email", "Send an email message to recipients."),
                    ("list_labels", "List the mailbox labels.")],
    "http_tools": [("http_request", "Send an HTTP request and return the response.")],
    "legacy_tools": [("send_fax", "Send a fax to a number.")],
}


@pytest.fixture
def catalogue(alice):
    github = Integration.objects.create(id="github_tools", name="GitHub", category="developer",
                                        description="Code hosting: repositories and their collaborators.",
                                        agent_instructions="Name a repository as owner/repo.")
    gmail = Integration.objects.create(id="gmail_tools", name="Gmail", category="communication",
                                       description="Send and read email with Gmail.")
    Integration.objects.create(id="http_tools", name="HTTP", category="developer", connection_required=False,
                               description="Make HTTP requests to allowed hosts.")
    Integration.objects.create(id="legacy_tools", name="Legacy relay", category="communication", enabled=False,
                               description="Fax and pager relay.")
    for integration_id, actions in ACTIONS.items():
        for name, description in actions:
            Action.objects.create(integration_id=integration_id, name=name, description=description, executor="http")
    Skill.objects.create(name="triage_issues", description="Adds labels to new issues from their text.",
                         source_code="pass").integrations.add(github)
    Skill.objects.create(owner=alice.user, name="weekly_digest", description="Email a weekly digest of pull requests.",
                         source_code="pass").integrations.add(gmail, github)
    Skill.objects.create(owner=alice.user, name="secret_recipe", description="Zanzibar marmalade recipe.",
                         source_code="pass")
    refresh_all()


def refresh_all() -> None:
    index_refresh(integrations=Integration.objects.all(), skills=Skill.objects.all())


def search(member, query, **options):
    arguments = {"types": None, "integration_id": None, "category": None, **options}
    return capabilities_search(caller=Caller.trusted(member.user, via="mcp"), query=query, **arguments)


def names(hits) -> list[str]:
    return [hit["name"] for hit in hits]


@pytest.fixture
def embedded(monkeypatch) -> list[str]:
    """Every text embedded from here on."""
    texts: list[str] = []
    real = embeddings.embed

    def counting(batch: list[str]):
        texts.extend(batch)
        return real(batch)

    monkeypatch.setattr(embeddings, "embed", counting)
    return texts


# The index.


def test_refresh_indexes_each_integration_action_and_skill(catalogue, alice):
    rows = {row.name: row for row in Capability.objects.all()}

    assert len(rows) == 4 + 7 + 3
    integration = rows["github_tools"]
    assert (integration.type, integration.integration_id, integration.category, integration.owner_id) == (
        "integration", "github_tools", "developer", None)
    assert integration.document == "github tools integration github code hosting repositories and their collaborators"
    action = rows["gmail_tools.send_email"]
    assert (action.type, action.integration_id, action.category, action.description, action.action.name) == (
        "action", "gmail_tools", "communication", "Send an email message to recipients.", "send_email")
    assert action.document == ("gmail tools send email send an email message to recipients gmail send and read "
                               "email with gmail")
    skill = rows["weekly_digest"]
    assert (skill.type, skill.integration_id, skill.category, skill.owner_id) == (
        "skill", "github_tools", "developer", alice.user.pk)
    assert skill.document == "weekly digest email a weekly digest of pull requests github gmail"
    lone = rows["secret_recipe"]
    assert (lone.integration_id, lone.category) == (None, "")
    assert all(len(row.embedding) == embeddings.DIMENSIONS * 4 and len(row.document_hash) == 64
               for row in rows.values())


def test_a_camel_case_action_name_is_found_by_its_words(catalogue, alice):
    Action.objects.create(integration_id="github_tools", name="listRepoTopics", description="Topics.", executor="http")
    index_refresh(integrations=Integration.objects.filter(pk="github_tools"))

    assert names(search(alice, '"repo topics"', mode="keyword")) == ["github_tools.listRepoTopics"]
    assert names(search(alice, "listrepotopics", mode="keyword")) == ["github_tools.listRepoTopics"]


def test_a_second_refresh_embeds_nothing_and_changes_no_row(catalogue, embedded):
    before = {row.pk: (bytes(row.embedding), row.updated_at) for row in Capability.objects.all()}

    refresh_all()

    assert embedded == []
    assert {row.pk: (bytes(row.embedding), row.updated_at) for row in Capability.objects.all()} == before


def test_only_rows_whose_text_changed_are_embedded_again(catalogue, embedded):
    before = {row.name: bytes(row.embedding) for row in Capability.objects.all()}
    Action.objects.filter(name="close_issue").update(description="Close an issue as done.")

    refresh_all()

    assert embedded == ["github tools close issue close an issue as done github code hosting repositories and their "
                        "collaborators"]
    after = {row.name: bytes(row.embedding) for row in Capability.objects.all()}
    assert after["github_tools.close_issue"] != before["github_tools.close_issue"]
    assert {n: v for n, v in after.items() if n != "github_tools.close_issue"} == {
        n: v for n, v in before.items() if n != "github_tools.close_issue"}


def test_an_integrations_new_description_reaches_its_actions(catalogue, embedded):
    Integration.objects.filter(pk="http_tools").update(description="Call web endpoints.")

    index_refresh(integrations=Integration.objects.filter(pk="http_tools"))

    assert len(embedded) == 2
    assert Capability.objects.get(name="http_tools.http_request").document.endswith("http call web endpoints")
    assert Capability.objects.get(name="http_tools").description == "Call web endpoints."


def test_a_category_change_is_written_without_embedding(catalogue, embedded):
    Integration.objects.filter(pk="http_tools").update(category="network")

    index_refresh(integrations=Integration.objects.filter(pk="http_tools"))

    assert embedded == []
    assert set(Capability.objects.filter(integration_id="http_tools").values_list("category", flat=True)) == {
        "network"}


def test_an_action_moved_to_another_integration_is_indexed_once_under_it(catalogue, alice):
    Action.objects.filter(name="list_labels").update(integration_id="github_tools")

    index_refresh(integrations=Integration.objects.filter(pk="gmail_tools"))
    assert not Capability.objects.filter(name__endswith="list_labels").exists()
    index_refresh(integrations=Integration.objects.filter(pk="github_tools"))

    row = Capability.objects.get(name__endswith="list_labels")
    assert (row.name, row.integration_id) == ("github_tools.list_labels", "github_tools")
    assert names(search(alice, "labels", mode="keyword", types=["action"])) == ["github_tools.list_labels"]


def test_deleted_actions_and_skills_leave_the_index(catalogue, alice):
    Action.objects.filter(name="close_issue").delete()
    Skill.objects.filter(name="secret_recipe").delete()

    assert not Capability.objects.filter(name__in=["github_tools.close_issue", "secret_recipe"]).exists()
    for mode in ("keyword", "semantic", "hybrid"):
        found = names(search(alice, "close issue | zanzibar marmalade", mode=mode, limit=50))
        assert "github_tools.close_issue" not in found and "secret_recipe" not in found


def test_lost_triggers_are_restored_and_the_index_refilled(catalogue, alice):
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER capability_document_update")  # what a table rebuild does
        Skill.objects.filter(name="secret_recipe").update(description="Quince jelly.")
        index_refresh(skills=Skill.objects.filter(name="secret_recipe"))
        assert search(alice, "quince", mode="keyword") == []

        assert ensure_sqlite_capability_index(connection) is True
    else:
        Skill.objects.filter(name="secret_recipe").update(description="Quince jelly.")
        index_refresh(skills=Skill.objects.filter(name="secret_recipe"))
        assert ensure_sqlite_capability_index(connection) is False

    assert names(search(alice, "quince", mode="keyword")) == ["secret_recipe"]
    assert ensure_sqlite_capability_index(connection) is False


# Keyword search and its operators.


@pytest.mark.parametrize(("query", "expected"), [
    ("issue", {"github_tools.create_issue", "github_tools.close_issue"}),
    ("issue*", {"github_tools.create_issue", "github_tools.close_issue", "triage_issues"}),
    ("repositor*", {"github_tools", "github_tools.create_issue", "github_tools.close_issue",
                    "github_tools.list_pull_requests"}),
    ("repositor", set()),
    ('"pull requests"', {"github_tools.list_pull_requests", "weekly_digest"}),
    ('"requests pull"', set()),
    ('"pull req"*', {"github_tools.list_pull_requests", "weekly_digest"}),
    ("email -digest", {"gmail_tools", "gmail_tools.send_email", "gmail_tools.list_labels"}),
    ('requests -"pull requests"', {"http_tools", "http_tools.http_request"}),
    ("email -dig*", {"gmail_tools", "gmail_tools.send_email", "gmail_tools.list_labels"}),
    ("labels | recipients", {"gmail_tools.list_labels", "gmail_tools.send_email", "triage_issues"}),
    ("gmail labels | recipients", {"gmail_tools.list_labels", "gmail_tools.send_email"}),
    ("github issue | requests open", {"github_tools.create_issue", "github_tools.close_issue"}),
    ("zanz* | fax", {"secret_recipe"}),
    ("send* -http -fax", {"gmail_tools", "gmail_tools.send_email", "gmail_tools.list_labels"}),
    ('"open" issue* -"new issue"', {"github_tools.close_issue"}),
    ('"weekly digest" | "mailbox labels" -mailbox', {"weekly_digest"}),
    ("github_tools.create_issue", {"github_tools.create_issue"}),
])
def test_keyword_operators(catalogue, alice, query, expected):
    assert set(names(search(alice, query, mode="keyword", limit=50))) == expected


@pytest.mark.parametrize(("query", "expected"), [
    ("issue & !open", {"github_tools.create_issue", "github_tools.close_issue"}),
    ("issue NOT open", set()),  # NOT is a word to look for, not an operator
    ("'issue'", {"github_tools.create_issue", "github_tools.close_issue"}),
    ('issue"', {"github_tools.create_issue", "github_tools.close_issue"}),
    ("issue:*", {"github_tools.create_issue", "github_tools.close_issue", "triage_issues"}),
    ("document:issue", set()),
    ("NEAR(issue open)", set()),
    ("issue'); DROP TABLE integrations_capability; --", set()),
    ("-- | issue", {"github_tools.create_issue", "github_tools.close_issue"}),
])
def test_full_text_syntax_in_a_query_is_only_words(catalogue, alice, query, expected):
    assert set(names(search(alice, query, mode="keyword", limit=50))) == expected
    assert Capability.objects.count() == 14


def test_queries_become_quoted_terms_for_both_databases():
    parsed = query_parse('gith* "pull requests" | issue -"wont fix" -stale*')

    assert parsed.fts5() == '(("gith"*) AND ("pull requests" OR "issue")) NOT "wont fix" NOT "stale"*'
    assert parsed.tsquery() == ("(('gith':*)) & (('pull' <-> 'requests') | ('issue')) & !('wont' <-> 'fix') & "
                                "!('stale':*)")
    assert parsed.plain() == "gith pull requests issue"
    assert len(query_parse(" ".join(f"w{i}" for i in range(32))).groups) == 32  # the most terms a query may have
    assert query_parse("x" * 500).plain() == "x" * 500


def test_a_name_counts_above_a_description(catalogue, alice):
    assert names(search(alice, "labels", mode="keyword")) == ["gmail_tools.list_labels", "triage_issues"]


def test_keyword_scores_fall_from_the_first(catalogue, alice):
    scores = [hit["score"] for hit in search(alice, "repositor*", mode="keyword")]

    assert all(isinstance(score, float) for score in scores)
    assert scores == sorted(scores, reverse=True)


# Semantic and hybrid search.


def test_semantic_search_finds_by_meaning(catalogue, alice):
    assert search(alice, "send a message to someone's inbox", mode="semantic")[0]["name"] == "gmail_tools.send_email"
    assert search(alice, "fetch a web page", mode="semantic")[0]["name"] == "http_tools.http_request"


def test_semantic_search_ranks_every_visible_row_by_similarity(catalogue, alice):
    hits = search(alice, "label new issues", mode="semantic", limit=50)

    assert len(hits) == 12  # all but the disabled integration's two rows
    assert [hit["score"] for hit in hits] == sorted((hit["score"] for hit in hits), reverse=True)
    assert all(-1 <= hit["score"] <= 1 for hit in hits)


def test_semantic_search_honours_exclusions(catalogue, alice):
    assert search(alice, "send email", mode="semantic")[0]["name"] == "gmail_tools.send_email"

    found = names(search(alice, "send email -recipients", mode="semantic", limit=50))

    assert "gmail_tools.send_email" not in found
    assert found[0] == "gmail_tools"
    assert len(found) == 11
    # Past the best few, when exclusions remove them, the ranking goes on in order.
    assert names(search(alice, "send email -gmail", mode="semantic", limit=2)) == names(
        search(alice, "send email -gmail", mode="semantic", limit=50))[:2]


def test_semantic_search_sees_a_refreshed_description(catalogue, alice):
    Skill.objects.filter(name="secret_recipe").update(description="Files the quarterly sales tax return.")
    index_refresh(skills=Skill.objects.filter(name="secret_recipe"))

    assert search(alice, "tax return filing", mode="semantic")[0]["name"] == "secret_recipe"


def test_hybrid_puts_what_both_rankings_agree_on_first(catalogue, alice):
    hits = search(alice, "send email", mode="hybrid")

    assert hits[0]["name"] == "gmail_tools.send_email"
    assert hits[0]["score"] == round(2 / 61, 4)  # first in both rankings
    assert len(hits) == 12  # the semantic ranking brings in the rest
    assert [hit["score"] for hit in hits] == sorted((hit["score"] for hit in hits), reverse=True)


def test_hybrid_is_the_default_mode(catalogue, alice):
    assert search(alice, "send email") == search(alice, "send email", mode="hybrid")


def test_hybrid_answers_semantically_when_no_word_matches(catalogue, alice):
    assert search(alice, "electronic correspondence", mode="keyword") == []

    hits = search(alice, "electronic correspondence", mode="hybrid", limit=5)

    assert names(hits) == names(search(alice, "electronic correspondence", mode="semantic", limit=5))
    assert hits[0]["score"] == round(1 / 61, 4)


# Who sees what.


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_charlie_never_finds_alices_skills(catalogue, alice, charlie, mode):
    assert "secret_recipe" in names(search(alice, "zanzibar marmalade", mode=mode))

    for query in ("zanzibar marmalade", "weekly digest", "recipe | digest"):
        found = names(search(charlie, query, mode=mode, limit=50))
        assert "secret_recipe" not in found and "weekly_digest" not in found
    assert "triage_issues" in names(search(charlie, "triage issues", mode=mode))


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_a_disabled_integration_and_its_actions_never_appear(catalogue, alice, mode):
    hidden = {"legacy_tools", "legacy_tools.send_fax"}
    assert not hidden & set(names(search(alice, "fax | pager", mode=mode, limit=50)))

    Integration.objects.filter(pk="legacy_tools").update(enabled=True)

    assert hidden <= set(names(search(alice, "fax | pager", mode=mode, limit=50)))


def test_connected_says_whether_the_caller_can_use_it_now(catalogue, alice, bob):
    Connection.objects.create(user=alice.user, integration_id="github_tools")
    Connection.objects.create(user=alice.user, integration_id="gmail_tools", state=Connection.State.EXPIRED)

    def connected(member) -> dict[str, bool]:
        return {hit["name"]: hit["connected"] for hit in search(member, "zzz", mode="semantic", limit=50)}

    assert connected(alice) == {
        "github_tools": True, "github_tools.create_issue": True, "github_tools.close_issue": True,
        "github_tools.list_pull_requests": True, "gmail_tools": False, "gmail_tools.send_email": False,
        "gmail_tools.list_labels": False, "http_tools": True, "http_tools.http_request": True,
        "triage_issues": True, "weekly_digest": False, "secret_recipe": True}
    assert {name for name, ready in connected(bob).items() if ready} == {
        "http_tools", "http_tools.http_request"}

    Connection.objects.filter(user=alice.user, integration_id="gmail_tools").update(state=Connection.State.CONNECTED)
    assert connected(alice)["weekly_digest"] is True


def test_a_hit_has_exactly_the_documented_fields(catalogue, alice):
    hits = {hit["name"]: hit for hit in search(alice, "recipe | recipients", mode="keyword")}

    assert hits["secret_recipe"] == {"type": "skill", "name": "secret_recipe",
                                     "description": "Zanzibar marmalade recipe.", "integrationId": None,
                                     "connected": True, "score": hits["secret_recipe"]["score"]}
    assert hits["gmail_tools.send_email"].keys() == {"type", "name", "description", "integrationId", "connected",
                                                     "score"}
    assert hits["gmail_tools.send_email"]["integrationId"] == "gmail_tools"


# Filters and limit.


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_filters_apply_before_ranking(catalogue, alice, mode):
    def found(**filters) -> set[str]:
        return set(names(search(alice, "list* | send* | issue*", mode=mode, limit=50, **filters)))

    assert found(types=["action"]) >= {"github_tools.list_pull_requests", "gmail_tools.list_labels"}
    assert {Capability.objects.get(name=name).type for name in found(types=["action"])} == {"action"}
    assert {Capability.objects.get(name=name).type for name in found(types=["skill", "integration"])} == {
        "skill", "integration"}
    assert found(integration_id="gmail_tools") == {"gmail_tools", "gmail_tools.send_email", "gmail_tools.list_labels"}
    assert found(category="Communication") == {"gmail_tools", "gmail_tools.send_email", "gmail_tools.list_labels"}
    assert found(types=["skill"], category="developer") >= {"triage_issues"}
    assert found(integration_id="nowhere_tools") == set()


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_the_limit_caps_the_hits(catalogue, alice, mode):
    assert len(search(alice, "repositor*", mode=mode, limit=2)) == 2
    assert len(search(alice, "repositor*", mode=mode, limit=1)) == 1


# A query with nothing to look for, or too many terms, passes a length check (an API schema's) but
# not the parser: those refusals have codes of their own.
@pytest.mark.parametrize(("query", "options", "code", "message"), [
    ("a", {}, "query_required", "at least 2 characters"),
    ("   a  ", {}, "query_required", "at least 2 characters"),
    ("x" * 501, {}, "invalid_input", "at most 500 characters"),
    (" ".join(f"w{i}" for i in range(33)), {}, "too_many_terms", "at most 32 terms"),
    ("-issue", {}, "query_required", "at least one word to look for"),
    ('-issue -"pull requests"', {}, "query_required", "at least one word to look for"),
    ("** ||", {}, "query_required", "at least one word to look for"),
    ("issue", {"mode": "fuzzy"}, "invalid_input", "mode must be one of keyword, semantic, hybrid"),
    ("issue", {"limit": 0}, "invalid_input", "limit must be a whole number from 1 to 50"),
    ("issue", {"limit": 51}, "invalid_input", "limit must be a whole number from 1 to 50"),
    ("issue", {"types": ["action", "widget"]}, "invalid_input", "not widget"),
])
def test_it_refuses_bad_arguments(catalogue, alice, query, options, code, message):
    with pytest.raises(InvalidInput) as refused:
        search(alice, query, **options)

    assert refused.value.code == code
    assert message in refused.value.message
