import secrets
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from accounts.caller import Caller
from accounts.models import AuditEvent, User
from accounts.services import token_create


class Command(BaseCommand):
    help = "Create the demo user once, then print the MCP URL and a fresh personal token for it."

    def handle(self, *args: Any, **options: Any) -> None:
        user = User.objects.filter(username="demo").first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user = User.objects.create_superuser("demo", email="demo@example.com", password=password)
            password_line = f"password {password}  (shown once; change it with: manage.py changepassword demo)"
        else:
            password_line = "password as printed when it was created (reset: manage.py changepassword demo)"
        _, raw = token_create(caller=Caller.trusted(user, via=AuditEvent.Via.COMMAND), user=user,
                              label="make run")
        self.stdout.write(
            "\n".join([
                "",
                "Atrium is starting.",
                f"  Console and admin:  {settings.ATRIUM_PUBLIC_URL}/admin/   user demo, {password_line}",
                f"  MCP URL:            {settings.ATRIUM_MCP_URL}",
                f"  Token for demo:     {raw}",
                "",
                "  Claude Code:  claude mcp add --transport http atrium "
                f"{settings.ATRIUM_MCP_URL} --header \"Authorization: Bearer {raw}\"",
                "  Docs:         docs/connecting-clients.md",
                "",
            ])
        )
