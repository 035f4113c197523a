"""Syncing one workflow store (a user's global store, or one of their projects) with a folder laid
out as a repository keeps it: `<id>.yaml` per workflow, and its bundled files under `<id>/`.

A pull writes the folder into the store, all or nothing; a push writes the store into the folder.
Neither ever deletes a workflow or a file. The sync_workflows command reports what these return.
An archive (workflows_archive) holds stores laid out the same way, for download."""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from core.caller import Caller
from core.errors import DomainError, InvalidInput, NotFound
from workflows import repofiles
from workflows.errors import DefinitionInvalid
from workflows.models import Project, Workflow, WorkflowRevision
from workflows.scoping import Scope
from workflows.selectors import GLOBAL, REPO, definition_parse
from workflows.services import Asset, workflow_forget, workflow_save

SUFFIXES = repofiles.SUFFIXES
FILE_GRACE = timedelta(seconds=10)


@dataclass
class Incoming:
    """One workflow file of the folder, read and schema-checked."""

    workflow_id: str
    filename: str
    text: str = ""
    # None when the folder has no `<id>/`: the store's bundled files are then left as they are.
    assets: list[Asset] | None = None
    references: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def _stored_text(text: str) -> str:
    """The text as workflow_save stores it, so an untouched file compares equal."""
    return text if text.endswith("\n") else text + "\n"


def _subworkflows(config: dict[str, Any]) -> set[str]:
    nodes = config.get("nodes") or {}
    return {node["workflow"] for node in nodes.values()
            if isinstance(node, dict) and node.get("type") == "subworkflow" and isinstance(node.get("workflow"), str)}


def _bundle_read(folder: Path, item: Incoming) -> None:
    """The files under `<id>/`, as assets with paths relative to it. Symbolic links are not followed."""
    assets = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = Path(root, name)
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink() or not path.is_file():
                item.errors.append(f"{item.workflow_id}/{relative}: not a regular file")
                continue
            try:
                content = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                item.errors.append(f"{item.workflow_id}/{relative}: cannot be read as UTF-8 text ({exc})")
                continue
            assets.append(Asset(relative, content, executable=os.access(path, os.X_OK)))
    item.assets = assets


def read_folder(directory: Path) -> dict[str, Incoming]:
    """Every `<id>.yaml` / `<id>.yml` of the folder, by id."""
    found: dict[str, Incoming] = {}
    for path in sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES and p.is_file()):
        workflow_id = path.stem
        if workflow_id in found:
            found[workflow_id].errors.append(f"both {found[workflow_id].filename} and {path.name} exist; keep one")
            continue
        item = found[workflow_id] = Incoming(workflow_id=workflow_id, filename=path.name)
        try:
            item.text = _stored_text(path.read_text(encoding="utf-8"))
            item.references = _subworkflows(definition_parse(item.text)[1])
        except (OSError, UnicodeDecodeError) as exc:
            item.errors.append(f"cannot be read as UTF-8 text ({exc})")
        except DefinitionInvalid as exc:
            item.errors.extend(exc.errors)
        if (directory / workflow_id).is_dir():
            _bundle_read(directory / workflow_id, item)
    return found


def import_order(items: dict[str, Incoming]) -> list[Incoming]:
    """Referenced workflows before the ones that reference them, so each save's integrity check
    finds the subworkflows imported earlier in the same run. A cycle among the files can have no
    such order (and the integrity rules forbid it): each file in it is marked invalid, naming it."""
    ordered: list[Incoming] = []
    done: set[str] = set()

    def references(workflow_id: str) -> list[str]:
        return sorted(items[workflow_id].references & items.keys())

    for first in sorted(items):
        if first in done:
            continue
        # Depth first, without recursion: a long chain of files must not hit the recursion limit.
        path, pending = [first], [references(first)]
        while path:
            if not pending[-1]:
                done.add(path[-1])
                ordered.append(items[path.pop()])
                pending.pop()
                continue
            following = pending[-1].pop(0)
            if following in path:
                cycle = [*path[path.index(following):], following]
                for workflow_id in cycle[:-1]:
                    items[workflow_id].errors.append(
                        f"subworkflows form a cycle: {' -> '.join(cycle)} (a workflow may not include itself, "
                        "directly or through others)")
            elif following not in done:
                path.append(following)
                pending.append(references(following))
    return ordered


