"""MCP over Streamable HTTP: a plain Django view over core.protocol, at /mcp and /mcp/discrete.

Each URL serves one of Atrium's MCP servers (config/urls.py): the main one at /mcp, DollhouseMCP's
discrete tools (elements.discrete) at /mcp/discrete. McpRouteMiddleware sends both straight to the
view, past the session, CSRF, messages and allauth middlewares that a bearer-token endpoint has no
use for.

- POST, DELETE (ends a legacy session) and OPTIONS (CORS preflight). GET would open a standalone
  SSE stream, which Atrium does not offer: 405, as both eras allow.
- Bearer authentication with a personal or OAuth token (accounts.authentication); failures are
  rate-limited per client address, tool calls per token (accounts.ratelimit).
- A browser Origin outside ATRIUM_ALLOWED_ORIGINS gets 403 (DNS-rebinding protection).
- A body past ATRIUM_MAX_REQUEST_BYTES gets 413, and one that is not JSON, or is JSON nested past
  core.input_bounds.MAX_MESSAGE_DEPTH, gets the JSON-RPC parse error (-32700) with 400, before
  anything walks it. Arguments are bounded again, tighter, by core.tools.
- A database that is down (or a statement past the statement timeout) gets 503 with a JSON-RPC
  error, never an HTML page.
- Legacy sessions live in the database (accounts.McpSession), bound to their user, so any web
  process can serve any request and a session id is useless to another user. Modern (2026-07-28)
  requests carry no session: they are checked against their headers and answered statelessly;
  their tool calls share the credential's standing session (accounts.services
  .mcp_session_of_credential), so what DollhouseMCP keeps per session (activations, the
  gatekeeper's confirmations, CLI approvals) carries from one call to the next.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from mcp_server.djangomcp import DjangoMCP
from rest_framework.exceptions import AuthenticationFailed, Throttled

from accounts.authentication import bearer_authenticate, logged_out_caller, protected_resource_metadata_url
from accounts.models import McpSession
from accounts.ratelimit import tool_call_retry_after
from accounts.selectors import mcp_session_find
from accounts.services import (
    mcp_session_close,
    mcp_session_of_credential,
    mcp_session_open,
    mcp_session_touch,
    records_defer,
    records_write,
)
from core import protocol
from core.caller import Caller
from core.input_bounds import MAX_MESSAGE_DEPTH, JsonRefused, json_parse
from core.protocol import ProtocolError, Reply
from core.tools import missing_scope, tools_of

logger = logging.getLogger(__name__)

SESSION_HEADER = "Mcp-Session-Id"
CORS_ALLOW_HEADERS = ("Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Mcp-Method, "
                      "Mcp-Name, Last-Event-ID")
CORS_EXPOSE_HEADERS = "Mcp-Session-Id, WWW-Authenticate"


def origin_allowed(origin: str) -> bool:
    parts = urlsplit(origin)
    for allowed in settings.ATRIUM_ALLOWED_ORIGINS:
        if allowed.endswith(":*"):
            pattern = urlsplit(allowed[:-2])
            if (parts.scheme, parts.hostname) == (pattern.scheme, pattern.hostname):
                return True
        elif origin.rstrip("/") == allowed.rstrip("/"):
            return True
    return False


def json_response(payload: Any, status: int = 200) -> HttpResponse:
    text = json.dumps(payload, ensure_ascii=False)
    try:
        content = text.encode()
    except UnicodeEncodeError:  # a lone surrogate a client sent, echoed back: escaped, as JSON allows
        content = json.dumps(payload).encode()
    return HttpResponse(content, status=status, content_type="application/json")


def jsonrpc_error(status: int, message_id: Any, code: int, message: str, **data: Any) -> HttpResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if data:
        error["data"] = data
    return json_response({"jsonrpc": "2.0", "id": message_id, "error": error}, status)


def reply_response(reply: Reply) -> HttpResponse:
    response = HttpResponse(status=reply.status) if reply.body is None else json_response(reply.body, reply.status)
    for name, value in reply.headers.items():
        response[name] = value
    return response


def unauthorized(message: str, code: str) -> HttpResponse:
    """RFC 6750's 401 with the protected resource metadata, so an OAuth client can sign in."""
    response = json_response({"error": message, "code": code}, 401)
    response["WWW-Authenticate"] = f'Bearer resource_metadata="{protected_resource_metadata_url()}"'
    return response


