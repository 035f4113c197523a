"""Reads for integrations, always as seen by one caller: the shared catalogue plus the caller's own
skills, connections and executions, never anyone else's."""

from __future__ import annotations

import difflib
from typing import Any

from django.db.models import Count, Q, QuerySet

from core.caller import Caller
from core.errors import Forbidden, InvalidInput, NotFound
from integrations import vault
from integrations.models import Action, Connection, Execution, Integration, Skill

INTEGRATION_PARTS = ("description", "agentFriendlyInstructions", "availableSkills")
CAPABILITY_PARTS = ("description", "inputSchema", "outputSchema", "sourceCode")


def connected(*, caller: Caller, integration: Integration) -> bool:
    return Connection.objects.filter(user=caller.user, integration=integration,
                                     state=Connection.State.CONNECTED).exists()


def integrations_enabled() -> QuerySet[Integration]:
    return Integration.objects.filter(enabled=True)


def skills_visible(*, caller: Caller) -> QuerySet[Skill]:
    return Skill.objects.filter(Q(owner__isnull=True) | Q(owner=caller.user))


def skills_own(*, caller: Caller) -> QuerySet[Skill]:
    return Skill.objects.filter(owner=caller.user).prefetch_related("integrations")


def skill_not_found() -> NotFound:
    return NotFound("Skill not found.", code="skill_not_found")


def skill_get(*, caller: Caller, skill_id: int) -> Skill:
    """One of the caller's own skills (the ones they may change)."""
    skill = skills_own(caller=caller).filter(pk=skill_id).first()
    if skill is None:
        raise skill_not_found()
    return skill


def integration_list(*, caller: Caller) -> dict[str, Any]:
    """Every enabled integration with the caller's connection state and its number of actions."""
    counts = dict(integrations_enabled().annotate(n=Count("actions")).values_list("id", "n"))
    details = {i.id: i for i in integrations_enabled().only("id", "description", "category")}
    rows = vault.vault_status(caller=caller)["integrations"]
    for row in rows:
        integration = details[row["integrationId"]]
        row.update(description=integration.description, category=integration.category,
                   actionCount=counts.get(integration.id, 0))
    return {"integrations": rows, "total": len(rows)}


def _names(caller: Caller) -> list[str]:
    names = list(integrations_enabled().values_list("id", flat=True))
    names += [f"{i}.{n}" for i, n in Action.objects.filter(integration__enabled=True)
              .values_list("integration_id", "name")]
    return names + list(skills_visible(caller=caller).values_list("name", flat=True))