def _same_bundle(workflow: Workflow, assets: list[Asset] | None) -> bool:
    if assets is None:
        return True
    stored = {(a.path, a.content, a.executable) for a in workflow.assets.all()}
    return stored == {(a.path, a.content, a.executable) for a in assets}


@dataclass
class PullReport:
    store: str
    # Workflow id -> created, updated, unchanged or invalid.
    outcomes: dict[str, str] = field(default_factory=dict)
    files: dict[str, Incoming] = field(default_factory=dict)
    only_in_store: list[str] = field(default_factory=list)
    # False when nothing stayed written (a dry run, or an invalid file): created and updated then
    # say what the pull would have done.
    written: bool = True

    @property
    def invalid(self) -> int:
        return sum(1 for outcome in self.outcomes.values() if outcome == "invalid")


@dataclass
class PushReport:
    store: str
    # (outcome: written, unchanged or skipped; workflow id; why it was skipped)
    lines: list[tuple[str, str, str]] = field(default_factory=list)


def _store_name(owner: User, project: Project | None) -> str:
    return f"{owner.get_username()}'s " + (f"project {project.project_id}" if project else "global store")


@transaction.atomic
def workflows_pull(*, caller: Caller, owner: User, project_id: str | None, directory: Path,
                   dry_run: bool) -> PullReport:
    """Write the folder's workflows into the store, referenced ones first. If any file is invalid
    (or on a dry run) nothing stays written: the report says what would have happened."""
    if not directory.is_dir():
        raise InvalidInput(f"{directory} is not a folder.")
    items = read_folder(directory)
    project = Project.objects.get_or_create(owner=owner, project_id=project_id)[0] if project_id else None
    scope = Scope(owner=owner, project=project)
    stored = {wf.workflow_id: wf for wf in Workflow.objects.filter(owner=owner, project=project)
              .prefetch_related("assets")}
    report = PullReport(store=_store_name(owner, project), files=items,
                        only_in_store=sorted(stored.keys() - items.keys()))
    for item in import_order(items):
        report.outcomes[item.workflow_id] = _pull_one(caller, scope, item, stored.get(item.workflow_id))
    if report.invalid or dry_run:
        # Every workflow saved before the invalid one goes too (a created project as well).
        transaction.set_rollback(True)
        report.written = False
    return report


def repo_folder_read(*, caller: Caller, scope: Scope) -> None:
    """Bring the index of a project's repo workflows to what its workflow folder holds, where this
    server sees the repository: changed and new files are read in (referenced ones first), and a
    workflow whose file is gone leaves the index. A file that does not validate is left out, and the
    index keeps what it had for it. A project whose workflows predate its folder gets the folder
    written first, so the repository holds every one of them from then on."""
    folder = repofiles.folder_of(scope)
    if folder is None:
        return
    # The index is written without the scope's root: what comes from the folder is not written back.
    index = Scope(owner=scope.owner, project=scope.project)
    stored = {wf.workflow_id: wf for wf in Workflow.objects.filter(owner=scope.owner, project=scope.project)
              .prefetch_related("assets")}
    if not folder.is_dir():
        for workflow in stored.values():
            _push_one(folder, workflow, dry_run=False)
        return
    items = read_folder(folder)
    for item in import_order(items):
        existing = stored.get(item.workflow_id)
        if item.errors or (existing is not None and existing.yaml_text == item.text
                           and _same_bundle(existing, item.assets)):
            continue
        try:
            with transaction.atomic():
                workflow_save(caller=caller, scope=index, workflow_id=item.workflow_id, source=REPO,
                              config=item.text, overwrite=True, assets=item.assets,
                              action=WorkflowRevision.Action.IMPORT)
        except DomainError:
            continue
    # A write that just committed writes its file right after: a row that new is not taken for gone.
    settled = timezone.now() - FILE_GRACE
    for workflow_id in sorted(stored.keys() - items.keys()):
        if stored[workflow_id].modified < settled:
            workflow_forget(caller=caller, workflow=stored[workflow_id])


