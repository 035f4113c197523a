"""DollhouseMCP's community collection: read from a source, cached in the database, installed as imports.

A source is a directory, the URL of a collection-index.json with the files beside it, or a git
repository (read with dulwich, objects only: nothing is checked out). Whatever the source, only
`library/<type>/<file>` paths with the type's extension are read, each file at most MAX_FILE_BYTES,
at most MAX_FILES files and MAX_TOTAL_BYTES in all, and every file is parsed by the same reader as
import_portfolio (elements.portfolio), whose YAML loader is bounded. A file that does not parse is
left out and named in the cache's index under `skipped`, so one bad file never hides the rest.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts import cache_stats
from core.caller import Caller
from core.errors import InvalidInput, NotFound
from elements.models import CollectionCache, CollectionItem, CollectionSubmission, Element
from elements.portfolio import MARKDOWN_SUFFIX, MEMORY_SUFFIXES, package_from_markdown, package_from_memory_yaml
from elements.services import element_import
from elements.types import MAX_FILE_BYTES, ElementType, element_type_parse

LIBRARY = "library"
INDEX_FILE = "collection-index.json"
MAX_FILES = 2000
MAX_TOTAL_BYTES = 64 * 1024 * 1024
MAX_PATH = 300
MAX_INDEX_BYTES = 4 * 1024 * 1024
CLAIM_SECONDS = 120
# After a failed read the source is left alone for this long, doubling with each failure in a row
# up to the TTL; callers meanwhile answer from the cached copy.
BACKOFF_SECONDS = 60
# A caller finding the cache empty while another worker fills it waits this long for it.
FIRST_FILL_WAIT_SECONDS = 30
SECTIONS = (LIBRARY,)


class SourceUnavailable(Exception):
    """The source could not be read at all (unreachable, not a collection, over the bounds)."""


def _suffixes(element_type: ElementType) -> tuple[str, ...]:
    return MEMORY_SUFFIXES if element_type is ElementType.MEMORY else (MARKDOWN_SUFFIX,)


def path_parse(path: object) -> tuple[str, ElementType]:
    """`library/<type>/<file>` (the `library/` may be left out, as in the reference's `personas/x.md`):
    the canonical path and the type. Anything else (`..`, absolute paths, other folders or extensions)
    is refused."""
    if not isinstance(path, str) or not path.strip() or len(path) > MAX_PATH:
        raise InvalidInput(f"path must be library/<type>/<file> (at most {MAX_PATH} characters).",
                           code="invalid_path")
    text = path.strip()
    if "\\" in text or "\x00" in text or text.startswith("/"):
        raise InvalidInput("path must be relative: library/<type>/<file>.", code="invalid_path")
    parts = PurePosixPath(text).parts
    if any(part in ("..", ".") for part in parts):
        raise InvalidInput("path may not contain '..' or '.' parts.", code="invalid_path")
    if parts and parts[0] == LIBRARY:
        parts = parts[1:]
    if len(parts) != 2:
        raise InvalidInput("path must be library/<type>/<file>, e.g. library/personas/code-reviewer.md.",
                           code="invalid_path")
    folder, filename = parts
    try:
        element_type = element_type_parse(folder)
    except InvalidInput as exc:
        raise InvalidInput(f"path: unknown collection folder {folder!r}: personas, skills, templates, agents, "
                           "memories or ensembles.", code="invalid_path") from exc
    if filename.startswith(".") or PurePosixPath(filename).suffix not in _suffixes(element_type):
        raise InvalidInput(f"path: a {element_type.value} file ends {' or '.join(_suffixes(element_type))}.",
                           code="invalid_path")
    return f"{LIBRARY}/{element_type.plural}/{filename}", element_type


def package_from_text(text: str, *, path: str) -> dict[str, Any]:
    """The import package of a collection file, read exactly as import_portfolio reads a portfolio file."""
    canonical, element_type = path_parse(path)
    if element_type is ElementType.MEMORY:
        return package_from_memory_yaml(text, filename=canonical)
    return package_from_markdown(text, element_type=element_type, filename=canonical)


# --- reading a source ----------------------------------------------------------------------


class _Budget:
    """The bounds on one read of a source: files, bytes per file and bytes in all."""

    def __init__(self) -> None:
        self.files = 0
        self.total = 0

    def take(self, path: str, size: int) -> None:
        if size > MAX_FILE_BYTES:
            raise InvalidInput(f"{path}: file too large: at most {MAX_FILE_BYTES:,} bytes (got {size:,}).",
                               code="too_large")
        self.files += 1
        self.total += size
        if self.files > MAX_FILES:
            raise SourceUnavailable(f"The collection has more than {MAX_FILES} files.")
        if self.total > MAX_TOTAL_BYTES:
            raise SourceUnavailable(f"The collection is larger than {MAX_TOTAL_BYTES:,} bytes.")


Files = dict[str, bytes | str]  # canonical path -> the file's bytes, or why it was refused


def _read_directory(root: Path) -> Files:
    library = root / LIBRARY
    if not library.is_dir():
        raise SourceUnavailable(f"{root} has no {LIBRARY}/ folder.")
    budget, files = _Budget(), {}
    for element_type in ElementType:
        folder = library / element_type.plural
        if not folder.is_dir() or folder.is_symlink():
            continue
        for entry in sorted(folder.iterdir()):
            if entry.is_symlink() or not entry.is_file():
                continue
            try:
                path, _ = path_parse(f"{LIBRARY}/{element_type.plural}/{entry.name}")
                budget.take(path, entry.stat().st_size)
            except InvalidInput as exc:
                files[f"{LIBRARY}/{element_type.plural}/{entry.name}"] = exc.message
                continue
            files[path] = entry.read_bytes()
    return files


def _read_git(url: str) -> Files:
    """The library files of the default branch's newest commit, read from the object store."""
    from dulwich import porcelain
    from dulwich.objects import Blob, Tree

    with tempfile.TemporaryDirectory(prefix="atrium-collection-") as target:
        try:
            repo = porcelain.clone(url.removeprefix("git+"), target, bare=True, depth=1,
                                 errstream=porcelain.NoneStream())
        except Exception as exc:  # dulwich raises many kinds for an unreachable or broken remote
            raise SourceUnavailable(f"Could not clone {url}: {exc.__class__.__name__}.") from exc
        with repo:
            store = repo.object_store
            tree = store[store[repo.head()].tree]
            budget, files = _Budget(), {}
            library = _subtree(store, tree, LIBRARY)
            if library is None:
                raise SourceUnavailable(f"{url} has no {LIBRARY}/ folder.")
            for element_type in ElementType:
                folder = _subtree(store, library, element_type.plural)
                if folder is None:
                    continue
                for entry in folder.iteritems():
                    name = entry.path.decode("utf-8", "replace")
                    raw = f"{LIBRARY}/{element_type.plural}/{name}"
                    blob = store[entry.sha]
                    if not isinstance(blob, Blob) or isinstance(blob, Tree):
                        continue
                    try:
                        path, _ = path_parse(raw)
                        budget.take(path, blob.raw_length())
                    except InvalidInput as exc:
                        files[raw] = exc.message
                        continue
                    files[path] = blob.as_raw_string()
            return files


def is_git(source: str) -> bool:
    return source.startswith("git+") or source.rstrip("/").endswith(".git")


def branch_commit(source: str, *, branch: str, path: str, text: str, message: str, author: str) -> str:
    """Commit `text` at `path` on top of the source's default branch and push it to `branch` there;
    the new commit's sha. Built in the object store of a shallow bare clone: nothing is checked out.
    Raises SourceUnavailable when the source cannot be cloned or refuses the push."""
    import time

    from dulwich import porcelain
    from dulwich.objects import Blob, Commit

    url = source.removeprefix("git+")
    with tempfile.TemporaryDirectory(prefix="atrium-submission-") as target:
        try:
            repo = porcelain.clone(url, target, bare=True, depth=1, errstream=porcelain.NoneStream())
        except Exception as exc:  # dulwich raises many kinds for an unreachable or broken remote
            raise SourceUnavailable(f"Could not clone {url}: {exc.__class__.__name__}.") from exc
        with repo:
            store = repo.object_store
            head = store[repo.head()]
            blob = Blob.from_string(text.encode("utf-8"))
            tree = _tree_with(store, store[head.tree], path.split("/"), blob)
            commit = Commit()
            commit.tree, commit.parents = tree.id, [head.id]
            commit.author = commit.committer = author.encode("utf-8")
            commit.author_time = commit.commit_time = int(time.time())
            commit.author_timezone = commit.commit_timezone = 0
            commit.encoding, commit.message = b"UTF-8", message.encode("utf-8")
            store.add_object(commit)
            ref = f"refs/heads/{branch}".encode()
            repo.refs[ref] = commit.id
            try:
                porcelain.push(repo, url, ref, outstream=porcelain.NoneStream(), errstream=porcelain.NoneStream(),
                               force=True)
            except Exception as exc:  # refused, unreachable, no rights: dulwich has no one error type for it
                raise SourceUnavailable(f"Could not push {branch} to {url}: {exc.__class__.__name__}: "
                                        f"{str(exc)[:200]}") from exc
            return commit.id.decode()


def _tree_with(store: Any, tree: Any, parts: list[str], blob: Any) -> Any:
    """A copy of `tree` holding `blob` at the path `parts`, its new trees added to the store."""
    from dulwich.objects import Tree

    copy = Tree()
    for entry in tree.iteritems():
        copy.add(entry.path, entry.mode, entry.sha)
    name = parts[0].encode("utf-8")
    if len(parts) == 1:
        store.add_object(blob)
        copy.add(name, 0o100644, blob.id)
    else:
        child = _subtree(store, tree, parts[0])
        copy.add(name, 0o040000, _tree_with(store, child if child is not None else Tree(), parts[1:], blob).id)
    store.add_object(copy)
    return copy


def _subtree(store: Any, tree: Any, name: str) -> Any:
    from dulwich.objects import Tree

    for entry in tree.iteritems():
        if entry.path == name.encode():
            found = store[entry.sha]
            return found if isinstance(found, Tree) else None
    return None


def _get(client: httpx.Client, url: str, *, limit: int) -> bytes:
    with client.stream("GET", url) as response:
        if response.status_code != 200:
            raise SourceUnavailable(f"{url} answered HTTP {response.status_code}.")
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                raise InvalidInput(f"{url}: larger than {limit:,} bytes.", code="too_large")
        return bytes(body)


def _index_paths(index: object) -> list[str]:
    """The paths a collection-index.json lists: {"index": {"personas": [{"path": …}, …], …}}."""
    sections = index.get("index") if isinstance(index, dict) else None
    if not isinstance(sections, dict):
        raise SourceUnavailable(f"{INDEX_FILE} has no `index` mapping of types to entries.")
    paths = [entry.get("path") for entries in sections.values() if isinstance(entries, list)
             for entry in entries if isinstance(entry, dict)]
    return [p for p in paths if isinstance(p, str)]


def _read_http(url: str) -> Files:
    base = url.rsplit("/", 1)[0] + "/"
    try:
        with httpx.Client(timeout=settings.ATRIUM_HTTP_TIMEOUT_SECONDS, follow_redirects=False) as client:
            try:
                index = json.loads(_get(client, url, limit=MAX_INDEX_BYTES))
            except (InvalidInput, ValueError) as exc:
                raise SourceUnavailable(f"{url} is not a {INDEX_FILE} of at most {MAX_INDEX_BYTES:,} bytes.") from exc
            budget, files = _Budget(), {}
            for raw in _index_paths(index):
                try:
                    path, _ = path_parse(raw)
                    body = _get(client, base + path, limit=MAX_FILE_BYTES)
                    budget.take(path, len(body))
                except InvalidInput as exc:
                    files[raw[:MAX_PATH]] = exc.message
                    continue
                files[path] = body
            return files
    except httpx.HTTPError as exc:
        raise SourceUnavailable(f"Could not read {url}: {exc.__class__.__name__}.") from exc


def source_read(source: str) -> Files:
    """Every library file of the source, bounded; raises SourceUnavailable when it cannot be read."""
    if is_git(source):
        return _read_git(source)
    if source.startswith(("http://", "https://")):
        return _read_http(source)
    root = Path(source)
    if not root.is_dir():
        raise SourceUnavailable(f"{source} is not a directory.")
    return _read_directory(root)


# --- the index -----------------------------------------------------------------------------


def index_entry(path: str, body: bytes) -> dict[str, Any]:
    """The index entry of one file, or raises InvalidInput naming the file."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not UTF-8 text.", code="invalid_file") from exc
    package = package_from_text(text, path=path)
    tags = package.get("tags") or []
    return {
        "path": path, "type": package["element_type"], "name": str(package["element_name"]),
        "description": str(package.get("description") or ""), "author": str(package.get("author") or ""),
        "version": str(package.get("version") or ""), "category": str(package.get("category") or ""),
        "tags": [str(t) for t in tags] if isinstance(tags, list) else [],
        "unique_id": str(package.get("unique_id") or ""), "created": str(package.get("created") or ""),
        "size": len(body), "sha": hashlib.sha256(body).hexdigest(),
    }


def index_build(files: Files) -> dict[str, Any]:
    """collection-index.json for the files, in DollhouseMCP's shape: entries grouped by type folder."""
    sections: dict[str, list[dict[str, Any]]] = {t.plural: [] for t in ElementType}
    skipped = []
    for path in sorted(files):
        body = files[path]
        if isinstance(body, str):
            skipped.append({"path": path, "error": body})
            continue
        try:
            entry = index_entry(path, body)
        except InvalidInput as exc:
            skipped.append({"path": path, "error": exc.message})
            continue
        sections[element_type_parse(entry["type"]).plural].append(entry)
    total = sum(len(entries) for entries in sections.values())
    return {"version": "1.0", "total_elements": total, "index": sections, "skipped": skipped}


# --- the cache -----------------------------------------------------------------------------


def _source() -> str:
    return str(settings.ATRIUM_COLLECTION_SOURCE)


def _claim(cache: CollectionCache, *, force: bool) -> bool:
    """Claim the refresh of the cache in one UPDATE: True for the one worker that won it. Unless
    forced, the cache must still be stale as the database has it, not only as this worker last read
    it: a refresh that finished meanwhile is not done twice."""
    now = timezone.now()
    claimable = CollectionCache.objects.filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now), pk=cache.pk)
    if not force:
        claimable = claimable.filter(Q(fetched_at__isnull=True) | Q(fetched_at__lt=now - _ttl()),
                                     Q(retry_after__isnull=True) | Q(retry_after__lte=now))
    return bool(claimable.update(claimed_until=now + timedelta(seconds=CLAIM_SECONDS)))


