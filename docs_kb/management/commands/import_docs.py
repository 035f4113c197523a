from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from docs_kb.services import docs_import


class Command(BaseCommand):
    help = ("Load the markdown pages under DIR (default docs/) into the docs knowledge base: new and changed "
            "pages by checksum, and remove pages whose file is gone. Pages edited in admin are kept unless --force.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", nargs="?", default=str(Path(settings.BASE_DIR) / "docs"))
        parser.add_argument("--force", action="store_true", help="Overwrite (or remove) pages edited in admin too.")
        parser.add_argument("--dry-run", action="store_true", help="Report what would change, change nothing.")

    def handle(self, *args: Any, directory: str, force: bool, dry_run: bool, **options: Any) -> None:
        root = Path(directory)
        if not root.is_dir():
            raise CommandError(f"{root} is not a directory.")
        report = docs_import(directory=root.resolve(), force=force, dry_run=dry_run)
        for label, slugs in (("created", report.created), ("updated", report.updated), ("removed", report.removed),
                             ("kept (edited in admin)", report.kept_edited)):
            for slug in slugs:
                self.stdout.write(f"{label:<24} {slug}")
        prefix = "Would change" if dry_run else "Changed"
        self.stdout.write(f"{prefix}: {len(report.created)} created, {len(report.updated)} updated, "
                          f"{len(report.removed)} removed; {len(report.unchanged)} unchanged, "
                          f"{len(report.kept_edited)} kept as edited.")
