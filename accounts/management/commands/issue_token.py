from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import AuditEvent, User
from accounts.services import token_create
from core.caller import Caller
from core.errors import DomainError


class Command(BaseCommand):
    help = "Make a personal access token for USERNAME and print it (the raw token is the last line)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--create-user", action="store_true", help="Create the user if it does not exist.")
        parser.add_argument("--label", default="command line", help="What the token is for.")
        parser.add_argument("--scope", action="append", dest="scopes", metavar="SCOPE",
                            help="A scope to grant (repeatable). Without any, every scope.")

    def handle(self, *args: Any, username: str, create_user: bool, label: str, scopes: list[str] | None,
               **options: Any) -> None:
        user = User.objects.filter(username=username).first()
        if user is None:
            if not create_user:
                raise CommandError(f"No user {username!r}; pass --create-user to create one.")
            user = User.objects.create_user(username=username)
            self.stderr.write(f"Created user {username} (no password: it signs in with tokens only).")
        try:
            token, raw = token_create(caller=Caller.trusted(user, via=AuditEvent.Via.COMMAND), user=user,
                                      label=label, scopes=scopes)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stderr.write(f"Token '{token.label}' for {username}, scopes: "
                          f"{', '.join(sorted(s.name for s in token.scopes.all()))}")
        self.stdout.write(raw)
