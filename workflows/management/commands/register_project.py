from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import AuditEvent, User
from core.caller import Caller
from core.errors import DomainError
from workflows.services import project_register


class Command(BaseCommand):
    help = ("Register PATH (a repository root on USER's machine) as a root of one of their projects, so MCP and "
            "API calls whose cwd lies inside it use that project's workflows.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="The repository root, an absolute path as the user's client sees it.")
        parser.add_argument("--user", required=True, help="Username of the project's owner.")
        parser.add_argument("--project-id", help="The project's id. Default: derived from the path (the folder's "
                                                 "name, or the git remote when this server can read it).")

    def handle(self, *args: Any, path: str, user: str, project_id: str | None, **options: Any) -> None:
        owner = User.objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"No user {user!r}.")
        try:
            project = project_register(caller=Caller.trusted(owner, via=AuditEvent.Via.COMMAND), path=path,
                                       project_id=project_id)
        except DomainError as exc:
            raise CommandError(f"{exc.message} ({exc.code})") from exc
        self.stdout.write(f"Project {project.project_id} of {owner.get_username()}")
        for root in project.roots.all():
            self.stdout.write(f"  root  {root.path}")
