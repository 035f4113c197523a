"""list_elements and query_elements answer pagination.nextCursor when another page follows; sent
back as cursor, it reads that page by keyset: the same rows as the numbered page, at any depth,
without an OFFSET, and without repeating or skipping a row when elements are added before it."""

import re
from dataclasses import replace
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import elements.operations  # noqa: F401  (fills the route table)
from core.caller import Caller
from elements import selectors
from elements.fields import version_key
from elements.mcpaql import Endpoint, run
from elements.models import Element
from elements.selectors import CURSOR_PATTERN, MAX_CURSOR_LENGTH
from elements.types import ElementType
from tests.conftest import Api

SORTS = [(sort_by, order) for sort_by in ("name", "created", "modified", "version") for order in ("asc", "desc")]


def listing(caller: Caller, operation: str = "list_elements", **params) -> dict:
    answer = run(Endpoint.READ, {"operation": operation, "element_type": "skill", "params": params}, caller)
    assert answer["success"] is True, answer
    return answer["data"]


def refused(caller: Caller, **params) -> str:
    answer = run(Endpoint.READ, {"operation": "list_elements", "element_type": "skill", "params": params}, caller)
    assert answer["success"] is False, answer
    return answer["error"]


def names(data: dict) -> list[str]:
    return [item["element_name"] for item in data["items"]]


