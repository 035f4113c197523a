"""Schedule triggers: presets and cron in the owner's timezone, firing when due (once, however late),
never while disabled, and once when two beats tick at the same moment."""

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connections

from core.caller import Caller
from core.errors import InvalidInput, NotFound
from runs.models import Run
from tests.playbook_helpers import playbook_make
from workflows import triggers
from workflows.models import Trigger, TriggerFiring

NEW_YORK = ZoneInfo("America/New_York")
LONDON = ZoneInfo("Europe/London")


def caller(member) -> Caller:
    return Caller.trusted(member.user, via="api")


def schedule(member, *, playbook=None, **spec) -> Trigger:
    playbook = playbook or playbook_make(member.user)
    return triggers.trigger_create(caller=caller(member), playbook=playbook, spec={"type": "schedule", **spec}).trigger


def due_at(trigger: Trigger, moment: datetime) -> None:
    Trigger.objects.filter(pk=trigger.pk).update(enabled=True, next_fire_at=moment)


@pytest.mark.parametrize(("preset", "words", "cron"), [
    ("every weekday at 9", "every weekday at 9", "0 9 * * 1-5"),
    ("Every Monday at 8", "every monday at 8", "0 8 * * 1"),
    ("hourly", "hourly", "0 * * * *"),
    ("First of the  Month", "first of the month", "0 9 1 * *"),
    ("daily at 7", "daily at 7", "0 7 * * *"),
    ("every day at 0", "every day at 0", "0 0 * * *"),
    ("every sunday at 23", "every sunday at 23", "0 23 * * 0"),
    ("every weekday at 09", "every weekday at 09", "0 9 * * 1-5"),
])
def test_a_preset_is_kept_in_its_words_with_its_cron(alice, preset, words, cron):
    trigger = schedule(alice, preset=preset)

    assert (trigger.preset, trigger.cron, trigger.enabled, trigger.next_fire_at) == (words, cron, False, None)
    assert Trigger.objects.get(pk=trigger.pk).cron == cron


@pytest.mark.parametrize("preset", ["every weekday at 24", "fortnightly", "every moonday at 9", "daily at nine",
                                    "every weekday at -1", "x" * 41, 9])
def test_an_unknown_preset_is_refused_and_nothing_is_written(alice, preset):
    playbook = playbook_make(alice.user)
    with pytest.raises(InvalidInput) as refused:
        schedule(alice, playbook=playbook, preset=preset)

    assert refused.value.code == "invalid_trigger" and "preset" in refused.value.message
    assert not Trigger.objects.exists()


@pytest.mark.parametrize(("spec", "says"), [
    ({"cron": "0 9 * * 1-5 *"}, "five fields"),
    ({"cron": "0 9 * *"}, "five fields"),
    ({"cron": "61 9 * * *"}, "not a valid cron"),
    ({"cron": "0 9 30 2 *"}, "not a valid cron"),
    ({"cron": "0 9 * * " + ",".join(["1"] * 60)}, "at most 100"),
    ({"cron": ""}, "cron expression"),
    ({"cron": "0 9 * * *", "preset": "hourly"}, "not both"),
    ({}, "needs a cron expression"),
    ({"cron": "0 9 * * *", "timezone": "UTC"}, "no key timezone"),
    ({"cron": "0 9 * * *", "event": "element.created"}, "no key event"),
    ({"cron": "0 9 * * *", "input": ["a"]}, "input"),
    ({"cron": "0 9 * * *", "enabled": "yes"}, "enabled"),
])
def test_a_bad_schedule_spec_is_refused_and_nothing_is_written(alice, spec, says):
    playbook = playbook_make(alice.user)
    with pytest.raises(InvalidInput) as refused:
        schedule(alice, playbook=playbook, **spec)

    assert says in refused.value.message
    assert not Trigger.objects.exists()


def test_an_enabled_schedule_gets_its_next_time_in_the_owners_timezone(alice):
    alice.user.timezone = "America/New_York"
    alice.user.save()

    trigger = schedule(alice, cron="0 9 * * 1-5", enabled=True)

    local = trigger.next_fire_at.astimezone(NEW_YORK)
    assert (local.hour, local.minute) == (9, 0) and local.weekday() < 5
    assert trigger.next_fire_at - datetime.now(UTC) < timedelta(days=4)
    shown = triggers.trigger_describe(trigger, tz=alice.user.timezone)
    assert shown["timezone"] == "America/New_York"
    assert shown["nextFireAt"].startswith(local.date().isoformat() + "T09:00:00-0")
    assert shown["schedule"] == "At 09:00 on Monday through Friday"


