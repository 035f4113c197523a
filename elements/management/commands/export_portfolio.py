from collections import Counter
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.caller import Caller
from accounts.models import AuditEvent, User
from elements.packages import element_package
from elements.portfolio import package_path, text_from_package
from elements.selectors import elements_all, memory_entries
from elements.types import ElementType


def _free_path(path: Path, taken: set[Path]) -> Path:
    """`path`, or with -2, -3... after its stem when another element's name makes the same file name."""
    candidate, number = path, 1
    while candidate in taken:
        number += 1
        candidate = path.with_stem(f"{path.stem}-{number}")
    taken.add(candidate)
    return candidate


class Command(BaseCommand):
    help = ("Write every element of USER to DIRECTORY as a DollhouseMCP portfolio (personas/, skills/, "
            "templates/, agents/, ensembles/, memories/YYYY-MM-DD/), which import_portfolio reads back.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", type=Path, help="The folder to write; created if missing.")
        parser.add_argument("--user", required=True, help="Username whose elements to export.")
        parser.add_argument("--force", action="store_true",
                            help="Write into a folder that is not empty, replacing files of the same name.")

    def handle(self, *args: Any, directory: Path, user: str, force: bool, **options: Any) -> None:
        owner = User.objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"No user {user!r}.")
        if directory.exists() and not directory.is_dir():
            raise CommandError(f"{directory} is a file, not a folder.")
        if directory.is_dir() and any(directory.iterdir()) and not force:
            raise CommandError(f"{directory} is not empty; pass --force to write into it anyway.")
        for element_type in ElementType:
            (directory / element_type.plural).mkdir(parents=True, exist_ok=True)
        counts: Counter[str] = Counter()
        taken: set[Path] = set()
        for element in elements_all(caller=Caller.trusted(owner, via=AuditEvent.Via.COMMAND)):
            is_memory = element.element_type == ElementType.MEMORY
            package = element_package(element, entries=memory_entries(memory=element) if is_memory else None)
            target = directory / _free_path(package_path(package), taken)
            target.parent.mkdir(parents=True, exist_ok=True)
            # Bytes, so line endings inside a body are written exactly as stored.
            target.write_bytes(text_from_package(package).encode("utf-8"))
            counts[element.element_type] += 1
        self.stdout.write(f"Exported {sum(counts.values())} elements of {owner.get_username()} to {directory}")
        for element_type in ElementType:
            self.stdout.write(f"  {element_type.plural:<10} {counts[element_type.value]}")