def _ttl() -> timedelta:
    return timedelta(seconds=settings.ATRIUM_COLLECTION_TTL_SECONDS)


def backoff(failures: int) -> timedelta:
    """How long the source is left alone after `failures` failed reads in a row."""
    return min(timedelta(seconds=BACKOFF_SECONDS * 2 ** min(max(failures - 1, 0), 20)), _ttl())


def backing_off(cache: CollectionCache) -> bool:
    return cache.retry_after is not None and timezone.now() < cache.retry_after


def collection_refresh(*, force: bool = True) -> CollectionCache:
    """Read the source into the cache. A source out of reach keeps the cached copy, records the
    error and is not tried again on use until its back-off has passed (a forced refresh, the beat
    task's, tries at once); a worker that finds another one refreshing leaves the cache to it."""
    cache, _ = CollectionCache.objects.get_or_create(source=_source())
    if not force and (not cache_stale(cache) or backing_off(cache)):
        return cache
    if not _claim(cache, force=force):
        cache.refresh_from_db()  # as the winner left it, or is leaving it
        return cache
    try:
        files = source_read(cache.source)
    except (SourceUnavailable, InvalidInput) as exc:
        message = exc.message if isinstance(exc, InvalidInput) else str(exc)
        # The claim is this worker's, so no other one counts failures meanwhile.
        failures = CollectionCache.objects.values_list("failures", flat=True).get(pk=cache.pk) + 1
        now = timezone.now()
        CollectionCache.objects.filter(pk=cache.pk).update(last_error=message, last_error_at=now, failures=failures,
                                                           retry_after=now + backoff(failures), claimed_until=None)
        cache.refresh_from_db()
        return cache
    index = index_build(files)
    items = [entry for entries in index["index"].values() for entry in entries]
    etag = hashlib.sha256(json.dumps(index, sort_keys=True).encode()).hexdigest()
    with transaction.atomic():
        cache = CollectionCache.objects.select_for_update().get(pk=cache.pk)
        if etag != cache.etag:
            cache.items.all().delete()
            CollectionItem.objects.bulk_create(CollectionItem(
                cache=cache, path=e["path"], element_type=e["type"], name=e["name"][:200],
                description=e["description"], author=e["author"][:200], version=e["version"][:50],
                category=e["category"][:100], tags=e["tags"], unique_id=e["unique_id"][:200],
                created=e["created"][:40], size=e["size"], sha=e["sha"],
                text=files[e["path"]].decode("utf-8")) for e in items)
        cache.index, cache.etag, cache.item_count = index, etag, len(items)
        cache.total_bytes = sum(e["size"] for e in items)
        cache.fetched_at, cache.last_error, cache.last_error_at, cache.claimed_until = timezone.now(), "", None, None
        cache.failures, cache.retry_after = 0, None
        cache.save()
    return cache


