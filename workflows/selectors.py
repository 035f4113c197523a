"""Reads for workflows, always within the caller's scope: their global store, plus the project the
call is about."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Count, Q, QuerySet

from core.errors import DomainError
from workflows import analysis, repofiles
from workflows.definition import config_check, config_normalize
from workflows.errors import IntegrityFailure, InvalidConfig, WorkflowNotFound
from workflows.models import ConfiguredModel, Project, Workflow, WorkflowRevision
from workflows.scoping import Scope
from workflows.yamltext import yaml_dump, yaml_load

GLOBAL, REPO = Workflow.Source.GLOBAL.value, Workflow.Source.REPO.value


def no_repo_source() -> DomainError:
    return DomainError("source 'repo' needs a project: call with cwd inside one, not global: true.",
                       code="no_repo_source")


def path_of(workflow: Workflow, scope: Scope | None = None) -> str:
    """Where the workflow really lives: its file in the repository, where this server sees the
    repository (a repo workflow on a local server); else the REST URL this server serves it at."""
    folder = repofiles.folder_of(scope) if scope is not None and workflow.project_id is not None else None
    if folder is not None:
        return str(repofiles.file_of(folder, workflow.workflow_id))
    if workflow.project_id is None:
        query = {"global": "true"}
    else:
        cwd = scope.cwd if scope is not None and scope.cwd else next(
            (root.path for root in workflow.project.roots.all()), None)
        query = {"source": REPO, **({"cwd": cwd} if cwd else {})}
    return f"{settings.ATRIUM_PUBLIC_URL}/api/workflows/{workflow.workflow_id}/?{urlencode(query)}"


def visible(*, scope: Scope) -> QuerySet[Workflow]:
    """The scope's workflows: the global store's, and the project's when there is one."""
    where = Q(project__isnull=True)
    if scope.project is not None:
        where |= Q(project=scope.project)
    return Workflow.objects.filter(where, owner=scope.owner)


def source_check(*, scope: Scope, source: str | None) -> str | None:
    if source == REPO and scope.project is None:
        raise no_repo_source()
    return source


def default_source(*, scope: Scope, source: str | None) -> str:
    """Writes go to the repo when the call has a project, else to the global store."""
    source_check(scope=scope, source=source)
    return source or (REPO if scope.project is not None else GLOBAL)


def workflow_find(*, scope: Scope, workflow_id: str, source: str | None = None) -> Workflow:
    """The workflow by id: in `source`, or repo-first when it is omitted."""
    source_check(scope=scope, source=source)
    found = {wf.source: wf for wf in visible(scope=scope).filter(workflow_id=workflow_id).select_related("project")}
    workflow = found.get(source) if source else found.get(REPO) or found.get(GLOBAL)
    if workflow is None:
        where = f"the {source} source" if source else ("this project or the global store" if scope.project
                                                        else "the global store")
        raise WorkflowNotFound(f"No workflow {workflow_id!r} in {where}. list_workflows shows what there is.")
    return workflow


def workflow_list(*, scope: Scope) -> list[dict[str, Any]]:
    rows = list(visible(scope=scope).values_list("workflow_id", "name", "description", "project_id"))
    repo_ids = {row[0] for row in rows if row[3] is not None}
    listed = [
        {"id": wid, "name": name, "description": description or None, "source": REPO if project else GLOBAL,
         "shadowed": project is None and wid in repo_ids}
        for wid, name, description, project in rows
    ]
    return sorted(listed, key=lambda w: (w["id"], w["source"] != REPO))


def workflow_lookup(*, scope: Scope) -> analysis.Lookup:
    """Subworkflow ids -> configs as a run in this scope would resolve them (repo first)."""
    cache: dict[str, dict[str, Any] | None] = {}

    def lookup(workflow_id: str) -> dict[str, Any] | None:
        if workflow_id not in cache:
            try:
                cache[workflow_id] = workflow_find(scope=scope, workflow_id=workflow_id).config
            except WorkflowNotFound:
                cache[workflow_id] = None
        return cache[workflow_id]

    return lookup


def resolves_to(*, referrer: Workflow, target: Workflow, shadow_ids: set[str]) -> bool:
    """Whether `referrer`'s subworkflow reference to target's id lands on `target`: a global workflow
    only sees the global store; a repo workflow sees its project first (`shadow_ids` are that project's ids)."""
    if referrer.project_id is None:
        return target.project_id is None
    if target.project_id is not None:
        return target.project_id == referrer.project_id
    return target.workflow_id not in shadow_ids


def workflow_referrers(*, scope: Scope, workflow_id: str) -> list[tuple[Workflow, str]]:
    """Every (workflow, node id) in the scope whose subworkflow node names `workflow_id`, any source."""
    found: list[tuple[Workflow, str]] = []
    if len(workflow_id) > Workflow._meta.get_field("workflow_id").max_length:
        # No workflow has such an id, so nothing can name it; and SQLite refuses a LIKE pattern
        # past 50,000 bytes.
        return found
    # Only a text that mentions the id can reference it: the database narrows, the config decides.
    candidates = visible(scope=scope).filter(yaml_text__contains=workflow_id)
    for workflow in candidates.select_related("project").order_by("workflow_id", "project_id"):
        for node_id, node in (workflow.config.get("nodes") or {}).items():
            if isinstance(node, dict) and node.get("type") == "subworkflow" and node.get("workflow") == workflow_id:
                found.append((workflow, node_id))
    return found


