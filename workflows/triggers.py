"""What starts a playbook's executions: schedules, Atrium's events and inbound webhooks.

A trigger is created from a spec, one of

    {"type": "schedule", "cron": "0 9 * * 1-5"}  or  {"type": "schedule", "preset": "every weekday at 9"}
    {"type": "event", "event": "element.created", "filters": {"type": "memory"}}
    {"type": "webhook"}

each with an optional fixed `input` (every execution gets it) and `enabled` (default false: a
trigger does nothing until its playbook is activated).

Every time a trigger fires it leaves a TriggerFiring: why it fired and the execution it started, or
why it started none (`refused`: the execution was refused, e.g. its input does not match the plan's
input card; `skipped`: over a limit; `failed`: an error of the server's, logged). The firing row is
written before the execution is started, so the claim on a firing (a schedule's next time, an
event's place under the per-minute cap, a webhook delivery's signature) and its record are one.

- Schedules: a five-field cron expression evaluated in the owner's timezone (User.timezone), or a
  preset in words. Beat calls `triggers_fire_due` every ATRIUM_TRIGGER_TICK_SECONDS; a due trigger
  is claimed by moving its next_fire_at to the first time after now, so a time missed while beat was
  down fires once, not once per missed time, and two beats at once fire it once.
- Events: `triggers_fire_for_event` (workflows.events dispatches to it) fires the owner's enabled
  triggers for that event whose filters match its data.
- Webhooks: POST /hooks/playbooks/<token>, signed like Atrium's own outgoing webhooks
  (integrations.executors.webhook): `webhook_receive`.
"""

from __future__ import annotations

import contextvars
import fnmatch
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError, InvalidInput, NotFound
from integrations import crypto
from integrations.executors.webhook import signature as webhook_signature
from runs.models import Run
from workflows.events import EVENTS, RUN_EVENTS
from workflows.models import Playbook, Trigger, TriggerFiring

logger = logging.getLogger(__name__)

MAX_CRON_LENGTH = 100
MAX_PRESET_LENGTH = 40
MAX_FILTER_KEYS = 20
MAX_FILTER_VALUES = 50
MAX_FILTER_TEXT = 200
MAX_INPUT_BYTES = 64 * 1024
MAX_TRIGGERS_PER_PLAYBOOK = 20
# Schedule triggers started per beat tick; the rest are still due at the next one.
MAX_DUE_PER_TICK = 500
# Without a broker an event's triggers fire in the emitting process, so executions that end and
# fire each other nest; past this depth their firings are skipped instead of exhausting the stack.
MAX_EVENT_DEPTH = 5
HOOK_PATH = "/hooks/playbooks/"
TOKEN_PREFIX_LENGTH = 12

SPEC_KEYS: dict[str, set[str]] = {"schedule": {"cron", "preset"}, "event": {"event", "filters"}, "webhook": set()}
COMMON_KEYS = {"input", "enabled"}

_event_depth: contextvars.ContextVar[int] = contextvars.ContextVar("trigger_event_depth", default=0)


@dataclass(frozen=True)
class TriggerCreated:
    """A trigger just made (or given a new webhook secret), with what is shown only now: for a
    webhook, {"webhookUrl", "secret"}; Atrium keeps the token's digest and the secret sealed."""

    trigger: Trigger
    secrets: dict[str, str] | None = None


@dataclass(frozen=True)
class Fired:
    """One firing: its row, the execution it started, and the refusal when it started none."""

    firing: TriggerFiring
    run: Run | None = None
    error: DomainError | None = None


class WebhookRefused(DomainError):
    """A webhook delivery that starts nothing, with the HTTP status the endpoint answers."""

    def __init__(self, message: str, *, code: str, status: int, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code, extra=extra)
        self.http_status = status


# --- schedules -------------------------------------------------------------------------------------

