"""Playbook templates: the shipped ones (workflows/playbook_templates/<id>.yaml) loaded by
`templates_sync`, and the reads every adapter answers templates_search, templates_list and
templates_get with.

A template file is a mapping:

    id: github-issues-daily-digest        # the file's name without .yaml
    name: Daily GitHub issues digest to Slack
    description: What it does and what to set up.
    category: reporting                   # one of CATEGORIES
    integrations: [github_tools, slack_tools]
    example_input: {owner: octo-org, repo: octo-app, channel: C0123456789}
    triggers: [{type: schedule, preset: every weekday at 9}]
    plan: {input: ..., steps: [...], output: ...}   # workflows.plans

`template_problems` is the one check of that shape: the sync refuses a file with problems, and the
admin form shows the same problems on its fields. Only enabled templates are visible to callers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from jsonschema import Draft202012Validator

import safeyaml
from accounts.services import audit_record
from core.caller import Caller
from core.errors import InvalidInput, NotFound
from integrations.models import Action, Integration
from integrations.selectors import integration_states
from workflows import analysis
from workflows.definition import config_check
from workflows.models import PlaybookTemplate
from workflows.plans import plan_capabilities, plan_compile, plan_problems

SHIPPED_TEMPLATES = Path(__file__).resolve().parent / "playbook_templates"
CATEGORIES = ("engineering", "reporting", "notifications", "knowledge", "operations")
TRIGGER_TYPES = ("schedule", "event", "webhook")
# What a sync writes: everything but `enabled`, which stays the curator's.
SYNCED_FIELDS = ("name", "description", "category", "integrations", "plan", "example_input", "triggers")
REQUIRED_KEYS = ("id", "name", "description", "category", "integrations", "plan")
OPTIONAL_KEYS = ("example_input", "triggers")
MAX_FILE_BYTES = 200_000
MAX_TRIGGERS = 10
MAX_QUERY_CHARS = 200
MAX_LIMIT = 100
ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
EVENT_RE = re.compile(r"^[a-z][a-z_]*\.[a-z][a-z_]*$")
YAML_BOUNDS = safeyaml.Bounds(depth=40, values=20_000, aliases=100)
TRIGGER_KEYS: dict[str, set[str]] = {
    "schedule": {"preset", "cron"},
    "event": {"event", "filters"},
    "webhook": set(),
}
# The lengths of the Trigger columns a spec's values go into.
MAX_PRESET, MAX_CRON, MAX_EVENT = 40, 100, 40


def template_not_found() -> NotFound:
    return NotFound("Template not found. templates_list shows the templates.", code="template_not_found")


# --- the shape ----------------------------------------------------------------------------------------

def trigger_spec_problems(specs: Any) -> list[str]:
    """Every way `specs` is not a list of suggested trigger specs: {type: schedule, preset | cron},
    {type: event, event, filters?} or {type: webhook}, each with an optional `input` mapping."""
    if not isinstance(specs, list):
        return ["must be a list of trigger specs."]
    if len(specs) > MAX_TRIGGERS:
        return [f"at most {MAX_TRIGGERS} triggers (got {len(specs)})."]
    problems = []
    for index, spec in enumerate(specs):
        where = f"[{index}]"
        if not isinstance(spec, dict):
            problems.append(f"{where}: must be a mapping with a type ({', '.join(TRIGGER_TYPES)}).")
            continue
        kind = spec.get("type")
        if kind not in TRIGGER_TYPES:
            problems.append(f"{where}.type: must be one of {', '.join(TRIGGER_TYPES)} (got {kind!r}).")
            continue
        allowed = {"type", "input"} | TRIGGER_KEYS[kind]
        unknown = set(spec) - allowed
        if unknown:
            problems.append(f"{where}: a {kind} trigger has no key {', '.join(sorted(map(str, unknown)))}; "
                            f"allowed: {', '.join(sorted(allowed))}.")
        if "input" in spec and not isinstance(spec["input"], dict):
            problems.append(f"{where}.input: must be a mapping (the input every execution it starts gets).")
        if kind == "schedule":
            given = [key for key in ("preset", "cron") if key in spec]
            if len(given) != 1:
                problems.append(f"{where}: a schedule trigger has exactly one of preset (e.g. 'every weekday "
                                "at 9') or cron (e.g. '0 9 * * 1-5').")
            elif given == ["preset"] and not _text(spec["preset"], MAX_PRESET):
                problems.append(f"{where}.preset: must be a non-empty string of at most {MAX_PRESET} characters.")
            elif given == ["cron"] and not (_text(spec["cron"], MAX_CRON) and len(spec["cron"].split()) == 5):
                problems.append(f"{where}.cron: must be a cron expression of five fields.")
        elif kind == "event":
            if not isinstance(spec.get("event"), str) or not EVENT_RE.match(spec["event"]) or \
                    len(spec["event"]) > MAX_EVENT:
                problems.append(f"{where}.event: must name an event, e.g. run.failed or element.changed.")
            if "filters" in spec and not isinstance(spec["filters"], dict):
                problems.append(f"{where}.filters: must be a mapping of the event's fields to values.")
    return problems


def _text(value: Any, limit: int) -> bool:
    return isinstance(value, str) and bool(value.strip()) and len(value) <= limit


def _plan_extra_problems(plan: dict[str, Any], name: str, description: str) -> list[str]:
    """What the compiled workflow's own checks say about a plan that passed plan_problems. A
    template's plan has no subworkflows, so the lookup finds none."""
    definition = plan_compile(name=name, goal=description, plan=plan)
    problems = config_check(definition)
    if not problems:
        problems = analysis.integrity_check(definition, workflow_id=None, lookup=lambda workflow_id: None)
    return problems


