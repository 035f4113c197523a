"""Writes for integrations: the built-in catalogue, skills, and executing capabilities.

capability_execute follows Aident's contract: a dotted name is an integration action when one
exists and only otherwise a skill of that full name; an action's own error is its answer and never
falls back to a skill; a plain name is a skill. Input is checked against the capability's input
schema before anything runs, a missing connection answers with how to connect instead of running,
and every execution is recorded without its input values or any credential. A refused call (bad
input, unknown name, rate limit) records nothing: it changes nothing.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.ratelimit import capability_execution_retry_after
from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError, InvalidInput
from core.versions import VersionConflict, row_version
from integrations import catalogue, schemas, search, selectors, skills, vault
from integrations.executors import EXECUTORS, ActionCall, ActionFailed, IntegrationSpec
from integrations.models import Action, Execution, Integration, Skill
from integrations.openapi import ImportReport, integration_import
from workflows.events import event_emit

logger = logging.getLogger(__name__)

MAX_SKILL_SOURCE_CHARS = 200_000
MAX_SKILL_TIMEOUT_SECONDS = 300
# How long a request waits for a skill before answering that it is still running.
SKILL_WAIT_SECONDS = 60


class RateLimited(DomainError):
    code = "rate_limited"
    http_status = 429


class SkillExists(DomainError):
    code = "skill_exists"
    http_status = 409


class NotConnected(DomainError):
    """The capability needs integrations the caller has not connected: nothing ran. Not an error to
    the caller: the answer is how to connect them."""

    code = "connection_required"


# --- the catalogue -----------------------------------------------------------------------------------

def _spec_apply(spec: IntegrationSpec) -> Integration:
    integration, _ = Integration.objects.update_or_create(id=spec.id, defaults={
        "name": spec.name, "description": spec.description, "category": spec.category,
        "agent_instructions": spec.agent_instructions, "auth_scheme": spec.auth_scheme,
        "auth_config": spec.auth_config, "connection_required": spec.connection_required,
        "first_party": spec.first_party, "kind": Integration.Kind.BUILTIN,
    })
    kept = []
    for action in spec.actions:
        Action.objects.update_or_create(integration=integration, name=action.name, defaults={
            "description": action.description, "input_schema": action.input_schema,
            "output_schema": action.output_schema, "executor": action.executor, "config": action.config,
        })
        kept.append(action.name)
    integration.actions.exclude(name__in=kept).delete()
    return integration


@transaction.atomic
def catalogue_sync(*, documents: list[Path] | None = None) -> dict[str, list[str]]:
    """Write the built-in integrations and import the shipped OpenAPI documents (or `documents`),
    then bring the search index up to date. A document already imported as it is now is left alone,
    so what curators changed in admin stays until the document itself changes; an import keeps their
    base URL, OAuth client and the enabled flag in any case."""
    builtin = [_spec_apply(spec) for spec in catalogue.builtin_specs()]
    imported = []
    for path in catalogue.shipped_documents() if documents is None else documents:
        text = path.read_bytes()
        current = Integration.objects.filter(kind=Integration.Kind.OPENAPI,
                                             source_document=text.decode("utf-8-sig")).first()
        if current is None:
            current = integration_import(document=text, source=path.name).integration
        imported.append(current)
    search.index_refresh(integrations=[*builtin, *imported], skills=Skill.objects.filter(owner__isnull=True))
    return {"builtin": [i.id for i in builtin], "imported": [i.id for i in imported]}


@transaction.atomic
def integration_document_import(*, document: str | bytes, source: str, integration_id: str | None = None,
                                server_url: str | None = None) -> tuple[Integration, ImportReport]:
    """Import an OpenAPI document as an integration (integrations.openapi) and index it for search, as
    the admin's Import and `manage.py import_integration` do: imported, it is found at once."""
    report = integration_import(document=document, source=source, integration_id=integration_id,
                                server_url=server_url)
    search.index_refresh(integrations=[report.integration])
    return report.integration, report


