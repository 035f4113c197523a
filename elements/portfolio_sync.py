"""GitHub portfolio sync: a user's elements in a GitHub repository, in DollhouseMCP's portfolio layout.

The repository holds exactly what export_portfolio writes (elements.portfolio: personas/<name>.md,
memories/<date>/<name>.yaml...) and is read back as import_portfolio reads a folder. Every sync
locks the user's PortfolioRemote row first, so two syncs of one user run one after the other.

Sync is by element. For each element the last sync recorded a base (PortfolioSyncBase): the blob
id of the remote file and of the file rendered from the local element then. A side whose current
id differs from its base has changed since. A change on one side is carried to the other; a change
on both sides (to different content) is a conflict, reported and left alone unless `force`, which
lets the side the sync comes from win. Modes: additive (the default) adds and updates, never
deletes; mirror also deletes on the other side what the source side removed since the last sync;
backup is additive in which the source side wins every conflict, as with force.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import PurePosixPath
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.github import GitHubUnavailable, github_token_for
from accounts.models import AuditEvent, GitHubAuth, User
from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError, InvalidInput, NotFound
from elements import portfolio_git
from elements.models import Element, PortfolioRemote, PortfolioSyncBase
from elements.packages import element_package
from elements.portfolio import package_from_markdown, package_from_memory_yaml, package_path, text_from_package
from elements.selectors import memory_entries
from elements.services import element_delete, element_import
from elements.types import ElementType

log = logging.getLogger(__name__)

DEFAULT_REPOSITORY = "dollhouse-portfolio"
MAX_DESCRIPTION = 350
# GitHub's rule for repository names: letters, digits, '-', '_' and '.', at most 100, not '.' or '..'.
REPOSITORY_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
DIRECTIONS = ("push", "pull")
MODES = ("additive", "mirror", "backup")
MAX_LISTED_IN_MESSAGE = 20
MAX_DIFF_LINES = 400
LOST_PUSH_SECONDS = 600

Key = tuple[str, str]  # (element_type, name)


class PortfolioNotInitialized(NotFound):
    code = "portfolio_not_initialized"


# --- the GitHub side ---------------------------------------------------------------------------


def _token(user: User) -> str:
    token = github_token_for(user)
    if not token:
        raise InvalidInput("You are not signed in to GitHub. Call setup_github_auth (mcp_aql_create), enter the "
                           "code on GitHub, check with check_github_auth, then try again.",
                           code="github_not_connected")
    return token


def _api(method: str, path: str, token: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    try:
        response = httpx.request(method, f"{settings.ATRIUM_GITHUB_API_URL}{path}", json=body,
                                 headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"},
                                 timeout=settings.ATRIUM_HTTP_TIMEOUT_SECONDS, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise GitHubUnavailable(f"GitHub could not be reached ({type(exc).__name__}); try again later.") from None
    try:
        answer = response.json()
    except ValueError:
        answer = None
    return response.status_code, answer if isinstance(answer, dict) else {}


def repository_name_check(name: object) -> str:
    if name is None:
        return DEFAULT_REPOSITORY
    if not isinstance(name, str):
        raise InvalidInput("repository_name must be a string.", code="invalid_parameter")
    name = name.strip()
    if (not REPOSITORY_NAME.fullmatch(name) or name in (".", "..") or name.lower().endswith(".git")):
        raise InvalidInput("repository_name must be 1-100 letters, digits, '-', '_' or '.', not '.' or '..' and not "
                           "ending in '.git' (GitHub's rule for repository names).", code="invalid_repository_name")
    return name


def _login(user: User) -> str:
    return GitHubAuth.objects.filter(user=user).values_list("login", flat=True).first() or ""


@transaction.atomic
def portfolio_init(*, caller: Caller, repository_name: object = None, private: bool = False,
                   description: str = "") -> tuple[PortfolioRemote, bool]:
    """Create the portfolio repository on GitHub, or adopt the caller's existing one of that name, and
    record it. Answers (remote, created on GitHub)."""
    token = _token(caller.user)
    # The row first (portfolio_config may have made it already), then its lock: two concurrent inits
    # of one user then run one after the other instead of both inserting.
    PortfolioRemote.objects.get_or_create(user=caller.user, defaults={"repository": DEFAULT_REPOSITORY})
    remote = PortfolioRemote.objects.select_for_update().get(user=caller.user)
    name = repository_name_check(repository_name if repository_name is not None else remote.repository)
    if len(description) > MAX_DESCRIPTION:
        raise InvalidInput(f"description is at most {MAX_DESCRIPTION} characters.", code="invalid_parameter")
    status, answer = _api("POST", "/user/repos", token, {
        "name": name, "private": private, "auto_init": False,
        "description": description or "My DollhouseMCP portfolio, synced by Atrium."})
    created = status == 201
    if not created:
        errors = answer.get("errors") if isinstance(answer.get("errors"), list) else []
        exists = status == 422 and any(isinstance(e, dict) and "already exists" in str(e.get("message", ""))
                                       for e in errors)
        if not exists:
            raise GitHubUnavailable(f"GitHub refused to create the repository {name!r} (HTTP {status}: "
                                    f"{str(answer.get('message') or 'no message')[:200]}).")
        owner = _login(caller.user)
        status, answer = _api("GET", f"/repos/{owner}/{name}", token)
        if status != 200:
            raise GitHubUnavailable(f"GitHub says {name!r} exists but could not show it (HTTP {status}).")
    clone_url = portfolio_git.url_check(answer.get("clone_url"))
    owner = str((answer.get("owner") or {}).get("login") or _login(caller.user))[:100]
    values = {"owner": owner, "repository": name, "clone_url": clone_url,
              "html_url": str(answer.get("html_url") or "")[:500],
              "default_branch": str(answer.get("default_branch") or "main")[:255],
              "private": bool(answer.get("private", private)), "last_error": ""}
    if (remote.owner, remote.repository, remote.clone_url) != (owner, name, clone_url):
        # Another repository: what was synced with the old one says nothing about this one.
        remote.bases.all().delete()
        remote.last_synced_commit, remote.last_synced_at, remote.last_sync_direction = "", None, ""
    for key, value in values.items():
        setattr(remote, key, value)
    remote.save()
    audit_record(caller=caller, action="portfolio.init", target=f"{owner}/{name}",
                 detail={"created": created, "private": remote.private})
    return remote, created


def remote_get(*, caller: Caller) -> PortfolioRemote | None:
    """The caller's initialized portfolio remote, or None."""
    return PortfolioRemote.objects.filter(user=caller.user).exclude(clone_url="").first()


