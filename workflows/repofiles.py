"""A project's workflows as files in its repository, where the server can see the repository.

On a local server (or over stdio) a `cwd` resolves to a git root on the server's own disk, and
the project's repo-source workflows are the YAML files of its workflow folder,
`<root>/.atrium/workflows/<id>.yaml`, with a workflow's bundled files under `<id>/`: the layout
sync_workflows reads and writes, so they can be committed with the code they belong to. The
database keeps an index of them (for lookups, references, runs and revisions): every call reads the
folder into it first, and every write to a repo workflow writes its file once the write commits.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePosixPath

from django.db import transaction

from workflows.models import Workflow
from workflows.scoping import Scope

FOLDER = Path(".atrium") / "workflows"
SUFFIXES = (".yaml", ".yml")


def folder_of(scope: Scope) -> Path | None:
    """The project's workflow folder on this server's disk, or None where the server cannot see it."""
    if scope.project is None or not scope.root:
        return None
    return Path(scope.root) / FOLDER


def file_of(folder: Path, workflow_id: str) -> Path:
    """`<id>.yaml`, or `<id>.yml` where the folder already spells it so."""
    yml = folder / f"{workflow_id}.yml"
    return yml if yml.is_file() and not (folder / f"{workflow_id}.yaml").exists() else folder / f"{workflow_id}.yaml"


def file_differs(path: Path, content: str, executable: bool) -> bool:
    try:
        return path.read_text(encoding="utf-8") != content or os.access(path, os.X_OK) != executable
    except (OSError, UnicodeDecodeError):
        return True  # missing, unreadable or not text: written over


def file_write(path: Path, content: str, executable: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    mode = path.stat().st_mode
    path.chmod(mode | 0o111 if executable else mode & ~0o111)


def bundle_path(folder: Path, workflow_id: str, asset_path: str) -> Path | None:
    """Where a bundled file goes, or None when its path would leave `<id>/`."""
    relative = PurePosixPath(asset_path)
    if relative.is_absolute() or ".." in relative.parts:
        return None
    return folder / workflow_id / relative


def workflow_files(folder: Path, workflow: Workflow) -> list[tuple[Path, str, bool]] | None:
    """(path, content, executable) of the workflow's file and its bundled files; None when a bundled
    file's path would land outside the workflow's folder."""
    files = [(file_of(folder, workflow.workflow_id), workflow.yaml_text, False)]
    for asset in workflow.assets.all():
        target = bundle_path(folder, workflow.workflow_id, asset.path)
        if target is None:
            return None
        files.append((target, asset.content, asset.executable))
    return files


def write_on_commit(scope: Scope, workflow: Workflow) -> None:
    """Write a repo workflow's file (and bundled files) into the repository once this write commits;
    nothing is written when it rolls back."""
    folder = folder_of(scope)
    if folder is None or workflow.project_id is None:
        return
    files = workflow_files(folder, workflow)

    def write() -> None:
        for path, content, executable in files or []:
            if file_differs(path, content, executable):
                file_write(path, content, executable)

    transaction.on_commit(write)


def remove_on_commit(scope: Scope, workflow_id: str) -> None:
    """Take a repo workflow's file and bundled files out of the repository once this write commits."""
    folder = folder_of(scope)
    if folder is None:
        return

    def remove() -> None:
        for suffix in SUFFIXES:
            (folder / f"{workflow_id}{suffix}").unlink(missing_ok=True)
        if (folder / workflow_id).is_dir() and not (folder / workflow_id).is_symlink():
            shutil.rmtree(folder / workflow_id)

    transaction.on_commit(remove)
