"""Writes for workflows and projects. The MCP tools, the REST API, the admin and the commands all
call these. Every write validates before it touches a row, takes a revision, and records an audit
event, in one transaction."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError, Forbidden
from core.versions import row_version, version_check
from workflows import repofiles, yamltext
from workflows.definition import ID_RE, MAX_ID_LENGTH
from workflows.errors import WorkflowConflict, WorkflowReferenced
from workflows.models import Project, ProjectRoot, Workflow, WorkflowAsset, WorkflowRevision
from workflows.paths import cwd_normalize, project_id_derive
from workflows.playbooks import playbook_follow_workflow
from workflows.scoping import Scope, server_paths_allowed
from workflows.selectors import (
    GLOBAL,
    REPO,
    default_source,
    definition_parse,
    definition_validate,
    no_repo_source,
    path_of,
    referrer_rows,
    resolves_to,
    workflow_find,
    workflow_referrers,
)


@dataclass(frozen=True)
class Asset:
    path: str
    content: str
    executable: bool = False


@dataclass
class RenameResult:
    workflow: Workflow
    rewritten: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def workflow_template(workflow_id: str) -> str:
    """The minimal valid workflow create_workflow writes when given no config."""
    return (
        f"name: {workflow_id}\n"
        "description: A new workflow. get_workflow_schema lists every node type.\n"
        "start: work\n"
        "nodes:\n"
        "  work:\n"
        "    type: ai_agent\n"
        "    label: Do the work\n"
        "    prompt: \"Describe the task here.\"\n"
        "    transitions: {done: done}\n"
        "  done: {type: end}\n"
    )


def _check_id(workflow_id: str, what: str = "id") -> None:
    if not isinstance(workflow_id, str) or not ID_RE.match(workflow_id) or len(workflow_id) > MAX_ID_LENGTH:
        raise DomainError(f"{what} {workflow_id!r} is not valid: use letters, digits, '_' and '-' "
                          f"(at most {MAX_ID_LENGTH}).", code="invalid_id")


def _capabilities_check(caller: Caller, config: dict[str, Any]) -> None:
    from integrations.selectors import capabilities_allowed

    nodes = config.get("nodes") or {}
    capabilities_allowed(caller=caller, names=[n["capability"] for n in nodes.values()
                                               if isinstance(n, dict) and isinstance(n.get("capability"), str)])


def _check_owner(caller: Caller, workflow: Workflow) -> None:
    """Users change their own workflows; staff curate anyone's, but only through admin."""
    if workflow.owner_id != caller.user.pk and not (caller.via == "admin" and caller.user.is_staff):
        raise Forbidden("That workflow is not yours.")


def _project_for(scope: Scope, source: str) -> Project | None:
    if source == REPO:
        if scope.project is None:
            raise no_repo_source()
        return scope.project
    return None


def _revision(*, caller: Caller, workflow: Workflow, action: str) -> None:
    WorkflowRevision.objects.create(
        workflow=workflow, owner=workflow.owner, project=workflow.project, workflow_key=workflow.workflow_id,
        action=action, yaml_text=workflow.yaml_text, credential=caller.credential[:200],
        assets=[{"path": a.path, "content": a.content, "executable": a.executable} for a in workflow.assets.all()],
    )
    audit_record(caller=caller, action=f"workflow.{action}",
                 target=f"{workflow.source} workflow '{workflow.workflow_id}'",
                 detail={"project": workflow.project.project_id if workflow.project_id else None})


def _fill(workflow: Workflow, text: str, config: dict[str, Any]) -> None:
    workflow.yaml_text = text
    workflow.config = config
    workflow.name = str(config.get("name", workflow.workflow_id))[:200]
    workflow.description = str(config.get("description") or "")
    workflow.modified = timezone.now()


def _existing(*, scope: Scope, project: Project | None, workflow_id: str) -> Workflow | None:
    return (Workflow.objects.select_for_update().filter(owner=scope.owner, project=project, workflow_id=workflow_id)
            .first())


def _assets_replace(workflow: Workflow, assets: list[Asset] | None) -> None:
    if assets is None:
        return
    workflow.assets.all().delete()
    WorkflowAsset.objects.bulk_create(
        WorkflowAsset(workflow=workflow, path=a.path, content=a.content, executable=a.executable) for a in assets
    )