def _remote_required(caller: Caller, *, lock: bool) -> PortfolioRemote:
    query = PortfolioRemote.objects.select_for_update() if lock else PortfolioRemote.objects
    remote = query.filter(user=caller.user).exclude(clone_url="").first()
    if remote is None:
        raise PortfolioNotInitialized("You have no GitHub portfolio yet: call init_portfolio (mcp_aql_create) to "
                                      "create or adopt the repository.")
    return remote


# --- both sides, by element --------------------------------------------------------------------


@dataclass
class Local:
    element: Element
    body: bytes
    sha: str
    path: str


@dataclass
class Remote:
    path: str
    sha: str
    package: dict[str, Any]


@dataclass
class Item:
    key: Key
    local: Local | None
    remote: Remote | None
    base: PortfolioSyncBase | None

    @property
    def local_changed(self) -> bool:
        if self.base is None:
            return self.local is not None
        return self.local is None or self.local.sha != self.base.local_sha

    @property
    def remote_changed(self) -> bool:
        if self.base is None:
            return self.remote is not None
        return self.remote is None or self.remote.sha != self.base.blob_sha

    @property
    def same(self) -> bool:
        """Both sides hold the same file, or neither has the element."""
        if self.local is None or self.remote is None:
            return self.local is None and self.remote is None
        return self.local.sha == self.remote.sha

    def describe(self, **extra: Any) -> dict[str, Any]:
        path = self.remote.path if self.remote else self.local.path if self.local else self.base.path
        return {"element_type": self.key[0], "element_name": self.key[1], "path": path, **extra}


def render(element: Element) -> bytes:
    """The element's portfolio file, exactly as export_portfolio writes it."""
    entries = memory_entries(memory=element) if element.element_type == ElementType.MEMORY else None
    return text_from_package(element_package(element, entries=entries)).encode("utf-8")


