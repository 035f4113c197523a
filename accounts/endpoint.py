"""The /mcp endpoint: django-mcp-server's view, hardened.

- POST and DELETE only. GET would open the package's standalone SSE stream, which never ends
  and spins a CPU core, so it answers 405 (the spec allows that; SDK clients carry on).
- Bearer authentication with a personal or OAuth token; failures are rate-limited.
- A browser Origin outside ATRIUM_ALLOWED_ORIGINS gets 403 (DNS-rebinding protection).
- MCP sessions live in the database (accounts.McpSession), bound to their user, so any web
  process can serve any request and a session id is useless to another user.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from mcp_server.views import MCPServerStreamableHttpView
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

from accounts.authentication import BearerAuthentication, caller_from_request, protected_resource_metadata_url
from accounts.mcp_registry import TOOLS, missing_scope
from accounts.models import McpSession
from accounts.selectors import mcp_session_find
from accounts.services import mcp_session_close, mcp_session_open, mcp_session_touch

SESSION_HEADER = "Mcp-Session-Id"
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


class McpEndpoint(MCPServerStreamableHttpView):
    authentication_classes = [BearerAuthentication]
    permission_classes = [IsAuthenticated]
    http_method_names = ["post", "delete", "options"]

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
            response = super().dispatch(request, *args, **kwargs)
        if origin:
            response["Access-Control-Allow-Origin"] = origin
            response["Access-Control-Expose-Headers"] = "Mcp-Session-Id, WWW-Authenticate"
            response["Vary"] = "Origin"
        return response

    def post(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        caller = caller_from_request(request, via="mcp")
        message = request.data if isinstance(request.data, dict) else {}
        method = message.get("method")
        message_id = message.get("id")

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
            if isinstance(name, str) and name in TOOLS:
                scope = missing_scope(name, caller)
                if scope is not None:
                    return insufficient_scope(message_id, name, scope)

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
        )