DAYS = {"sunday": 0, "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4, "friday": 5, "saturday": 6}
FIXED_PRESETS = {"hourly": "0 * * * *", "first of the month": "0 9 1 * *"}
PRESET_AT = re.compile(r"^(?:daily|every (?P<days>day|weekday|" + "|".join(DAYS) + r")) at (?P<hour>\d{1,2})$")
PRESET_HELP = ("hourly, first of the month, daily at H, every day at H, every weekday at H or every <day> at H "
               "(H an hour 0-23, e.g. every monday at 8)")


def preset_cron(preset: str) -> tuple[str, str]:
    """A preset's words as kept (lower case, single spaces) and its cron expression."""
    words = " ".join(preset.lower().split())
    if words in FIXED_PRESETS:
        return words, FIXED_PRESETS[words]
    match = PRESET_AT.match(words)
    if match is None or int(match["hour"]) > 23:
        raise InvalidInput(f"Unknown schedule preset {preset[:MAX_PRESET_LENGTH]!r}: use {PRESET_HELP}, or a "
                           "cron expression.", code="invalid_trigger")
    days = match["days"] or "day"
    weekdays = {"day": "*", "weekday": "1-5"}.get(days, str(DAYS.get(days)))
    return words, f"0 {int(match['hour'])} * * {weekdays}"


def zone(name: str | ZoneInfo) -> ZoneInfo:
    """The IANA timezone of that name; UTC for a name this server's tz database does not know."""
    if isinstance(name, ZoneInfo):
        return name
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        return ZoneInfo("UTC")


def next_fire_after(*, cron: str, tz: str, after: datetime) -> datetime | None:
    """The first time strictly after `after` that the cron expression names in timezone `tz`, in
    UTC; None when there is none (within cronsim's 50 years)."""
    times = CronSim(cron, after.astimezone(zone(tz)))
    # A daily time is matched on local wall-clock time (as cron does across DST), so inside the hour
    # that repeats when clocks go back, the first match can be earlier than `after`: skip it.
    for _ in range(10):
        try:
            candidate = next(times)
        except StopIteration:
            return None
        if candidate > after:
            return candidate.astimezone(UTC)
    return None


def cron_check(cron: object) -> str:
    """The cron expression with single spaces, or InvalidInput saying what is wrong with it."""
    if not isinstance(cron, str) or not cron.strip():
        raise InvalidInput("cron: must be a cron expression such as '0 9 * * 1-5'.", code="invalid_trigger")
    if len(cron) > MAX_CRON_LENGTH:
        raise InvalidInput(f"cron: at most {MAX_CRON_LENGTH} characters.", code="invalid_trigger")
    fields = cron.split()
    if len(fields) != 5:
        raise InvalidInput(f"cron: {cron!r} must have five fields (minute hour day-of-month month day-of-week).",
                           code="invalid_trigger")
    cron = " ".join(fields)
    try:
        following = next_fire_after(cron=cron, tz="UTC", after=timezone.now())
    except CronSimError as exc:
        raise InvalidInput(f"cron: {cron!r} is not a valid cron expression: {exc}.", code="invalid_trigger") from None
    if following is None:
        raise InvalidInput(f"cron: {cron!r} names no time in the next 50 years.", code="invalid_trigger")
    return cron


def schedule_words(cron: str) -> str:
    try:
        return CronSim(cron, timezone.now()).explain()
    except (CronSimError, ValueError, KeyError, IndexError):
        return cron


# --- specs -----------------------------------------------------------------------------------------

def _bad(message: str) -> InvalidInput:
    return InvalidInput(message, code="invalid_trigger")


def _filter_value_check(key: str, value: object) -> None:
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not 1 <= len(value) <= MAX_FILTER_VALUES:
        raise _bad(f"filters.{key}: a list of 1 to {MAX_FILTER_VALUES} allowed values.")
    for item in values:
        if item is not None and not isinstance(item, (str, int, float, bool)):
            raise _bad(f"filters.{key}: a value, a list of allowed values or a glob pattern (a string).")
        if isinstance(item, str) and len(item) > MAX_FILTER_TEXT:
            raise _bad(f"filters.{key}: a string of at most {MAX_FILTER_TEXT} characters.")


def filters_check(event: str, filters: object) -> dict[str, Any]:
    """The filters of an event trigger: a mapping of the event's data keys to what they must be."""
    if not isinstance(filters, dict):
        raise _bad("filters: must be a mapping of the event's data keys to a value, a list of allowed values or "
                   "a glob pattern.")
    if len(filters) > MAX_FILTER_KEYS:
        raise _bad(f"filters: at most {MAX_FILTER_KEYS} keys.")
    keys = EVENTS[event]
    for key, value in filters.items():
        if key not in keys:
            raise _bad(f"filters: {event} events have no data key {str(key)[:100]!r}; they have "
                       f"{', '.join(keys)}.")
        _filter_value_check(key, value)
    return filters


def _matches(expected: Any, actual: Any) -> bool:
    if isinstance(actual, list):
        return any(_matches(expected, item) for item in actual)
    if isinstance(expected, list):
        return any(_matches(item, actual) for item in expected)
    if isinstance(expected, str):
        return isinstance(actual, str) and fnmatch.fnmatchcase(actual, expected)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return expected == actual


def filters_match(filters: dict[str, Any], data: dict[str, Any]) -> bool:
    """Whether an event's data passes every filter: a value it must equal, a list of values it must
    equal one of, or a glob pattern (fnmatch, case-sensitive) a string must match. A list in the data
    (tags) passes when one of its items does; a key the data lacks never passes."""
    return all(key in data and _matches(expected, data[key]) for key, expected in filters.items())


def _input_check(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad("input: must be a JSON object (the input every execution this trigger starts gets).")
    if len(json.dumps(value, default=str)) > MAX_INPUT_BYTES:
        raise _bad(f"input: at most {MAX_INPUT_BYTES:,} bytes as JSON.")
    return value


def _enabled_check(value: object) -> bool:
    if not isinstance(value, bool):
        raise _bad("enabled: must be true or false.")
    return value


def _fields_check(kind: str, given: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """The model fields of `kind` from the spec keys `given`, over the `current` ones."""
    allowed = SPEC_KEYS[kind] | COMMON_KEYS
    unknown = set(given) - allowed
    if unknown:
        raise _bad(f"A {kind} trigger has no key {', '.join(sorted(map(str, unknown)))}; allowed: "
                   f"{', '.join(sorted(allowed | {'type'}))}.")
    fields = dict(current)
    if "input" in given:
        fields["input"] = _input_check(given["input"])
    if "enabled" in given:
        fields["enabled"] = _enabled_check(given["enabled"])
    if kind == Trigger.Kind.SCHEDULE:
        if "cron" in given and "preset" in given:
            raise _bad("A schedule trigger has a cron expression or a preset, not both.")
        if "cron" in given:
            fields["cron"], fields["preset"] = cron_check(given["cron"]), ""
        elif "preset" in given:
            if not isinstance(given["preset"], str) or len(given["preset"]) > MAX_PRESET_LENGTH:
                raise _bad(f"preset: a string of at most {MAX_PRESET_LENGTH} characters: {PRESET_HELP}.")
            fields["preset"], fields["cron"] = preset_cron(given["preset"])
        if not fields.get("cron"):
            raise _bad(f"A schedule trigger needs a cron expression (cron) or a preset: {PRESET_HELP}.")
    elif kind == Trigger.Kind.EVENT:
        if "event" in given:
            if given["event"] not in EVENTS:
                raise _bad(f"Unknown event {str(given['event'])[:100]!r}; events are {', '.join(EVENTS)}.")
            fields["event"] = given["event"]
        if not fields.get("event"):
            raise _bad(f"An event trigger names its event: one of {', '.join(EVENTS)}.")
        fields["filters"] = filters_check(fields["event"], given.get("filters", fields.get("filters", {})))
    return fields


def _spec_check(spec: object) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise _bad("A trigger is a mapping with a type: schedule, event or webhook.")
    kind = spec.get("type")
    if kind not in SPEC_KEYS:
        raise _bad(f"A trigger's type is schedule, event or webhook (got {str(kind)[:40]!r}).")
    given = {key: value for key, value in spec.items() if key != "type"}
    return {"kind": kind, **_fields_check(kind, given, {"enabled": False, "input": {}})}


# --- writes ----------------------------------------------------------------------------------------

def _playbook_check(caller: Caller, playbook: Playbook) -> None:
    if playbook.owner_id != caller.user.pk:
        raise NotFound("Playbook not found.", code="playbook_not_found")


def trigger_not_found() -> NotFound:
    return NotFound("Trigger not found.", code="trigger_not_found")


def _locked(caller: Caller, trigger: Trigger) -> Trigger:
    """The trigger as stored now, under its row lock, if it is the caller's."""
    locked = Trigger.objects.select_for_update().filter(pk=trigger.pk, owner=caller.user).first()
    if locked is None:
        raise trigger_not_found()
    return locked


def _target(trigger: Trigger) -> str:
    return f"{trigger.kind} trigger {trigger.pk} of playbook {trigger.playbook_id}"


def _schedule_next(trigger: Trigger, *, tz: str, now: datetime) -> None:
    if trigger.kind == Trigger.Kind.SCHEDULE:
        trigger.next_fire_at = next_fire_after(cron=trigger.cron, tz=tz, after=now) if trigger.enabled else None


def _webhook_new(trigger: Trigger) -> dict[str, str]:
    """A new URL token and signing secret for a webhook trigger: kept as a digest and sealed, and
    returned to be shown once."""
    token = "pbh_" + secrets.token_urlsafe(32)
    secret = "whsec_" + secrets.token_urlsafe(32)
    trigger.webhook_token_digest = hashlib.sha256(token.encode()).hexdigest()
    trigger.webhook_token_prefix = token[:TOKEN_PREFIX_LENGTH]
    trigger.sealed_secret = crypto.seal(secret)
    return {"webhookUrl": f"{settings.ATRIUM_PUBLIC_URL}{HOOK_PATH}{token}", "secret": secret}


@transaction.atomic
def trigger_create(*, caller: Caller, playbook: Playbook, spec: dict[str, Any]) -> TriggerCreated:
    """Add a trigger to the caller's playbook from a spec (see the module docstring)."""
    _playbook_check(caller, playbook)
    fields = _spec_check(spec)
    # The playbook's row is the lock: two creates at once must not both pass the count.
    Playbook.objects.select_for_update().filter(pk=playbook.pk).first()
    if Trigger.objects.filter(playbook=playbook).count() >= MAX_TRIGGERS_PER_PLAYBOOK:
        raise _bad(f"A playbook has at most {MAX_TRIGGERS_PER_PLAYBOOK} triggers.")
    trigger = Trigger(playbook=playbook, owner_id=playbook.owner_id, **fields)
    webhook = _webhook_new(trigger) if trigger.kind == Trigger.Kind.WEBHOOK else None
    _schedule_next(trigger, tz=caller.user.timezone, now=timezone.now())
    trigger.save()
    audit_record(caller=caller, action="trigger.create", target=_target(trigger),
                 detail={"type": trigger.kind, "enabled": trigger.enabled})
    return TriggerCreated(trigger=trigger, secrets=webhook)


@transaction.atomic
def trigger_update(*, caller: Caller, trigger: Trigger, changes: dict[str, Any]) -> Trigger:
    """Change a trigger's spec keys (not its type): cron or preset, event or filters, input, enabled."""
    if not isinstance(changes, dict) or not changes:
        raise _bad("changes: a mapping of the trigger's keys to change.")
    if "type" in changes:
        raise _bad("A trigger's type cannot change: delete it and create another.")
    trigger = _locked(caller, trigger)
    was = (trigger.enabled, trigger.cron)
    current = {"cron": trigger.cron, "preset": trigger.preset, "event": trigger.event, "filters": trigger.filters,
               "input": trigger.input, "enabled": trigger.enabled}
    for field, value in _fields_check(trigger.kind, changes, current).items():
        setattr(trigger, field, value)
    now = timezone.now()
    # An enabled schedule that keeps its cron keeps its next time: one that is due fires as due.
    if (trigger.enabled, trigger.cron) != was or trigger.next_fire_at is None:
        _schedule_next(trigger, tz=caller.user.timezone, now=now)
    trigger.updated_at = now
    trigger.save()
    audit_record(caller=caller, action="trigger.update", target=_target(trigger), detail={"fields": sorted(changes)})
    return trigger


@transaction.atomic
def trigger_delete(*, caller: Caller, trigger: Trigger) -> None:
    trigger = _locked(caller, trigger)
    audit_record(caller=caller, action="trigger.delete", target=_target(trigger))
    trigger.delete()


@transaction.atomic
def webhook_secret_rotate(*, caller: Caller, trigger: Trigger) -> TriggerCreated:
    """A new URL and secret for a webhook trigger, shown once; the old ones stop working now."""
    trigger = _locked(caller, trigger)
    if trigger.kind != Trigger.Kind.WEBHOOK:
        raise _bad(f"Only a webhook trigger has a secret; this one is a {trigger.kind} trigger.")
    webhook = _webhook_new(trigger)
    trigger.updated_at = timezone.now()
    trigger.save(update_fields=["webhook_token_digest", "webhook_token_prefix", "sealed_secret", "updated_at"])
    audit_record(caller=caller, action="trigger.rotate", target=_target(trigger))
    return TriggerCreated(trigger=trigger, secrets=webhook)


@transaction.atomic
def triggers_set_enabled(*, caller: Caller, playbook: Playbook, enabled: bool) -> list[Trigger]:
    """Enable (activate) or disable every trigger of the caller's playbook. A schedule that is
    enabled now gets its next time from now; a disabled one has none."""
    _playbook_check(caller, playbook)
    now = timezone.now()
    triggers = list(Trigger.objects.select_for_update().filter(playbook=playbook).order_by("pk"))
    for trigger in triggers:
        if trigger.enabled == enabled and (trigger.next_fire_at is not None) == (
                enabled and trigger.kind == Trigger.Kind.SCHEDULE):
            continue
        trigger.enabled = enabled
        _schedule_next(trigger, tz=caller.user.timezone, now=now)
        trigger.updated_at = now
        trigger.save(update_fields=["enabled", "next_fire_at", "updated_at"])
    if triggers:
        audit_record(caller=caller, action="trigger.enable" if enabled else "trigger.disable",
                     target=f"triggers of playbook {playbook.pk}", detail={"triggers": [t.pk for t in triggers]})
    return triggers


# --- reading ---------------------------------------------------------------------------------------

def webhook_url_prefix(trigger: Trigger) -> str:
    """The start of the webhook's URL, enough to tell which one a logged URL is."""
    return f"{settings.ATRIUM_PUBLIC_URL}{HOOK_PATH}{trigger.webhook_token_prefix}"


def trigger_describe(trigger: Trigger, *, tz: str | ZoneInfo) -> dict[str, Any]:
    """A trigger as APIs show it, its times in the owner's timezone `tz` (a name or a ZoneInfo). Keys
    that do not apply to its type are null."""
    local = zone(tz)
    schedule = trigger.kind == Trigger.Kind.SCHEDULE

    def when(moment: datetime | None) -> str | None:
        return moment.astimezone(local).isoformat() if moment is not None else None

    return {
        "id": trigger.pk,
        "type": trigger.kind,
        "enabled": trigger.enabled,
        "cron": trigger.cron if schedule else None,
        "preset": (trigger.preset or None) if schedule else None,
        "schedule": schedule_words(trigger.cron) if schedule else None,
        "timezone": local.key if schedule else None,
        "nextFireAt": when(trigger.next_fire_at),
        "lastFiredAt": when(trigger.last_fired_at),
        "event": trigger.event if trigger.kind == Trigger.Kind.EVENT else None,
        "filters": trigger.filters if trigger.kind == Trigger.Kind.EVENT else None,
        "webhookUrlPrefix": webhook_url_prefix(trigger) if trigger.kind == Trigger.Kind.WEBHOOK else None,
        "input": trigger.input,
    }


# --- firing ----------------------------------------------------------------------------------------

def _reserve(trigger: Trigger, *, reason: str, now: datetime, outcome: str = TriggerFiring.Outcome.STARTED,
             detail: str = "", signature_digest: str = "") -> TriggerFiring:
    return TriggerFiring.objects.create(trigger=trigger, playbook_id=trigger.playbook_id, owner_id=trigger.owner_id,
                                        fired_at=now, reason=reason[:200], outcome=outcome, detail=detail,
                                        signature_digest=signature_digest)


def _problems_text(exc: DomainError) -> str:
    problems = exc.extra.get("problems")
    if isinstance(problems, list) and problems:
        return f"{exc.message} ({exc.code}: {'; '.join(map(str, problems))})"
    return f"{exc.message} ({exc.code})"


def _start(firing: TriggerFiring, trigger: Trigger, input: dict[str, Any]) -> Fired:
    """Start the execution a firing (written `started`) stands for, and record how that went."""
    # Imported here: playbooks creates its triggers through this module.
    from workflows import playbooks

    try:
        run = playbooks.execution_start(caller=Caller.trusted(trigger.owner, via="task"), playbook=trigger.playbook,
                                        input=input, trigger=trigger)
    except DomainError as exc:
        firing.outcome, firing.detail = TriggerFiring.Outcome.REFUSED, _problems_text(exc)
        firing.save(update_fields=["outcome", "detail"])
        return Fired(firing=firing, error=exc)
    except Exception:
        # One trigger's failure must not stop the others of this tick or this event.
        logger.exception("Trigger %s could not start an execution of playbook %s", trigger.pk, trigger.playbook_id)
        firing.outcome = TriggerFiring.Outcome.FAILED
        firing.detail = "The execution could not be started: an error on the server, which was logged."
        firing.save(update_fields=["outcome", "detail"])
        return Fired(firing=firing)
    firing.run = run
    firing.save(update_fields=["run"])
    return Fired(firing=firing, run=run)


def schedule_reason(trigger: Trigger) -> str:
    return f"schedule {trigger.cron}" + (f" ({trigger.preset})" if trigger.preset else "")


def triggers_fire_due(*, now: datetime | None = None) -> dict[str, int]:
    """Start an execution for every enabled schedule trigger that is due. Returns counts: due,
    started, refused, failed, and claimed elsewhere (by another beat or tick at the same time)."""
    now = now or timezone.now()
    counts: Counter[str] = Counter(due=0, started=0, refused=0, failed=0, claimed_elsewhere=0)
    due = list(Trigger.objects.filter(kind=Trigger.Kind.SCHEDULE, enabled=True, next_fire_at__lte=now)
               .select_related("owner", "playbook").order_by("next_fire_at", "pk")[:MAX_DUE_PER_TICK])
    for trigger in due:
        counts["due"] += 1
        try:
            following, broken = next_fire_after(cron=trigger.cron, tz=trigger.owner.timezone, after=now), ""
        except CronSimError as exc:
            # A cron written behind the services' back must not stop every other schedule's tick.
            following, broken = None, f"The cron expression {trigger.cron!r} does not parse ({exc}): fix it."
        with transaction.atomic():
            # The claim: of two beats (or a slow tick and the next) that both read it due, only the
            # one whose update still finds the next_fire_at it read fires it. The next time is the
            # first after now, so the times missed while beat was down fire once, here, not each.
            claimed = Trigger.objects.filter(pk=trigger.pk, enabled=True, next_fire_at=trigger.next_fire_at).update(
                next_fire_at=following, last_fired_at=now, updated_at=now)
            if not claimed:
                counts["claimed_elsewhere"] += 1
                continue
            if broken:
                _reserve(trigger, reason=schedule_reason(trigger), now=now, outcome=TriggerFiring.Outcome.FAILED,
                         detail=broken)
                counts["failed"] += 1
                continue
            firing = _reserve(trigger, reason=schedule_reason(trigger), now=now)
        counts[_start(firing, trigger, dict(trigger.input)).firing.outcome] += 1
    return dict(counts)


def _event_reserve(trigger: Trigger, *, reason: str, now: datetime) -> TriggerFiring | None:
    """The firing of an event trigger: `started` within the per-minute cap, else `skipped`; None when
    the trigger was disabled or deleted meanwhile."""
    cap = settings.ATRIUM_TRIGGER_EVENT_FIRINGS_PER_MINUTE
    with transaction.atomic():
        # Locked: two events at once must not both count the last free firing of the minute.
        if not Trigger.objects.select_for_update().filter(pk=trigger.pk, enabled=True).exists():
            return None
        recent = TriggerFiring.objects.filter(trigger=trigger, outcome=TriggerFiring.Outcome.STARTED,
                                              fired_at__gt=now - timedelta(minutes=1), fired_at__lte=now).count()
        if cap and recent >= cap:
            return _reserve(trigger, reason=reason, now=now, outcome=TriggerFiring.Outcome.SKIPPED,
                            detail=f"This trigger already started {recent} executions in the last minute, the most "
                                   "ATRIUM_TRIGGER_EVENT_FIRINGS_PER_MINUTE allows.")
        Trigger.objects.filter(pk=trigger.pk).update(last_fired_at=now)
        return _reserve(trigger, reason=reason, now=now)


def triggers_fire_for_event(*, owner_id: int, name: str, data: dict[str, Any],
                            now: datetime | None = None) -> dict[str, int]:
    """Fire the owner's enabled triggers for event `name` whose filters match `data`; each
    execution's input is the trigger's input with {"event": {"name", "data"}}. A run event from an
    execution of playbook P does not fire P's own triggers. Returns counts."""
    now = now or timezone.now()
    counts: Counter[str] = Counter(matched=0, started=0, refused=0, failed=0, skipped=0)
    triggers = Trigger.objects.filter(owner_id=owner_id, kind=Trigger.Kind.EVENT, event=name, enabled=True)
    if name in RUN_EVENTS and data.get("playbookId"):
        triggers = triggers.exclude(playbook_id=data["playbookId"])
    depth = _event_depth.get()
    for trigger in triggers.select_related("owner", "playbook").order_by("pk"):
        if not filters_match(trigger.filters, data):
            continue
        counts["matched"] += 1
        reason = f"event {name}"
        if depth >= MAX_EVENT_DEPTH:
            _reserve(trigger, reason=reason, now=now, outcome=TriggerFiring.Outcome.SKIPPED,
                     detail=f"Events nested more than {MAX_EVENT_DEPTH} deep in one process: executions that end "
                            "fire each other's triggers.")
            counts["skipped"] += 1
            continue
        firing = _event_reserve(trigger, reason=reason, now=now)
        if firing is None:
            continue
        if firing.outcome == TriggerFiring.Outcome.SKIPPED:
            counts["skipped"] += 1
            continue
        token = _event_depth.set(depth + 1)
        try:
            fired = _start(firing, trigger, {**trigger.input, "event": {"name": name, "data": data}})
        finally:
            _event_depth.reset(token)
        counts[fired.firing.outcome] += 1
    return dict(counts)


# --- webhooks --------------------------------------------------------------------------------------

def _refuse(trigger: Trigger, message: str, *, code: str, status: int, now: datetime,
            extra: dict[str, Any] | None = None) -> WebhookRefused:
    _reserve(trigger, reason="webhook delivery", now=now, outcome=TriggerFiring.Outcome.REFUSED,
             detail=f"{message} ({code})")
    return WebhookRefused(message, code=code, status=status, extra=extra)


def webhook_trigger(token: str) -> Trigger | None:
    if not token or len(token) > 200:
        return None
    digest = hashlib.sha256(token.encode()).hexdigest()
    return (Trigger.objects.select_related("owner", "playbook")
            .filter(kind=Trigger.Kind.WEBHOOK, webhook_token_digest=digest).first())


def webhook_receive(*, token: str, timestamp: str | None, signature: str | None, body: bytes,
                    now: float | None = None) -> Fired:
    """Start an execution for one inbound webhook delivery, or raise WebhookRefused (with the
    status to answer) having started nothing. The delivery must be signed with the trigger's secret
    as Atrium signs its own (X-Atrium-Signature over "<timestamp>.<body>"), recently, and once."""
    now = time.time() if now is None else now
    moment = datetime.fromtimestamp(now, tz=UTC)
    trigger = webhook_trigger(token)
    if trigger is None:
        raise WebhookRefused("No webhook has this URL.", code="webhook_not_found", status=404)
    limit = settings.ATRIUM_WEBHOOK_MAX_BYTES
    if len(body) > limit:
        raise _refuse(trigger, f"The body is larger than {limit:,} bytes.", code="payload_too_large", status=413,
                      now=moment)
    if not timestamp or not timestamp.isdigit() or len(timestamp) > 12 or not signature:
        raise _refuse(trigger, "The delivery is not signed: send X-Atrium-Timestamp (unix seconds) and "
                               "X-Atrium-Signature (sha256=<hex HMAC-SHA256 of \"<timestamp>.<body>\">).",
                      code="invalid_signature", status=401, now=moment)
    expected = webhook_signature(crypto.unseal(trigger.sealed_secret), timestamp, body)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise _refuse(trigger, "The signature does not match this webhook's secret.", code="invalid_signature",
                      status=401, now=moment)
    tolerance = settings.ATRIUM_WEBHOOK_TOLERANCE_SECONDS
    if abs(now - int(timestamp)) > tolerance:
        raise _refuse(trigger, f"The timestamp is more than {tolerance} seconds from the server's clock.",
                      code="stale_timestamp", status=401, now=moment)
    if not trigger.enabled:
        raise _refuse(trigger, "This webhook's trigger is disabled: activate the playbook first.",
                      code="trigger_disabled", status=409, now=moment)
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        payload = None
    if not isinstance(payload, dict):
        raise _refuse(trigger, "The body must be a JSON object.", code="not_an_object", status=400, now=moment)
    try:
        with transaction.atomic():
            # The signature's digest is unique per trigger: a delivery sent again, even at the same
            # moment as the first, finds it taken and starts nothing.
            firing = _reserve(trigger, reason="webhook delivery", now=moment,
                              signature_digest=hashlib.sha256(signature.encode()).hexdigest())
            Trigger.objects.filter(pk=trigger.pk).update(last_fired_at=moment)
    except IntegrityError:
        raise _refuse(trigger, "This delivery was received before (the same signature): sign it again with a new "
                               "timestamp to send it again.", code="replayed_delivery", status=409,
                      now=moment) from None
    fired = _start(firing, trigger, {**trigger.input, **payload})
    if fired.error is not None:
        exc = fired.error
        # Input the plan's input card refuses is the sender's to fix; anything else (the playbook
        # cannot run now) is a conflict with the playbook's state.
        status = 422 if isinstance(exc, InvalidInput) else 429 if exc.http_status == 429 else 409
        raise WebhookRefused(exc.message, code=exc.code, status=status, extra=exc.extra)
    if fired.run is None:
        raise WebhookRefused("The execution could not be started: an error on the server, which was logged.",
                             code="internal_error", status=500)
    return fired