def template_problems(data: Any) -> dict[str, list[str]]:
    """Every way `data` is not a template, as sentences keyed by the field they are about ("" for
    the whole); empty when it is one."""
    if not isinstance(data, dict):
        return {"": ["A template is a mapping with " + ", ".join(REQUIRED_KEYS) + "."]}
    found: dict[str, list[str]] = {}

    def say(field: str, problem: str) -> None:
        found.setdefault(field, []).append(problem)

    for key in sorted(set(data) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS), key=str):
        say("", f"A template has no key {key!r}; allowed: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}.")
    for key in REQUIRED_KEYS:
        if key not in data:
            say(key, "is required.")
    template_id = data.get("id")
    if "id" in data and (not isinstance(template_id, str) or not ID_RE.match(template_id) or len(template_id) > 100):
        say("id", "must be a slug of lower-case letters, digits and single hyphens (at most 100 characters).")
    if "name" in data and not _text(data["name"], 200):
        say("name", "must be a non-empty string of at most 200 characters.")
    if "description" in data and not _text(data["description"], 5000):
        say("description", "must be a non-empty string saying what it does and what to set up.")
    if "category" in data and data["category"] not in CATEGORIES:
        say("category", f"must be one of {', '.join(CATEGORIES)} (got {data['category']!r}).")
    integrations = data.get("integrations", [])
    if not isinstance(integrations, list) or not all(isinstance(i, str) and i for i in integrations) or \
            len(set(integrations)) != len(integrations):
        say("integrations", "must be a list of distinct integration ids.")
        integrations = []
    plan = data.get("plan")
    if "plan" in data:
        for problem in plan_problems(plan):
            say("plan", problem)
    if "plan" in data and "plan" not in found:
        if not found.get("name") and not found.get("description"):
            for problem in _plan_extra_problems(plan, str(data.get("name", "")), str(data.get("description", ""))):
                say("plan", problem)
        needed = [name.split(".", 1)[0] for name in plan_capabilities(plan) if "." in name]
        missing = sorted(set(needed) - set(integrations))
        if missing:
            say("integrations", f"must list every integration the plan's steps use; missing: {', '.join(missing)}.")
    example = data.get("example_input", {})
    if not isinstance(example, dict):
        say("example_input", "must be a mapping: an input the plan's input card accepts.")
    elif "plan" in data and "plan" not in found:
        card = plan.get("input", {"type": "object"})
        for error in sorted(Draft202012Validator(card).iter_errors(example), key=lambda e: [str(p) for p in e.path]):
            where = ".".join(map(str, error.path))
            say("example_input", f"{where + ': ' if where else ''}{error.message}")
    for problem in trigger_spec_problems(data.get("triggers", [])):
        say("triggers", problem)
    return found


def catalogue_problems(data: dict[str, Any]) -> dict[str, list[str]]:
    """What the integration catalogue says about a template that has no other problems: integrations
    it does not have, and capability steps naming an action their integration does not have. (A
    sync does not ask: the catalogue may be synced after the templates.)"""
    found: dict[str, list[str]] = {}
    known = set(Integration.objects.filter(pk__in=data["integrations"]).values_list("pk", flat=True))
    unknown = [i for i in data["integrations"] if i not in known]
    if unknown:
        found["integrations"] = [f"the catalogue has no integration {', '.join(unknown)}."]
    actions = set(Action.objects.filter(integration_id__in=known).values_list("integration_id", "name"))
    for name in plan_capabilities(data["plan"]):
        integration_id, _, action = name.partition(".")
        if integration_id in known and (integration_id, action) not in actions:
            found.setdefault("plan", []).append(f"{integration_id} has no action {action!r} ({name}).")
    return found