@transaction.atomic
def integration_set_enabled(*, caller: Caller, integration: Integration, enabled: bool) -> bool:
    """Offer the integration (its actions, connections and search hits) to callers, or withdraw it;
    whether that changed anything. A catalogue sync keeps the flag as set here."""
    # A conditional update: of two curators switching the same integration, one changes it and audits.
    changed = Integration.objects.filter(pk=integration.pk, enabled=not enabled).update(
        enabled=enabled, updated_at=timezone.now())
    if changed:
        audit_record(action=f"integration.{'enable' if enabled else 'disable'}", target=integration.pk,
                     caller=caller)
    return bool(changed)


# --- skills ----------------------------------------------------------------------------------------

def _skill_fields(fields: dict[str, Any]) -> dict[str, Any]:
    cleaned = dict(fields)
    for key in ("input_schema", "output_schema"):
        if key in cleaned:
            cleaned[key] = schemas.schema_check(cleaned[key] or {}, field=key)
    if "source_code" in cleaned:
        source = cleaned["source_code"]
        if not isinstance(source, str):
            raise InvalidInput("source_code is required.", code="invalid_input")
        if not source.strip():
            raise InvalidInput("source_code is blank: it must define run(input, atrium).", code="invalid_source")
        if len(source) > MAX_SKILL_SOURCE_CHARS:
            raise InvalidInput(f"source_code is longer than {MAX_SKILL_SOURCE_CHARS} characters.",
                               code="invalid_input")
        try:
            compile(source, "<skill>", "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise InvalidInput(f"source_code does not compile: line {exc.lineno}: {exc.msg}.",
                               code="invalid_source") from None
    timeout = cleaned.get("timeout_seconds")
    if timeout is not None and not 1 <= timeout <= MAX_SKILL_TIMEOUT_SECONDS:
        raise InvalidInput(f"timeout_seconds must be 1-{MAX_SKILL_TIMEOUT_SECONDS}.", code="invalid_input")
    return cleaned


def _integrations_named(ids: list[str]) -> list[Integration]:
    found = {i.id: i for i in Integration.objects.filter(id__in=ids)}
    unknown = sorted(set(ids) - set(found))
    if unknown:
        raise InvalidInput(f"Unknown integration(s): {', '.join(unknown)}.", code="integration_not_found")
    return [found[i] for i in ids]


def _skill_name_check(*, owner_id: int | None, name: str, exclude: int | None = None) -> None:
    clash = Skill.objects.filter(Q(owner__isnull=True) | Q(owner_id=owner_id), name=name) if owner_id else \
        Skill.objects.filter(name=name)
    if exclude is not None:
        clash = clash.exclude(pk=exclude)
    if clash.exists():
        raise SkillExists(f"A skill named '{name}' already exists.")


@transaction.atomic
def skill_create(*, caller: Caller, name: str, description: str, source_code: str,
                 input_schema: dict[str, Any] | None = None, output_schema: dict[str, Any] | None = None,
                 integrations: list[str] | None = None, timeout_seconds: int = 30, shared: bool = False) -> Skill:
    """A new skill: the caller's own, or (for a curator, `shared`) part of everyone's catalogue."""
    owner = None if shared else caller.user
    if shared and not caller.user.is_staff:
        raise DomainError("Only curators (staff) may add skills to the shared catalogue.", code="forbidden")
    fields = _skill_fields({"source_code": source_code, "input_schema": input_schema or {},
                            "output_schema": output_schema or {}, "timeout_seconds": timeout_seconds})
    skill = Skill(owner=owner, name=name, description=description, **fields)
    # The name is checked by _skill_name_check, which refuses it with skill_exists (the constraints
    # would raise a ValidationError no adapter answers).
    skill.full_clean(exclude=["integrations"], validate_unique=False, validate_constraints=False)
    _skill_name_check(owner_id=owner.pk if owner else None, name=name)
    try:
        with transaction.atomic():  # two creates of one name at once: the loser hits the constraint here
            skill.save()
    except IntegrityError:
        raise SkillExists(f"A skill named '{name}' already exists.") from None
    skill.integrations.set(_integrations_named(integrations or []))
    search.index_refresh(skills=[skill])
    audit_record(action="skill.create", target=name, caller=caller, detail={"shared": shared})
    return skill