def insufficient_scope(message_id: Any, tool_name: str, scope: str) -> HttpResponse:
    """RFC 6750 403 challenge, so an OAuth client can step up to the scope it needs."""
    response = jsonrpc_error(
        403, message_id, -32001,
        f"Tool '{tool_name}' needs the scope '{scope}', which this token does not carry.",
        requiredScopes=[scope],
    )
    response["WWW-Authenticate"] = (
        f'Bearer error="insufficient_scope", scope="{scope}", '
        f'resource_metadata="{protected_resource_metadata_url()}", '
        f'error_description="Tool {tool_name} requires scope {scope}"'
    )
    return response


def too_many_tool_calls(message_id: Any, retry_after: int) -> HttpResponse:
    """429 with Retry-After for clients that back off on the status, and a JSON-RPC error for
    those that read the body."""
    response = jsonrpc_error(
        429, message_id, -32000,
        f"Too many tool calls on this token: at most {settings.ATRIUM_TOOL_CALLS_PER_MINUTE} a minute. "
        f"Retry after {retry_after} seconds.",
        retryAfter=retry_after,
    )
    response["Retry-After"] = str(retry_after)
    return response


def mcp_view(server: DjangoMCP):
    """The view serving `server`."""

    @csrf_exempt
    def view(request: HttpRequest) -> HttpResponse:
        # The calls' records are written when the response is closed, after it was sent.
        records_defer()
        origin = request.headers.get("Origin")
        if origin and not origin_allowed(origin):
            return json_response({"error": f"Origin {origin} is not allowed.", "code": "origin_not_allowed"}, 403)
        try:
            response = _dispatch(server, request)
        except (OperationalError, InterfaceError) as exc:
            logger.warning("MCP request failed on the database: %s", exc)
            response = jsonrpc_error(503, None, protocol.INTERNAL_ERROR,
                                     "The database is unavailable; try again shortly.")
            response["Retry-After"] = "5"
        if origin:
            response["Access-Control-Allow-Origin"] = origin
            response["Access-Control-Expose-Headers"] = CORS_EXPOSE_HEADERS
            response["Vary"] = "Origin"
        return response

    return view


def records_after_response(**_: Any) -> None:
    """Connected to request_finished, which a response's close() sends in the request's thread once
    the WSGI server has sent it: the tool calls' records are written then, not while the client
    waits, and before the request's database connection is released (core.apps)."""
    records_write()


def _dispatch(server: DjangoMCP, request: HttpRequest) -> HttpResponse:
    if request.method == "OPTIONS":
        response = HttpResponse(status=204)
        response["Access-Control-Allow-Methods"] = "POST, DELETE"
        response["Access-Control-Allow-Headers"] = CORS_ALLOW_HEADERS
        response["Access-Control-Max-Age"] = "600"
        return response
    if request.method not in ("POST", "DELETE"):
        response = HttpResponse(status=405)
        response["Allow"] = "POST, DELETE"
        return response
    body: Any = None
    if request.method == "POST":
        refused = _body_refusal(request)
        if isinstance(refused, HttpResponse):
            return refused
        body = refused
    try:
        caller = bearer_authenticate(request, via="mcp")
    except Throttled as exc:
        response = json_response({"error": str(exc.detail), "code": "throttled"}, 429)
        response["Retry-After"] = str(int(exc.wait or 1))
        return response
    except AuthenticationFailed as exc:
        # A client that has just logged out may still list the tools anyone may see (an SDK checks
        # the logout's own answer against its output schema) and end its session.
        after_logout = logged_out_caller(request, via="mcp")
        if after_logout is not None:
            return _after_logout(server, request, body, after_logout)
        return unauthorized(str(exc.detail), exc.get_codes() if isinstance(exc.get_codes(), str) else "error")
    if caller is None:
        return unauthorized("Authentication credentials were not provided.", "not_authenticated")
    if request.method == "DELETE":
        return _session_end(request, caller)
    return _post(server, request, body, caller)


def _body_refusal(request: HttpRequest) -> HttpResponse | Any:
    """413 for a body past the limit, -32700 for one that is not bounded JSON; else the JSON."""
    limit = settings.ATRIUM_MAX_REQUEST_BYTES
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return jsonrpc_error(400, None, protocol.PARSE_ERROR, "Parse error: the Content-Length header is not a number.")
    if length > limit:
        return jsonrpc_error(413, None, protocol.INVALID_REQUEST,
                             f"Request body too large: {length:,} bytes; the limit is {limit:,}.")
    content_type = request.content_type or ""
    if content_type != "application/json":
        return json_response({"error": f'Unsupported media type "{content_type}" in request: send '
                              'application/json.', "code": "unsupported_media_type"}, 415)
    try:
        return json_parse(request.body, MAX_MESSAGE_DEPTH)
    except JsonRefused as exc:
        return jsonrpc_error(400, None, protocol.PARSE_ERROR, f"Parse error: {exc}")


