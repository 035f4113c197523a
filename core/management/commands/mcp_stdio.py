"""MCP over stdio: one JSON-RPC message per line on stdin, one answer per line on stdout.

A thin transport over core.protocol, like the HTTP view: the process is the caller's session in
both eras (legacy clients open it with initialize; modern ones send their version with each
request). Calls are answered one at a time on the main thread, each with one write; stdout
carries JSON-RPC only, logs go to stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Any, BinaryIO

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections
from mcp_server import mcp_server

from accounts.models import AuditEvent, McpSession, User
from accounts.services import mcp_session_close, mcp_session_describe, mcp_session_open, records_defer, records_write
from core import protocol
from core.caller import Caller
from core.input_bounds import MAX_MESSAGE_DEPTH, JsonRefused, json_parse
from core.protocol import ProtocolError
from elements.discrete import discrete_mcp_server

# A line past this is refused unread, like an HTTP body past ATRIUM_MAX_REQUEST_BYTES.
MAX_LINE_BYTES = 16 * 1024 * 1024


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
        try:
            serve(discrete_mcp_server if discrete else mcp_server, caller, sys.stdin.buffer, sys.stdout.buffer)
        finally:
            mcp_session_close(caller=caller, session=session)


def serve(server: Any, caller: Caller, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Answer each line of `stdin` until it ends."""
    while True:
        line = stdin.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            _write(stdout, _error(None, protocol.INVALID_REQUEST, f"Message too large: more than {MAX_LINE_BYTES:,} "
                                  "bytes on one line."))
            while line and not line.endswith(b"\n"):  # the rest of that line is skipped unread
                line = stdin.readline(MAX_LINE_BYTES)
            continue
        if not line.strip():
            continue
        close_old_connections()
        records_defer()
        try:
            answer = respond(server, caller, line)
            if answer is not None:
                _write(stdout, answer)
        finally:
            records_write()  # the calls' records, once the client has its answer


def respond(server: Any, caller: Caller, line: bytes) -> dict[str, Any] | None:
    """The answer to one line, or None for a notification."""
    try:
        body = json_parse(line, MAX_MESSAGE_DEPTH)
    except JsonRefused as exc:
        return _error(None, protocol.PARSE_ERROR, f"Parse error: {exc}")
    message_id = protocol.request_id(body)
    try:
        message = protocol.parse(body)
        modern = message.modern()
        version = protocol.check_modern(message, None) if modern else None
    except ProtocolError as exc:
        return protocol.error_reply(exc, message_id, modern=True).body
    session = caller.session
    if version is not None and session is not None and session.protocol_version != version:
        name, client_version = protocol.client_info(message)
        mcp_session_describe(session=session, protocol_version=version, client_name=name or session.client_name,
                             client_version=client_version, elicitation_modes="")
    reply = protocol.answer(server, message, caller, modern=modern)
    if reply.opened is not None and session is not None:
        mcp_session_describe(session=session, protocol_version=reply.opened.protocol_version,
                             client_name=reply.opened.client_name, client_version=reply.opened.client_version,
                             elicitation_modes=reply.opened.elicitation_modes)
    return reply.body


def _error(message_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": message}}


def _write(stdout: BinaryIO, answer: dict[str, Any]) -> None:
    try:
        line = json.dumps(answer, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate a client sent, echoed back: escaped, as JSON allows
        line = json.dumps(answer).encode()
    stdout.write(line + b"\n")
    stdout.flush()