def referrer_rows(referrers: list[tuple[Workflow, str]]) -> list[dict[str, str]]:
    return [{"workflowId": wf.workflow_id, "nodeId": node_id, "source": wf.source} for wf, node_id in referrers]


# --- definitions ---------------------------------------------------------------------------------

def definition_parse(config: dict[str, Any] | str | None, *, with_text: bool = True) -> tuple[str, dict[str, Any]]:
    """(YAML text as it will be stored, parsed form), schema-checked. Text keeps its comments; an
    object becomes block YAML (only when `with_text`: checks that write nothing skip the dump)."""
    if isinstance(config, str):
        text = config if config.endswith("\n") else config + "\n"
        parsed = config_normalize(yaml_load(text))
    elif isinstance(config, dict):
        parsed = config_normalize(copy.deepcopy(config))
        # get_workflow adds `source` to what it returns; taking that object back must just work.
        if parsed.get("source") in (GLOBAL, REPO):
            del parsed["source"]
        text = ""
    else:
        raise InvalidConfig("config must be a workflow object or its YAML text.")
    errors = config_check(parsed)
    if errors:
        raise InvalidConfig(errors)
    return text or (yaml_dump(parsed) if with_text else ""), parsed


def definition_validate(*, scope: Scope, config: dict[str, Any], workflow_id: str | None) -> None:
    """Raise IntegrityFailure when a schema-valid definition breaks a graph rule."""
    errors = analysis.integrity_check(config, workflow_id=workflow_id, lookup=workflow_lookup(scope=scope))
    if errors:
        raise IntegrityFailure(errors)


def _subject(*, scope: Scope, config: dict[str, Any] | str | None, workflow_id: str | None,
             source: str | None) -> tuple[dict[str, Any], str | None]:
    """What validate/lint/audit look at: the given config, or the stored workflow."""
    if (config is None) == (workflow_id is None):
        raise DomainError("Pass exactly one of config or id.", code="invalid_input")
    if config is not None:
        return definition_parse(config, with_text=False)[1], None
    workflow = workflow_find(scope=scope, workflow_id=workflow_id, source=source)
    return workflow.config, workflow.workflow_id


def validation_report(*, scope: Scope, config: dict[str, Any] | str | None = None,
                      workflow_id: str | None = None, source: str | None = None) -> dict[str, Any]:
    try:
        parsed, own_id = _subject(scope=scope, config=config, workflow_id=workflow_id, source=source)
        definition_validate(scope=scope, config=parsed, workflow_id=own_id)
    except (InvalidConfig, IntegrityFailure) as exc:
        return {"valid": False, "code": exc.code, "errors": exc.errors}
    return {"valid": True, "errors": []}


def lint_report(*, scope: Scope, config: dict[str, Any] | str | None = None, workflow_id: str | None = None,
                source: str | None = None) -> dict[str, Any]:
    try:
        parsed, own_id = _subject(scope=scope, config=config, workflow_id=workflow_id, source=source)
    except InvalidConfig as exc:
        return {"errors": exc.errors, "warnings": []}
    errors = analysis.integrity_check(parsed, workflow_id=own_id, lookup=workflow_lookup(scope=scope))
    return {"errors": errors, "warnings": analysis.lint(parsed, models=model_ids())}


def audit_report(*, scope: Scope, config: dict[str, Any] | str | None = None, workflow_id: str | None = None,
                 source: str | None = None) -> dict[str, Any]:
    parsed, own_id = _subject(scope=scope, config=config, workflow_id=workflow_id, source=source)
    lookup = workflow_lookup(scope=scope)
    report = analysis.audit(parsed, pricing=pricing(), lookup=lookup)
    integrity = analysis.integrity_check(parsed, workflow_id=own_id, lookup=lookup)
    report["findings"] = [{"severity": "error", "code": "integrity_error", "message": e} for e in integrity] + \
        report["findings"]
    return report


# --- models --------------------------------------------------------------------------------------

def model_ids() -> set[str]:
    return set(ConfiguredModel.objects.filter(active=True).values_list("model_id", flat=True))


def models_configured() -> dict[str, Any]:
    models = list(ConfiguredModel.objects.filter(active=True))
    default = next((m.model_id for m in models if m.is_default), models[0].model_id if models else None)
    return {
        "available": [m.model_id for m in models],
        "default": default,
        "prices": {m.model_id: {"inputUsdPerMTok": float(m.input_usd_per_mtok),
                                "outputUsdPerMTok": float(m.output_usd_per_mtok)} for m in models},
    }


def pricing() -> analysis.Pricing:
    models = list(ConfiguredModel.objects.filter(active=True))
    default = next((m.model_id for m in models if m.is_default), None)
    return analysis.Pricing(
        prices={m.model_id: (Decimal(m.input_usd_per_mtok), Decimal(m.output_usd_per_mtok)) for m in models},
        default_model=default,
    )


def project_list(*, owner: Any) -> QuerySet[Project]:
    """The owner's projects with their roots and a `workflow_count`."""
    return Project.objects.filter(owner=owner).prefetch_related("roots").annotate(workflow_count=Count("workflows"))


def workflow_revisions(workflow: Workflow) -> QuerySet[WorkflowRevision]:
    """The workflow's history: its own revisions, and those of an earlier workflow with the same id
    in the same store that was deleted (a restore makes a new row)."""
    same_place = Q(workflow__isnull=True, owner=workflow.owner_id, project=workflow.project_id,
                   workflow_key=workflow.workflow_id)
    return WorkflowRevision.objects.filter(Q(workflow=workflow) | same_place)