def _pull_one(caller: Caller, scope: Scope, item: Incoming, existing: Workflow | None) -> str:
    if item.errors:
        return "invalid"
    if existing is not None and existing.yaml_text == item.text and _same_bundle(existing, item.assets):
        return "unchanged"
    try:
        with transaction.atomic():
            workflow_save(caller=caller, scope=scope, workflow_id=item.workflow_id,
                          source=REPO if scope.project else GLOBAL, config=item.text, overwrite=True,
                          assets=item.assets, action=WorkflowRevision.Action.IMPORT)
    except DefinitionInvalid as exc:
        item.errors.extend(exc.errors)
        return "invalid"
    except DomainError as exc:
        item.errors.append(f"{exc.message} ({exc.code})")
        return "invalid"
    return "created" if existing is None else "updated"


def workflows_push(*, owner: User, project_id: str | None, directory: Path, dry_run: bool) -> PushReport:
    """Write each workflow of the store, and its bundled files, into the folder where they differ."""
    project = None
    if project_id:
        project = Project.objects.filter(owner=owner, project_id=project_id).first()
        if project is None:
            raise NotFound(f"{owner.get_username()} has no project {project_id!r}: nothing to push.")
    if directory.exists() and not directory.is_dir():
        raise InvalidInput(f"{directory} is not a folder.")
    report = PushReport(store=_store_name(owner, project))
    for workflow in Workflow.objects.filter(owner=owner, project=project).prefetch_related("assets"):
        outcome, note = _push_one(directory, workflow, dry_run=dry_run)
        report.lines.append((outcome, workflow.workflow_id, note))
    return report


def _push_one(directory: Path, workflow: Workflow, *, dry_run: bool) -> tuple[str, str]:
    """Write the workflow's file and bundled files where they differ: (written, unchanged or skipped;
    why it was skipped). A folder that spells the file .yml keeps it, rather than gaining a second
    one pull would refuse."""
    files = repofiles.workflow_files(directory, workflow)
    if files is None:
        return "skipped", f"  (a bundled file would land outside {workflow.workflow_id}/)"
    changed = [f for f in files if repofiles.file_differs(*f)]
    if not dry_run:
        for path, content, executable in changed:
            repofiles.file_write(path, content, executable)
    return ("written" if changed else "unchanged"), ""


def workflows_archive(*, workflows: Iterable[Workflow]) -> bytes:
    """A zip of `workflows`, each store a folder as sync_workflows reads one: `<owner>/global/` or
    `<owner>/projects/<project id>/`, holding `<id>.yaml` as written and the bundled files under
    `<id>/`. A bundled file whose path would leave `<id>/` is left out, as a push leaves it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for workflow in workflows:
            store = ("projects", workflow.project.project_id) if workflow.project else (GLOBAL,)
            folder = Path(workflow.owner.get_username(), *store)
            files = [(folder / f"{workflow.workflow_id}.yaml", workflow.yaml_text, False)]
            files += [(target, asset.content, asset.executable) for asset in workflow.assets.all()
                      if (target := repofiles.bundle_path(folder, workflow.workflow_id, asset.path)) is not None]
            for path, content, executable in files:
                entry = zipfile.ZipInfo(path.as_posix(), date_time=workflow.modified.timetuple()[:6])
                entry.external_attr = (0o755 if executable else 0o644) << 16
                archive.writestr(entry, content, compress_type=zipfile.ZIP_DEFLATED)
    return buffer.getvalue()
