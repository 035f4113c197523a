from collections import Counter
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from django.db import connection

from accounts.models import AuditEvent, User
from core.caller import Caller
from elements.portfolio import iter_portfolio
from elements.services import IMPORTED, REFUSED, REPLACED, SKIPPED, elements_import

OUTCOMES = (IMPORTED, REPLACED, SKIPPED, REFUSED)
# Files imported per transaction (services.elements_import): one commit, and one statement per
# table for the new elements, per batch instead of per file.
BATCH = 500
# The tables an import grows, whose planner statistics are refreshed as they do.
GROWN_TABLES = ("elements_element", "elements_memoryentry", "elements_elementrevision")


class Statistics:
    """Refresh the database's planner statistics each time an import has doubled what the
    elements table held at the last refresh: plans chosen for a small table stay fast as it grows."""

    min_rows = 1000  # below this the statistics matter little

    def __init__(self) -> None:
        self.since = 0
        self.rows = max(self.min_rows, self._rows())

    @staticmethod
    def _rows() -> int:
        from elements.models import Element

        return Element.objects.count()

    def grew(self, created: int) -> None:
        self.since += created
        if self.since >= self.rows:
            self.refresh()
            self.rows, self.since = max(self.min_rows, self._rows()), 0

    @staticmethod
    def refresh() -> None:
        with connection.cursor() as cursor:
            for table in GROWN_TABLES:
                cursor.execute(f"ANALYZE {table}")


def _unstyled(text: str) -> str:
    return text


class Progress:
    """`[#####.....] 12/40` redrawn in place on a terminal; one plain line per file in logs and pipes."""

    width = 30

    def __init__(self, out: OutputWrapper, total: int) -> None:
        self.out = out
        self.total = total
        self.redraw = out.isatty()

    def advance(self, done: int, label: str) -> None:
        if not self.redraw:
            self.out.write(f"{done}/{self.total} {label}", style_func=_unstyled)
            return
        filled = self.width * done // self.total
        self.out.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total}", ending="",
                       style_func=_unstyled)
        self.out.flush()

    def finish(self) -> None:
        if self.redraw:
            self.out.write("", style_func=_unstyled)  # ends the bar's line


class Command(BaseCommand):
    help = ("Import a DollhouseMCP portfolio folder (personas/, skills/, templates/, agents/, ensembles/, "
            "memories/) as USER's elements. A file that cannot be imported is reported and the rest go on; the "
            "command then exits non-zero.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", type=Path, help="The portfolio folder, e.g. ~/.dollhouse/portfolio.")
        parser.add_argument("--user", required=True, help="Username of the elements' owner.")
        parser.add_argument("--overwrite", action="store_true",
                            help="Replace elements that already exist (their current version is kept as a revision).")
        parser.add_argument("--dry-run", action="store_true",
                            help="Check every file as a real import would, then write nothing.")

    def handle(self, *args: Any, directory: Path, user: str, overwrite: bool, dry_run: bool, **options: Any) -> None:
        owner = User.objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"No user {user!r}.")
        if not directory.is_dir():
            raise CommandError(f"{directory} is not a folder.")
        # Read everything first: the progress bar needs the total, and reading is quick next to importing.
        found = list(iter_portfolio(directory))
        if not found:
            raise CommandError(f"No element files in {directory}: expected personas/, skills/, templates/, agents/, "
                               "ensembles/ or memories/ inside it.")
        caller = Caller.trusted(owner, via=AuditEvent.Via.COMMAND)
        counts: Counter[str] = Counter()
        refusals: list[str] = []
        progress = Progress(self.stderr, len(found))
        statistics = Statistics()
        for start in range(0, len(found), BATCH):
            batch = found[start:start + BATCH]
            readable = [package for _, package in batch if not isinstance(package, str)]
            outcomes = iter(elements_import(caller=caller, packages=readable, overwrite=overwrite, dry_run=dry_run))
            created_before = counts[IMPORTED]
            for done, (path, package) in enumerate(batch, start=start + 1):
                filename = path.relative_to(directory).as_posix()
                if isinstance(package, str):
                    outcome, reason = REFUSED, package  # the message names the file already
                else:
                    outcome, refusal = next(outcomes)
                    reason = f"{filename}: {refusal}" if refusal else ""
                counts[outcome] += 1
                if reason:
                    refusals.append(reason)
                progress.advance(done, filename)
            if not dry_run:
                statistics.grew(counts[IMPORTED] - created_before)
        progress.finish()
        self._summary(directory, owner, counts, refusals, dry_run=dry_run)
        if all(isinstance(package, str) for _, package in found):
            raise CommandError(f"Nothing could be read from {directory}.")
        if counts["refused"]:
            # The good files are in (or, in a dry run, would be); the exit status still tells a
            # script that the portfolio did not come over whole.
            done = "checked" if dry_run else "imported"
            raise CommandError(f"{counts['refused']} of {len(found)} file(s) refused (listed above); the others were "
                               f"{done}.")

    def _summary(self, directory: Path, owner: User, counts: Counter[str], refusals: list[str], *,
                 dry_run: bool) -> None:
        heading = f"Portfolio {directory} into {owner.get_username()}'s elements"
        self.stdout.write(heading + (" (dry run: nothing was written)" if dry_run else ""))
        notes = {"skipped": "  (already exist; --overwrite replaces them)"}
        for outcome in OUTCOMES:
            self.stdout.write(f"  {outcome:<8} {counts[outcome]}{notes.get(outcome, '') if counts[outcome] else ''}")
        if refusals:
            self.stdout.write("Refused:")
            for line in refusals:
                self.stdout.write(f"  {line}")