def skill_lock(skill: Skill) -> Skill:
    return Skill.objects.select_for_update().get(pk=skill.pk)


@transaction.atomic
def skill_update(*, caller: Caller, skill: Skill, changes: dict[str, Any],
                 expected_versions: frozenset[str] | None = None) -> Skill:
    """Change a skill's fields (name, description, source_code, input_schema, output_schema,
    timeout_seconds, integrations). With `expected_versions` (If-Match), refuses if the skill
    changed since the client read it."""
    skill = skill_lock(skill)
    current = row_version(skill.pk, skill.updated_at)
    if expected_versions is not None and current not in expected_versions:
        raise VersionConflict(f"The skill changed since you read it (it is now version {current}). "
                              "Read it again and retry.")
    integrations = changes.pop("integrations", None)
    for key, value in _skill_fields(changes).items():
        setattr(skill, key, value)
    skill.full_clean(exclude=["integrations"], validate_unique=False, validate_constraints=False)
    _skill_name_check(owner_id=skill.owner_id, name=skill.name, exclude=skill.pk)
    skill.version += 1
    skill.save()
    if integrations is not None:
        skill.integrations.set(_integrations_named(integrations))
    search.index_refresh(skills=[skill])
    audit_record(action="skill.update", target=skill.name, caller=caller, detail={"fields": sorted(changes)})
    return skill


@transaction.atomic
def skill_delete(*, caller: Caller, skill: Skill) -> None:
    name = skill.name
    skill.delete()  # its Capability row goes with it (CASCADE)
    audit_record(action="skill.delete", target=name, caller=caller)


# --- executing -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """What capabilities_execute answers: the payload, and whether it is an error (isError)."""

    payload: Any
    is_error: bool = False


def _action_named(name: str) -> Action | None:
    integration_id, _, action_name = name.partition(".")
    return (Action.objects.select_related("integration")
            .filter(integration_id=integration_id, name=action_name, integration__enabled=True).first())


def _skill_named(caller: Caller, name: str) -> Skill | None:
    found = list(selectors.skills_visible(caller=caller).filter(name=name).prefetch_related("integrations"))
    # The caller's own skill wins over a shared one a curator added later under the same name.
    found.sort(key=lambda skill: skill.owner_id is None)
    return found[0] if found else None


def _record(*, caller: Caller, name: str, kind: str, status: str, input: dict[str, Any], started: float,
            integration: Integration | None = None, skill: Skill | None = None, parent: Execution | None = None,
            error: DomainError | None = None) -> Execution:
    execution = Execution.objects.create(
        user=caller.user, name=name, kind=kind, integration=integration, skill=skill, parent=parent, via=caller.via,
        credential=caller.credential[:200], input_keys=sorted(input)[:50], status=status,
        error_code=error.code if error else "", error=error.message[:2000] if error else "",
        finished_at=timezone.now(), duration_ms=round((time.monotonic() - started) * 1000),
    )
    event_emit(owner_id=caller.user.pk, name="capability.executed",
               data={"name": name, "kind": str(kind), "status": str(status)})
    return execution


def _input_check(schema: dict[str, Any], value: dict[str, Any], name: str) -> None:
    found = schemas.problems(schema, value)
    if found:
        raise InvalidInput(f"The input does not match {name}'s input schema: {'; '.join(found)}.",
                           code="invalid_input", extra={"problems": found})


