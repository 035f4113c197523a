"""Writes for playbooks: create (from a plan, a template or a prompt), update, delete, execute, and
keeping a playbook and its compiled workflow in step.

A playbook's plan (workflows.plans) compiles to a workflow `playbook-<id>` in its owner's global
store, written through the workflow services so it has revisions and shows up in every workflow
tool. Editing that workflow reads the plan back from it when a plan can describe it; otherwise the
playbook is marked detached and runs the workflow as edited. An execution is a run of the workflow.
"""

from __future__ import annotations

import json
import logging
import re
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError, InvalidInput, NotFound
from core.input_bounds import MAX_JSON_DEPTH, json_depth
from core.versions import version_check
from integrations import schemas
from runs.engine import Caps, run_create, run_dispatch
from runs.models import Run
from workflows import plans, templates
from workflows import triggers as trigger_services
from workflows.models import Playbook, PlaybookTemplate, Trigger, Workflow, WorkflowRevision
from workflows.scoping import Scope

logger = logging.getLogger(__name__)

MAX_NAME = 200
MAX_GOAL = 5_000
WORKFLOW_PREFIX = "playbook-"


class PlaybookError(DomainError):
    code = "playbook_error"


def playbook_not_found() -> NotFound:
    return NotFound("Playbook not found. playbooks_list shows your playbooks and their ids.",
                    code="playbook_not_found")


def playbook_get_owned(*, caller: Caller, playbook_id: str) -> Playbook:
    """The caller's playbook; another user's is "not found", so its existence does not leak."""
    playbook = Playbook.objects.select_related("workflow").filter(pk=playbook_id, owner=caller.user).first()
    if playbook is None:
        raise playbook_not_found()
    return playbook


def playbook_version(playbook: Playbook) -> str:
    return f"{playbook.pk}-{playbook.version}"


def _scope(caller: Caller) -> Scope:
    return Scope(owner=caller.user, project=None)


def _normalized(plan: Any) -> dict[str, Any]:
    """The plan checked, with every default written out (a judge's verdicts and continueOn), so
    what is stored is exactly what its workflow says."""
    plans.plan_check(plan)
    if "input" in plan:
        schemas.schema_check(plan["input"], field="input")
    definition = plans.plan_compile(name="-", goal="", plan=plan)
    return plans.plan_from_definition(definition) or plan


def _text(value: Any, field: str, limit: int, *, required: bool = False) -> str:
    if not isinstance(value, str) or (required and not value.strip()) or len(value) > limit:
        raise InvalidInput(f"{field} must be a{' non-empty' if required else ''} string of at most {limit} "
                           "characters.", code="invalid_input")
    return value.strip()


def _integrations_needed(caller: Caller, plan: dict[str, Any], declared: list[str]) -> list[str]:
    """The integrations the plan's capability steps need (an action's own, a skill's declared ones),
    then the ones the author declared, once each. An unknown capability is refused now rather than
    at the first execution, and so are steps the author's token could not execute itself."""
    from integrations import selectors as capability_selectors
    from integrations.models import Action, Integration

    needed: list[str] = []
    for name in plans.plan_capabilities(plan):
        integration_id, _, action_name = name.partition(".")
        if action_name and Action.objects.filter(integration_id=integration_id, name=action_name).exists():
            needed.append(integration_id)
            continue
        skill = capability_selectors.skills_visible(caller=caller).filter(name=name).first()
        if skill is None:
            raise capability_selectors.capability_not_found(caller=caller, name=name)
        needed.extend(skill.integrations.values_list("id", flat=True))
    if not isinstance(declared, list) or not all(isinstance(i, str) for i in declared):
        raise InvalidInput("integrations must be a list of integration ids.", code="invalid_input")
    capability_selectors.capabilities_allowed(caller=caller, names=plans.plan_capabilities(plan))
    unknown = sorted(set(declared) - set(Integration.objects.filter(id__in=declared).values_list("id", flat=True)))
    if unknown:
        raise InvalidInput(f"Unknown integration(s): {', '.join(unknown)}. capabilities_integration_list lists "
                           "them.", code="integration_not_found")
    return list(dict.fromkeys([*needed, *declared]))


def _compile_into(caller: Caller, playbook: Playbook) -> None:
    """Write the playbook's plan as its workflow (creating it the first time) and re-attach it."""
    from workflows.services import workflow_save

    definition = plans.plan_compile(name=playbook.name, goal=playbook.goal, plan=playbook.plan)
    workflow_id = playbook.workflow.workflow_id if playbook.workflow else WORKFLOW_PREFIX + playbook.pk
    action = WorkflowRevision.Action.UPDATE if playbook.workflow else WorkflowRevision.Action.CREATE
    playbook.detached_reason = ""
    playbook.workflow = workflow_save(caller=caller, scope=_scope(caller), workflow_id=workflow_id, source="global",
                                      config=definition, overwrite=True, action=action)