@transaction.atomic
def workflow_save(*, caller: Caller, scope: Scope, workflow_id: str, source: str | None,
                  config: dict[str, Any] | str | None, overwrite: bool, assets: list[Asset] | None = None,
                  action: str = WorkflowRevision.Action.CREATE) -> Workflow:
    """Create a workflow, or replace one when `overwrite` is true. Schema and integrity are checked first."""
    _check_id(workflow_id)
    source = default_source(scope=scope, source=source)
    project = _project_for(scope, source)
    text, parsed = definition_parse(config if config is not None else workflow_template(workflow_id))
    definition_validate(scope=scope, config=parsed, workflow_id=workflow_id)
    _capabilities_check(caller, parsed)
    workflow = _existing(scope=scope, project=project, workflow_id=workflow_id)
    if workflow is not None and not overwrite:
        raise WorkflowConflict(f"A workflow {workflow_id!r} already exists in the {source} source; pass "
                               "overwrite: true to replace it, or pick another id.")
    if workflow is None:
        workflow = Workflow(owner=scope.owner, project=project, workflow_id=workflow_id, created=timezone.now())
    else:
        action = WorkflowRevision.Action.UPDATE
    _fill(workflow, text, parsed)
    try:
        with transaction.atomic():
            workflow.save()
    except IntegrityError as exc:
        # Another request created the same id between our check and this insert.
        raise WorkflowConflict(f"A workflow {workflow_id!r} was just created in the {source} source.") from exc
    _assets_replace(workflow, assets)
    _revision(caller=caller, workflow=workflow, action=action)
    repofiles.write_on_commit(scope, workflow)
    playbook_follow_workflow(workflow=workflow)
    return workflow


@transaction.atomic
def workflow_update(*, caller: Caller, scope: Scope, workflow_id: str, source: str | None,
                    config: dict[str, Any] | str, if_match: Collection[str] | None = None) -> Workflow:
    """Replace a workflow's definition. With `if_match` (the versions the caller's copy may be at),
    a workflow changed since it was read is refused."""
    workflow = workflow_find(scope=scope, workflow_id=workflow_id, source=source)
    _check_owner(caller, workflow)
    text, parsed = definition_parse(config)
    definition_validate(scope=scope, config=parsed, workflow_id=workflow_id)
    _capabilities_check(caller, parsed)
    workflow = Workflow.objects.select_for_update().get(pk=workflow.pk)
    version_check(current=row_version(workflow.pk, workflow.modified), accepted=if_match,
                  what=f"workflow {workflow_id!r}")
    _fill(workflow, text, parsed)
    workflow.save()
    _revision(caller=caller, workflow=workflow, action=WorkflowRevision.Action.UPDATE)
    repofiles.write_on_commit(scope, workflow)
    playbook_follow_workflow(workflow=workflow)
    return workflow


def _breaking_referrers(scope: Scope, workflow: Workflow) -> list[tuple[Workflow, str]]:
    """Subworkflow nodes that resolve to `workflow` (so a delete or rename would leave them dangling)."""
    shadow_ids = set(Workflow.objects.filter(owner=scope.owner, project__isnull=False)
                     .values_list("project_id", "workflow_id"))
    return [
        (referrer, node_id) for referrer, node_id in workflow_referrers(scope=scope, workflow_id=workflow.workflow_id)
        if referrer.pk != workflow.pk and resolves_to(
            referrer=referrer, target=workflow,
            shadow_ids={wid for pid, wid in shadow_ids if pid == referrer.project_id})
    ]


@transaction.atomic
def workflow_delete(*, caller: Caller, scope: Scope, workflow_id: str, source: str | None, confirm: object,
                    force: bool) -> Workflow:
    """Delete after a snapshot; refused while a subworkflow node still resolves to it, unless forced."""
    if confirm is not True:
        raise DomainError("Deleting a workflow needs confirm: true.", code="confirm_required")
    workflow = workflow_find(scope=scope, workflow_id=workflow_id, source=source)
    _check_owner(caller, workflow)
    referrers = _breaking_referrers(scope, workflow)
    if referrers and not force:
        raise WorkflowReferenced(
            f"{workflow_id!r} is used as a subworkflow by {len(referrers)} node(s); deleting it would break them. "
            "Pass force: true to delete anyway.", extra={"referencedBy": referrer_rows(referrers)})
    _revision(caller=caller, workflow=workflow, action=WorkflowRevision.Action.DELETE)
    if workflow.project_id is not None:
        repofiles.remove_on_commit(scope, workflow.workflow_id)
    workflow.delete()
    workflow.pk = None
    return workflow


