"""Submitting an element to the server's collection, and the curators' decisions on submissions.

A submission is a snapshot: the collection file the element is (elements.portfolio's writer),
read back by the collection's reader and validated as import_portfolio validates a file, plus the
collection's own rules, with the injection scan's findings kept for the reviewer. A second
submission of the same element while one is pending replaces that snapshot. A curator approves or
rejects a pending submission in admin; each decision locks the row first, so of two curators
deciding at once only the first one counts. An approved submission is served by the collection
operations (elements.collection.served_items) and, where the source is a git repository, committed
to a branch there by a Celery task.
"""

from __future__ import annotations

import difflib
import logging
import re
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError, Forbidden, InvalidInput, NotFound
from elements import collection, selectors, validation
from elements.fields import clean_fields, split_params
from elements.models import CollectionCache, CollectionSubmission, Element, MemoryEntry
from elements.packages import element_package
from elements.portfolio import MARKDOWN_SUFFIX, MEMORY_SUFFIXES, filename_for, text_from_package
from elements.types import MAX_FILE_BYTES, MAX_NAME_LENGTH, ElementType, element_type_parse

Status = CollectionSubmission.Status
MAX_REASON = 2000
MAX_LISTED = 20
# The collection repository's own rules (DollhouseMCP's collection schema), beyond what an import checks.
_UNIQUE_ID = re.compile(r"[a-z0-9_-]+")
_SEMVER = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?")
_MIN_NAME, _MIN_DESCRIPTION, _MAX_COLLECTION_TAGS = 3, 10, 10


class NotPending(DomainError):
    code = "not_pending"
    http_status = 409


# --- the element reference -------------------------------------------------------------------

log = logging.getLogger(__name__)