def _locals(user: User, only: Key | None) -> dict[Key, Local]:
    elements = Element.objects.filter(owner=user).order_by("element_type", "name")
    if only is not None:
        elements = elements.filter(element_type=only[0], name=only[1])
    found = {}
    for element in elements:
        body = render(element)
        package = {"element_type": element.element_type, "element_name": element.name,
                   "created": element.created.isoformat()}
        found[(element.element_type, element.name)] = Local(element, body, portfolio_git.blob_sha(body),
                                                            package_path(package).as_posix())
    return found


def remote_package(file: portfolio_git.RemoteFile) -> dict[str, Any]:
    """The import package of a remote file, read as import_portfolio reads a portfolio file."""
    if file.body is None:
        raise InvalidInput(file.error, code="too_large")
    try:
        text = file.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{file.path}: not UTF-8 text.", code="invalid_file") from exc
    if file.element_type is ElementType.MEMORY and PurePosixPath(file.path).suffix != ".md":
        return package_from_memory_yaml(text, filename=file.path)
    return package_from_markdown(text, element_type=file.element_type, filename=file.path)


def _remotes(snapshot: portfolio_git.Snapshot, only: Key | None) -> tuple[dict[Key, Remote], list[dict[str, str]]]:
    found: dict[Key, Remote] = {}
    unreadable = []
    for path in sorted(snapshot.files):
        file = snapshot.files[path]
        try:
            package = remote_package(file)
        except DomainError as exc:
            unreadable.append({"path": path, "reason": exc.message})
            continue
        key = (file.element_type.value, str(package["element_name"]).strip())
        if only is not None and key != only:
            continue
        if key in found:
            unreadable.append({"path": path, "reason": f"another file ({found[key].path}) holds the same element"})
            continue
        found[key] = Remote(path, file.sha, package)
    return found, unreadable


def _items(remote_row: PortfolioRemote, locals_: dict[Key, Local], remotes: dict[Key, Remote],
           only: Key | None) -> list[Item]:
    bases = {(b.element_type, b.name): b for b in remote_row.bases.all()}
    if only is not None:
        bases = {k: v for k, v in bases.items() if k == only}
    keys = sorted(set(locals_) | set(remotes) | set(bases))
    return [Item(k, locals_.get(k), remotes.get(k), bases.get(k)) for k in keys]


# --- planning ----------------------------------------------------------------------------------


@dataclass
class Plan:
    direction: str
    mode: str
    force: bool
    added: list[Item] = field(default_factory=list)
    updated: list[Item] = field(default_factory=list)
    deleted: list[Item] = field(default_factory=list)
    conflicts: list[Item] = field(default_factory=list)
    kept: list[tuple[Item, str]] = field(default_factory=list)  # a change this sync does not carry, and why
    settled: list[Item] = field(default_factory=list)  # the same on both sides: only the base is recorded
    resolved: list[Item] = field(default_factory=list)  # conflicts force (or backup) decided for the source


def _plan(items: list[Item], *, direction: str, mode: str, force: bool) -> Plan:
    plan = Plan(direction, mode, force)
    push = direction == "push"
    wins = force or mode == "backup"
    for item in items:
        source, target = (item.local, item.remote) if push else (item.remote, item.local)
        source_changed = item.local_changed if push else item.remote_changed
        target_changed = item.remote_changed if push else item.local_changed
        if item.same:
            if source_changed or target_changed:
                plan.settled.append(item)
            continue
        if not source_changed:
            if target_changed:
                other = "pull" if push else "push"
                plan.kept.append((item, f"changed only on the {'remote' if push else 'local'} side; {other} "
                                        "carries it"))
            continue
        if target_changed:
            if not wins:
                plan.conflicts.append(item)
                continue
            plan.resolved.append(item)
        if source is None:
            if mode == "mirror":
                plan.deleted.append(item)
            else:
                plan.kept.append((item, f"removed on the {'local' if push else 'remote'} side; mode {mode} never "
                                        "deletes (mirror does)"))
        elif target is None:
            plan.added.append(item)
        else:
            plan.updated.append(item)
    return plan


