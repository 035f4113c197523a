import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from elements.collection import INDEX_FILE, SourceUnavailable, index_build, source_read


def index_text(directory: Path) -> str:
    """collection-index.json for the collection in the directory, as committed beside its library/."""
    return json.dumps(index_build(source_read(str(directory))), indent=2, ensure_ascii=False) + "\n"


class Command(BaseCommand):
    help = (f"Write {INDEX_FILE} for a collection folder (default: the shipped collection/), listing every file "
            "under library/<type>/ with its name, description, tags and checksum. Exits non-zero if any file is "
            "refused.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", type=Path, nargs="?", default=Path(settings.BASE_DIR) / "collection")
        parser.add_argument("--check", action="store_true", help=f"Only say whether {INDEX_FILE} is up to date.")

    def handle(self, *args: Any, directory: Path, check: bool, **options: Any) -> None:
        try:
            text = index_text(directory)
        except SourceUnavailable as exc:
            raise CommandError(str(exc)) from exc
        target = directory / INDEX_FILE
        skipped = json.loads(text)["skipped"]
        if check:
            if not target.is_file() or target.read_text() != text:
                raise CommandError(f"{target} is out of date: run manage.py collection_index.")
        else:
            target.write_text(text)
        for entry in skipped:
            self.stderr.write(f"refused {entry['path']}: {entry['error']}")
        if skipped:
            raise CommandError(f"{len(skipped)} file(s) refused.")
        self.stdout.write(f"{target}: {json.loads(text)['total_elements']} elements.")
