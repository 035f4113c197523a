from collections import Counter
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import AuditEvent, User
from core.caller import Caller
from elements.selectors import portfolio_files
from elements.types import ElementType, element_type_parse


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
        for path, body in portfolio_files(caller=Caller.trusted(owner, via=AuditEvent.Via.COMMAND)):
            target = directory / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
            counts[element_type_parse(path.parts[0]).value] += 1
        self.stdout.write(f"Exported {sum(counts.values())} elements of {owner.get_username()} to {directory}")
        for element_type in ElementType:
            self.stdout.write(f"  {element_type.plural:<10} {counts[element_type.value]}")