def _report(plan: Plan, *, dry_run: bool, refused: list[dict[str, Any]], unreadable: list[dict[str, str]],
            commit: str | None = None) -> dict[str, Any]:
    def side(item: Item) -> dict[str, Any]:
        return {"local": "absent" if item.local is None else "changed" if item.local_changed else "unchanged",
                "remote": "absent" if item.remote is None else "changed" if item.remote_changed else "unchanged"}

    done = {i.key for i in plan.added + plan.updated + plan.deleted} - {(r["element_type"], r["element_name"])
                                                                          for r in refused}
    return {
        "direction": plan.direction, "mode": plan.mode, "force": plan.force, "dry_run": dry_run,
        "added": [i.describe() for i in plan.added if i.key in done or dry_run],
        "updated": [i.describe() for i in plan.updated if i.key in done or dry_run],
        "deleted": [i.describe() for i in plan.deleted if i.key in done or dry_run],
        "conflicts": [i.describe(**side(i), resolution="left unchanged: pass force to let the "
                                 f"{'local' if plan.direction == 'push' else 'remote'} side win")
                      for i in plan.conflicts],
        "forced": [i.describe(winner="local" if plan.direction == "push" else "remote") for i in plan.resolved],
        "kept": [i.describe(reason=why) for i, why in plan.kept],
        "refused": refused, "unreadable": unreadable,
        **({"commit": commit} if commit is not None else {}),
    }


# --- applying ----------------------------------------------------------------------------------


def _free_path(path: str, taken: set[str]) -> str:
    candidate, number = path, 1
    while candidate in taken:
        number += 1
        stem = PurePosixPath(path)
        candidate = str(stem.with_stem(f"{stem.stem}-{number}"))
    return candidate


def _message(plan: Plan) -> str:
    lines = [f"{verb} {i.key[0]} '{i.key[1]}'" for verb, items in (("Add", plan.added), ("Update", plan.updated),
                                                                  ("Delete", plan.deleted)) for i in items]
    count = len(lines)
    head = f"Atrium: sync {count} element{'s' if count != 1 else ''}"
    if count == 1:
        head = f"Atrium: {lines[0][0].lower()}{lines[0][1:]}"
    shown = lines[:MAX_LISTED_IN_MESSAGE]
    more = [f"... and {count - len(shown)} more"] if count > len(shown) else []
    return "\n".join([head, "", *shown, *more]) + "\n"


def _base_set(remote_row: PortfolioRemote, key: Key, *, path: str, blob: str, local: str) -> None:
    PortfolioSyncBase.objects.update_or_create(remote=remote_row, element_type=key[0], name=key[1],
                                               defaults={"path": path, "blob_sha": blob, "local_sha": local})


def _base_clear(remote_row: PortfolioRemote, key: Key) -> None:
    PortfolioSyncBase.objects.filter(remote=remote_row, element_type=key[0], name=key[1]).delete()


def _settle(remote_row: PortfolioRemote, plan: Plan) -> None:
    for item in plan.settled:
        if item.local is None:
            _base_clear(remote_row, item.key)
        else:
            _base_set(remote_row, item.key, path=item.remote.path, blob=item.remote.sha, local=item.local.sha)


def _push(remote_row: PortfolioRemote, token: str, snapshot: portfolio_git.Snapshot, plan: Plan) -> str | None:
    """Commit the plan's changes on top of the snapshot; answers the new head (None: nothing to commit)."""
    _settle(remote_row, plan)
    if not (plan.added or plan.updated or plan.deleted):
        return None
    changes: dict[str, bytes | None] = {}
    taken = set(snapshot.files)
    written: dict[Key, str] = {}
    for item in plan.updated:
        changes[item.remote.path] = item.local.body
        written[item.key] = item.remote.path
    for item in plan.added:
        path = _free_path(item.local.path, taken)
        taken.add(path)
        changes[path] = item.local.body
        written[item.key] = path
    for item in plan.deleted:
        changes[item.remote.path] = None
    head = portfolio_git.commit_push(remote_row.clone_url, token, snapshot, branch=remote_row.default_branch,
                                     changes=changes, message=_message(plan))
    for item in plan.added + plan.updated:
        _base_set(remote_row, item.key, path=written[item.key], blob=item.local.sha, local=item.local.sha)
    for item in plan.deleted:
        _base_clear(remote_row, item.key)
    return head


def _policy_change(item: Item) -> bool:
    incoming = item.remote.package.get("gatekeeper") or (item.remote.package.get("metadata") or {}).get("gatekeeper")
    current = item.local.element.gatekeeper if item.local else None
    return bool(incoming) and incoming != current