@transaction.atomic
def workflow_forget(*, caller: Caller, workflow: Workflow) -> None:
    """Take a repo workflow whose file left the repository out of the store, after a snapshot. No
    reference check: the repository no longer has it, whatever still names it."""
    _revision(caller=caller, workflow=workflow, action=WorkflowRevision.Action.DELETE)
    workflow.delete()


@transaction.atomic
def workflow_move(*, caller: Caller, scope: Scope, workflow_id: str, to: str) -> tuple[Workflow, str]:
    """Move between the global store and the project; returns the workflow and where it came from."""
    target_project = _project_for(scope, to)
    origin = GLOBAL if to == REPO else REPO
    if origin == REPO and scope.project is None:
        raise no_repo_source()
    workflow = workflow_find(scope=scope, workflow_id=workflow_id, source=origin)
    _check_owner(caller, workflow)
    if _existing(scope=scope, project=target_project, workflow_id=workflow_id) is not None:
        raise WorkflowConflict(f"The {to} source already has a workflow {workflow_id!r}; rename one first.")
    workflow.project = target_project
    workflow.modified = timezone.now()
    workflow.save()
    _revision(caller=caller, workflow=workflow, action=WorkflowRevision.Action.MOVE)
    if origin == REPO:
        repofiles.remove_on_commit(scope, workflow_id)
    else:
        repofiles.write_on_commit(scope, workflow)
    return workflow, origin


@transaction.atomic
def workflow_duplicate(*, caller: Caller, scope: Scope, from_id: str, from_source: str | None, to_id: str,
                       to_source: str, overwrite: bool) -> Workflow:
    original = workflow_find(scope=scope, workflow_id=from_id, source=from_source)
    _check_id(to_id, "to_id")
    text = yamltext.yaml_set_name(original.yaml_text, to_id)
    assets = [Asset(a.path, a.content, a.executable) for a in original.assets.all()]
    return workflow_save(caller=caller, scope=scope, workflow_id=to_id, source=to_source, config=text,
                         overwrite=overwrite, assets=assets)


class RenameRolledBack(DomainError):
    code = "io_error"


def workflow_rename(*, caller: Caller, scope: Scope, workflow_id: str, new_id: str, source: str | None,
                    rewrite_references: bool) -> RenameResult:
    """Rename the workflow and set its name to the new id; by default every subworkflow node that
    resolves to it is pointed at the new id. All of it happens, or (on any failure) none of it."""
    _check_id(new_id, "new_id")
    result = RenameResult(workflow=workflow_find(scope=scope, workflow_id=workflow_id, source=source))
    try:
        with transaction.atomic():
            _rename(caller, scope, result, new_id, rewrite_references)
    except RenameRolledBack as exc:
        exc.extra = {"id": workflow_id, "source": result.workflow.source, "path": path_of(result.workflow, scope),
                     "rewritten": result.rewritten, "failed": result.failed, "rolledBack": True}
        raise
    return result