def cache_stale(cache: CollectionCache) -> bool:
    return cache.fetched_at is None or timezone.now() - cache.fetched_at > _ttl()


def collection_cache(*, warnings: list[str]) -> CollectionCache:
    """The cache to answer from, refreshed first when it is stale. A source out of reach answers from
    the cached copy with a warning; with nothing cached, that is an error."""
    asked = timezone.now()
    cache = collection_refresh(force=False)
    cache_stats.record("collection", hit=cache.fetched_at is not None and cache.fetched_at < asked)
    if cache.fetched_at is None and cache.claimed_until is not None:
        cache = _await_first_fill(cache)
    if cache.fetched_at is None:
        raise NotFound(f"The community collection could not be read from its source and nothing is cached: "
                       f"{cache.last_error or 'another worker is still reading it'}", code="collection_unavailable")
    if cache.last_error:  # a successful read clears it
        retry = f" It is tried again after {cache.retry_after.isoformat()}." if backing_off(cache) else ""
        warnings.append(f"The collection source could not be read ({cache.last_error}); answering from the copy "
                        f"cached at {cache.fetched_at.isoformat()}.{retry}")
    return cache


def _await_first_fill(cache: CollectionCache) -> CollectionCache:
    import time

    deadline = time.monotonic() + FIRST_FILL_WAIT_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.2)
        cache.refresh_from_db()
        if cache.fetched_at is not None or cache.claimed_until is None:
            break
    return cache