@transaction.atomic
def _missing(caller: Caller, integrations: list[Integration]) -> list[dict[str, Any]]:
    """How to connect each of these integrations that the caller has not connected. One transaction:
    when one of them cannot be connected at all, the refusal leaves no link made for the others."""
    missing = []
    for integration in integrations:
        if integration.connection_required and not selectors.connected(caller=caller, integration=integration):
            missing.append(vault.vault_connect(caller=caller, integration_id=integration.id))
    return missing


def _not_connected(missing: list[dict[str, Any]]) -> NotConnected:
    ids = ", ".join(m["integrationId"] for m in missing)
    return NotConnected(
        f"Connect {ids} first: nothing ran. Give the user each connectUrl to open (they enter the credential "
        "there, never in this chat), or call vault with action connect; then call again.",
        extra={"missingIntegrations": missing},
    )


def action_execute(*, caller: Caller, name: str, input: dict[str, Any], parent: Execution | None = None,
                   action: Action | None = None) -> Any:
    """Run one integration action as the caller and return its output. Raises ActionFailed (the
    action's own error, recorded), or before anything runs InvalidInput, NotConnected or NotFound
    (not recorded: a refused call changes nothing)."""
    action = action or _action_named(name)
    if action is None:
        raise selectors.capability_not_found(caller=caller, name=name)
    integration = action.integration
    _input_check(action.input_schema, input, action.full_name)
    missing = _missing(caller, [integration])
    if missing:
        raise _not_connected(missing)
    record = {"caller": caller, "name": action.full_name, "kind": Execution.Kind.ACTION, "input": input,
              "started": time.monotonic(), "integration": integration, "parent": parent}
    try:
        credentials = vault.connection_credentials(caller=caller, integration=integration) or {}
        output = EXECUTORS[action.executor](ActionCall(caller=caller, action=action, input=input,
                                                       credentials=credentials))
    except DomainError as exc:
        _record(status=Execution.Status.FAILED, error=exc, **record)
        raise exc if isinstance(exc, ActionFailed) else ActionFailed(exc.message, code=exc.code) from exc
    except Exception as exc:
        logger.exception("Action %s failed", action.full_name)
        failure = ActionFailed(f"{action.full_name} failed on the server; the error was logged.",
                               code="internal_error")
        _record(status=Execution.Status.FAILED, error=failure, **record)
        raise failure from exc
    _record(status=Execution.Status.SUCCEEDED, **record)
    return output


def _rate_check(caller: Caller) -> None:
    retry_after = capability_execution_retry_after(caller.user.pk)
    if retry_after is not None:
        raise RateLimited(f"Too many capability executions; retry after {retry_after} seconds.",
                          extra={"retryAfter": retry_after})


def _reap_deadline(execution: Execution) -> Any:
    timeout = execution.skill.timeout_seconds if execution.skill is not None else MAX_SKILL_TIMEOUT_SECONDS
    return execution.started_at + timedelta(seconds=timeout + settings.ATRIUM_SCRIPT_LEASE_GRACE_SECONDS)


def executions_reap(*, user_id: int | None = None) -> int:
    """Fail skill executions still `running` well past their timeout: their worker (or the web process
    supervising them) died, and nobody else will ever record their end. Returns how many."""
    now = timezone.now()
    stale = Execution.objects.filter(kind=Execution.Kind.SKILL, status=Execution.Status.RUNNING,
                                     started_at__lt=now - timedelta(seconds=settings.ATRIUM_SCRIPT_LEASE_GRACE_SECONDS))
    if user_id is not None:
        stale = stale.filter(user_id=user_id)
    reaped = 0
    for execution in stale.select_related("skill"):
        if _reap_deadline(execution) > now:
            continue
        with transaction.atomic():
            # Locked and checked again: the worker may record its result at this very moment.
            locked = Execution.objects.select_for_update().get(pk=execution.pk)
            if locked.status != Execution.Status.RUNNING:
                continue
            error = "The skill's worker was lost before it reported a result."
            locked.status, locked.error_code, locked.error = Execution.Status.FAILED, "worker_lost", error
            locked.finished_at = now
            locked.duration_ms = round((now - locked.started_at).total_seconds() * 1000)
            locked.result = {"success": False, "error": error, "executionTimeMs": locked.duration_ms}
            locked.save(update_fields=["status", "error_code", "error", "finished_at", "duration_ms", "result"])
            reaped += 1
    return reaped