def _audit(caller: Caller, playbook: Playbook, verb: str, **detail: Any) -> None:
    audit_record(caller=caller, action=f"playbook.{verb}", target=f"playbook {playbook.pk} '{playbook.name}'",
                 detail=detail)


@transaction.atomic
def playbook_create(*, caller: Caller, name: str, goal: str = "", plan: dict[str, Any],
                    integrations: list[str] | None = None, template: PlaybookTemplate | None = None,
                    triggers: list[dict[str, Any]] | None = None,
                    spending_cap_usd: Decimal | None = None) -> Playbook:
    """A new playbook of the caller's, its workflow compiled and its triggers made (disabled unless a
    spec says otherwise). Nothing is written when any part is invalid."""
    name = _text(name, "name", MAX_NAME, required=True)
    goal = _text(goal, "goal", MAX_GOAL)
    plan = _normalized(plan)
    if triggers is not None and not isinstance(triggers, list):
        raise InvalidInput("triggers must be a list of trigger specs.", code="invalid_input")
    playbook = Playbook(owner=caller.user, name=name, goal=goal, plan=plan, template=template,
                        integrations=_integrations_needed(caller, plan, integrations or []),
                        spending_cap_usd=spending_cap_usd)
    playbook.save()
    _compile_into(caller, playbook)
    playbook.save(update_fields=["workflow", "detached_reason"])
    created = [trigger_services.trigger_create(caller=caller, playbook=playbook, spec=spec) for spec in triggers or []]
    playbook.created_triggers = created  # type: ignore[attr-defined]
    _audit(caller, playbook, "create", template=template.pk if template else None)
    return playbook


def playbook_lock(*, caller: Caller, playbook_id: str) -> Playbook:
    """The caller's playbook under its row lock: call inside transaction.atomic()."""
    playbook = Playbook.objects.select_for_update(of=("self",)).select_related("workflow").filter(
        pk=playbook_id, owner=caller.user).first()
    if playbook is None:
        raise playbook_not_found()
    return playbook


PLAYBOOK_FIELDS = {"name", "goal", "plan", "integrations", "spending_cap_usd"}


@transaction.atomic
def playbook_update(*, caller: Caller, playbook_id: str, changes: dict[str, Any],
                    if_match: list[str] | None = None) -> Playbook:
    """Change a playbook's name, goal, plan, declared integrations or cap, under its row lock (and,
    with `if_match`, only at the version the caller read). A new plan is compiled into the workflow,
    which re-attaches a detached playbook."""
    unknown = set(changes) - PLAYBOOK_FIELDS
    if unknown:
        raise InvalidInput(f"Unknown field(s): {', '.join(sorted(unknown))}.", code="invalid_input")
    playbook = playbook_lock(caller=caller, playbook_id=playbook_id)
    version_check(current=playbook_version(playbook), accepted=if_match, what=f"playbook {playbook.pk}")
    if "name" in changes:
        playbook.name = _text(changes["name"], "name", MAX_NAME, required=True)
    if "goal" in changes:
        playbook.goal = _text(changes["goal"], "goal", MAX_GOAL)
    if "plan" in changes:
        playbook.plan = _normalized(changes["plan"])
    if "spending_cap_usd" in changes:
        playbook.spending_cap_usd = changes["spending_cap_usd"]
    declared = changes.get("integrations", _declared(playbook))
    playbook.integrations = _integrations_needed(caller, playbook.plan, declared)
    playbook.version += 1
    playbook.updated_at = timezone.now()
    # Saved before the workflow is written: the workflow's own follow-up then finds the plan it holds.
    playbook.save()
    if {"name", "goal", "plan"} & set(changes) or playbook.workflow is None or playbook.detached_reason:
        _compile_into(caller, playbook)
        playbook.save(update_fields=["workflow", "detached_reason"])
    _audit(caller, playbook, "update", fields=sorted(changes))
    return playbook


def _declared(playbook: Playbook) -> list[str]:
    """The integrations the author added beyond those the plan's steps need."""
    steps_need = {name.partition(".")[0] for name in plans.plan_capabilities(playbook.plan) if "." in name}
    return [i for i in playbook.integrations if i not in steps_need]


