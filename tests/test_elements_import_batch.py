"""An import's batch is written together: the new elements, their revisions, their audit events and
their memories' entries one statement per table, the owner's triggers asked once; and each package
gets the outcome element_import would give it alone."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import AuditEvent
from core.caller import Caller
from elements import services
from elements.models import Element, ElementCount, ElementRevision, MemoryEntry
from elements.selectors import memory_entries
from elements.types import ElementType
from tests.conftest import THREADS, in_threads, make_member
from tests.playbook_helpers import playbook_make
from workflows import tasks, triggers

pytestmark = pytest.mark.django_db
WRITE = re.compile(r'^INSERT INTO "(\w+)"')


def skill(name: str, **fields) -> dict:
    return {"element_type": "skill", "element_name": name, "description": f"The {name} skill.",
            "content": "Do it well.", **fields}


def notes(name: str, entries: list) -> dict:
    return {"element_type": "memory", "element_name": name, "description": "Notes.", "entries": entries}


def caller(member) -> Caller:
    return Caller.trusted(member.user, via="command")


def test_new_elements_are_written_one_statement_per_table(alice):
    packages = [skill(f"skill-{i}") for i in range(50)] + [notes("log", [{"content": "One."}, {"content": "Two."}])]

    with CaptureQueriesContext(connection) as queries:
        outcomes = services.elements_import(caller=caller(alice), packages=packages)

    assert outcomes == [("created", "")] * 51
    inserts = [m[1] for q in queries.captured_queries if (m := WRITE.match(q["sql"]))]
    assert sorted(inserts) == ["accounts_auditevent", "elements_element", "elements_elementrevision",
                               "elements_memoryentry"]
    assert Element.objects.filter(owner=alice.user).count() == 51
    assert ElementCount.objects.get(owner=alice.user, element_type="skill").count == 50
    memory = Element.objects.get(owner=alice.user, name="log")
    assert [e.content for e in memory_entries(memory=memory)] == ["One.", "Two."]
    # The first revision holds what was imported, entries included: restoring it loses nothing.
    assert [e["content"] for e in ElementRevision.objects.get(element=memory).snapshot["entries"]] == ["One.", "Two."]


def test_a_batch_records_what_importing_each_file_alone_would(alice, bob):
    packages = [notes("log", [{"content": "One."}]), skill("tidy")]
    services.elements_import(caller=caller(alice), packages=packages)
    for package in packages:
        services.element_import(caller=caller(bob), package=package)

    def recorded(member) -> tuple[list, list]:
        events = AuditEvent.objects.filter(actor=member.user, action__startswith="element.").order_by("target")
        revisions = ElementRevision.objects.filter(owner=member.user).order_by("name")
        return ([(e.action, e.target, e.via, e.credential, e.detail) for e in events],
                [(r.action, r.element_type, r.name, r.credential,
                  [entry["content"] for entry in r.snapshot.get("entries") or []]) for r in revisions])

    assert recorded(alice) == recorded(bob)
    assert recorded(alice)[1] == [("import", "memory", "log", "management command", ["One."]),
                                  ("import", "skill", "tidy", "management command", [])]


def test_each_package_gets_the_outcome_it_would_get_alone(alice):
    services.elements_import(caller=caller(alice), packages=[skill("kept"), skill("replaced")])
    packages = [
        skill("new"),
        skill("kept"),  # there already, no overwrite: skipped
        {"element_type": "gadget", "element_name": "odd"},  # refused, alone
        notes("bad", [{"content": "Fine."}, "not an entry"]),  # a bad entry refuses its memory alone
        skill("new", description="The same name again."),  # an earlier package of the batch made it
        skill("also-new"),
    ]

    outcomes = services.elements_import(caller=caller(alice), packages=packages)

    assert [outcome for outcome, _ in outcomes] == ["created", "skipped", "refused", "refused", "skipped", "created"]
    assert "gadget" in outcomes[2][1] and outcomes[3][1] == "Each entry must be an object."
    assert sorted(Element.objects.filter(owner=alice.user).values_list("name", flat=True)) == [
        "also-new", "kept", "new", "replaced"]
    assert Element.objects.get(owner=alice.user, name="new").description == "The new skill."
    assert not MemoryEntry.objects.exists()


def test_overwrite_replaces_what_is_there_and_creates_the_rest(alice):
    services.elements_import(caller=caller(alice), packages=[skill("old", description="Before.")])

    outcomes = services.elements_import(caller=caller(alice), overwrite=True,
                                        packages=[skill("old", description="After."), skill("fresh")])

    assert outcomes == [("updated", ""), ("created", "")]
    assert Element.objects.get(owner=alice.user, name="old").description == "After."
    assert ElementRevision.objects.filter(element__name="old").count() == 2


def test_a_dry_run_gives_the_outcomes_and_writes_nothing(alice):
    outcomes = services.elements_import(caller=caller(alice), dry_run=True,
                                        packages=[skill("one"), {"element_type": "skill", "element_name": ""}])

    assert [outcome for outcome, _ in outcomes] == ["created", "refused"]
    assert not Element.objects.exists() and not ElementRevision.objects.exists()
    assert not ElementCount.objects.filter(owner=alice.user, count__gt=0).exists()


def test_every_element_created_is_an_event_and_the_triggers_are_asked_once(alice, monkeypatch,
                                                                           django_capture_on_commit_callbacks):
    triggers.trigger_create(caller=Caller.trusted(alice.user, via="api"), playbook=playbook_make(alice.user),
                            spec={"type": "event", "event": "element.created", "filters": {}, "enabled": True})
    sent = []
    monkeypatch.setattr(tasks.event_dispatch, "apply_async", lambda args, **kwargs: sent.append(args))

    with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks(execute=True):
        services.elements_import(caller=caller(alice), packages=[skill("a"), skill("b"), skill("c")])

    assert [(name, data["name"]) for _, name, data in sent] == [("element.created", n) for n in ("a", "b", "c")]
    assert sum('FROM "workflows_trigger"' in q["sql"] for q in queries.captured_queries) == 1
    assert {data["type"] for _, _, data in sent} == {ElementType.SKILL.value}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_concurrent_imports_of_one_batch_create_each_element_once():
    member = make_member("alice")
    packages = [skill(f"skill-{i}") for i in range(10)]

    answers = in_threads(lambda _: services.elements_import(caller=caller(member), packages=packages))

    for position in range(10):
        assert sorted(answer[position][0] for answer in answers) == ["created"] + ["skipped"] * (THREADS - 1)
    assert Element.objects.filter(owner=member.user).count() == 10
    assert ElementRevision.objects.filter(owner=member.user).count() == 10
    assert ElementCount.objects.get(owner=member.user, element_type="skill").count == 10


def test_a_batch_larger_than_one_lookup_finds_every_existing_name(alice):
    services.elements_import(caller=caller(alice), packages=[skill(f"s-{i}") for i in range(0, 1200, 2)])

    outcomes = services.elements_import(caller=caller(alice), packages=[skill(f"s-{i}") for i in range(1200)])

    assert [outcome for outcome, _ in outcomes] == ["skipped", "created"] * 600
    assert Element.objects.filter(owner=alice.user).count() == 1200
