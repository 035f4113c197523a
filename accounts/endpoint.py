"""The /mcp endpoint: django-mcp-server's view, hardened.

The same view serves every MCP server of Atrium's, named by its `mcp_server` (config/urls.py):
the main one at /mcp, DollhouseMCP's discrete tools (elements.discrete) at /mcp/discrete.

- POST and DELETE only. GET would open the package's standalone SSE stream, which never ends
  and spins a CPU core, so it answers 405 (the spec allows that; SDK clients carry on).
- Bearer authentication with a personal or OAuth token; failures are rate-limited per client
  address, tool calls per token (accounts.ratelimit).
- A browser Origin outside ATRIUM_ALLOWED_ORIGINS gets 403 (DNS-rebinding protection).
- A body past ATRIUM_MAX_REQUEST_BYTES gets 413, and one that is not JSON, or is JSON nested
  past accounts.input_bounds.MAX_MESSAGE_DEPTH, gets the JSON-RPC parse error (-32700) with 400,
  before anything walks it. Arguments are bounded again, tighter, by the tool layer.
- A database that is down (or a statement past the statement timeout) gets 503 with a JSON-RPC
  error, never an HTML page.
- MCP sessions live in the database (accounts.McpSession), bound to their user, so any web
  process can serve any request and a session id is useless to another user.
- tools/list, tools/call, ping and the initialized notification are answered here, in the
  request's thread, through accounts.mcp_registry; the package and the SDK handle initialize and
  the rest. The package's path builds an SDK session manager and an event loop per request and
  hops threads twice, which costs more than everything else in a tool call.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from mcp import types
from mcp.shared.exceptions import McpError
from mcp.shared.version import SUPPORTED_PROTOCOL_VERSIONS
from mcp_server.views import MCPServerStreamableHttpView
from pydantic import ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

from accounts.authentication import BearerAuthentication, caller_from_request, protected_resource_metadata_url
from accounts.input_bounds import MAX_MESSAGE_DEPTH, JsonRefused, json_parse
from accounts.mcp_registry import elicitation_modes, missing_scope, tool_call, tool_list, tools_of
from accounts.models import McpSession
from accounts.ratelimit import tool_call_retry_after
from accounts.selectors import mcp_session_find
from accounts.services import mcp_session_close, mcp_session_open, mcp_session_touch

logger = logging.getLogger(__name__)

SESSION_HEADER = "Mcp-Session-Id"
DIRECT_METHODS = {"tools/list", "tools/call", "ping", "notifications/initialized"}
CORS_ALLOW_HEADERS = "Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID"


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


def jsonrpc_error(status: int, message_id: Any, code: int, message: str, **data: Any) -> JsonResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if data:
        error["data"] = data
    return JsonResponse({"jsonrpc": "2.0", "id": message_id, "error": error}, status=status)


def insufficient_scope(message_id: Any, tool_name: str, scope: str) -> JsonResponse:
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


def too_many_tool_calls(message_id: Any, retry_after: int) -> JsonResponse:
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


class McpEndpoint(MCPServerStreamableHttpView):
    authentication_classes = [BearerAuthentication]
    permission_classes = [IsAuthenticated]
    http_method_names = ["post", "delete", "options"]
    # The body is checked in dispatch, so DRF's own parser only ever sees bounded JSON; tool
    # arguments are checked in accounts.mcp_registry, where each product's error shape is known.
    parser_classes = [JSONParser]
    # The MCP endpoint speaks JSON-RPC (docs/connecting-clients.md), not REST: it has no place in the
    # OpenAPI schema, where the schema generator would guess it an operation per method.
    schema = None

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        origin = request.headers.get("Origin")
        if origin and not origin_allowed(origin):
            return JsonResponse({"error": f"Origin {origin} is not allowed.", "code": "origin_not_allowed"},
                                status=403)
        if request.method == "GET":
            response = HttpResponse(status=405)
            response["Allow"] = "POST, DELETE"
        elif request.method == "OPTIONS":
            response = HttpResponse(status=204)
            response["Access-Control-Allow-Methods"] = "POST, DELETE"
            response["Access-Control-Allow-Headers"] = CORS_ALLOW_HEADERS
            response["Access-Control-Max-Age"] = "600"
        else:
            response = self._body_refusal(request) or super().dispatch(request, *args, **kwargs)
        if origin:
            response["Access-Control-Allow-Origin"] = origin
            response["Access-Control-Expose-Headers"] = "Mcp-Session-Id, WWW-Authenticate"
            response["Vary"] = "Origin"
        return response

    @staticmethod
    def _body_refusal(request: HttpRequest) -> HttpResponse | None:
        """413 for a body past the limit, -32700 for one that is not bounded JSON; None if it is."""
        if request.method != "POST":
            return None
        limit = settings.ATRIUM_MAX_REQUEST_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return jsonrpc_error(400, None, -32700, "Parse error: the Content-Length header is not a number.")
        if length > limit:
            return jsonrpc_error(413, None, -32600, f"Request body too large: {length:,} bytes; the limit is "
                                 f"{limit:,}.")
        try:
            json_parse(request.body, MAX_MESSAGE_DEPTH)
        except JsonRefused as exc:
            return jsonrpc_error(400, None, -32700, f"Parse error: {exc}")
        return None

    def handle_exception(self, exc: Exception) -> HttpResponse:
        if isinstance(exc, OperationalError | InterfaceError):
            logger.warning("MCP request failed on the database: %s", exc)
            response = jsonrpc_error(503, None, -32603, "The database is unavailable; try again shortly.")
            response["Retry-After"] = "5"
            return response
        return super().handle_exception(exc)

    def post(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        caller = caller_from_request(request, via="mcp")
        message = request.data if isinstance(request.data, dict) else {}
        method = message.get("method")
        message_id = message.get("id")
        if method == "tools/call":
            retry_after = tool_call_retry_after(caller.token)
            if retry_after is not None:
                return too_many_tool_calls(message_id, retry_after)

        session: McpSession | None = None
        if method != "initialize":
            session_id = request.headers.get(SESSION_HEADER)
            if not session_id:
                return jsonrpc_error(400, message_id, -32600,
                                     "Missing Mcp-Session-Id header: send initialize first.")
            session = mcp_session_find(caller=caller, session_id=session_id)
            if session is None:
                return jsonrpc_error(404, message_id, -32600,
                                     "Session not found or expired: send initialize to start a new one.")
            mcp_session_touch(session)
        request.caller = caller.with_session(session)

        # OAuth clients get the standard 403 challenge and can re-authorize with the scope.
        # Personal-token clients cannot step up, and a 403 ends an mcp 1.x client's whole
        # connection, so they get the in-band tool error from the guard instead.
        if method == "tools/call" and caller.token_kind == "oauth":
            name = (message.get("params") or {}).get("name")
            if isinstance(name, str) and name in tools_of(self.mcp_server):
                scope = missing_scope(self.mcp_server, name, caller)
                if scope is not None:
                    return insufficient_scope(message_id, name, scope)

        if method in DIRECT_METHODS:
            return self._answer(request, message)
        response = self.mcp_server.handle_django_request(request)
        if method == "initialize" and response.status_code == 200:
            response[SESSION_HEADER] = self._session_open(request, message, response).id
        return response

    def delete(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        caller = caller_from_request(request, via="mcp")
        session = mcp_session_find(caller=caller, session_id=request.headers.get(SESSION_HEADER, ""))
        if session is None:
            return HttpResponse(status=404)
        mcp_session_close(caller=caller, session=session)
        return HttpResponse(status=204)

    def _answer(self, request: Request, message: dict[str, Any]) -> HttpResponse:
        """Answer a hot-path message, with the checks the SDK's transport would make first."""
        message_id = message.get("id")
        accepted = request.headers.get("Accept", "").split(",")
        if not any(part.strip().startswith("application/json") for part in accepted):
            return jsonrpc_error(406, message_id, -32600, "Not Acceptable: Client must accept application/json")
        version = request.headers.get("MCP-Protocol-Version")
        if version is not None and version not in SUPPORTED_PROTOCOL_VERSIONS:
            return jsonrpc_error(400, message_id, -32600, f"Bad Request: Unsupported protocol version: {version}. "
                                 f"Supported versions: {', '.join(SUPPORTED_PROTOCOL_VERSIONS)}")
        if message.get("method") == "notifications/initialized" and "id" not in message:
            return HttpResponse(status=202)
        try:
            parsed = types.ClientRequest.model_validate(message).root
        except ValidationError:
            return jsonrpc_error(200, message_id, types.INVALID_PARAMS, "Invalid request parameters")
        if isinstance(parsed, types.ListToolsRequest):
            result: types.Result = types.ListToolsResult(tools=tool_list(self.mcp_server, request.caller))
        elif isinstance(parsed, types.CallToolRequest):
            try:
                result = tool_call(self.mcp_server, parsed.params.name, parsed.params.arguments or {}, request)
            except McpError as exc:  # e.g. URL elicitation required: a JSON-RPC error, as the SDK sends it
                return JsonResponse({"jsonrpc": "2.0", "id": message_id,
                                     "error": exc.error.model_dump(by_alias=True, mode="json", exclude_none=True)})
        else:
            result = types.EmptyResult()
        return JsonResponse({"jsonrpc": "2.0", "id": message_id,
                             "result": result.model_dump(by_alias=True, mode="json", exclude_none=True)})

    @staticmethod
    def _session_open(request: Request, message: dict[str, Any], response: HttpResponse) -> McpSession:
        params = message.get("params") or {}
        client = params.get("clientInfo") or {}
        try:
            negotiated = json.loads(response.content)["result"]["protocolVersion"]
        except (ValueError, KeyError, TypeError):
            negotiated = ""
        return mcp_session_open(
            caller=request.caller, transport=McpSession.Transport.HTTP, protocol_version=str(negotiated),
            client_name=str(client.get("name", "")), client_version=str(client.get("version", "")),
            elicitation_modes=elicitation_modes(params.get("capabilities")),
        )