@transaction.atomic
def playbook_delete(*, caller: Caller, playbook_id: str) -> None:
    """Delete the playbook, its triggers and its compiled workflow; its executions stay, as runs."""
    from workflows.services import workflow_forget

    playbook = playbook_lock(caller=caller, playbook_id=playbook_id)
    workflow = playbook.workflow
    _audit(caller, playbook, "delete")
    playbook.delete()
    if workflow is not None:
        workflow_forget(caller=caller, workflow=workflow)


def playbook_follow_workflow(*, workflow: Workflow) -> None:
    """The playbook's workflow was written by someone other than the playbook: take its plan back when
    a plan describes it, else mark the playbook detached. Called by the workflow services."""
    playbook = Playbook.objects.select_for_update().filter(workflow=workflow).first()
    if playbook is None:
        return
    plan = plans.plan_from_definition(workflow.config)
    name, goal = workflow.config.get("name"), workflow.config.get("description", "")
    if plan == playbook.plan and (name, goal) == (playbook.name, playbook.goal) and not playbook.detached_reason:
        return  # the playbook wrote it
    if plan is None:
        playbook.detached_reason = (
            "The workflow was edited into a shape a plan cannot describe (a plan is a straight chain of "
            "capability, ai, judge and approval steps). Executions run the workflow as edited; saving a plan "
            "overwrites the workflow and re-attaches it.")
    else:
        playbook.plan, playbook.name, playbook.goal = plan, name[:MAX_NAME], goal[:MAX_GOAL]
        playbook.detached_reason = ""
    playbook.version += 1
    playbook.updated_at = timezone.now()
    playbook.save()


# --- executions -------------------------------------------------------------------------------------

def _input_problems(playbook: Playbook, input: dict[str, Any]) -> list[str]:
    card = (playbook.workflow.config if playbook.workflow else {}).get("context") or playbook.plan.get("input")
    return schemas.problems(card or {}, input, label="input", root=True)


def execution_start(*, caller: Caller, playbook: Playbook, input: dict[str, Any] | None,
                    trigger: Trigger | None = None) -> Run:
    """Start an execution: check the input against the plan's input card, create the run, and hand
    its driving to a worker (to this process without a broker). Returns the run at once."""
    input = {} if input is None else input
    if not isinstance(input, dict):
        raise InvalidInput("input must be a JSON object.", code="invalid_input")
    if playbook.workflow is None:
        raise PlaybookError("This playbook has no workflow (it was deleted); save its plan again to recompile it.",
                            code="playbook_not_compiled")
    problems = _input_problems(playbook, input)
    if problems:
        raise InvalidInput(f"The input does not match the playbook's input card: {'; '.join(problems)}.",
                           code="invalid_input", extra={"problems": problems})
    workflow = playbook.workflow
    # Nobody watches a trigger's execution spend: it gets the operator's default cap unless the
    # playbook sets its own.
    cap = playbook.spending_cap_usd
    if cap is None and trigger is not None:
        cap = Decimal(settings.ATRIUM_PLAYBOOK_SPENDING_CAP_USD)
    with transaction.atomic():
        run = run_create(caller=caller, scope=_scope(caller), definition=workflow.config, context=input,
                         workflow=workflow, workflow_key=workflow.workflow_id, source=workflow.source,
                         caps=Caps(usd=cap), playbook=playbook, trigger=trigger)
        _audit(caller, playbook, "execute", run=run.pk, trigger=trigger.pk if trigger else None)
    run_dispatch(run.pk)
    return run


# --- templates and triggers -------------------------------------------------------------------------

def playbook_instantiate(*, caller: Caller, template_id: str, name: str | None = None) -> Playbook:
    """A playbook of the caller's from an enabled template, with the template's suggested triggers
    (disabled until activated)."""
    template = templates.template_find(template_id=template_id)
    return playbook_create(caller=caller, name=name or template.name, goal=template.description, plan=template.plan,
                           integrations=list(template.integrations), template=template,
                           triggers=[{**spec, "enabled": False} for spec in template.triggers])


@transaction.atomic
def playbook_triggers_activate(*, caller: Caller, playbook_id: str, enabled: bool) -> Playbook:
    """Turn every trigger of the playbook on or off."""
    playbook = playbook_lock(caller=caller, playbook_id=playbook_id)
    if enabled and not playbook.triggers.exists():
        raise PlaybookError("This playbook has no trigger to enable; add one (a schedule, an event or a webhook) "
                            "through the REST API first.", code="no_trigger")
    trigger_services.triggers_set_enabled(caller=caller, playbook=playbook, enabled=enabled)
    _audit(caller, playbook, "triggers_" + ("enable" if enabled else "disable"))
    return playbook