def _rename(caller: Caller, scope: Scope, result: RenameResult, new_id: str, rewrite_references: bool) -> None:
    workflow = Workflow.objects.select_for_update(of=("self",)).select_related("project").get(pk=result.workflow.pk)
    _check_owner(caller, workflow)
    old_id = workflow.workflow_id
    if new_id == old_id:
        raise DomainError("new_id is the workflow's current id.", code="invalid_id")
    if _existing(scope=scope, project=workflow.project, workflow_id=new_id) is not None:
        raise WorkflowConflict(f"The {workflow.source} source already has a workflow {new_id!r}.")
    referrers = _breaking_referrers(scope, workflow) if rewrite_references else []
    text = yamltext.yaml_set_name(workflow.yaml_text, new_id)
    workflow.workflow_id = new_id
    _fill(workflow, text, definition_parse(text)[1])
    workflow.save()
    result.workflow = workflow
    _revision(caller=caller, workflow=workflow, action=WorkflowRevision.Action.RENAME)
    if workflow.project_id is not None:
        repofiles.remove_on_commit(scope, old_id)
        repofiles.write_on_commit(scope, workflow)
    for referrer in dict.fromkeys(wf for wf, _ in referrers):
        label = f"{referrer.source}:{referrer.workflow_id}"
        try:
            _point_at(caller, scope, referrer, old_id, new_id)
        except Exception as exc:
            result.failed.append(label)
            raise RenameRolledBack(
                f"Rewriting the reference in {label} failed ({exc}); the rename and every rewrite were rolled back."
            ) from exc
        result.rewritten.append(label)


def _point_at(caller: Caller, scope: Scope, referrer: Workflow, old_id: str, new_id: str) -> None:
    text, changed = yamltext.yaml_rewrite_subworkflow(referrer.yaml_text, old_id, new_id)
    if not changed:
        return
    locked = Workflow.objects.select_for_update(of=("self",)).select_related("project").get(pk=referrer.pk)
    _fill(locked, text, definition_parse(text)[1])
    locked.save()
    _revision(caller=caller, workflow=locked, action=WorkflowRevision.Action.REFERENCE)
    repofiles.write_on_commit(scope, locked)


@transaction.atomic
def workflow_restore(*, caller: Caller, revision: WorkflowRevision) -> Workflow:
    """Put a revision's YAML (and bundled files) back: into the workflow it belongs to, or, for a
    deleted one, into a new workflow where it was."""
    scope = Scope(owner=revision.owner, project=revision.project)
    source = REPO if revision.project_id else GLOBAL
    assets = [Asset(a["path"], a["content"], a.get("executable", False)) for a in revision.assets]
    workflow = revision.workflow
    if workflow is not None:
        _check_owner(caller, workflow)
        text, parsed = definition_parse(revision.yaml_text)
        # The revision may name a subworkflow that has gone since: refuse rather than store a broken graph.
        definition_validate(scope=Scope(owner=workflow.owner, project=workflow.project), config=parsed,
                            workflow_id=workflow.workflow_id)
        _capabilities_check(caller, parsed)
        workflow = Workflow.objects.select_for_update().get(pk=workflow.pk)
        _fill(workflow, text, parsed)
        workflow.save()
        _assets_replace(workflow, assets)
        _revision(caller=caller, workflow=workflow, action=WorkflowRevision.Action.RESTORE)
        playbook_follow_workflow(workflow=workflow)
        return workflow
    return workflow_save(caller=caller, scope=scope, workflow_id=revision.workflow_key, source=source,
                         config=revision.yaml_text, overwrite=False, assets=assets,
                         action=WorkflowRevision.Action.RESTORE)


# --- projects ------------------------------------------------------------------------------------

@transaction.atomic
def project_register(*, caller: Caller, path: str, project_id: str | None = None) -> Project:
    """Register `path` (a repository root on the user's machine) as a root of a project: the one named
    by `project_id`, else the one derived from the path (its git remote when this server can read it,
    else the folder's name)."""
    root = cwd_normalize(path)
    if not project_id and server_paths_allowed(caller):
        project_id = project_id_derive(Path(root)) if Path(root).is_dir() else None
    project_id = (project_id or root.rstrip("/").rsplit("/", 1)[-1]).strip()
    if not project_id or len(project_id) > 255:
        raise DomainError("Give the project an id (project_id): it could not be derived from the path.",
                          code="PROJECT_ID_UNAVAILABLE")
    project, created = Project.objects.get_or_create(owner=caller.user, project_id=project_id)
    existing = ProjectRoot.objects.filter(owner=caller.user, path=root).select_related("project").first()
    if existing is not None and existing.project_id != project.pk:
        raise WorkflowConflict(f"{root} is already a root of your project {existing.project.project_id!r}.")
    if existing is None:
        ProjectRoot.objects.create(owner=caller.user, project=project, path=root)
        audit_record(caller=caller, action="project.register", target=f"project '{project_id}'",
                     detail={"root": root, "created": created})
    return project