def _accepts_json(request: HttpRequest) -> bool:
    accepted = request.headers.get("Accept", "")
    return any(part.strip().startswith(("application/json", "*/*", "application/*")) for part in accepted.split(","))


def _post(server: DjangoMCP, request: HttpRequest, body: Any, caller: Caller) -> HttpResponse:
    message_id = protocol.request_id(body)
    try:
        message = protocol.parse(body)
    except ProtocolError as exc:
        return reply_response(protocol.error_reply(exc, message_id, modern=True))
    header_version = request.headers.get("MCP-Protocol-Version")
    modern = message.modern(header_version)
    if not message.notification and not _accepts_json(request):
        return jsonrpc_error(406, message_id, protocol.INVALID_REQUEST,
                             "Not Acceptable: Client must accept application/json")
    try:
        if modern:
            version = protocol.check_modern(message, {name.lower(): value for name, value in request.headers.items()})
            session = None
        else:
            protocol.check_legacy_version(header_version)
            session = None
            if message.method != "initialize":
                session_id = request.headers.get(SESSION_HEADER)
                if not session_id:
                    return jsonrpc_error(400, message_id, protocol.INVALID_REQUEST,
                                         "Missing Mcp-Session-Id header: send initialize first.")
                session = mcp_session_find(caller=caller, session_id=session_id)
                if session is None:
                    return jsonrpc_error(404, message_id, protocol.INVALID_REQUEST,
                                         "Session not found or expired: send initialize to start a new one.")
                mcp_session_touch(session)
    except ProtocolError as exc:
        return reply_response(protocol.error_reply(exc, message_id, modern=modern))
    caller = caller.with_session(session)

    if message.method == "tools/call" and not message.notification:
        retry_after = tool_call_retry_after(caller.token)
        if retry_after is not None:
            return too_many_tool_calls(message_id, retry_after)
        # OAuth clients get the standard 403 challenge and can re-authorize with the scope.
        # Personal-token clients cannot step up, and a 403 ends an mcp 1.x client's whole
        # connection, so they get the in-band tool error from core.tools instead.
        name = message.params.get("name")
        if caller.token_kind == "oauth" and isinstance(name, str) and name in tools_of(server):
            scope = missing_scope(server, name, caller)
            if scope is not None:
                return insufficient_scope(message_id, name, scope)

    if modern and message.method == "tools/call" and not message.notification:
        # Opened only for a call that is about to run: a refused one leaves no session behind.
        name, client_version = protocol.client_info(message)
        caller = caller.with_session(mcp_session_of_credential(
            caller=caller, protocol_version=version, client_name=name, client_version=client_version))
    reply = protocol.answer(server, message, caller, modern=modern)
    if reply.opened is not None:
        opened = reply.opened
        session = mcp_session_open(
            caller=caller, transport=McpSession.Transport.HTTP, protocol_version=opened.protocol_version,
            client_name=opened.client_name, client_version=opened.client_version,
            elicitation_modes=opened.elicitation_modes,
        )
        reply.headers[SESSION_HEADER] = session.id
    return reply_response(reply)


def _session_end(request: HttpRequest, caller: Caller) -> HttpResponse:
    session = mcp_session_find(caller=caller, session_id=request.headers.get(SESSION_HEADER, ""))
    if session is None:
        return HttpResponse(status=404)
    mcp_session_close(caller=caller, session=session)
    return HttpResponse(status=204)


def _after_logout(server: DjangoMCP, request: HttpRequest, body: Any, caller: Caller) -> HttpResponse:
    """What a token that has just logged out may still do: list the tools that need no scope, and
    end its session (which the logout already closed)."""
    if request.method == "DELETE":
        return HttpResponse(status=204)
    try:
        message = protocol.parse(body)
    except ProtocolError:
        message = None
    if message is None or message.method != "tools/list":
        return unauthorized("Invalid or revoked token.", "authentication_failed")
    modern = message.modern(request.headers.get("MCP-Protocol-Version"))
    return reply_response(protocol.answer(server, message, caller, modern=modern))


class McpRouteMiddleware:
    """Serve the MCP endpoints before the middlewares that only browsers need."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = MCP_ROUTES.get(request.path_info)
        if view is not None:
            return view(request)
        return self.get_response(request)


MCP_ROUTES: dict[str, Any] = {}


def mcp_route(path: str, server: DjangoMCP) -> Any:
    """The view of `server`, served at `path` by McpRouteMiddleware (and named in the URLconf)."""
    view = mcp_view(server)
    MCP_ROUTES[path] = view
    return view
