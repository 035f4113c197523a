"""The git side of portfolio sync: read a portfolio repository's files at the head of its branch, and
commit changes to them on top of that head. Plain dulwich plumbing; nothing is checked out.

Each read fetches the branch's newest commit only (depth 1) into a temporary bare repository, on
disk rather than in memory, and then reads at most MAX_FILES element files of at most
MAX_FILE_BYTES each and MAX_TOTAL_BYTES in all, as the collection's reader does. Over HTTPS the
user's GitHub token goes to git as the password of the request and nowhere else: it is never put in
a URL, a message or a log line. A push is a compare-and-swap of the branch: it names the head it
was built on, and a branch that moved meanwhile refuses it (RemoteMoved).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from core.errors import DomainError, InvalidInput
from elements.collection import MAX_FILES, MAX_TOTAL_BYTES
from elements.portfolio import MARKDOWN_SUFFIX, MEMORY_SUFFIXES
from elements.types import MAX_FILE_BYTES, ElementType, element_type_parse

MAX_PATH = 300
MAX_MESSAGE = 4000
# GitHub accepts any user name with a token as the password; this one says what the password is.
TOKEN_USERNAME = "x-access-token"
COMMITTER = b"Atrium <atrium@users.noreply.github.com>"


class RemoteUnavailable(DomainError):
    code = "portfolio_unavailable"
    http_status = 502


class RemoteMoved(DomainError):
    code = "portfolio_remote_moved"
    http_status = 409


@dataclass
class RemoteFile:
    path: str
    element_type: ElementType
    sha: str  # the git blob id
    body: bytes | None  # None when `error` says why it was not read
    error: str = ""


@dataclass
class Snapshot:
    """The files at the branch's head (None for an empty repository)."""

    head: str | None
    files: dict[str, RemoteFile] = field(default_factory=dict)
    repo: Any = None  # the temporary dulwich repository holding the head's objects


def url_check(url: object) -> str:
    """A clone URL Atrium may use: https, without credentials in it. A local path or file: URL only
    where the operator allows local remotes (ATRIUM_PORTFOLIO_LOCAL_REMOTES, for tests and a server
    run on one's own machine)."""
    if not isinstance(url, str) or not url or len(url) > 500:
        raise RemoteUnavailable("GitHub answered no usable clone_url for the repository.")
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        if parts.username or parts.password:
            raise RemoteUnavailable("The repository's clone_url carries credentials; Atrium does not use such URLs.")
        return url
    local = parts.scheme == "file" or (not parts.scheme and url.startswith("/"))
    if local and settings.ATRIUM_PORTFOLIO_LOCAL_REMOTES:
        return url
    raise RemoteUnavailable("The repository's clone_url is not an https URL; Atrium only syncs over https.")


def blob_sha(body: bytes) -> str:
    from dulwich.objects import Blob

    return Blob.from_string(body).id.decode()


def _client(url: str, token: str | None) -> tuple[Any, str]:
    from dulwich.client import get_transport_and_path

    if url.startswith("https://") and token:
        return get_transport_and_path(url, username=TOKEN_USERNAME, password=token)
    return get_transport_and_path(url.removeprefix("file://"))


def _branch_ref(branch: str) -> bytes:
    return f"refs/heads/{branch}".encode()


def element_path(path: str) -> ElementType | None:
    """The type of a portfolio file at `path`, or None if sync leaves the path alone: the six type
    folders only (memories also in one level of date folders, not backups/), the type's extension,
    no hidden parts."""
    parts = PurePosixPath(path).parts
    if len(parts) < 2 or any(p.startswith(".") for p in parts):
        return None
    try:
        element_type = element_type_parse(parts[0])
    except InvalidInput:
        return None
    if parts[0] != element_type.plural:
        return None
    suffix = PurePosixPath(path).suffix
    if element_type is ElementType.MEMORY:
        if len(parts) > 3 or "backups" in parts or suffix not in (*MEMORY_SUFFIXES, MARKDOWN_SUFFIX):
            return None
        return element_type
    return element_type if len(parts) == 2 and suffix == MARKDOWN_SUFFIX else None


def _walk(store: Any, tree_id: bytes, prefix: str, depth: int) -> Iterator[tuple[str, bytes, int]]:
    from dulwich.objects import Tree

    for entry in store[tree_id].iteritems():
        name = entry.path.decode("utf-8", "replace")
        path = f"{prefix}{name}"
        if entry.mode & 0o170000 == 0o040000:
            if depth < 2 and not name.startswith("."):
                found = store[entry.sha]
                if isinstance(found, Tree):
                    yield from _walk(store, entry.sha, path + "/", depth + 1)
        elif entry.mode & 0o170000 == 0o100000:
            yield path, entry.sha, entry.mode