def element_resolve(*, caller: Caller, content: object, element_type: ElementType | None) -> Element:
    """The caller's element that submit_collection_content's `content` names: its name, with the
    type given apart or as a `type/name` prefix (`personas/Code Reviewer`), or alone when unique."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput("content must name the element to submit: its name, or type/name "
                           "(e.g. personas/code-reviewer).", code="missing_parameter")
    name = content.strip()
    if "/" in name:
        prefix, _, rest = name.partition("/")
        try:
            given = element_type_parse(prefix)
        except InvalidInput as exc:
            raise InvalidInput(f"content: unknown element type {prefix[:40]!r} before '/'. Use type/name, e.g. "
                               "personas/code-reviewer.", code="invalid_parameter") from exc
        if element_type is not None and element_type is not given:
            raise InvalidInput(f"content names a {given.value} but element_type is {element_type.value}.",
                               code="invalid_parameter")
        element_type, name = given, rest.strip()
    if not name or len(name) > MAX_NAME_LENGTH:
        raise InvalidInput(f"content: an element name of 1 to {MAX_NAME_LENGTH} characters.",
                           code="invalid_parameter")
    return selectors.element_find(caller=caller, name=name, element_type=element_type)


# --- the snapshot ----------------------------------------------------------------------------


def collection_path(element: Element) -> str:
    element_type = ElementType(element.element_type)
    suffix = MEMORY_SUFFIXES[0] if element_type is ElementType.MEMORY else MARKDOWN_SUFFIX
    return f"{collection.LIBRARY}/{element_type.plural}/{filename_for(element.name)}{suffix}"


def collection_file(element: Element) -> tuple[str, str, list[str]]:
    """The element's collection file: (path, text, notes). A memory takes only its public entries:
    the collection is everyone's, and private or sensitive entries stay in the author's portfolio."""
    notes = []
    entries = None
    if element.element_type == ElementType.MEMORY:
        entries = selectors.memory_entries(memory=element)
        public = [e for e in entries if e.privacy_level == MemoryEntry.Privacy.PUBLIC]
        if len(public) < len(entries):
            notes.append(f"{len(entries) - len(public)} private or sensitive memory entries were left out; only "
                         "public entries are submitted.")
        entries = public
    package = element_package(element, entries=entries)
    package.pop("modified", None)
    if not package.get("author"):
        package["author"] = element.owner.get_username()  # the collection requires one
    return collection_path(element), text_from_package(package), notes


def _collection_rules(package: dict[str, Any]) -> list[str]:
    errors = []
    name = str(package.get("element_name") or "")
    description = str(package.get("description") or "")
    if len(name) < _MIN_NAME:
        errors.append(f"The collection needs a name of at least {_MIN_NAME} characters.")
    if len(description) < _MIN_DESCRIPTION:
        errors.append(f"The collection needs a description of {_MIN_DESCRIPTION} to 500 characters (got "
                      f"{len(description)}).")
    if not _UNIQUE_ID.fullmatch(str(package.get("unique_id") or "")):
        errors.append("The collection needs a unique_id of lowercase letters, digits, '-' and '_'.")
    if not str(package.get("author") or "").strip():
        errors.append("The collection needs an author.")
    if not _SEMVER.fullmatch(str(package.get("version") or "")):
        errors.append("The collection needs a semantic version such as 1.0.0.")
    if len(package.get("tags") or []) > _MAX_COLLECTION_TAGS:
        errors.append(f"The collection allows at most {_MAX_COLLECTION_TAGS} tags.")
    return errors


def submission_check(*, path: str, text: str) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, str]]]:
    """The file read back as the collection reads it and validated as an import validates it:
    (index entry, validation, scan findings). Raises InvalidInput, naming every problem, when the
    collection would skip it or an import would refuse it."""
    body = text.encode("utf-8")
    try:
        if len(body) > MAX_FILE_BYTES:  # the collection leaves out a larger file
            raise InvalidInput(f"its collection file is {len(body):,} bytes, over the {MAX_FILE_BYTES:,} a collection "
                               "file may have.", code="too_large")
        entry = collection.index_entry(path, body)
        package = collection.package_from_text(text, path=path)
        element_type = element_type_parse(package["element_type"])
        validation.clean_name(package["element_name"], element_type=element_type)
        params = {key: package[key] for key in ("description", "instructions", "content", "tags", "triggers",
                                                "category", "author", "version", "gatekeeper") if key in package}
        params["metadata"] = package.get("metadata") or {}
        common, metadata = split_params(element_type, params)
        clean_fields(element_type, common, metadata)
    except InvalidInput as exc:
        raise InvalidInput(f"This element cannot be submitted to the collection: {exc.message}",
                           code="invalid_element") from exc
    errors = _collection_rules(package)
    if errors:
        raise InvalidInput("This element cannot be submitted to the collection: " + " ".join(errors),
                           code="invalid_element")
    scan = []
    texts = [(field, str(package.get(field) or "")) for field in ("description", "instructions", "content")]
    texts += [(f"entries[{n}]", str(e.get("content") or "")) for n, e in enumerate(package.get("entries") or [])]
    for field, value in texts:
        scan += [{"field": field, "pattern": t.pattern, "severity": t.severity, "excerpt": t.excerpt}
                 for t in validation.scan_injection(value, element_type=element_type)]
    warnings = [f"The security scan flagged {f['field']}: {f['pattern']} ({f['severity']})." for f in scan]
    return entry, {"valid": True, "errors": [], "warnings": warnings}, scan


# --- submitting ------------------------------------------------------------------------------


def _rate_check(caller: Caller) -> None:
    """At most ATRIUM_COLLECTION_SUBMISSIONS_PER_HOUR submissions touched per author in an hour:
    each is queued for a person to read."""
    limit = settings.ATRIUM_COLLECTION_SUBMISSIONS_PER_HOUR
    since = timezone.now() - timedelta(hours=1)
    recent = list(CollectionSubmission.objects.filter(author=caller.user, submitted_at__gt=since)
                  .order_by("submitted_at").values_list("submitted_at", flat=True)[:limit])
    if len(recent) >= limit:
        retry_after = max(1, int((recent[0] + timedelta(hours=1) - timezone.now()).total_seconds()))
        raise InvalidInput(f"You have submitted {limit} elements to the collection in the last hour, the most "
                           f"allowed; try again in {retry_after} seconds.", code="rate_limited",
                           extra={"retryAfter": retry_after})


def submission_create(*, caller: Caller, element: Element) -> tuple[CollectionSubmission, bool]:
    """Submit the caller's element: (submission, replaced). Replaces the snapshot of the element's
    pending submission if there is one, under its row lock; otherwise adds one."""
    if element.owner_id != caller.user.pk:
        raise NotFound(f"No element named '{element.name}'.", code="element_not_found")
    path, text, notes = collection_file(element)
    entry, checked, scan = submission_check(path=path, text=text)
    checked["warnings"] = notes + checked["warnings"]
    snapshot = {"path": path, "text": text, "entry": entry, "validation": checked, "scan": scan,
                "element": element}
    try:
        return _submission_save(caller, element, snapshot)
    except IntegrityError:
        # Two first submissions of one element at once: the other's row now exists; replace it.
        return _submission_save(caller, element, snapshot)


@transaction.atomic
def _submission_save(caller: Caller, element: Element, snapshot: dict[str, Any]) -> tuple[CollectionSubmission, bool]:
    pending = CollectionSubmission.objects.select_for_update().filter(
        author=caller.user, element_type=element.element_type, name=element.name, status=Status.PENDING).first()
    if pending is None:
        _rate_check(caller)
        submission = CollectionSubmission.objects.create(
            author=caller.user, element_type=element.element_type, name=element.name, **snapshot)
    else:
        submission = pending
        for field, value in snapshot.items():
            setattr(submission, field, value)
        submission.submitted_at = timezone.now()
        submission.resubmissions += 1
        submission.save()
    audit_record(caller=caller, action="collection.submit", target=f"{element.element_type} '{element.name}'",
                 detail={"submission": submission.pk, "path": submission.path, "replaced": pending is not None})
    return submission, pending is not None


def submissions_of(*, caller: Caller, limit: int = MAX_LISTED) -> list[CollectionSubmission]:
    """The caller's own submissions, newest first."""
    return list(CollectionSubmission.objects.filter(author=caller.user).order_by("-submitted_at", "-id")[:limit])