def cache_health() -> dict[str, Any]:
    cache = CollectionCache.objects.filter(source=_source()).first()
    ttl = settings.ATRIUM_COLLECTION_TTL_SECONDS
    if cache is None or cache.fetched_at is None:
        return {"source": _source(), "cached": False, "fetchedAt": None, "ageSeconds": None, "ttlSeconds": ttl,
                "stale": True, "itemCount": 0, "countsByType": {}, "totalBytes": 0, "skipped": 0,
                "lastError": cache.last_error or None if cache else None,
                "failures": cache.failures if cache else 0,
                "retryAfter": cache.retry_after.isoformat() if cache and backing_off(cache) else None}
    counts: dict[str, int] = {}
    for element_type in cache.items.values_list("element_type", flat=True):
        counts[element_type] = counts.get(element_type, 0) + 1
    return {"source": cache.source, "cached": True, "fetchedAt": cache.fetched_at.isoformat(),
            "ageSeconds": int((timezone.now() - cache.fetched_at).total_seconds()), "ttlSeconds": ttl,
            "stale": cache_stale(cache), "itemCount": cache.item_count, "countsByType": counts,
            "totalBytes": cache.total_bytes, "skipped": len(cache.index.get("skipped") or []),
            "lastError": cache.last_error or None,
            "lastErrorAt": cache.last_error_at.isoformat() if cache.last_error_at else None,
            "failures": cache.failures, "retryAfter": cache.retry_after.isoformat() if backing_off(cache) else None}


