import time
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError
from integrations.executors import ActionFailed
from integrations.executors.transport import read_capped
from integrations.openapi import MAX_DOCUMENT_BYTES, ImportReport
from integrations.services import integration_document_import


def _fetch(url: str) -> bytes:
    """The document at `url`. The operator chose it, so any host will do; size and time are bounded."""
    timeout = settings.ATRIUM_HTTP_TIMEOUT_SECONDS
    deadline = time.monotonic() + timeout
    headers = {"Accept": "application/yaml, application/json, */*", "Accept-Encoding": "identity"}
    try:
        with (httpx.Client(timeout=timeout, follow_redirects=True, trust_env=False) as client,
              client.stream("GET", url, headers=headers) as response):
            if response.status_code != 200:
                raise CommandError(f"{url} answered HTTP {response.status_code}.")
            content, truncated = read_capped(response, max_bytes=MAX_DOCUMENT_BYTES, deadline=deadline)
    except httpx.HTTPError as exc:
        raise CommandError(f"Could not fetch {url}: {exc or type(exc).__name__}.") from exc
    except ActionFailed as exc:
        raise CommandError(f"Could not fetch {url}: {exc.message}") from exc
    if truncated:
        raise CommandError(f"{url} is larger than {MAX_DOCUMENT_BYTES:,} bytes.")
    return content


def _read(path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            content = file.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise CommandError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
    if len(content) > MAX_DOCUMENT_BYTES:
        raise CommandError(f"{path} is larger than {MAX_DOCUMENT_BYTES:,} bytes.")
    return content


class Command(BaseCommand):
    help = ("Import an OpenAPI 3.0 or 3.1 document (a YAML or JSON file, or an http(s) URL) as an integration: "
            "one action per operation. Importing it again updates the actions and removes those whose operation "
            "is gone.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("document", metavar="FILE_OR_URL", help="The OpenAPI document: a file or an http(s) URL.")
        parser.add_argument("--id", dest="integration_id",
                            help="The integration's id (default: x-atrium-integration.id, else from info.title).")
        parser.add_argument("--server-url", help="The API's base URL, instead of the document's servers[0].url.")

    def handle(self, *args: Any, document: str, integration_id: str | None, server_url: str | None,
               **options: Any) -> None:
        content = _fetch(document) if document.startswith(("http://", "https://")) else _read(Path(document))
        try:
            _, report = integration_document_import(document=content, source=document, integration_id=integration_id,
                                                    server_url=server_url)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self._summary(report)

    def _summary(self, report: ImportReport) -> None:
        verb = "Created" if report.integration_created else "Updated"
        self.stdout.write(f"{verb} integration {report.integration_id} ({report.name}): base URL {report.base_url}, "
                          f"auth {report.auth_scheme}.")
        for label, names in (("created", report.created), ("updated", report.updated), ("removed", report.removed),
                             ("skipped", report.skipped)):
            for name in names:
                self.stdout.write(f"  {label:<8} {name}")
        self.stdout.write(f"Actions: {len(report.created)} created, {len(report.updated)} updated, "
                          f"{len(report.removed)} removed, {len(report.unchanged)} unchanged; "
                          f"{len(report.skipped)} operation(s) skipped.")
