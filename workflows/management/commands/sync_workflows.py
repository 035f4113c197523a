"""`python manage.py sync_workflows`: the command's face on workflows.sync."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import AuditEvent, User
from core.caller import Caller
from core.errors import DomainError
from workflows.sync import workflows_pull, workflows_push


class Command(BaseCommand):
    help = ("Sync USER's global store (--global) or one of their projects (--project ID) with DIR, which holds "
            "<id>.yaml per workflow and its bundled files under <id>/. pull (the default) writes DIR into the "
            "store: every file is validated, and if any is invalid nothing is written. push writes the store into "
            "DIR. Nothing is ever deleted on either side.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", type=Path, help="The folder, e.g. a repository's .atrium/workflows.")
        parser.add_argument("--user", required=True, help="Username of the store's owner.")
        store = parser.add_mutually_exclusive_group(required=True)
        store.add_argument("--project", metavar="ID", help="One of the user's projects, by its project id "
                                                           "(created, with no roots, when missing).")
        store.add_argument("--global", dest="global_", action="store_true", help="The user's global store.")
        parser.add_argument("--direction", choices=("pull", "push"), default="pull",
                            help="pull: folder -> store (default); push: store -> folder.")
        parser.add_argument("--dry-run", action="store_true", help="Report what would change; write nothing.")

    def handle(self, *args: Any, directory: Path, user: str, project: str | None, global_: bool, direction: str,
               dry_run: bool, **options: Any) -> None:
        owner = User.objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"No user {user!r}.")
        try:
            if direction == "pull":
                self._pull(directory, owner, project, dry_run=dry_run)
            else:
                self._push(directory, owner, project, dry_run=dry_run)
        except DomainError as exc:
            raise CommandError(exc.message) from exc

    def _line(self, outcome: str, name: str) -> None:
        self.stdout.write(f"{outcome}  {name}")

    def _summary(self, heading: str, counts: Counter[str], outcomes: tuple[str, ...], dry_run: bool) -> None:
        parts = ", ".join(f"{counts[o]} {o}" for o in outcomes)
        self.stdout.write(f"{heading}: {parts}" + (" (dry run: nothing was written)" if dry_run else ""))

    def _pull(self, directory: Path, owner: User, project_id: str | None, *, dry_run: bool) -> None:
        report = workflows_pull(caller=Caller.trusted(owner, via=AuditEvent.Via.COMMAND), owner=owner,
                                project_id=project_id, directory=directory, dry_run=dry_run)
        # A pull that kept nothing (a dry run, or one with an invalid file) says what it would have done.
        would = {} if report.written else {"created": "would be created", "updated": "would be updated"}
        for workflow_id in sorted(report.outcomes):
            self._line(would.get(report.outcomes[workflow_id], report.outcomes[workflow_id]), workflow_id)
            for error in report.files[workflow_id].errors:
                self.stdout.write(f"    {report.files[workflow_id].filename}: {error}")
        for workflow_id in report.only_in_store:
            self._line("only in the store", workflow_id)
        counts = Counter(would.get(outcome, outcome) for outcome in report.outcomes.values())
        counts["only in the store"] = len(report.only_in_store)
        kept = ("would be created", "would be updated") if would else ("created", "updated")
        self._summary(f"Pulled {directory} into {report.store}", counts,
                      (*kept, "unchanged", "invalid", "only in the store"), dry_run)
        if report.invalid:
            raise CommandError(f"{report.invalid} invalid file(s); nothing was written.")

    def _push(self, directory: Path, owner: User, project_id: str | None, *, dry_run: bool) -> None:
        report = workflows_push(owner=owner, project_id=project_id, directory=directory, dry_run=dry_run)
        for outcome, workflow_id, note in report.lines:
            self._line(outcome, workflow_id + note)
        counts = Counter(outcome for outcome, _, _ in report.lines)
        self._summary(f"Pushed {report.store} to {directory}", counts, ("written", "unchanged", "skipped"), dry_run)
