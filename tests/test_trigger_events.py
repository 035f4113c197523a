"""Event triggers: each of Atrium's events, emitted by the service that caused it once its
transaction commits, fires the owner's matching triggers, and only the owner's; a playbook's own
run events never fire it; a trigger starts at most so many executions a minute."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from core.caller import Caller
from core.errors import InvalidInput
from elements import services as element_services
from elements.types import ElementType
from integrations import services as integration_services
from runs import engine
from runs.models import Run
from tests.playbook_helpers import playbook_make
from workflows import events, tasks, triggers
from workflows.models import Trigger, TriggerFiring
from workflows.scoping import Scope
from workflows.services import workflow_save

QUICK = {"name": "Quick", "start": "done", "nodes": {"done": {"type": "end"}}}
BROKEN = {"name": "Broken", "start": "done", "nodes": {"done": {"type": "end", "status": "failed"}}}


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Run what a block leaves for its transaction's commit (the event's dispatch), as a commit would."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def caller(member) -> Caller:
    return Caller.trusted(member.user, via="api")


def on_event(member, event: str, *, playbook=None, filters=None, enabled=True, **spec) -> Trigger:
    playbook = playbook or playbook_make(member.user)
    spec = {"type": "event", "event": event, "filters": filters or {}, "enabled": enabled, **spec}
    return triggers.trigger_create(caller=caller(member), playbook=playbook, spec=spec).trigger


def memory(member, name: str = "notes"):
    return element_services.element_create(caller=caller(member), element_type=ElementType.MEMORY, name=name,
                                           params={"description": "Notes", "tags": ["team"]})


def run_of(member, definition: dict, *, playbook=None) -> Run:
    scope = Scope(owner=member.user, project=None)
    workflow = workflow_save(caller=caller(member), scope=scope, workflow_id=definition["name"].lower(),
                             source="global", config=definition, overwrite=True)
    run = engine.run_create(caller=caller(member), scope=scope, definition=workflow.config, context=None,
                            workflow=workflow, workflow_key=workflow.workflow_id, source="global", playbook=playbook)
    engine.drive(run.pk)
    return Run.objects.get(pk=run.pk)


def cause_element_created(member) -> dict:
    element = memory(member)
    return {"type": "memory", "name": "notes", "uniqueId": element.unique_id, "tags": ["team"]}


def cause_element_changed(member) -> dict:
    element = memory(member)
    element_services.element_edit(caller=caller(member), element=element, changes={"description": "Team notes"})
    return {"type": "memory", "name": "notes", "uniqueId": element.unique_id, "tags": ["team"],
            "fields": ["description"]}


def cause_memory_entry_added(member) -> dict:
    entry = element_services.memory_entry_add(caller=caller(member), memory=memory(member), content="Ship it.",
                                              tags=["release"])
    return {"memory": "notes", "entryId": entry.entry_id, "content": "Ship it.", "tags": ["release"], "source": ""}


def cause_run_completed(member) -> dict:
    run = run_of(member, QUICK)
    return {"runId": run.pk, "workflowId": "quick", "playbookId": None, "status": "completed"}


def cause_run_failed(member) -> dict:
    run = run_of(member, BROKEN)
    return {"runId": run.pk, "workflowId": "broken", "playbookId": None, "status": "failed"}


def cause_capability_executed(member) -> dict:
    integration_services.catalogue_sync(documents=[])
    memory(member)
    integration_services.action_execute(caller=caller(member), name="atrium_tools.get_element",
                                        input={"type": "memory", "name": "notes"})
    return {"name": "atrium_tools.get_element", "kind": "action", "status": "succeeded"}


CAUSES = {
    "element.created": cause_element_created,
    "element.changed": cause_element_changed,
    "memory.entry_added": cause_memory_entry_added,
    "run.completed": cause_run_completed,
    "run.failed": cause_run_failed,
    "capability.executed": cause_capability_executed,
}


def test_every_event_has_a_cause_here():
    assert set(CAUSES) == set(events.EVENTS)


@pytest.mark.parametrize("event", list(CAUSES))
def test_each_event_starts_an_execution_of_a_matching_trigger_with_the_event_as_input(alice, committed, event):
    playbook = playbook_make(alice.user)
    trigger = on_event(alice, event, playbook=playbook, input={"repo": "atrium"})

    with committed():
        data = CAUSES[event](alice)

    firing = TriggerFiring.objects.get(trigger=trigger)
    assert (firing.outcome, firing.reason, firing.owner) == ("started", f"event {event}", alice.user)
    execution = Run.objects.get(trigger=trigger)
    assert firing.run == execution and execution.playbook == playbook
    assert execution.context == {"repo": "atrium", "event": {"name": event, "data": data}}
    assert sorted(data) == sorted(events.EVENTS[event])  # the documented keys, no more, no fewer


def test_an_event_waits_for_its_transaction_and_a_rolled_back_write_fires_nothing(alice, committed):
    trigger = on_event(alice, "element.created")

    with committed(), pytest.raises(RuntimeError), transaction.atomic():
        memory(alice)
        raise RuntimeError("the request failed after the create")

    assert not TriggerFiring.objects.filter(trigger=trigger).exists()


def test_filters_choose_which_events_fire_a_trigger(alice, committed):
    playbook = playbook_make(alice.user)
    notes = on_event(alice, "element.created", playbook=playbook, filters={"type": "memory", "name": "notes-*"})
    personas = on_event(alice, "element.created", playbook=playbook, filters={"type": ["persona", "agent"]})
    team = on_event(alice, "element.created", playbook=playbook, filters={"tags": "team"})

    with committed():
        memory(alice, "notes-2026")
        memory(alice, "diary")
        element_services.element_create(caller=caller(alice), element_type=ElementType.PERSONA, name="reviewer",
                                        params={"description": "Reviews", "instructions": "Review."})

    def fired(trigger):
        return [r.context["event"]["data"]["name"] for r in Run.objects.filter(trigger=trigger).order_by("started_at")]

    assert fired(notes) == ["notes-2026"]
    assert fired(personas) == ["reviewer"]
    assert sorted(fired(team)) == ["diary", "notes-2026"]  # memory() tags its memories "team"


@pytest.mark.parametrize(("filters", "data", "passes"), [
    ({}, {"name": "x"}, True),
    ({"name": "x"}, {"name": "x"}, True),
    ({"name": "x"}, {"name": "X"}, False),
    ({"name": "notes-*"}, {"name": "notes-1"}, True),
    ({"name": "notes-?"}, {"name": "notes-12"}, False),
    ({"name": ["a", "b*"]}, {"name": "bee"}, True),
    ({"name": ["a", "b*"]}, {"name": "cee"}, False),
    ({"tags": "urgent"}, {"tags": ["team", "urgent"]}, True),
    ({"tags": "urgent"}, {"tags": []}, False),
    ({"playbookId": None}, {"playbookId": None}, True),
    ({"status": "completed"}, {}, False),
    ({"count": 1}, {"count": True}, False),
    ({"name": "1"}, {"name": 1}, False),
    ({"name": "x", "type": "memory"}, {"name": "x", "type": "persona"}, False),
])
def test_a_filter_is_a_value_a_list_of_values_or_a_glob(filters, data, passes):
    assert triggers.filters_match(filters, data) is passes


@pytest.mark.parametrize(("spec", "says"), [
    ({"event": "element.deleted"}, "Unknown event"),
    ({"event": "element.created", "filters": {"colour": "red"}}, "no data key 'colour'"),
    ({"event": "element.created", "filters": {"name": {"$regex": ".*"}}}, "filters.name"),
    ({"event": "element.created", "filters": {"name": []}}, "filters.name"),
    ({"event": "element.created", "filters": {"name": "x" * 201}}, "filters.name"),
    ({"event": "element.created", "filters": ["name"]}, "filters: must be a mapping"),
    ({"event": "run.completed", "filters": {f"k{i}": 1 for i in range(21)}}, "at most 20 keys"),
    ({"filters": {}}, "names its event"),
    ({"event": "run.completed", "cron": "* * * * *"}, "no key cron"),
])
def test_a_bad_event_spec_is_refused_and_nothing_is_written(alice, spec, says):
    playbook = playbook_make(alice.user)
    with pytest.raises(InvalidInput) as refused:
        triggers.trigger_create(caller=caller(alice), playbook=playbook, spec={"type": "event", **spec})

    assert says in refused.value.message
    assert not Trigger.objects.exists()


def test_another_users_event_never_fires_alices_trigger(alice, bob, charlie, committed):
    trigger = on_event(alice, "element.created")

    with committed():
        memory(bob)
        memory(charlie)

    assert not TriggerFiring.objects.filter(trigger=trigger).exists()
    assert not Run.objects.filter(owner=alice.user).exists()


def test_a_disabled_trigger_is_not_fired(alice, committed):
    trigger = on_event(alice, "element.created", enabled=False)

    with committed():
        memory(alice)

    assert not TriggerFiring.objects.filter(trigger=trigger).exists()


def test_a_playbooks_own_run_events_never_fire_its_triggers(alice, committed):
    looping = playbook_make(alice.user, name="Looping")
    own = on_event(alice, "run.completed", playbook=looping)
    watcher = on_event(alice, "run.completed", playbook=playbook_make(alice.user, name="Watcher"))

    with committed():
        execution = run_of(alice, QUICK, playbook=looping)

    assert execution.status == "completed"
    assert not TriggerFiring.objects.filter(trigger=own).exists()
    firing = TriggerFiring.objects.get(trigger=watcher)
    assert firing.run.context["event"]["data"]["playbookId"] == looping.pk


def test_past_the_per_minute_cap_firings_are_skipped(alice, settings):
    settings.ATRIUM_TRIGGER_EVENT_FIRINGS_PER_MINUTE = 3
    trigger = on_event(alice, "element.created")
    data = {"type": "memory", "name": "notes", "uniqueId": "u", "tags": []}
    moment = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    counts = [triggers.triggers_fire_for_event(owner_id=alice.user.pk, name="element.created", data=data,
                                               now=moment + timedelta(seconds=second)) for second in range(4)]
    later = triggers.triggers_fire_for_event(owner_id=alice.user.pk, name="element.created", data=data,
                                             now=moment + timedelta(seconds=61))

    assert [c["started"] for c in counts] == [1, 1, 1, 0] and counts[3]["skipped"] == 1
    assert later["started"] == 1  # the first of the minute before has left the window
    firings = TriggerFiring.objects.filter(trigger=trigger)
    assert sorted(firings.values_list("outcome", flat=True)) == ["skipped"] + ["started"] * 4
    skipped = firings.get(outcome="skipped")
    assert skipped.run is None and "ATRIUM_TRIGGER_EVENT_FIRINGS_PER_MINUTE" in skipped.detail
    assert Run.objects.filter(trigger=trigger).count() == 4


def test_events_nested_too_deep_in_one_process_are_skipped(alice):
    trigger = on_event(alice, "run.failed")
    token = triggers._event_depth.set(triggers.MAX_EVENT_DEPTH)
    try:
        counts = triggers.triggers_fire_for_event(owner_id=alice.user.pk, name="run.failed",
                                                  data={"runId": "r", "playbookId": None, "status": "failed"})
    finally:
        triggers._event_depth.reset(token)

    assert counts["skipped"] == 1
    assert TriggerFiring.objects.get(trigger=trigger).outcome == "skipped" and not Run.objects.exists()


def test_an_execution_the_plan_refuses_is_a_refused_firing(alice, committed):
    playbook = playbook_make(alice.user, plan={
        "input": {"type": "object", "properties": {"repo": {"type": "string"}}, "additionalProperties": False},
        "steps": [{"id": "digest", "title": "Digest", "kind": "ai", "prompt": "Digest"}]})
    trigger = on_event(alice, "element.created", playbook=playbook)

    with committed():
        memory(alice)

    firing = TriggerFiring.objects.get(trigger=trigger)
    assert firing.outcome == "refused" and "'event' was unexpected" in firing.detail
    assert not Run.objects.exists()


def test_a_broker_that_refuses_the_event_does_not_fail_the_write(alice, committed, monkeypatch):
    trigger = on_event(alice, "element.created")

    def refuse(*args, **kwargs):
        raise ConnectionError("the broker is down")

    monkeypatch.setattr(tasks.event_dispatch, "apply_async", refuse)
    with committed():
        element = memory(alice)

    assert element.pk is not None
    assert not TriggerFiring.objects.filter(trigger=trigger).exists()


def test_an_event_no_enabled_trigger_waits_for_is_not_sent(alice, bob, committed, monkeypatch):
    on_event(alice, "element.created", enabled=False)
    on_event(bob, "element.created")
    sent = []
    monkeypatch.setattr(tasks.event_dispatch, "apply_async", lambda *args, **kwargs: sent.append(args))

    with committed():
        memory(alice)

    assert sent == []