def problems_text(problems: dict[str, list[str]]) -> list[str]:
    return [f"{field}: {problem}" if field else problem for field, lines in problems.items() for problem in lines]


# --- the shipped templates --------------------------------------------------------------------------

def _file_read(path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, [f"cannot be read: {exc.strerror or exc}."]
    if len(raw) > MAX_FILE_BYTES:
        return None, [f"is larger than {MAX_FILE_BYTES:,} bytes."]
    try:
        data = safeyaml.load(raw.decode("utf-8-sig"), schema=safeyaml.WORKFLOW, bounds=YAML_BOUNDS)
    except UnicodeDecodeError:
        return None, ["is not UTF-8 text."]
    except safeyaml.InvalidYAML as exc:
        return None, [f"is not valid YAML: {exc.message}."]
    problems = problems_text(template_problems(data))
    if not problems and data["id"] != path.stem:
        problems = [f"id: must be the file's name without .yaml ({path.stem!r}), not {data['id']!r}."]
    return (None, problems) if problems else (data, [])


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    return {"name": data["name"], "description": data["description"].strip(), "category": data["category"],
            "integrations": data["integrations"], "plan": data["plan"],
            "example_input": data.get("example_input", {}), "triggers": data.get("triggers", [])}


@transaction.atomic
def templates_sync(*, directory: Path | None = None) -> dict[str, Any]:
    """Load the shipped templates (or those in `directory`): create new ones, rewrite changed ones
    and leave unchanged ones alone. A shipped template whose file is gone is disabled, never
    deleted (playbooks made from it keep their link); a curator's own template is never touched,
    even when a file has its id. Every file is checked whole before anything is written: a bad one
    is reported under `refused` and skipped. `enabled` stays as the curator set it."""
    folder = SHIPPED_TEMPLATES if directory is None else directory
    paths = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    report: dict[str, Any] = {"created": [], "updated": [], "unchanged": [], "disabled": [], "refused": []}
    seen: set[str] = set()
    for path in paths:
        data, problems = _file_read(path)
        if data is None:
            report["refused"].append({"file": path.name, "problems": problems})
            continue
        seen.add(data["id"])
        fields = _fields(data)
        # Locked, so a concurrent sync (two processes starting at once) waits rather than rewriting it too.
        current = PlaybookTemplate.objects.select_for_update().filter(pk=data["id"]).first()
        if current is None:
            try:
                with transaction.atomic():  # a new row locks nothing: the other sync's insert may win
                    PlaybookTemplate.objects.create(id=data["id"], shipped=True, **fields)
            except IntegrityError:
                report["unchanged"].append(data["id"])
                continue
            report["created"].append(data["id"])
        elif not current.shipped:
            report["refused"].append({"file": path.name, "problems": [
                f"id: {data['id']!r} is a curator's own template, which a sync never changes."]})
        elif all(getattr(current, key) == value for key, value in fields.items()):
            report["unchanged"].append(data["id"])
        else:
            for key, value in fields.items():
                setattr(current, key, value)
            current.updated_at = timezone.now()
            current.save()
            report["updated"].append(data["id"])
    gone = PlaybookTemplate.objects.filter(shipped=True, enabled=True).exclude(pk__in=seen)
    report["disabled"] = sorted(gone.values_list("pk", flat=True))
    gone.update(enabled=False, updated_at=timezone.now())
    return report


@transaction.atomic
def template_duplicate(*, caller: Caller, template: PlaybookTemplate) -> PlaybookTemplate:
    """A curator's own copy of `template` (shipped or not), disabled until they enable it, under
    the first free id of `<id>-copy`, `<id>-copy-2`, ..."""
    base = f"{template.pk[:90]}-copy"
    taken = set(PlaybookTemplate.objects.filter(pk__startswith=base).values_list("pk", flat=True))
    new_id = next(candidate for n in range(1, len(taken) + 2)
                  if (candidate := base if n == 1 else f"{base}-{n}") not in taken)
    copy = PlaybookTemplate.objects.create(
        id=new_id, name=f"{template.name} (copy)"[:200], shipped=False, enabled=False,
        **{key: getattr(template, key) for key in SYNCED_FIELDS if key != "name"})
    audit_record(action="playbooktemplate.duplicate", target=new_id, caller=caller, detail={"from": template.pk})
    return copy


@transaction.atomic
def template_set_enabled(*, caller: Caller, template: PlaybookTemplate, enabled: bool) -> bool:
    """Show the template to callers, or hide it; whether that changed anything. A sync keeps the
    setting, except that it disables a shipped template whose file is gone."""
    # A conditional update: of two curators switching the same template, one changes it and audits.
    changed = PlaybookTemplate.objects.filter(pk=template.pk, enabled=not enabled).update(
        enabled=enabled, updated_at=timezone.now())
    if changed:
        audit_record(action=f"playbooktemplate.{'enable' if enabled else 'disable'}", target=template.pk,
                     caller=caller)
    return bool(changed)


# --- reads ----------------------------------------------------------------------------------------

def templates_visible() -> Any:
    return PlaybookTemplate.objects.filter(enabled=True)


def _bounded(limit: int, offset: int = 0) -> None:
    if not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be 1-{MAX_LIMIT}.", code="invalid_input")
    if not isinstance(offset, int) or offset < 0:
        raise InvalidInput("offset must be 0 or more.", code="invalid_input")


def _summary(template: PlaybookTemplate) -> dict[str, Any]:
    return {"templateId": template.pk, "name": template.name, "description": template.description,
            "category": template.category, "integrations": list(template.integrations),
            "stepCount": len(template.plan.get("steps", [])),
            "triggerTypes": list(dict.fromkeys(t.get("type") for t in template.triggers))}


_WORD = re.compile(r"[a-z0-9]+")
# How much a query word found in each part of a template counts.
WEIGHTS = (("name", 4), ("category", 3), ("integrations", 3), ("steps", 2), ("description", 1))


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _parts(template: PlaybookTemplate) -> dict[str, set[str]]:
    integrations = " ".join(i.replace("_tools", "") + " " + i for i in template.integrations)
    steps = " ".join(str(s.get("title", "")) for s in template.plan.get("steps", []) if isinstance(s, dict))
    return {"name": _words(template.name), "category": _words(template.category),
            "integrations": _words(integrations), "steps": _words(steps),
            "description": _words(template.description)}


def _score(words: list[str], parts: dict[str, set[str]]) -> int:
    """Each query word scores the weight of the best part with a word it begins ("issue" finds
    "issues"); a template matching no query word scores 0."""
    total = 0
    for word in words:
        total += max((weight for part, weight in WEIGHTS if any(w.startswith(word) for w in parts[part])),
                     default=0)
    return total


def template_search(*, caller: Caller, query: str | None, category: str | None,
                    limit: int = 20) -> list[dict[str, Any]]:
    """Enabled templates matching the query's words, best first (all of them, by category and name,
    for an empty query), optionally in one category."""
    _bounded(limit)
    text = (query or "").strip()
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query must be at most {MAX_QUERY_CHARS} characters.", code="invalid_input")
    templates = templates_visible()
    if category:
        templates = templates.filter(category=category)
    words = list(dict.fromkeys(_WORD.findall(text.lower())))
    if not words:
        return [_summary(t) for t in templates.order_by("category", "name", "pk")[:limit]]
    scored = [(score, t) for t in templates if (score := _score(words, _parts(t))) > 0]
    scored.sort(key=lambda pair: (-pair[0], pair[1].name, pair[1].pk))
    return [{**_summary(t), "score": score} for score, t in scored[:limit]]


def template_list(*, caller: Caller, category: str | None = None, limit: int = 20, offset: int = 0) -> dict[str, Any]:
    _bounded(limit, offset)
    templates = templates_visible().order_by("category", "name", "pk")
    if category:
        templates = templates.filter(category=category)
    page = [_summary(t) for t in templates[offset:offset + limit]]
    return {"templates": page, "total": templates.count(), "limit": limit, "offset": offset}


def template_find(*, template_id: str) -> PlaybookTemplate:
    """The enabled template `template_id`; NotFound (template_not_found) for an unknown or disabled one."""
    template = templates_visible().filter(pk=template_id).first() if isinstance(template_id, str) else None
    if template is None:
        raise template_not_found()
    return template


def template_get(*, caller: Caller, template_id: str) -> dict[str, Any]:
    """Everything about one template, with whether the caller has connected what it needs: `ready`
    when every required integration is enabled and, where it needs a connection, connected."""
    template = template_find(template_id=template_id)
    required = integration_states(caller=caller, integration_ids=list(template.integrations))
    return {**_summary(template), "plan": template.plan, "exampleInput": template.example_input,
            "suggestedTriggers": template.triggers, "requiredIntegrations": required,
            "ready": all(r["connected"] for r in required), "updatedAt": template.updated_at.isoformat()}