def capability_not_found(*, caller: Caller, name: str) -> NotFound:
    close = difflib.get_close_matches(name, _names(caller), n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else " Use capabilities_search to find one."
    return NotFound(f"No integration or capability named '{name}'.{hint}", code="capability_not_found",
                    extra={"suggestions": close})


def _parts(parts: list[str] | None, allowed: tuple[str, ...], kind: str) -> list[str]:
    wanted = list(dict.fromkeys(parts or ["description"]))
    unknown = [p for p in wanted if p not in allowed]
    if unknown:
        raise InvalidInput(f"Unknown part(s) for {kind} {', '.join(unknown)}; "
                           f"a {kind} has: {', '.join(allowed)}.", code="invalid_parts")
    return wanted


def _integration_details(caller: Caller, integration: Integration, parts: list[str]) -> dict[str, Any]:
    wanted = _parts(parts, INTEGRATION_PARTS, "an integration:")
    shown: dict[str, Any] = {"name": integration.id, "type": "integration", "displayName": integration.name,
                             "connected": not integration.connection_required or connected(caller=caller,
                                                                                           integration=integration)}
    if "description" in wanted:
        shown["description"] = integration.description
    if "agentFriendlyInstructions" in wanted:
        shown["agentFriendlyInstructions"] = integration.agent_instructions
    if "availableSkills" in wanted:
        actions = [{"name": a.full_name, "type": "action", "description": a.description}
                   for a in integration.actions.all()]
        used_by = [{"name": s.name, "type": "skill", "description": s.description}
                   for s in skills_visible(caller=caller).filter(integrations=integration).distinct()]
        shown["availableSkills"] = actions + used_by
    return shown


def _capability_details(kind: str, capability: Action | Skill, parts: list[str]) -> dict[str, Any]:
    wanted = _parts(parts, CAPABILITY_PARTS, f"a {kind}:")
    name = capability.full_name if isinstance(capability, Action) else capability.name
    shown: dict[str, Any] = {"name": name, "type": kind}
    if isinstance(capability, Action):
        shown["integrationId"] = capability.integration_id
    else:
        shown["integrations"] = [i.id for i in capability.integrations.all()]
    if "description" in wanted:
        shown["description"] = capability.description
    if "inputSchema" in wanted:
        shown["inputSchema"] = capability.input_schema or {"type": "object"}
    if "outputSchema" in wanted:
        shown["outputSchema"] = capability.output_schema or {}
    if "sourceCode" in wanted:
        # An action runs server-side code that is not the caller's to read; a skill's source is.
        shown["sourceCode"] = capability.source_code if isinstance(capability, Skill) else None
    return shown


def capability_get(*, caller: Caller, name: str, parts: list[str] | None = None) -> dict[str, Any]:
    """An integration by exact id, or an action or skill by exact name, with the parts asked for."""
    integration = integrations_enabled().filter(id=name).first()
    if integration is not None:
        return _integration_details(caller, integration, parts or [])
    if "." in name:
        integration_id, _, action_name = name.partition(".")
        action = Action.objects.select_related("integration").filter(
            integration_id=integration_id, name=action_name, integration__enabled=True).first()
        if action is not None:
            return _capability_details("action", action, parts or [])
    skills = sorted(skills_visible(caller=caller).filter(name=name), key=lambda s: s.owner_id is None)
    if skills:
        return _capability_details("skill", skills[0], parts or [])
    raise capability_not_found(caller=caller, name=name)


def executions(*, caller: Caller, name: str | None = None, status: str | None = None) -> QuerySet[Execution]:
    found = Execution.objects.filter(user=caller.user)
    if name:
        found = found.filter(name=name)
    if status:
        found = found.filter(status=status)
    return found


def execution_not_found() -> NotFound:
    return NotFound("Execution not found.", code="execution_not_found")


def execution_get(*, caller: Caller, execution_id: int) -> Execution:
    execution = Execution.objects.filter(user=caller.user, pk=execution_id).first()
    if execution is None:
        raise execution_not_found()
    return execution


def execution_describe(execution: Execution) -> dict[str, Any]:
    return {"id": execution.pk, "name": execution.name, "kind": execution.kind,
            "integrationId": execution.integration_id, "status": execution.status, "via": execution.via,
            "inputKeys": execution.input_keys, "errorCode": execution.error_code or None,
            "error": execution.error or None, "result": execution.result,
            "parentId": execution.parent_id, "startedAt": execution.started_at,
            "finishedAt": execution.finished_at, "durationMs": execution.duration_ms}


def capabilities_allowed(*, caller: Caller, names: list[str]) -> None:
    """Refuse a workflow or a playbook plan whose capability steps its author could not execute: the
    steps run as the owner every time, whoever starts the run (a trigger, a token that may only run
    it), so writing them needs capabilities:execute and each Atrium action's own scope."""
    if not names:
        return
    needed = {"capabilities:execute"}
    for action in Action.objects.filter(integration_id__in={n.partition(".")[0] for n in names if "." in n}):
        if action.full_name in names and action.config.get("scope"):
            needed.add(action.config["scope"])
    missing = sorted(needed - caller.scopes)
    if missing:
        raise Forbidden(f"Its capability steps need the scope(s) {', '.join(missing)}, which this token does not "
                        "carry: a workflow or playbook may only do what its author may.", code="insufficient_scope",
                        extra={"scopes": missing})


def integration_states(*, caller: Caller, integration_ids: list[str]) -> list[dict[str, Any]]:
    """For each integration something needs (a playbook, a template), in order: whether it is on this
    server and enabled (`available`), whether it needs a connection, and whether the caller has one
    (an integration that needs none counts as connected)."""
    known = {i.pk: i for i in Integration.objects.filter(pk__in=integration_ids)}
    connected_ids = set(Connection.objects.filter(user=caller.user, integration_id__in=known,
                                                  state=Connection.State.CONNECTED)
                        .values_list("integration_id", flat=True))
    states = []
    for integration_id in integration_ids:
        integration = known.get(integration_id)
        if integration is None or not integration.enabled:
            states.append({"integrationId": integration_id, "name": integration.name if integration else integration_id,
                           "connected": False, "connectionRequired": True, "available": False})
            continue
        states.append({"integrationId": integration_id, "name": integration.name,
                       "connected": not integration.connection_required or integration_id in connected_ids,
                       "connectionRequired": integration.connection_required, "available": True})
    return states
