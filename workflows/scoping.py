"""Which store a workflow call applies to: the caller's global store, or one of their projects.

Every project-scoped tool takes exactly one of `cwd` or `global: true`. A `cwd` resolves first
through the caller's registered project roots (the only way on a shared server, which cannot see
the user's disk), then, where the server may read its own disk (local use, stdio), to the
enclosing git root, registering that root on the way. There the project's workflows are the files
of the repository's workflow folder (workflows.repofiles).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from django.conf import settings
from django.db.models.functions import Length

from accounts.models import User
from core.caller import Caller
from workflows.models import Project, ProjectRoot
from workflows.paths import ScopeError, cwd_normalize, server_path_resolve

# The longest `cwd` a tool or endpoint takes: PATH_MAX on Linux, and short enough for a request line.
MAX_CWD_CHARS = 4096


@dataclass(frozen=True)
class Scope:
    owner: User
    project: Project | None
    # The project's root on this server's disk, when the server can see it (local use).
    root: str | None = None
    cwd: str | None = None

    @property
    def project_key(self) -> str:
        """The project's id, or "" for the global namespace."""
        return self.project.project_id if self.project is not None else ""


def server_paths_allowed(caller: Caller) -> bool:
    """A stdio process runs as the user on their own machine, so it may always read the disk."""
    return settings.ATRIUM_SERVER_PATHS or caller.token_kind == "stdio"


def _ancestors(path: str) -> list[str]:
    found = [path]
    while path != "/":
        path = posixpath.dirname(path)
        found.append(path)
    return found


def registered_root(*, owner: User, path: str) -> ProjectRoot | None:
    """The caller's registered root that holds `path` most closely."""
    return (ProjectRoot.objects.select_related("project").filter(owner=owner, path__in=_ancestors(path))
            .order_by(Length("path").desc()).first())


def scope_resolve(*, caller: Caller, cwd: str | None, global_: bool | None) -> Scope:
    """The store a call applies to. Where this server sees the project's repository, the project's
    workflows are the files of its workflow folder: they are read in before the call goes on."""
    try:
        scope = _resolve(caller, cwd, global_)
    except ScopeError as exc:
        # Documented as {error, code, cwd?}.
        exc.extra = {"cwd": cwd} if cwd is not None else {}
        raise
    if scope.root is not None:
        from workflows.sync import repo_folder_read  # sync builds on this module

        repo_folder_read(caller=caller, scope=scope)
    return scope


def _resolve(caller: Caller, cwd: str | None, global_: bool | None) -> Scope:
    if cwd is not None and global_:
        raise ScopeError("Pass either cwd or global: true, not both.", code="CWD_GLOBAL_CONFLICT")
    if global_:
        return Scope(owner=caller.user, project=None)
    if cwd is None:
        raise ScopeError("Pass cwd (an absolute path inside your project) or global: true. The server never "
                         "guesses a project.", code="CWD_REQUIRED")
    path = cwd_normalize(cwd)
    root = registered_root(owner=caller.user, path=path)
    if root is not None:
        local = root.path if server_paths_allowed(caller) and posixpath.isdir(root.path) else None
        return Scope(owner=caller.user, project=root.project, root=local, cwd=path)
    if not server_paths_allowed(caller):
        raise ScopeError(
            f"No project of yours has a root that contains {path}, and this server cannot see your disk. "
            "Register the project's root once: POST /api/projects/ with {\"path\": \"<repository root>\"}, "
            "in the admin, or `python manage.py register_project PATH --user YOU`.", code="NOT_FOUND")
    local_project = server_path_resolve(path)
    project, _ = Project.objects.get_or_create(owner=caller.user, project_id=local_project.project_id)
    # The real path of the root may already be registered (the cwd came through a symlink).
    known, _ = ProjectRoot.objects.get_or_create(owner=caller.user, path=local_project.root,
                                                 defaults={"project": project})
    return Scope(owner=caller.user, project=known.project, root=local_project.root, cwd=path)
