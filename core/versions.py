"""Row versions for optimistic concurrency: the REST API's ETag and If-Match.

A version is the row's id with its `modified` time in microseconds: every write sets `modified`,
so the version changes with every change a GET could show. Services compare it under the row
lock, so a client that edits what it read is refused when someone else wrote in between.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from rest_framework.request import Request

from core.errors import DomainError


class VersionConflict(DomainError):
    code = "version_conflict"
    http_status = 412


def row_version(pk: int, modified: datetime) -> str:
    return f"{pk}-{int(modified.timestamp() * 1_000_000)}"


def etag(version: str) -> str:
    return f'"{version}"'


def if_match(request: Request) -> frozenset[str] | None:
    """The versions an If-Match header accepts; None when it is absent or `*` (any version).
    Weak tags never match (If-Match compares strongly), so they are dropped."""
    header = request.headers.get("If-Match")
    if header is None or header.strip() == "*":
        return None
    tags = (tag.strip() for tag in header.split(","))
    return frozenset(tag[1:-1] for tag in tags if len(tag) >= 2 and tag[0] == tag[-1] == '"')


def version_check(*, current: str, accepted: Collection[str] | None, what: str) -> None:
    """Refuse a write made against a version other than the stored one."""
    if accepted is not None and current not in accepted:
        raise VersionConflict(f"The {what} changed since you read it (it is now at version {etag(current)}): "
                              "read it again and reapply your change. Nothing was saved.")
