"""Atrium's MCP protocol layer: one JSON-RPC message in, one answer out, for every transport.

The HTTP view (core.http) and the stdio command (core/management/commands/mcp_stdio.py) are thin
transports over this module: they authenticate, find the legacy session where there is one, and
hand each message here. Tools are listed and called through core.tools, where scopes, arguments,
the gatekeeper's callers and the call record are handled for every transport alike.

Two eras of the protocol are served side by side (docs/specification/2026-07-28/basic/versioning):

- Legacy (2024-11-05 to 2025-11-25): the client opens with `initialize`, which negotiates the
  version; the transport keeps a session (Mcp-Session-Id over HTTP, the process over stdio) and
  the client's capabilities with it. `ping` answers empty.
- Modern (2026-07-28): no handshake and no session. Every request carries its protocol version and
  client capabilities in `params._meta`; over HTTP the MCP-Protocol-Version, Mcp-Method and
  Mcp-Name headers must match the body (HeaderMismatch otherwise). `server/discover` names the
  versions, capabilities and instructions; every result carries `resultType` and the server's
  identity in `_meta`.

A request is modern when its `_meta` names a protocol version or its MCP-Protocol-Version header
names a modern one, and when it is `server/discover`; everything else is legacy.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import version
from typing import Any

from mcp.shared.exceptions import McpError
from mcp_server.djangomcp import DjangoMCP

from core.caller import Caller
from core.tools import tool_call, tool_list

MODERN_VERSIONS = ("2026-07-28",)
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
SUPPORTED_VERSIONS = (*MODERN_VERSIONS, *LEGACY_VERSIONS)

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT = "io.modelcontextprotocol/clientInfo"
META_SERVER = "io.modelcontextprotocol/serverInfo"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022

# The HTTP status of a modern request's error (streamable-http.mdx, versioning.mdx); legacy
# errors travel in a 200 answer, as the handshake revisions' SDKs send them.
MODERN_ERROR_STATUS = {PARSE_ERROR: 400, INVALID_REQUEST: 400, INVALID_PARAMS: 400, HEADER_MISMATCH: 400,
                       UNSUPPORTED_PROTOCOL_VERSION: 400, METHOD_NOT_FOUND: 404}

# The methods that name their target in Mcp-Name, and the parameter that holds it.
NAMED_METHODS = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}
CAPABILITIES = {"tools": {"listChanged": False}}
# How long a client may keep tools/list: tools are fixed while the server runs, and a token's
# scopes are fixed when it is made.
TOOLS_TTL_MS = 300_000
DISCOVER_TTL_MS = 3_600_000


class ProtocolError(Exception):
    """A JSON-RPC error answer: `code`, `message` and `data` as the specification names them."""

    def __init__(self, code: int, message: str, data: Any = None, *, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.status = status

    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@dataclass(frozen=True)
class Message:
    """A client's JSON-RPC message whose envelope is sound."""

    method: str | None  # None for a response to a server request (none are sent; it is ignored)
    id: str | int | None
    params: dict[str, Any]
    notification: bool

    @property
    def meta(self) -> dict[str, Any]:
        meta = self.params.get("_meta")
        return meta if isinstance(meta, dict) else {}

    def modern(self, header_version: str | None = None) -> bool:
        return META_VERSION in self.meta or header_version in MODERN_VERSIONS or self.method == "server/discover"


@dataclass(frozen=True)
class Opened:
    """What a legacy `initialize` settled, for the transport to keep with its session."""

    protocol_version: str
    client_name: str
    client_version: str
    elicitation_modes: str


@dataclass
class Reply:
    """The answer to one message: the JSON-RPC response (None for a notification) and its HTTP
    status; `opened` when it answered `initialize`."""

    body: dict[str, Any] | None
    status: int = 200
    opened: Opened | None = None
    headers: dict[str, str] = field(default_factory=dict)