@transaction.atomic
def skill_execution_claim(*, caller: Caller, skill: Skill, input: dict[str, Any]) -> Execution:
    """The Execution row a skill runs under, if the caller has a slot: at most
    ATRIUM_SKILL_CONCURRENCY_PER_USER of one user's skills run at once."""
    # The user's row is the lock: without it, two requests could both count a free slot and take it.
    type(caller.user).objects.select_for_update().filter(pk=caller.user.pk).first()
    running = Execution.objects.filter(user=caller.user, kind=Execution.Kind.SKILL,
                                       status=Execution.Status.RUNNING).count()
    limit = settings.ATRIUM_SKILL_CONCURRENCY_PER_USER
    if limit and running >= limit:
        raise RateLimited(f"{running} of your skills are running, the most at once; try again when one ends.",
                          extra={"retryAfter": 5})
    return Execution.objects.create(user=caller.user, name=skill.name, kind=Execution.Kind.SKILL, skill=skill,
                                    via=caller.via, credential=caller.credential[:200], input_keys=sorted(input)[:50])


def _skill_execute(*, caller: Caller, skill: Skill, input: dict[str, Any], here: bool = False) -> Outcome:
    started = time.monotonic()
    _input_check(skill.input_schema, input, skill.name)
    missing = _missing(caller, list(skill.integrations.all()))
    if missing:
        exc = _not_connected(missing)
        return Outcome({"success": False, "status": "connection_required", "error": exc.message,
                        "code": exc.code, "executionTimeMs": 0, **exc.extra})
    executions_reap(user_id=caller.user.pk)  # a dead worker's execution must not hold a slot for ever
    execution = skill_execution_claim(caller=caller, skill=skill, input=input)
    # Run here, a worker waits for the skill's whole timeout: nobody else would apply its result.
    wait = skill.timeout_seconds + settings.ATRIUM_SCRIPT_LEASE_GRACE_SECONDS if here else SKILL_WAIT_SECONDS
    result = skills.skill_dispatch(caller=caller, skill=skill, input=input, execution=execution,
                                   call_action=functools.partial(action_execute, caller=caller),
                                   wait_seconds=wait, here=here)
    if result is None:
        return Outcome({"success": False, "executionId": execution.pk, "executionTimeMs":
                        round((time.monotonic() - started) * 1000),
                        "error": f"The skill is still running after {SKILL_WAIT_SECONDS} s; its result will be in "
                                 f"execution {execution.pk} (GET /api/capabilities/executions/{execution.pk}/)."},
                       is_error=True)
    return Outcome(result, is_error=not result.get("success"))


def capability_execute(*, caller: Caller, name: str, input: dict[str, Any] | None, here: bool = False) -> Outcome:
    """Execute a capability by name for the caller (see the module docstring for the rules). `here`
    runs a skill on this process (a worker's playbook step) rather than on another worker."""
    input = {} if input is None else input
    if not isinstance(input, dict):
        raise InvalidInput("input must be a JSON object.", code="invalid_input")
    _rate_check(caller)
    if "." in name:
        action = _action_named(name)
        if action is not None:
            try:
                return Outcome(action_execute(caller=caller, name=name, input=input, action=action))
            except ActionFailed as exc:
                return Outcome(exc.payload(), is_error=True)
            except NotConnected as exc:
                return Outcome({"status": "connection_required", "message": exc.message, **exc.extra})
    skill = _skill_named(caller, name)
    if skill is None:
        raise selectors.capability_not_found(caller=caller, name=name)
    return _skill_execute(caller=caller, skill=skill, input=input, here=here)
