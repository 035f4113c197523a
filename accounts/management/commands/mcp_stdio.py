from types import SimpleNamespace
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from mcp_server import mcp_server
from mcp_server.djangomcp import django_request_ctx

from accounts.caller import Caller
from accounts.models import AuditEvent, McpSession, User
from accounts.services import mcp_session_close, mcp_session_open
from elements.discrete import discrete_mcp_server


class Command(BaseCommand):
    help = "Serve Atrium's MCP tools over stdio as USERNAME, with all of that user's scopes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, dest="username")
        parser.add_argument("--discrete", action="store_true",
                            help="Serve DollhouseMCP's operations as one tool each (as /mcp/discrete does) "
                                 "instead of Atrium's tools.")

    def handle(self, *args: Any, username: str, discrete: bool = False, **options: Any) -> None:
        user = User.objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"No active user {username!r}.")
        caller = Caller.trusted(user, via=AuditEvent.Via.MCP)
        session = mcp_session_open(caller=caller, transport=McpSession.Transport.STDIO, client_name="stdio")
        caller = caller.with_session(session)
        # The tools read the caller from the package's request context; anyio copies this
        # context into the server's tasks. stdout carries JSON-RPC only: logs go to stderr.
        django_request_ctx.set(SimpleNamespace(user=user, auth=None, caller=caller, META={}))
        try:
            (discrete_mcp_server if discrete else mcp_server).run(transport="stdio")
        finally:
            mcp_session_close(caller=caller, session=session)