def parse(body: Any) -> Message:
    """The message in a decoded JSON body, or ProtocolError(-32600) for one that is not a single
    JSON-RPC 2.0 request, notification or response."""
    if isinstance(body, list):
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: send one JSON-RPC message per request; "
                            "batches are not supported.", status=400)
    if not isinstance(body, dict):
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: the body must be a JSON-RPC message object.",
                            status=400)
    message_id = body.get("id")
    if "id" in body and (isinstance(message_id, bool) or not isinstance(message_id, str | int)):
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer.", status=400)
    if body.get("jsonrpc") != "2.0":
        raise ProtocolError(INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0".', status=400)
    method = body.get("method")
    if method is None and ("result" in body or "error" in body) and "id" in body:
        return Message(method=None, id=message_id, params={}, notification=True)
    if not isinstance(method, str):
        raise ProtocolError(INVALID_REQUEST, "Invalid Request: method must be a string.", status=400)
    params = body.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ProtocolError(INVALID_PARAMS, "Invalid params: params must be an object.", status=400)
    return Message(method=method, id=message_id, params=params, notification="id" not in body)


def request_id(body: Any) -> str | int | None:
    """The id of a body, where it has a usable one, for an error about it."""
    if isinstance(body, dict):
        value = body.get("id")
        if isinstance(value, str | int) and not isinstance(value, bool):
            return value
    return None


def decode_header(value: str | None) -> str | None:
    """A header value as sent, with the `=?base64?...?=` sentinel decoded; None if malformed."""
    if value is None or not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    try:
        return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def check_modern(message: Message, headers: Mapping[str, str] | None) -> str:
    """The protocol version of a modern request, after the checks the specification orders
    (the envelope in _meta, then the headers against the body, then the version). `headers`
    (lower-case names) is None on stdio, which has none."""
    meta = message.params.get("_meta")
    if not isinstance(meta, dict):
        raise ProtocolError(INVALID_PARAMS, f"Invalid params: params._meta must be an object carrying "
                            f"{META_VERSION} and {META_CAPABILITIES}.")
    missing = [key for key in (META_VERSION, META_CAPABILITIES) if key not in meta]
    if missing:
        raise ProtocolError(INVALID_PARAMS, f"Invalid params: params._meta is missing {', '.join(missing)}.")
    requested = meta[META_VERSION]
    if headers is not None:
        sent = headers.get("mcp-protocol-version")
        if sent is None or sent != requested:
            raise ProtocolError(HEADER_MISMATCH, f"Header mismatch: MCP-Protocol-Version header {_shown(sent)} "
                                f"does not match the body's {META_VERSION} {_shown(requested)}.")
        if headers.get("mcp-method") != message.method:
            raise ProtocolError(HEADER_MISMATCH, f"Header mismatch: Mcp-Method header "
                                f"{_shown(headers.get('mcp-method'))} does not match the body's method "
                                f"{_shown(message.method)}.")
        name_key = NAMED_METHODS.get(message.method or "")
        if name_key is not None and message.params.get(name_key) is not None:
            sent_name = decode_header(headers.get("mcp-name"))
            if sent_name != message.params.get(name_key):
                raise ProtocolError(HEADER_MISMATCH, f"Header mismatch: Mcp-Name header {_shown(sent_name)} "
                                    f"does not match the body's {name_key} {_shown(message.params.get(name_key))}.")
    if not isinstance(requested, str):
        raise ProtocolError(INVALID_PARAMS, f"Invalid params: {META_VERSION} must be a string.")
    if requested not in MODERN_VERSIONS:
        raise ProtocolError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                            {"supported": list(SUPPORTED_VERSIONS), "requested": requested})
    return requested


def client_info(message: Message) -> tuple[str, str]:
    """The name and version a modern request's client gave in _meta, "" where it gave none."""
    info = message.meta.get(META_CLIENT)
    if not isinstance(info, dict):
        return "", ""
    name, client_version = info.get("name"), info.get("version")
    return (name if isinstance(name, str) else "", client_version if isinstance(client_version, str) else "")


def _shown(value: Any) -> str:
    return "(missing)" if value is None else repr(value)[:80]


def check_legacy_version(header_version: str | None) -> None:
    """A legacy request's MCP-Protocol-Version header, where sent, must name a legacy version."""
    if header_version is not None and header_version not in LEGACY_VERSIONS:
        raise ProtocolError(INVALID_REQUEST, f"Bad Request: Unsupported protocol version: {header_version}. "
                            f"Supported versions: {', '.join(reversed(LEGACY_VERSIONS))}", status=400)


@cache
def server_info(server: DjangoMCP) -> dict[str, str]:
    return {"name": server.name, "version": version("atrium")}