def _pull(caller: Caller, remote_row: PortfolioRemote, plan: Plan, *, accept_policies: bool) -> list[dict[str, Any]]:
    """Import the plan's changes; answers the elements refused, each with why. One refusal never stops the rest."""
    _settle(remote_row, plan)
    refused = []
    for item in plan.added + plan.updated:
        if _policy_change(item) and not accept_policies:
            refused.append(item.describe(reason="it sets a gatekeeper policy: pass accept_policies: true (confirmed "
                                                "each time) to import it"))
            continue
        try:
            with transaction.atomic():
                element, _ = element_import(caller=caller, package=item.remote.package, overwrite=True)
        except DomainError as exc:
            refused.append(item.describe(reason=exc.message))
            continue
        stored = Element.objects.get(pk=element.pk)  # as the database gives it back, as the next sync reads it
        _base_set(remote_row, item.key, path=item.remote.path, blob=item.remote.sha,
                  local=portfolio_git.blob_sha(render(stored)))
    for item in plan.deleted:
        element_delete(caller=caller, element=item.local.element)
        _base_clear(remote_row, item.key)
    return refused


def _options(direction: str, mode: str) -> None:
    if direction not in DIRECTIONS:
        raise InvalidInput("direction must be push or pull.", code="invalid_parameter")
    if mode not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}.", code="invalid_parameter")


@transaction.atomic
def portfolio_sync(*, caller: Caller, direction: str = "push", mode: str = "additive", force: bool = False,
                   dry_run: bool = False, accept_policies: bool = False, only: Key | None = None) -> dict[str, Any]:
    """Sync the caller's elements (or, with `only`, one of them) with their portfolio repository.
    With dry_run, answers exactly what would change and changes nothing on either side."""
    _options(direction, mode)
    token = _token(caller.user)
    # The lock is held through the git work: a second sync of this user waits, then sees this one's result.
    remote_row = _remote_required(caller, lock=True)
    with portfolio_git.snapshot(remote_row.clone_url, token, remote_row.default_branch) as snapshot:
        remotes, unreadable = _remotes(snapshot, only)
        items = _items(remote_row, _locals(caller.user, only), remotes, only)
        plan = _plan(items, direction=direction, mode=mode, force=force)
        if dry_run:
            return _report(plan, dry_run=True, refused=[], unreadable=unreadable)
        refused: list[dict[str, Any]] = []
        head = snapshot.head
        if direction == "push":
            head = _push(remote_row, token, snapshot, plan) or head
        else:
            refused = _pull(caller, remote_row, plan, accept_policies=accept_policies)
    remote_row.last_synced_commit = head or ""
    remote_row.last_synced_at, remote_row.last_sync_direction = timezone.now(), direction
    remote_row.last_error = (f"{len(plan.conflicts)} conflict(s) left unchanged" if plan.conflicts else "")
    remote_row.save(update_fields=["last_synced_commit", "last_synced_at", "last_sync_direction", "last_error",
                                   "updated_at"])
    report = _report(plan, dry_run=False, refused=refused, unreadable=unreadable,
                     commit=head if direction == "push" else None)
    audit_record(caller=caller, action=f"portfolio.{direction}", target=str(remote_row),
                 detail={"mode": mode, "force": force, **{k: len(report[k]) for k in
                                                          ("added", "updated", "deleted", "conflicts", "refused")},
                         **({"element": f"{only[0]} '{only[1]}'"} if only else {})})
    return report


# --- reading -----------------------------------------------------------------------------------


def remote_elements(*, caller: Caller, element_type: ElementType | None = None
                    ) -> tuple[PortfolioRemote, list[dict[str, Any]], list[dict[str, str]]]:
    """The elements at the remote's head: (remote, [{element_type, element_name, path, sha, size,
    description, tags, package}], files that could not be read)."""
    token = _token(caller.user)
    remote_row = _remote_required(caller, lock=False)
    with portfolio_git.snapshot(remote_row.clone_url, token, remote_row.default_branch) as snapshot:
        remotes, unreadable = _remotes(snapshot, None)
        sizes = {path: len(f.body or b"") for path, f in snapshot.files.items()}
    listed = [{"element_type": key[0], "element_name": key[1], "path": r.path, "sha": r.sha, "size": sizes[r.path],
               "description": str(r.package.get("description") or ""),
               "tags": [str(t) for t in r.package.get("tags") or [] if isinstance(t, str | int | float)],
               "package": r.package}
              for key, r in sorted(remotes.items()) if element_type is None or key[0] == element_type.value]
    return remote_row, listed, unreadable


