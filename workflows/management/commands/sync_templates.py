"""Load the shipped playbook templates (workflows/playbook_templates/) into the database. Safe to run
on every deploy (make run does): unchanged templates are left alone, a template whose file is gone
is disabled, and a curator's own templates are never touched."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from workflows.templates import templates_sync


class Command(BaseCommand):
    help = "Load the shipped playbook templates; a bad file is reported and skipped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--directory", type=Path,
                            help="Load the templates in this folder instead of the shipped ones.")

    def handle(self, *args: Any, directory: Path | None = None, **options: Any) -> None:
        done = templates_sync(directory=directory)
        # Refused files go to stderr at every verbosity: they are what an operator must fix.
        for refused in done["refused"]:
            for problem in refused["problems"]:
                self.stderr.write(f"{refused['file']}: {problem}")
        if options["verbosity"]:
            self.stdout.write(", ".join(f"{len(done[key])} {key}" for key in
                                        ("created", "updated", "unchanged", "disabled", "refused")) + ".")