def test_the_next_time_follows_the_owners_clock_across_daylight_saving():
    winter = triggers.next_fire_after(cron="0 9 * * 1-5", tz="America/New_York",
                                      after=datetime(2026, 3, 6, 15, 0, tzinfo=UTC))  # a Friday, after 9 there
    summer = triggers.next_fire_after(cron="0 9 * * 1-5", tz="America/New_York", after=winter)

    assert winter == datetime(2026, 3, 9, 13, 0, tzinfo=UTC)  # Monday 9:00 EDT: clocks went forward on Sunday
    assert summer == datetime(2026, 3, 10, 13, 0, tzinfo=UTC)
    assert triggers.next_fire_after(cron="0 9 * * *", tz="Europe/London",
                                    after=datetime(2026, 10, 24, 9, 0, tzinfo=UTC)) == datetime(2026, 10, 25, 9, 0,
                                                                                                tzinfo=UTC)


def test_a_time_in_the_hour_that_repeats_when_clocks_go_back_fires_once(alice):
    alice.user.timezone = "Europe/London"
    alice.user.save()
    trigger = schedule(alice, cron="30 1 * * *")
    due_at(trigger, datetime(2026, 10, 25, 0, 30, tzinfo=UTC))  # 01:30 BST, the first 01:30 of the night

    moment = datetime(2026, 10, 24, 23, 0, tzinfo=UTC)
    while moment < datetime(2026, 10, 25, 6, 0, tzinfo=UTC):
        triggers.triggers_fire_due(now=moment)
        moment += timedelta(minutes=10)

    assert TriggerFiring.objects.filter(trigger=trigger).count() == 1
    trigger.refresh_from_db()
    assert trigger.next_fire_at == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)  # 01:30 GMT the next night


def test_a_due_schedule_starts_an_execution_and_records_the_firing(alice):
    playbook = playbook_make(alice.user)
    trigger = schedule(alice, playbook=playbook, preset="every weekday at 9", input={"repo": "atrium"})
    due_at(trigger, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))  # Monday 9:00 in UTC, Alice's timezone

    counts = triggers.triggers_fire_due(now=datetime(2026, 3, 2, 9, 0, 20, tzinfo=UTC))

    assert counts == {"due": 1, "started": 1, "refused": 0, "failed": 0, "claimed_elsewhere": 0}
    firing = TriggerFiring.objects.get(trigger=trigger)
    assert (firing.outcome, firing.reason, firing.owner, firing.playbook) == (
        "started", "schedule 0 9 * * 1-5 (every weekday at 9)", alice.user, playbook)
    run = Run.objects.get()
    assert firing.run == run
    assert (run.owner, run.playbook, run.trigger, run.context) == (alice.user, playbook, trigger, {"repo": "atrium"})
    assert (run.status, run.current_node) == ("paused", "digest")
    trigger.refresh_from_db()
    assert trigger.next_fire_at == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
    assert trigger.last_fired_at == datetime(2026, 3, 2, 9, 0, 20, tzinfo=UTC)


def test_a_schedule_missed_while_beat_was_down_fires_once_when_it_is_back(alice):
    trigger = schedule(alice, cron="0 9 * * 1-5")
    due_at(trigger, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))  # Monday; beat comes back on Wednesday at 10:00

    first = triggers.triggers_fire_due(now=datetime(2026, 3, 4, 10, 0, tzinfo=UTC))
    again = triggers.triggers_fire_due(now=datetime(2026, 3, 4, 10, 0, 30, tzinfo=UTC))

    assert (first["started"], again["due"]) == (1, 0)
    assert TriggerFiring.objects.filter(trigger=trigger).count() == 1 and Run.objects.count() == 1
    trigger.refresh_from_db()
    assert trigger.next_fire_at == datetime(2026, 3, 5, 9, 0, tzinfo=UTC)


def test_a_schedule_that_is_not_due_yet_does_not_fire(alice):
    trigger = schedule(alice, cron="0 9 * * *")
    due_at(trigger, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))

    assert triggers.triggers_fire_due(now=datetime(2026, 3, 2, 8, 59, 59, tzinfo=UTC))["due"] == 0
    assert not TriggerFiring.objects.exists()


def test_a_disabled_schedule_never_fires(alice):
    playbook = playbook_make(alice.user)
    trigger = schedule(alice, playbook=playbook, cron="* * * * *", enabled=True)
    assert trigger.next_fire_at is not None

    disabled = triggers.triggers_set_enabled(caller=caller(alice), playbook=playbook, enabled=False)
    # Even one whose next time was left in the past.
    Trigger.objects.filter(pk=trigger.pk).update(next_fire_at=datetime(2026, 1, 1, tzinfo=UTC))
    counts = triggers.triggers_fire_due(now=datetime(2030, 1, 1, tzinfo=UTC))

    assert [(t.pk, t.enabled, t.next_fire_at) for t in disabled] == [(trigger.pk, False, None)]
    assert counts["due"] == 0
    assert not TriggerFiring.objects.exists() and not Run.objects.exists()