def submission_data(submission: CollectionSubmission) -> dict[str, Any]:
    """A submission as its author sees it."""
    data = {"submission_id": submission.pk, "status": submission.status, "element_type": submission.element_type,
            "element_name": submission.name, "path": submission.path,
            "submitted_at": submission.submitted_at.isoformat(),
            "decided_at": submission.decided_at.isoformat() if submission.decided_at else None}
    if submission.status == Status.REJECTED:
        data["reason"] = submission.reason
    if submission.git_branch:
        data["branch"] = submission.git_branch
    return data


# --- deciding --------------------------------------------------------------------------------


def _check_curator(caller: Caller) -> None:
    if not caller.user.is_staff:
        raise Forbidden("Only curators decide on collection submissions.")


def _lock_pending(submission_id: int) -> CollectionSubmission:
    submission = CollectionSubmission.objects.select_for_update().filter(pk=submission_id).first()
    if submission is None:
        raise NotFound(f"No collection submission {submission_id}.", code="not_found")
    if submission.status != Status.PENDING:
        raise NotPending(f"Submission {submission_id} is {submission.status}, not pending: it was decided already.")
    return submission


def _decide(caller: Caller, submission: CollectionSubmission, status: str, reason: str) -> None:
    submission.status, submission.reason = status, reason
    submission.reviewer, submission.decided_at = caller.user, timezone.now()


def _notify(caller: Caller, submission: CollectionSubmission, *, subject: str, body: str) -> None:
    """An entry in the author's own audit trail (query_logs), and an email once the decision is committed."""
    audit_record(caller=Caller.trusted(submission.author, via=caller.via),
                 action=f"collection.submission_{submission.status}",
                 target=f"{submission.element_type} '{submission.name}'",
                 detail={"submission": submission.pk, "path": submission.path, "reviewer": caller.user.get_username(),
                         **({"reason": submission.reason} if submission.reason else {})})
    address = submission.author.email
    if address:
        transaction.on_commit(lambda: send_mail(subject, body, None, [address]), robust=True)


@transaction.atomic
def submission_approve(*, caller: Caller, submission_id: int) -> CollectionSubmission:
    """Approve a pending submission: the collection serves it from now on, at its path. Where the
    source is a git repository, a task commits it to the branch atrium/submission-<id> there."""
    _check_curator(caller)
    submission = _lock_pending(submission_id)
    _decide(caller, submission, Status.APPROVED, "")
    source = str(settings.ATRIUM_COLLECTION_SOURCE)
    if collection.is_git(source):
        submission.git_branch = f"atrium/submission-{submission.pk}"
    submission.save()
    audit_record(caller=caller, action="collection.approve", target=f"{submission.element_type} '{submission.name}'",
                 detail={"submission": submission.pk, "path": submission.path, "author": submission.author_id})
    _notify(caller, submission, subject=f"Your {submission.element_type} '{submission.name}' is in the collection",
            body=f"A curator approved your submission {submission.pk} of {submission.element_type} "
                 f"'{submission.name}'. It is now in the collection at {submission.path}.")
    if submission.git_branch:
        transaction.on_commit(lambda: _push_queue(submission.pk))
    return submission


def _push_queue(submission_id: int) -> None:
    """Queue the git push of an approved submission; a broker out of reach is recorded on it, not raised
    into the curator's page after the approval has committed."""
    from elements.tasks import collection_submission_push

    try:
        collection_submission_push.delay(submission_id)
    except Exception as exc:  # kombu raises several kinds for an unreachable broker
        log.warning("The git push of collection submission %s was not queued: %s", submission_id, exc)
        CollectionSubmission.objects.filter(pk=submission_id, git_commit="").update(
            git_error=f"The push to the git source could not be queued ({type(exc).__name__}): the task broker "
                      "was unreachable.")