def elicitation_modes(capabilities: Any) -> str:
    """The elicitation modes a client declared, as "form", "url" or "form,url"; an empty
    `elicitation` object means form only (2025-11-25)."""
    declared = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    if not isinstance(declared, dict):
        return ""
    modes = [mode for mode in ("form", "url") if isinstance(declared.get(mode), dict)]
    return ",".join(modes or ["form"])


def _initialize(server: DjangoMCP, params: dict[str, Any]) -> tuple[dict[str, Any], Opened]:
    requested = params.get("protocolVersion")
    client = params.get("clientInfo")
    capabilities = params.get("capabilities")
    if not (isinstance(requested, str) and isinstance(capabilities, dict) and isinstance(client, dict)
            and isinstance(client.get("name"), str) and isinstance(client.get("version"), str)):
        raise ProtocolError(INVALID_PARAMS, "Invalid request parameters: initialize needs protocolVersion, "
                            "capabilities and clientInfo {name, version}.")
    # A version this server does not speak through the handshake gets its newest one as the
    # counter-offer; the client decides whether it can go on with it.
    negotiated = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
    result: dict[str, Any] = {"protocolVersion": negotiated, "capabilities": CAPABILITIES,
                              "serverInfo": server_info(server)}
    if server.instructions:
        result["instructions"] = server.instructions
    return result, Opened(protocol_version=negotiated, client_name=client["name"], client_version=client["version"],
                          elicitation_modes=elicitation_modes(capabilities))


def _call(server: DjangoMCP, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    name = params.get("name")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise ProtocolError(INVALID_PARAMS, "Invalid request parameters: tools/call needs name (text) and "
                            "arguments (an object).")
    try:
        result = tool_call(server, name, arguments, caller)
    except McpError as exc:  # URL elicitation required (2025-11-25): a JSON-RPC error, as the SDK sends it
        error = exc.error.model_dump(by_alias=True, mode="json", exclude_none=True)
        raise ProtocolError(error["code"], error["message"], error.get("data")) from exc
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


Handler = Callable[[DjangoMCP, dict[str, Any], Caller], dict[str, Any]]


def _discover(server: DjangoMCP, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    result: dict[str, Any] = {"supportedVersions": list(SUPPORTED_VERSIONS), "capabilities": CAPABILITIES,
                              "ttlMs": DISCOVER_TTL_MS, "cacheScope": "public"}
    if server.instructions:
        result["instructions"] = server.instructions
    return result


def _tools(server: DjangoMCP, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    return {"tools": tool_list(server, caller)}


def _modern_tools(server: DjangoMCP, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
    # Which tools a caller sees follows from its token's scopes: cacheable for that token only.
    return {"tools": tool_list(server, caller), "ttlMs": TOOLS_TTL_MS, "cacheScope": "private"}


LEGACY_METHODS: dict[str, Handler] = {
    "ping": lambda server, params, caller: {},
    "tools/list": _tools,
    "tools/call": _call,
}
MODERN_METHODS: dict[str, Handler] = {
    "server/discover": _discover,
    "tools/list": _modern_tools,
    "tools/call": _call,
}


def answer(server: DjangoMCP, message: Message, caller: Caller, *, modern: bool) -> Reply:
    """Answer one message whose era the transport has checked (check_modern or
    check_legacy_version, and the session for legacy requests)."""
    if message.notification:
        return Reply(body=None, status=202)
    try:
        if not modern and message.method == "initialize":
            result, opened = _initialize(server, message.params)
            return Reply(body=_response(message.id, result), opened=opened)
        handler = (MODERN_METHODS if modern else LEGACY_METHODS).get(message.method or "")
        if handler is None:
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {message.method}")
        result = handler(server, message.params, caller)
    except ProtocolError as exc:
        return error_reply(exc, message.id, modern=modern)
    if modern:
        result = {**result, "resultType": "complete",
                  "_meta": {**result.get("_meta", {}), META_SERVER: server_info(server)}}
    return Reply(body=_response(message.id, result))


def _response(message_id: str | int | None, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "result": result}


def error_reply(exc: ProtocolError, message_id: str | int | None, *, modern: bool) -> Reply:
    status = exc.status or (MODERN_ERROR_STATUS.get(exc.code, 200) if modern else 200)
    return Reply(body={"jsonrpc": "2.0", "id": message_id, "error": exc.error()}, status=status)