def test_enabling_a_playbooks_triggers_gives_schedules_their_next_time_and_disabling_clears_it(alice):
    playbook = playbook_make(alice.user)
    timed = schedule(alice, playbook=playbook, preset="hourly")
    hook = triggers.trigger_create(caller=caller(alice), playbook=playbook, spec={"type": "webhook"}).trigger

    enabled = triggers.triggers_set_enabled(caller=caller(alice), playbook=playbook, enabled=True)

    assert [t.pk for t in enabled] == [timed.pk, hook.pk]
    timed.refresh_from_db()
    hook.refresh_from_db()
    assert timed.enabled and hook.enabled and hook.next_fire_at is None
    assert (timed.next_fire_at.minute, timed.next_fire_at.second) == (0, 0)
    triggers.triggers_set_enabled(caller=caller(alice), playbook=playbook, enabled=False)
    timed.refresh_from_db()
    assert (timed.enabled, timed.next_fire_at) == (False, None)


def test_a_schedule_whose_input_the_plan_refuses_records_a_refused_firing_and_starts_nothing(alice):
    trigger = schedule(alice, cron="0 9 * * *", input={"repo": 42})
    due_at(trigger, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))

    counts = triggers.triggers_fire_due(now=datetime(2026, 3, 2, 9, 0, tzinfo=UTC))

    assert (counts["refused"], counts["started"]) == (1, 0)
    firing = TriggerFiring.objects.get(trigger=trigger)
    assert firing.outcome == "refused" and firing.run is None
    assert "invalid_input" in firing.detail and "repo: 42 is not of type 'string'" in firing.detail
    assert not Run.objects.exists()
    trigger.refresh_from_db()
    assert trigger.next_fire_at == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)  # it tries again tomorrow, not each tick


def test_changing_a_schedules_cron_moves_its_next_time(alice):
    trigger = schedule(alice, preset="first of the month", enabled=True)

    changed = triggers.trigger_update(caller=caller(alice), trigger=trigger, changes={"cron": "15 * * * *"})

    assert (changed.cron, changed.preset, changed.next_fire_at.minute) == ("15 * * * *", "", 15)
    stored = Trigger.objects.get(pk=trigger.pk)
    assert (stored.cron, stored.preset, stored.next_fire_at) == ("15 * * * *", "", changed.next_fire_at)
    with pytest.raises(InvalidInput):
        triggers.trigger_update(caller=caller(alice), trigger=trigger, changes={"type": "webhook"})
    with pytest.raises(InvalidInput):
        triggers.trigger_update(caller=caller(alice), trigger=trigger, changes={"event": "run.completed"})


def test_charlie_can_neither_add_to_nor_change_alices_schedules(alice, charlie):
    playbook = playbook_make(alice.user)
    trigger = schedule(alice, playbook=playbook, preset="hourly")

    with pytest.raises(NotFound) as adding:
        triggers.trigger_create(caller=caller(charlie), playbook=playbook,
                                spec={"type": "schedule", "cron": "* * * * *"})
    with pytest.raises(NotFound) as changing:
        triggers.trigger_update(caller=caller(charlie), trigger=trigger, changes={"enabled": True})
    with pytest.raises(NotFound):
        triggers.trigger_delete(caller=caller(charlie), trigger=trigger)
    with pytest.raises(NotFound):
        triggers.triggers_set_enabled(caller=caller(charlie), playbook=playbook, enabled=True)

    assert (adding.value.code, changing.value.code) == ("playbook_not_found", "trigger_not_found")
    assert list(Trigger.objects.values_list("pk", "enabled")) == [(trigger.pk, False)]


def test_alice_deletes_her_trigger(alice):
    trigger = schedule(alice, preset="hourly")

    triggers.trigger_delete(caller=caller(alice), trigger=trigger)

    assert not Trigger.objects.exists()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_beats_ticking_at_once_fire_a_due_schedule_once(alice):
    trigger = schedule(alice, cron="0 9 * * *")
    due_at(trigger, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    now = datetime(2026, 3, 2, 9, 0, 5, tzinfo=UTC)

    def tick(index: int) -> dict[str, int]:
        try:
            return triggers.triggers_fire_due(now=now)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=20) as pool:
        counts = list(pool.map(tick, range(20)))

    assert sum(c["started"] for c in counts) == 1
    assert sum(c["claimed_elsewhere"] for c in counts) == sum(c["due"] for c in counts) - 1
    assert TriggerFiring.objects.filter(trigger=trigger).count() == 1
    assert Run.objects.filter(trigger=trigger).count() == 1


def test_a_cron_that_no_longer_parses_fails_its_firing_and_not_the_others(alice):
    broken = schedule(alice, cron="0 9 * * *")
    fine = schedule(alice, cron="0 9 * * *")
    due_at(broken, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    due_at(fine, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    Trigger.objects.filter(pk=broken.pk).update(cron="0 99 * * *")  # as a hand edit in the database would

    counts = triggers.triggers_fire_due(now=datetime(2026, 3, 2, 9, 1, tzinfo=UTC))

    assert (counts["failed"], counts["started"]) == (1, 1)
    failed = TriggerFiring.objects.get(trigger=broken)
    assert failed.outcome == "failed" and "does not parse" in failed.detail and failed.run is None
    assert TriggerFiring.objects.get(trigger=fine).outcome == "started"
    assert Trigger.objects.get(pk=broken.pk).next_fire_at is None  # it waits for a fix, not for every tick