def _files(store: Any, tree_id: bytes) -> dict[str, RemoteFile]:
    files: dict[str, RemoteFile] = {}
    count = total = 0
    for path, sha, _mode in _walk(store, tree_id, "", 0):
        element_type = element_path(path)
        if element_type is None:
            continue
        if len(path) > MAX_PATH:
            files[path[:MAX_PATH]] = RemoteFile(path[:MAX_PATH], element_type, sha.decode(), None,
                                                f"path longer than {MAX_PATH} characters")
            continue
        count += 1
        if count > MAX_FILES:
            raise RemoteUnavailable(f"The portfolio repository has more than {MAX_FILES} element files.")
        blob = store[sha]
        size = blob.raw_length()
        if size > MAX_FILE_BYTES:
            files[path] = RemoteFile(path, element_type, sha.decode(), None,
                                     f"{path}: file too large: at most {MAX_FILE_BYTES:,} bytes (got {size:,}).")
            continue
        total += size
        if total > MAX_TOTAL_BYTES:
            raise RemoteUnavailable(f"The portfolio repository is larger than {MAX_TOTAL_BYTES:,} bytes.")
        files[path] = RemoteFile(path, element_type, sha.decode(), blob.as_raw_string())
    return files


@contextmanager
def snapshot(url: str, token: str | None, branch: str) -> Iterator[Snapshot]:
    """The files at the head of `branch`, with a repository to commit on top of it while the block runs."""
    from dulwich.repo import Repo

    url = url_check(url)  # checked at each use too: the operator may have tightened the rule since
    with tempfile.TemporaryDirectory(prefix="atrium-portfolio-") as target:
        repo = Repo.init_bare(target)
        ref = _branch_ref(branch)
        try:
            client, path = _client(url, token)

            def wants(refs: dict[bytes, bytes], depth: int | None = None) -> list[bytes]:
                return [refs[ref]] if ref in refs else []

            result = client.fetch(path, repo, determine_wants=wants, depth=1)
        except DomainError:
            raise
        except Exception as exc:  # dulwich raises many kinds for an unreachable or refusing remote
            raise RemoteUnavailable(f"The portfolio repository could not be read ({type(exc).__name__}); check "
                                    "that it exists and that your GitHub sign-in may read it.") from None
        with repo:
            head = (result.refs or {}).get(ref)
            if head is None:
                yield Snapshot(head=None, repo=repo)
                return
            yield Snapshot(head=head.decode(), files=_files(repo.object_store, repo[head].tree), repo=repo)


def commit_push(url: str, token: str | None, base: Snapshot, *, branch: str, changes: dict[str, bytes | None],
                message: str) -> str:
    """Commit `changes` (path -> new bytes, or None to delete) on top of the snapshot's head and push
    it to `branch`. Answers the new head. Refused with RemoteMoved if the branch moved since."""
    from dulwich.object_store import commit_tree_changes
    from dulwich.objects import Blob, Commit, Tree

    store = base.repo.object_store
    if base.head is None:
        empty = Tree()
        store.add_object(empty)
        tree = empty.id
    else:
        tree = base.repo[base.head.encode()].tree
    edits: list[tuple[bytes, int | None, bytes | None]] = []
    for path, body in sorted(changes.items()):
        if body is None:
            edits.append((path.encode(), None, None))
            continue
        blob = Blob.from_string(body)
        store.add_object(blob)
        edits.append((path.encode(), 0o100644, blob.id))
    commit = Commit()
    commit.tree = commit_tree_changes(store, tree, edits)
    commit.parents = [base.head.encode()] if base.head else []
    commit.author = commit.committer = COMMITTER
    commit.author_time = commit.commit_time = int(time.time())
    commit.author_timezone = commit.commit_timezone = 0
    commit.encoding = b"UTF-8"
    commit.message = message[:MAX_MESSAGE].encode("utf-8")
    store.add_object(commit)
    ref = _branch_ref(branch)
    expected = base.head.encode() if base.head else None

    def update_refs(refs: dict[bytes, bytes]) -> dict[bytes, bytes]:
        if refs.get(ref) != expected:
            raise RemoteMoved("The portfolio repository changed while this sync ran; sync again.")
        return {ref: commit.id}

    shallow = base.repo.get_shallow()  # the fetch had the head only: its parents are not here to walk

    def pack(have: Any, want: Any, ofs_delta: bool = False, progress: Any = None) -> Any:
        return store.generate_pack_data(have, want, shallow=shallow, ofs_delta=ofs_delta, progress=progress)

    try:
        client, path = _client(url, token)
        result = client.send_pack(path, update_refs, pack)
    except DomainError:
        raise
    except Exception as exc:
        raise RemoteUnavailable(f"The portfolio repository refused the push ({type(exc).__name__}); check that "
                                "your GitHub sign-in may write to it.") from None
    failed = {k: v for k, v in (result.ref_status or {}).items() if v}
    if failed:
        raise RemoteMoved("The portfolio repository refused the update of its branch (it changed while this "
                          "sync ran); sync again.")
    return commit.id.decode()