# --- generating --------------------------------------------------------------------------------------

# How well a template must match the prompt's words (templates_search's score: 4 for a word of its
# name, 3 of its category or integrations, 2 of a step's title, 1 of its description) to start a draft.
TEMPLATE_MATCH_MIN = 8
DRAFT_CAPABILITIES = 2
MAX_TITLE_DRAFT = 120


def _draft_name(prompt: str) -> str:
    words = " ".join(prompt.split())
    return words if len(words) <= 60 else words[:57].rstrip() + "..."


def _capability_steps(caller: Caller, prompt: str) -> tuple[dict[str, Any], list[str]]:
    """A plan drafted from the capabilities that best match the prompt: each one a step whose required
    inputs come from the input card, then an ai step that does what the prompt asks with their results."""
    from integrations import search
    from integrations.models import Action

    hits = [h for h in search.capabilities_search(caller=caller, query=prompt[:500], types=["action", "skill"],
                                                  integration_id=None, category=None, limit=10)
            if h["type"] in ("action", "skill")][:DRAFT_CAPABILITIES]
    properties: dict[str, Any] = {}
    required: list[str] = []
    steps: list[dict[str, Any]] = []
    for index, hit in enumerate(hits):
        integration_id, _, action_name = hit["name"].partition(".")
        action = Action.objects.filter(integration_id=integration_id, name=action_name).first()
        schema = action.input_schema if action is not None else {}
        step_input = {}
        for prop in schema.get("required", []):
            spec = (schema.get("properties") or {}).get(prop, {})
            properties.setdefault(prop, {k: v for k, v in spec.items() if k in ("type", "description", "enum")}
                                  or {"type": "string"})
            required.append(prop)
            step_input[prop] = f"{{{{ context.{prop} }}}}"
        steps.append({"id": f"step{index + 1}", "title": hit["description"][:MAX_TITLE_DRAFT] or hit["name"],
                      "kind": "capability", "capability": hit["name"], "input": step_input})
    results = " ".join(f"{{{{ {s['id']} }}}}" for s in steps)
    steps.append({"id": "answer", "title": "Do what was asked with the results", "kind": "ai",
                  "prompt": f"{prompt}\n\nResults so far: {results}" if steps else prompt})
    plan = {"input": {"type": "object", "properties": properties, "required": list(dict.fromkeys(required))},
            "steps": steps, "output": {"value": "{{ answer.output }}"}}
    return plan, [h["name"] for h in hits]


def _refine_prompt(playbook: Playbook, prompt: str, draft: dict[str, Any]) -> str:
    return (
        f"Atrium drafted the playbook {playbook.pk} ({playbook.name!r}) for this request: {prompt!r}. It was made "
        f"from {draft['source']}" + (f" {draft['templateId']}" if draft.get("templateId") else "") + ". Read it "
        f"with playbooks_get, then improve its plan so it does exactly what was asked: pick capabilities with "
        f"capabilities_search and check their inputs with capabilities_get; edit the compiled workflow "
        f"{playbook.workflow.workflow_id if playbook.workflow else ''} with update_workflow (global store), or PATCH "
        f"/api/playbooks/{playbook.pk}/ with a new plan. Keep steps of the kinds capability, ai, judge and approval "
        "so the plan and the workflow stay in step, then add a trigger and turn it on with "
        "playbooks_trigger_activate."
    )


MODEL_ATTEMPTS = 2
PLAN_FORMAT = (
    "A plan is JSON: {\"input\": <JSON Schema of type object for the execution's input>, \"steps\": [...], "
    "\"output\": {\"description\": \"...\", \"value\": <template or mapping of templates>}}. Each step is "
    "{\"id\", \"title\", \"kind\"} plus: kind capability: \"capability\" (a name from the catalogue) and "
    "\"input\" (a mapping; string values are templates); kind ai: \"prompt\"; kind judge: \"prompt\", "
    "\"verdicts\" (two or more) and \"continueOn\" (the verdicts that go on); kind approval: \"prompt\" (a "
    "person approves or rejects). Templates: {{ context.x }} is the input, {{ stepId }} or {{ stepId.field }} an "
    "earlier step's output ({{ id.output }} for an ai step). Step ids match [a-zA-Z0-9_-]+ and are not done, "
    "failed, context or stop_*."
)