def element_compare(*, caller: Caller, key: Key) -> dict[str, Any]:
    """One element on both sides: whether each has it, changed since the last sync, and a diff."""
    token = _token(caller.user)
    remote_row = _remote_required(caller, lock=False)
    with portfolio_git.snapshot(remote_row.clone_url, token, remote_row.default_branch) as snapshot:
        remotes, _ = _remotes(snapshot, key)
        [item] = _items(remote_row, _locals(caller.user, key), remotes, key) or [Item(key, None, None, None)]
        remote_body = snapshot.files[item.remote.path].body if item.remote else None
    if item.local is None and item.remote is None:
        raise NotFound(f"No {key[0]} named '{key[1]}' locally or in the portfolio repository.",
                       code="element_not_found")
    if item.same or not (item.local_changed or item.remote_changed):
        state = "in_sync"
    elif item.local_changed and item.remote_changed:
        state = "conflict"
    elif item.local_changed:
        state = "local_ahead"
    else:
        state = "remote_ahead"
    local_lines = item.local.body.decode("utf-8").splitlines(keepends=True) if item.local else []
    remote_lines = remote_body.decode("utf-8", "replace").splitlines(keepends=True) if remote_body else []
    diff = list(difflib.unified_diff(remote_lines, local_lines, "remote", "local"))
    return item.describe(state=state, local=item.local is not None, remote=item.remote is not None,
                         local_changed=item.local_changed, remote_changed=item.remote_changed,
                         last_synced=item.base is not None, diff="".join(diff[:MAX_DIFF_LINES]),
                         diff_truncated=len(diff) > MAX_DIFF_LINES)


def portfolio_status(*, caller: Caller, username: str | None = None) -> dict[str, Any]:
    token = _token(caller.user)
    remote_row = PortfolioRemote.objects.filter(user=caller.user).first()
    name = remote_row.repository if remote_row is not None else DEFAULT_REPOSITORY
    if username and (remote_row is None or username.lower() != remote_row.owner.lower()):
        status, answer = _api("GET", f"/repos/{username}/{name}", token)
        return {"username": username, "repository": f"{username}/{name}", "exists": status == 200,
                "url": str(answer.get("html_url") or "") or None if status == 200 else None}
    local_counts = Counter(Element.objects.filter(owner=caller.user).values_list("element_type", flat=True))
    data: dict[str, Any] = {
        "username": _login(caller.user) or None, "initialized": remote_get(caller=caller) is not None,
        "local": {t.plural: local_counts.get(t.value, 0) for t in ElementType},
    }
    if not data["initialized"]:
        return {**data, "repository": f"{_login(caller.user)}/{name}", "exists": False, "url": None,
                "message": "No portfolio repository yet: call init_portfolio to create or adopt it."}
    status, answer = _api("GET", f"/repos/{remote_row.owner}/{remote_row.repository}", token)
    _, listed, unreadable = remote_elements(caller=caller)
    remote_counts = Counter(e["element_type"] for e in listed)
    locals_ = _locals(caller.user, None)
    bases = {(b.element_type, b.name): b for b in remote_row.bases.all()}
    pending = []
    for key in sorted(set(locals_) | set(bases)):
        item = Item(key, locals_.get(key), None, bases.get(key))
        if item.local_changed:
            change = "added" if item.base is None else "deleted" if item.local is None else "updated"
            pending.append(item.describe(change=change))
    return {**data, "repository": str(remote_row), "exists": status == 200,
            "url": str(answer.get("html_url") or remote_row.html_url) or None,
            "private": bool(answer.get("private", remote_row.private)), "default_branch": remote_row.default_branch,
            "remote": {t.plural: remote_counts.get(t.value, 0) for t in ElementType}, "unreadable": unreadable,
            "last_sync": {"at": remote_row.last_synced_at.isoformat() if remote_row.last_synced_at else None,
                          "commit": remote_row.last_synced_commit or None,
                          "direction": remote_row.last_sync_direction or None},
            "pending_local_changes": pending, "auto_sync": remote_row.auto_sync,
            "last_error": remote_row.last_error or None}


def config_data(remote_row: PortfolioRemote | None) -> dict[str, Any]:
    if remote_row is None:
        return {"auto_sync": False, "auto_submit": False, "repository_name": DEFAULT_REPOSITORY, "initialized": False}
    return {"auto_sync": remote_row.auto_sync, "auto_submit": remote_row.auto_submit,
            "repository_name": remote_row.repository, "initialized": bool(remote_row.clone_url)}