# --- reading the cache ---------------------------------------------------------------------
#
# What the collection operations serve is the cached source and, over it, the submissions curators
# approved (CollectionSubmission): those are rows of their own, so a refresh, which replaces the
# cache's items, leaves them in place. At a path both hold, the approved submission is served.


def submission_item(submission: CollectionSubmission) -> CollectionItem:
    """An approved submission as an (unsaved) item, with origin "submission"."""
    entry = submission.entry
    item = CollectionItem(
        path=submission.path, element_type=submission.element_type, name=submission.name,
        description=entry.get("description", ""), author=entry.get("author", ""), version=entry.get("version", ""),
        category=entry.get("category", ""), tags=entry.get("tags", []), unique_id=entry.get("unique_id", ""),
        created=entry.get("created", ""), size=entry.get("size", 0), sha=entry.get("sha", ""), text=submission.text)
    item.origin = "submission"
    return item


def approved_submissions() -> list[CollectionSubmission]:
    """The approved submission served at each path: the latest approved there."""
    served: dict[str, CollectionSubmission] = {}
    approved = CollectionSubmission.objects.filter(status=CollectionSubmission.Status.APPROVED)
    for submission in approved.order_by("-decided_at", "-id"):
        served.setdefault(submission.path, submission)
    return list(served.values())


