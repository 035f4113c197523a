"""A list without filters takes its total from the owner's count per type, which the database keeps
itself: whatever writes elements (a service, admin, bulk_create, a user's deletion, twenty calls at
once), the count stays what COUNT(*) would say."""

import pytest
from django.db import connection

import elements.operations  # noqa: F401  (fills the route table)
from core.caller import Caller
from elements import selectors, services
from elements.counts import ensure_sqlite_counts
from elements.mcpaql import Endpoint, run
from elements.models import Element, ElementCount
from elements.types import ElementType
from tests.conftest import THREADS, in_threads, make_member


def counts(user) -> dict[str, int]:
    return dict(ElementCount.objects.filter(owner=user).values_list("element_type", "count"))


def counted(user) -> dict[str, int]:
    """COUNT(*) per type, for comparison; types with none left out, as a count of 0 may stay."""
    rows = Element.objects.filter(owner=user).values_list("element_type", flat=True)
    found: dict[str, int] = {}
    for element_type in rows:
        found[element_type] = found.get(element_type, 0) + 1
    return found


def kept(user) -> dict[str, int]:
    return {element_type: n for element_type, n in counts(user).items() if n}


def skill(caller: Caller, name: str) -> Element:
    return services.element_create(caller=caller, element_type=ElementType.SKILL, name=name,
                                   params={"description": "A skill.", "content": "Do it."})


def listed_total(caller: Caller, element_type: str | None = "skill", **params) -> int:
    answer = run(Endpoint.READ, {"operation": "list_elements", "element_type": element_type, "params": params}, caller)
    assert answer["success"] is True, answer
    return answer["data"]["pagination"]["totalItems"]


def test_the_count_follows_creates_deletes_and_bulk_inserts(alice, bob):
    caller = Caller.trusted(alice.user, via="api")
    for index in range(3):
        skill(caller, f"skill-{index}")
    Element.objects.bulk_create([Element(owner=alice.user, element_type="persona", name=f"p{i}", unique_id=f"p{i}")
                                 for i in range(4)])
    services.element_delete(caller=caller, element=Element.objects.get(owner=alice.user, name="skill-0"))
    Element.objects.filter(owner=alice.user, element_type="persona", name="p3").delete()
    skill(Caller.trusted(bob.user, via="api"), "bobs")

    assert kept(alice.user) == counted(alice.user) == {"skill": 2, "persona": 3}
    assert kept(bob.user) == {"skill": 1}
    assert listed_total(caller) == 2
    assert selectors.element_page(caller=caller, query=selectors.ListQuery())[1] == 5


def test_a_list_with_filters_still_counts_its_matches(alice):
    caller = Caller.trusted(alice.user, via="api")
    for name in ("alpha", "beta", "alphabet"):
        skill(caller, name)

    assert listed_total(caller) == 3
    assert listed_total(caller, nameContains="alpha") == 2


def test_moving_an_element_to_another_owner_or_type_moves_its_count(alice, bob):
    element = skill(Caller.trusted(alice.user, via="api"), "moving")

    Element.objects.filter(pk=element.pk).update(owner=bob.user)
    Element.objects.filter(pk=element.pk).update(element_type="persona")
    Element.objects.filter(pk=element.pk).update(name="renamed")  # neither owner nor type: nothing moves

    assert kept(alice.user) == {}
    assert kept(bob.user) == counted(bob.user) == {"persona": 1}


def test_deleting_a_user_takes_their_counts_with_them(alice):
    skill(Caller.trusted(alice.user, via="api"), "one")
    user_id = alice.user.pk

    alice.user.delete()

    assert not ElementCount.objects.filter(owner_id=user_id).exists()


def test_what_goes_around_the_row_triggers_leaves_the_counts_exact(alice):
    caller = Caller.trusted(alice.user, via="api")
    skill(caller, "before")
    if connection.vendor == "sqlite":
        # SQLite drops a table's triggers when a migration rebuilds it; after migrate they come back
        # and the counts are recomputed, including what was inserted meanwhile.
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER element_count_insert")
        skill(caller, "unseen")

        assert ensure_sqlite_counts(connection) is True
        assert kept(alice.user) == {"skill": 2}
        assert ensure_sqlite_counts(connection) is False
    else:
        # PostgreSQL's TRUNCATE fires no row triggers; its own trigger empties the counts.
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the test's transaction holds deferred checks
            cursor.execute("TRUNCATE elements_element CASCADE")

        assert kept(alice.user) == counted(alice.user) == {}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_concurrent_creates_and_deletes_leave_the_count_exact():
    member = make_member("alice")
    caller = Caller.trusted(member.user, via="mcp")
    services.settings_set(caller=caller, values={"gatekeeper.auto_confirm": True})
    for index in range(THREADS):
        skill(caller, f"old-{index}")

    def churn(index: int) -> bool:
        created = run(Endpoint.CREATE, {"operation": "create_element", "element_type": "skill", "params": {
            "element_name": f"new-{index}", "description": "New.", "content": "Do it."}}, caller)
        if index % 2:
            return created["success"]
        services.element_delete(caller=caller, element=Element.objects.get(owner=member.user, name=f"old-{index}"))
        return created["success"]

    assert in_threads(churn) == [True] * THREADS

    assert kept(member.user) == counted(member.user) == {"skill": THREADS + THREADS // 2}
    assert listed_total(caller) == THREADS + THREADS // 2