@pytest.fixture
def skills(alice, bob):
    """47 skills of alice's whose times and versions tie in groups (so the id breaks ties), and one
    of bob's, which no listing of alice's may show."""
    now = timezone.now()
    Element.objects.bulk_create([
        Element(owner=alice.user, element_type="skill", name=f"skill-{i:02d}", unique_id=f"s{i}",
                description="A skill.", tags=["even" if i % 2 == 0 else "odd"],
                created=now - timedelta(minutes=i // 5), modified=now - timedelta(minutes=i % 4),
                version=f"1.{i % 3}.0", version_key=version_key(f"1.{i % 3}.0"))
        for i in range(47)])
    Element.objects.create(owner=bob.user, element_type="skill", name="skill-bob", unique_id="bob")
    return Caller.trusted(alice.user, via="api")


def followed(caller: Caller, operation: str = "list_elements", **params) -> tuple[list[str], list[dict]]:
    """Every name a listing shows by following its cursors, and each page's pagination."""
    seen, pages = [], []
    data = listing(caller, operation, **params)
    while True:
        seen += names(data)
        pages.append(data["pagination"])
        if "nextCursor" not in data["pagination"]:
            return seen, pages
        cursor = data["pagination"]["nextCursor"]
        data = listing(caller, operation, **{k: v for k, v in params.items() if k != "page"}, cursor=cursor)


@pytest.mark.parametrize(("sort_by", "order"), SORTS)
def test_following_cursors_shows_the_numbered_pages_rows_in_every_order(skills, sort_by, order):
    by_number = [names(listing(skills, sortBy=sort_by, sortOrder=order, pageSize=10, page=page))
                 for page in range(1, 6)]

    seen, pages = followed(skills, sortBy=sort_by, sortOrder=order, pageSize=10)

    assert seen == [name for page in by_number for name in page]
    assert sorted(seen) == [f"skill-{i:02d}" for i in range(47)]
    assert [p["page"] for p in pages] == [1, 2, 3, 4, 5]
    assert [p["hasNextPage"] for p in pages] == [True] * 4 + [False]
    assert [p["hasPrevPage"] for p in pages] == [False] + [True] * 4
    assert {p["totalItems"] for p in pages} == {47}


def test_a_cursor_keeps_the_filters_and_may_change_the_page_size(skills):
    first = listing(skills, tags=["even"], pageSize=5)
    rest = listing(skills, tags=["even"], pageSize=20, cursor=first["pagination"]["nextCursor"])

    assert names(first) + names(rest) == [f"skill-{i:02d}" for i in range(0, 47, 2)][:25]
    assert rest["pagination"]["page"] == 1 and rest["pagination"]["hasPrevPage"] is True
    assert rest["filters"]["applied"] == {"tags": ["even"], "count": 24}


def test_query_elements_takes_the_cursor_in_its_pagination(skills):
    first = listing(skills, "query_elements", filters={"tags": ["odd"]}, pagination={"pageSize": 20})
    cursor = first["pagination"]["nextCursor"]

    second = listing(skills, "query_elements", filters={"tags": ["odd"]}, pagination={"cursor": cursor})

    assert names(first) + names(second) == [f"skill-{i:02d}" for i in range(1, 47, 2)]
    assert "nextCursor" not in second["pagination"] and second["pagination"]["page"] == 2


def test_elements_added_before_the_cursor_neither_repeat_nor_shift_the_next_page(skills):
    first = listing(skills, pageSize=10)
    Element.objects.create(owner=skills.user, element_type="skill", name="skill-00a", unique_id="new")

    second = listing(skills, pageSize=10, cursor=first["pagination"]["nextCursor"])

    assert names(second) == [f"skill-{i:02d}" for i in range(10, 20)]
    assert second["pagination"]["totalItems"] == 48


def test_a_cursor_page_has_no_offset_however_deep(skills):
    cursor = listing(skills, pageSize=1, page=40)["pagination"]["nextCursor"]

    with CaptureQueriesContext(connection) as queries:
        page = listing(skills, pageSize=1, cursor=cursor)

    assert names(page) == ["skill-40"] and page["pagination"]["page"] == 41
    assert not [q for q in queries.captured_queries if "OFFSET" in q["sql"].upper()]


def test_a_cursor_for_another_listing_or_edited_or_with_a_page_is_refused(skills):
    cursor = listing(skills, pageSize=10)["pagination"]["nextCursor"]
    payload, _, signature = cursor.rpartition(".")

    for params in ({"sortOrder": "desc"}, {"sortBy": "created"}, {"nameContains": "skill"}, {"tags": ["odd"]}):
        assert "cursor is not one this server gave for this listing" in refused(skills, cursor=cursor, **params)
    for forged in (payload[:-2] + "xx." + signature, "not-a-cursor", "x" * 999, cursor + "0", "\udcff.x"):
        assert "cursor is not one this server gave" in refused(skills, cursor=forged)
    assert "must be under 1000 characters" in refused(skills, cursor="x" * 1000)
    assert "Conflicting pagination" in refused(skills, cursor=cursor, page=2)
    assert "Conflicting pagination" in refused(skills, cursor=cursor, offset=10)
    assert "must be a string" in refused(skills, cursor=12)


def test_a_cursor_after_the_longest_name_fits_in_a_url_as_it_is(skills):
    longest = "\U0001f600" * 100  # 100 characters of 4 bytes each
    Element.objects.create(owner=skills.user, element_type="skill", name=longest, unique_id="longest")

    first = listing(skills, pageSize=1, sortOrder="desc")
    cursor = first["pagination"]["nextCursor"]
    rest = listing(skills, pageSize=1, sortOrder="desc", cursor=cursor)

    assert names(first) == [longest] and 600 < len(cursor) < MAX_CURSOR_LENGTH
    assert quote(cursor, safe="") == cursor and re.fullmatch(CURSOR_PATTERN, cursor)
    assert names(rest) == ["skill-46"]


def test_another_users_cursor_shows_only_the_callers_own_elements(skills, bob):
    cursor = listing(skills, pageSize=10)["pagination"]["nextCursor"]

    theirs = listing(Caller.trusted(bob.user, via="api"), pageSize=10, cursor=cursor)

    assert names(theirs) == ["skill-bob"]


def test_the_api_lists_by_cursor_and_refuses_a_bad_one(alice, skills):
    api = Api(alice)
    first = api.get("/api/elements/skills/", {"pageSize": 30}).json()

    second = api.get("/api/elements/skills/", {"cursor": first["pagination"]["nextCursor"]})
    bad = api.get("/api/elements/skills/", {"cursor": "forged"})

    assert [i["element_name"] for i in first["items"] + second.json()["items"]] == [
        f"skill-{i:02d}" for i in range(47)]
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_cursor"


def test_a_page_without_filters_reads_its_total_from_the_kept_count(skills):
    """In the page's own statement on PostgreSQL (a round trip fewer); on its own on SQLite."""
    query = selectors.ListQuery(element_type=ElementType.SKILL, page_size=10)

    with CaptureQueriesContext(connection) as unfiltered:
        items, paging = selectors.element_list(caller=skills, query=query)
    with CaptureQueriesContext(connection) as filtered:
        _, filtered_paging = selectors.element_list(caller=skills, query=replace(query, tags_any=("odd",)))
    with CaptureQueriesContext(connection) as past_the_end:
        none, beyond = selectors.element_list(caller=skills, query=replace(query, page=9))

    one_statement = connection.vendor == "postgresql"
    assert len(unfiltered.captured_queries) == (1 if one_statement else 2)
    assert "elements_elementcount" in unfiltered.captured_queries[-1]["sql"]
    assert len(items) == 10 and paging["totalItems"] == 47
    assert len(filtered.captured_queries) == 2 and filtered_paging["totalItems"] == 23
    assert len(past_the_end.captured_queries) == 2 and none == [] and beyond["totalItems"] == 47