def served_items(cache: CollectionCache, *, element_type: ElementType | None = None,
                 category: str = "") -> list[CollectionItem]:
    """The collection's items: the approved submissions, and the source's files at the other paths."""
    submissions = [submission_item(s) for s in approved_submissions()]
    community = cache.items.exclude(path__in=[i.path for i in submissions])
    if element_type is not None:
        community = community.filter(element_type=element_type.value)
        submissions = [i for i in submissions if i.element_type == element_type.value]
    if category:
        community = community.filter(category__iexact=category)
        submissions = [i for i in submissions if i.category.lower() == category.lower()]
    return submissions + list(community.defer("text"))


def item_get(cache: CollectionCache, path: object) -> CollectionItem:
    canonical, _ = path_parse(path)
    submission = next((s for s in approved_submissions() if s.path == canonical), None)
    if submission is not None:
        return submission_item(submission)
    item = cache.items.filter(path=canonical).first()
    if item is None:
        raise NotFound(f"No collection content at {canonical}.", code="not_found")
    return item


def items_matching(cache: CollectionCache, *, text: str = "", element_type: ElementType | None = None,
                   category: str = "") -> list[tuple[CollectionItem, list[str], int]]:
    """Items whose name, description or tags hold every word of `text` (case-insensitive), with where
    each matched and a relevance score (name over tags over description)."""
    words = [w.lower() for w in text.split()]
    found = []
    for item in served_items(cache, element_type=element_type, category=category):
        name, description, tags = item.name.lower(), item.description.lower(), [t.lower() for t in item.tags]
        where: set[str] = set()
        score = 0
        for word in words:
            hits = {"name": word in name, "tags": any(word in t for t in tags), "description": word in description}
            if not any(hits.values()):
                break
            where.update(k for k, v in hits.items() if v)
            score += 10 * (word == name) + 5 * hits["name"] + 3 * hits["tags"] + hits["description"]
        else:
            found.append((item, sorted(where), score))
    return found


def item_data(item: CollectionItem) -> dict[str, Any]:
    return {"path": item.path, "type": item.element_type, "name": item.name, "description": item.description,
            "author": item.author, "version": item.version, "category": item.category or None, "tags": item.tags,
            "unique_id": item.unique_id, "created": item.created or None, "size": item.size, "sha": item.sha,
            "origin": item.origin}


# --- installing ----------------------------------------------------------------------------


def collection_install(*, caller: Caller, item: CollectionItem, overwrite: bool) -> tuple[Element, bool]:
    """Install the item as the caller's element through the import path (validation, revision on
    overwrite, audit row). Raises ElementExists for a name the caller already has, without overwrite."""
    package = package_from_text(item.text, path=item.path)
    with transaction.atomic():
        return element_import(caller=caller, package=package, overwrite=overwrite)