@transaction.atomic
def portfolio_configure(*, caller: Caller, auto_sync: bool | None = None, auto_submit: bool | None = None,
                        repository_name: str | None = None) -> dict[str, Any]:
    PortfolioRemote.objects.get_or_create(user=caller.user, defaults={"repository": DEFAULT_REPOSITORY})
    remote_row = PortfolioRemote.objects.select_for_update().get(user=caller.user)
    if repository_name is not None:
        name = repository_name_check(repository_name)
        if remote_row.clone_url and name != remote_row.repository:
            raise InvalidInput(f"Your portfolio is {remote_row}: to switch to {name!r}, call init_portfolio with "
                               f"repository_name {name!r} (it creates or adopts that repository).",
                               code="portfolio_initialized")
        remote_row.repository = name
    if auto_sync is not None:
        remote_row.auto_sync = auto_sync
    if auto_submit is not None:
        remote_row.auto_submit = auto_submit
    remote_row.save()
    audit_record(caller=caller, action="portfolio.configure", target=caller.user.get_username(),
                 detail=config_data(remote_row))
    return config_data(remote_row)


# --- auto-sync ---------------------------------------------------------------------------------


def auto_sync_queue(owner_id: int) -> None:
    """After a change to a user's elements has committed: queue one push of their portfolio if they
    turned auto_sync on and none is queued yet. The conditional UPDATE is the claim, so however many
    changes land at once, one push is queued; the push clears the mark before it reads the elements."""
    from elements.tasks import portfolio_auto_push

    candidates = PortfolioRemote.objects.filter(user_id=owner_id, auto_sync=True).exclude(clone_url="")
    if not candidates.exists():
        return  # the common case, read only: on SQLite an UPDATE would take the write lock for nothing
    now = timezone.now()
    # A push queued this long ago was lost (its worker died before it ran): queue another.
    lost = now - timedelta(seconds=settings.ATRIUM_PORTFOLIO_AUTO_SYNC_DELAY_SECONDS + LOST_PUSH_SECONDS)
    queued = candidates.filter(Q(push_queued_at__isnull=True) | Q(push_queued_at__lt=lost)).update(push_queued_at=now)
    if not queued:
        return
    try:
        portfolio_auto_push.apply_async((owner_id,), countdown=settings.ATRIUM_PORTFOLIO_AUTO_SYNC_DELAY_SECONDS,
                                        retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5,
                                                      "interval_max": 1})
    except Exception:
        # Without a broker the push ran here and this is its own failure; with one, the broker's.
        # Either way the next change queues again.
        PortfolioRemote.objects.filter(user_id=owner_id).update(push_queued_at=None)
        log.exception("Portfolio auto-sync of user %s was not queued", owner_id)


def auto_push(*, user_id: int) -> dict[str, Any] | None:
    """The queued push of a user's portfolio (additive, never forced: conflicts are left and recorded)."""
    if not PortfolioRemote.objects.filter(user_id=user_id, push_queued_at__isnull=False).update(push_queued_at=None):
        return None
    user = User.objects.filter(pk=user_id).first()
    if user is None:
        return None
    try:
        return portfolio_sync(caller=Caller.trusted(user, via=AuditEvent.Via.TASK), direction="push")
    except DomainError as exc:
        PortfolioRemote.objects.filter(user_id=user_id).update(last_error=exc.message[:1000])
        return {"error": exc.message}


def remote_search(*, caller: Caller, text: str, element_type: ElementType | None) -> list[dict[str, Any]]:
    """The elements at the head of the caller's portfolio repository whose name, description or tags
    hold every word of `text` (case-insensitive); every element for '' or '*'."""
    _, listed, _ = remote_elements(caller=caller, element_type=element_type)
    words = [] if text in ("", "*") else [w.lower() for w in text.split()]
    found = []
    for entry in listed:
        fields = {"name": entry["element_name"].lower(), "description": entry["description"].lower(),
                  "tags": " ".join(entry["tags"]).lower()}
        where: set[str] = set()
        for word in words:
            hits = [name for name, value in fields.items() if word in value]
            if not hits:
                break
            where.update(hits)
        else:
            found.append({"type": entry["element_type"], "element_name": entry["element_name"],
                          "description": entry["description"], "source": "github", "path": entry["path"],
                          "matchedIn": sorted(where)})
    return found
