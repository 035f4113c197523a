"""Resolving a client's working directory to a project: its git root and a stable project id.

MCP tools receive `cwd`, an absolute path on the user's machine. `cwd_normalize` checks it as a
string only, so a hosted server can vet a path it cannot see. `server_path_resolve` goes further
when the server shares the client's filesystem (local or stdio use): it finds the enclosing git
root and derives a project id from the repository's remote, or from the root folder's name.
"""

from __future__ import annotations

import configparser
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from core.errors import DomainError

PROTECTED_PREFIXES: tuple[str, ...] = (
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/dev", "/proc", "/sys",
    "/System", "/Library", "/private/etc", "/private/var", "/var/lib", "/var/run", "/run",
)

_REMOTE_SECTION = re.compile(r'remote\s+"(?P<name>.*)"')
# scp-like syntax, `[user@]host:path`. Git only reads it so when no slash comes before the colon.
_SCP_URL = re.compile(r"(?:[^@/:]+@)?(?P<host>[^@/:]+):(?P<path>.*)")
_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


class ScopeError(DomainError):
    """The working directory cannot be used as a project: not absolute, protected, missing, or not in a repo."""

    code = "scope_error"
    http_status = 400


@dataclass(frozen=True)
class LocalProject:
    root: str
    project_id: str


def cwd_normalize(cwd: str) -> str:
    """The normalized absolute path, refused when it is not absolute or lies in a protected system area.

    Pure string work: no filesystem access."""
    if not isinstance(cwd, str) or not cwd.strip() or "\x00" in cwd or not cwd.startswith("/"):
        raise ScopeError(f"The working directory {cwd!r} is not an absolute path.", code="NOT_ABSOLUTE")
    # POSIX lets normpath keep exactly two leading slashes; a client path never means that.
    normalized = "/" + posixpath.normpath(cwd).lstrip("/")
    _refuse_protected(normalized, cwd)
    return normalized


def is_within(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root + "/")


def is_protected(path: str) -> bool:
    return any(is_within(path, prefix) for prefix in PROTECTED_PREFIXES)


def _refuse_protected(path: str, given: str) -> None:
    if is_protected(path):
        shown = repr(given) if given == path else f"{given!r} ({path})"
        raise ScopeError(f"The working directory {shown} is inside a protected system directory.",
                         code="PROTECTED_PATH")


def git_root_find(path: Path) -> Path | None:
    """The nearest directory, from `path` upwards, holding a `.git` directory or file."""
    for candidate in (path, *path.parents):
        dot_git = candidate / ".git"
        if os.path.isdir(dot_git) or os.path.isfile(dot_git):
            return candidate
    return None


def git_remote_url(root: Path) -> str | None:
    """The url of remote `origin`, else of the first remote that has one, read from the config file directly."""
    try:
        config_path = _git_config_path(root)
        if config_path is None:
            return None
        parser = configparser.ConfigParser(strict=False, interpolation=None, allow_no_value=True)
        parser.read_string(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, configparser.Error):
        return None
    return _preferred_remote_url(parser)


def _git_config_path(root: Path) -> Path | None:
    dot_git = root / ".git"
    if dot_git.is_dir():
        git_dir = dot_git
    elif dot_git.is_file():
        git_dir = _gitdir_from_file(dot_git, root)
        if git_dir is None:
            return None
    else:
        return None
    # A linked worktree's git dir keeps only per-worktree state; `commondir` points at the shared config.
    commondir_file = git_dir / "commondir"
    if commondir_file.is_file():
        git_dir = git_dir / commondir_file.read_text(encoding="utf-8").strip()
    return git_dir / "config"


def _gitdir_from_file(dot_git: Path, root: Path) -> Path | None:
    for line in dot_git.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "gitdir" and value.strip():
            return root / value.strip()  # joining an absolute path keeps it as is
    return None


def _preferred_remote_url(parser: configparser.ConfigParser) -> str | None:
    urls: dict[str, str] = {}
    for section in parser.sections():
        match = _REMOTE_SECTION.fullmatch(section.strip())
        url = _unquoted(parser.get(section, "url", fallback=None) or "")
        if match and url and match["name"] not in urls:
            urls[match["name"]] = url
    if "origin" in urls:
        return urls["origin"]
    return next(iter(urls.values()), None)


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].strip()
    return value


def project_id_from_remote(url: str) -> str | None:
    """`host/owner/repo` for a network remote, the repository folder's name for a local one; never credentials."""
    url = url.strip()
    if not url:
        return None
    if url.lower().startswith("file://"):
        return _local_repo_name(urlsplit(url).path)
    if _URL_SCHEME.match(url):
        return _project_id_from_url(url)
    scp = _SCP_URL.fullmatch(url)
    # A one-letter "host" is a Windows drive (C:\repo), which git also reads as a local path.
    if scp and len(scp["host"]) > 1:
        return _host_path_id(scp["host"], scp["path"])
    return _local_repo_name(url)


def _project_id_from_url(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        host = parts.hostname  # lowercased, without credentials or port
    except ValueError:
        return None
    if not host:
        return None
    return _host_path_id(host, parts.path)


def _host_path_id(host: str, path: str) -> str | None:
    repo_path = _without_git_suffix(path.strip("/"))
    if not repo_path:
        return None
    return f"{host.lower()}/{repo_path}"


def _local_repo_name(path: str) -> str | None:
    components = [part for part in re.split(r"[/\\]", path) if part]
    # `/srv/app/.git` names the repository `app`, not `.git`.
    if components and components[-1] == ".git":
        components.pop()
    if not components:
        return None
    return _without_git_suffix(components[-1]) or None


def _without_git_suffix(path: str) -> str:
    return path.removesuffix("/").removesuffix(".git").rstrip("/")


def project_id_derive(root: Path) -> str | None:
    remote = git_remote_url(root)
    project_id = project_id_from_remote(remote) if remote else None
    return project_id or root.name or None


def server_path_resolve(cwd: str) -> LocalProject:
    """The git root enclosing `cwd` on this machine, and its project id."""
    normalized = cwd_normalize(cwd)
    # os.path rather than Path: it reports an unreadable path as missing instead of raising.
    if not os.path.exists(normalized):
        raise ScopeError(f"The working directory {normalized!r} does not exist on this server.", code="NOT_FOUND")
    if not os.path.isdir(normalized):
        raise ScopeError(f"The working directory {normalized!r} is not a directory.", code="NOT_DIR")
    real = os.path.realpath(normalized)
    _refuse_protected(real, normalized)
    git_root = git_root_find(Path(real))
    if git_root is None:
        raise ScopeError(f"The working directory {normalized!r} is not inside a git repository.",
                         code="NOT_GIT_REPO")
    root = Path(os.path.realpath(git_root))
    project_id = project_id_derive(root)
    if project_id is None:
        raise ScopeError(f"No project id can be derived for the git repository at {str(root)!r}: "
                         "it has no remote and its folder has no name.", code="PROJECT_ID_UNAVAILABLE")
    return LocalProject(root=str(root), project_id=project_id)