@transaction.atomic
def submission_reject(*, caller: Caller, submission_id: int, reason: str) -> CollectionSubmission:
    """Reject a pending submission with a reason its author is told (audit trail and email)."""
    _check_curator(caller)
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("A rejection needs a reason: the author is told it.", code="reason_required")
    if len(reason) > MAX_REASON:
        raise InvalidInput(f"The reason is at most {MAX_REASON} characters.", code="invalid_parameter")
    submission = _lock_pending(submission_id)
    _decide(caller, submission, Status.REJECTED, reason)
    submission.save()
    audit_record(caller=caller, action="collection.reject", target=f"{submission.element_type} '{submission.name}'",
                 detail={"submission": submission.pk, "reason": reason, "author": submission.author_id})
    _notify(caller, submission, subject=f"Your {submission.element_type} '{submission.name}' was not accepted",
            body=f"A curator rejected your submission {submission.pk} of {submission.element_type} "
                 f"'{submission.name}' to the collection.\n\nReason: {reason}\n\nYou can change the element and "
                 "submit it again.")
    return submission


@transaction.atomic
def submission_withdraw(*, caller: Caller, submission_id: int) -> CollectionSubmission:
    """Take an approved submission out of the collection (for instance once the source has it), or
    drop a pending one. The source's file at the path, if any, is served again."""
    _check_curator(caller)
    submission = CollectionSubmission.objects.select_for_update().filter(pk=submission_id).first()
    if submission is None:
        raise NotFound(f"No collection submission {submission_id}.", code="not_found")
    if submission.status not in (Status.PENDING, Status.APPROVED):
        raise NotPending(f"Submission {submission_id} is {submission.status}: only a pending or approved one can "
                         "be withdrawn.")
    submission.status = Status.WITHDRAWN
    submission.reviewer, submission.decided_at = caller.user, timezone.now()
    submission.save()
    audit_record(caller=caller, action="collection.withdraw", target=f"{submission.element_type} '{submission.name}'",
                 detail={"submission": submission.pk, "path": submission.path})
    return submission


# --- the git branch --------------------------------------------------------------------------


def submission_push(*, submission_id: int) -> CollectionSubmission:
    """Commit an approved submission to its branch on the git source, and record how that went. The
    clone and push run outside any transaction; only the outcome is written, under the row lock."""
    submission = CollectionSubmission.objects.select_related("author").get(pk=submission_id)
    if not submission.git_branch or submission.git_commit or submission.status != Status.APPROVED:
        return submission  # nothing to push, pushed already, or withdrawn before the task ran
    author = submission.author
    identity = f"{author.get_full_name() or author.get_username()} <{author.email or 'atrium@localhost'}>"
    commit, error = "", ""
    try:
        commit = collection.branch_commit(
            str(settings.ATRIUM_COLLECTION_SOURCE), branch=submission.git_branch, path=submission.path,
            text=submission.text, author=identity,
            message=f"Add {submission.path}\n\nSubmission {submission.pk} of {submission.element_type} "
                    f"'{submission.name}' by {author.get_username()}, approved in Atrium.\n")
    except collection.SourceUnavailable as exc:
        error = str(exc)
    with transaction.atomic():
        submission = CollectionSubmission.objects.select_for_update().get(pk=submission_id)
        submission.git_commit, submission.git_error = commit, error
        submission.save(update_fields=["git_commit", "git_error"])
    return submission


# --- what the reviewer reads -----------------------------------------------------------------


def served_text(submission: CollectionSubmission) -> tuple[str, str] | None:
    """What the collection serves now at the submission's path, other than the submission itself:
    (where it comes from, its text), or None for a new path."""
    served = next((s for s in collection.approved_submissions()
                   if s.path == submission.path and s.pk != submission.pk), None)
    if served is not None:
        return f"submission {served.pk} (approved)", served.text
    cache = CollectionCache.objects.filter(source=str(settings.ATRIUM_COLLECTION_SOURCE)).first()
    item = cache.items.filter(path=submission.path).first() if cache is not None else None
    if item is not None:
        return f"the collection source's {item.path}", item.text
    return None


def submission_diff(submission: CollectionSubmission) -> tuple[str, list[str]]:
    """The submission against the collection's current version of its path: (against, diff lines)."""
    current = served_text(submission)
    before = current[1].splitlines() if current else []
    against = current[0] if current else "new: nothing in the collection at this path yet"
    lines = difflib.unified_diff(before, submission.text.splitlines(), fromfile=current[0] if current else "(new)",
                                 tofile=f"submission {submission.pk}", lineterm="")
    return against, list(lines)