def _model_messages(caller: Caller, prompt: str, problems: list[str] | None = None,
                    answer: str | None = None) -> list[dict[str, str]]:
    from integrations import search

    hits = search.capabilities_search(caller=caller, query=prompt[:500], types=["action", "skill"],
                                      integration_id=None, category=None, limit=15)
    catalogue = "\n".join(f"- {h['name']}: {h['description'][:200]}" for h in hits)
    examples = "\n".join(f"- {t['templateId']}: {t['name']}" for t in
                         templates.template_search(caller=caller, query=prompt, category=None, limit=3))
    messages = [
        {"role": "system", "content": "You design automation playbooks for Atrium. Answer with one JSON object, "
                                      "the plan, and nothing else. " + PLAN_FORMAT},
        {"role": "user", "content": f"Design a playbook for: {prompt}\n\nCapabilities that may fit (use only "
                                    f"these names):\n{catalogue or '- none'}\n\nTemplates like it:\n"
                                    f"{examples or '- none'}"},
    ]
    if problems and answer is not None:
        messages += [{"role": "assistant", "content": answer},
                     {"role": "user", "content": "That plan is not valid: " + "; ".join(problems)
                                                 + ". Answer with the corrected plan only."}]
    return messages


def _model_plan(caller: Caller, prompt: str) -> tuple[dict[str, Any] | None, str | None]:
    """A plan the operator's model drafted, checked (one retry with its problems); or None and why."""
    from runs import answerers

    problems: list[str] | None = None
    answer: str | None = None
    for _ in range(MODEL_ATTEMPTS):
        try:
            completion = answerers.completion_request(model=settings.ATRIUM_MODEL_BACKEND_MODEL,
                                                      messages=_model_messages(caller, prompt, problems, answer))
        except answerers.BackendFailed as exc:
            return None, f"The model backend failed: {exc.message}"
        answer = completion.text
        text = answer.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
        try:
            plan = json.loads(text)
        except (ValueError, RecursionError):  # nested past the parser's stack: not a plan either
            problems = ["the answer was not JSON"]
            continue
        if json_depth(plan) > MAX_JSON_DEPTH:
            problems = [f"the answer was nested more than {MAX_JSON_DEPTH} levels deep"]
            continue
        problems = plans.plan_problems(plan)
        if not problems:
            try:
                _integrations_needed(caller, plan, [])
            except DomainError as exc:
                problems = [exc.message]
        if not problems:
            return plan, None
    return None, "The model's plan was not valid: " + "; ".join(problems or [])


def playbook_generate(*, caller: Caller, prompt: str) -> dict[str, Any]:
    """A saved playbook drafted from `prompt`: by the operator's model backend when there is one, else
    (or when the model's plan is not valid) from the best-matching template, else from the
    best-matching capabilities."""
    from runs import answerers
    from workflows.playbook_selectors import playbook_detail

    prompt = _text(prompt, "prompt", 4000, required=True)
    if len(prompt) < 10:
        raise InvalidInput("prompt must be at least 10 characters: say what the playbook should do.",
                           code="invalid_input")
    model_error = None
    if answerers.backend_configured():
        plan, model_error = _model_plan(caller, prompt)
        if plan is not None:
            playbook = playbook_create(caller=caller, name=_draft_name(prompt), goal=prompt, plan=plan)
            draft = {"source": "model", "templateId": None, "capabilities": plans.plan_capabilities(playbook.plan)}
            return {**playbook_detail(caller=caller, playbook_id=playbook.pk), "draft": draft,
                    "refinePrompt": _refine_prompt(playbook, prompt, draft)}
    # Only the prompt's longer words: "a" or "to" would match half of every template's words.
    words = " ".join(w for w in re.findall(r"[a-z0-9]+", prompt.lower()) if len(w) >= 4)
    matches = templates.template_search(caller=caller, query=words[:500], category=None, limit=1)
    template = None
    if matches and matches[0].get("score", 0) >= TEMPLATE_MATCH_MIN:
        template = templates.template_find(template_id=matches[0]["templateId"])
    if template is not None:
        playbook = playbook_create(caller=caller, name=_draft_name(prompt), goal=prompt, plan=template.plan,
                                   integrations=list(template.integrations), template=template,
                                   triggers=[{**spec, "enabled": False} for spec in template.triggers])
        draft = {"source": "template", "templateId": template.pk,
                 "capabilities": plans.plan_capabilities(template.plan)}
    else:
        plan, names = _capability_steps(caller, prompt)
        playbook = playbook_create(caller=caller, name=_draft_name(prompt), goal=prompt, plan=plan)
        draft = {"source": "capabilities", "templateId": None, "capabilities": names}
    if model_error:
        draft["modelError"] = model_error
    return {**playbook_detail(caller=caller, playbook_id=playbook.pk), "draft": draft,
            "refinePrompt": _refine_prompt(playbook, prompt, draft)}
