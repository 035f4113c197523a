"""http_tools: one HTTP request to a host the operator allows.

Any answer is the action's output, whatever its status: a 404 or a 500 is something the caller
asked to see (is the page there? what does the API say?), so `status` reports it and only a request
that could not be made (a refused host or scheme, no answer) is an ActionFailed.
"""

from __future__ import annotations

import json
from typing import Any

from integrations.executors import ActionCall, ActionFailed, ActionSpec, IntegrationSpec, executor
from integrations.executors.transport import (
    MAX_RESPONSE_BYTES,
    authorize,
    check_headers,
    param_text,
    send,
    settings_allowlist,
)

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
MAX_REQUEST_BYTES = 1024 * 1024
# The transport writes these from the request itself; a caller's own would contradict it.
TRANSPORT_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "te", "trailer",
                               "upgrade", "keep-alive", "proxy-authorization", "proxy-connection"})

_SCALAR: dict[str, Any] = {"type": ["string", "number", "boolean"]}

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "method": {"type": "string", "enum": list(METHODS), "description": "The HTTP method."},
        "url": {"type": "string", "minLength": 1, "maxLength": 8192,
                "description": "Absolute http:// or https:// URL. Its host must be one the operator allows."},
        "headers": {"type": "object", "maxProperties": 50,
                    "additionalProperties": {"type": "string", "maxLength": 8192},
                    "description": "Request headers. Authorization is replaced by the connection's token when "
                                   "http_tools is connected."},
        "query": {"type": "object", "maxProperties": 100,
                  "additionalProperties": {"anyOf": [_SCALAR, {"type": "array", "items": _SCALAR, "maxItems": 100}]},
                  "description": "Query parameters added to the URL's own; a list repeats the parameter."},
        "json": {"description": "A JSON body, sent with Content-Type: application/json. Not with `body`."},
        "body": {"type": "string", "maxLength": MAX_REQUEST_BYTES,
                 "description": "A text body, sent as UTF-8 (Content-Type text/plain unless a header says "
                                "otherwise). Not with `json`."},
    },
    "required": ["method", "url"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "integer", "description": "The response's HTTP status, whatever it is."},
        "headers": {"type": "object", "additionalProperties": {"type": "string"},
                    "description": "Selected response headers, lower-cased: content-type, location, etag, "
                                   "link, retry-after, rate-limit headers and the like."},
        "body": {"description": "The parsed JSON of a JSON response, else its text (empty for HEAD)."},
        "truncated": {"type": "boolean",
                      "description": f"True when the body was longer than {MAX_RESPONSE_BYTES:,} bytes and was cut "
                                     "there (a cut JSON body is returned as text)."},
    },
    "required": ["status", "headers", "body", "truncated"],
    "additionalProperties": False,
}

INTEGRATION = IntegrationSpec(
    id="http_tools",
    name="HTTP requests",
    description="Call any HTTP or REST API on the hosts the server's operator allows: GET a web page or JSON "
                "resource, POST or PUT JSON to an endpoint, DELETE a resource, check a URL with HEAD.",
    category="development",
    agent_instructions=(
        "Use http_tools.request for APIs that have no integration of their own. Only hosts the operator lists in "
        "ATRIUM_HTTP_ALLOWED_HOSTS can be reached; any other answers host_not_allowed, so do not retry it. "
        "Connecting http_tools is optional: when connected, its token is sent as `Authorization: Bearer` on "
        "every request. Every HTTP status is a result: read `status` (a 404 is not an error of the action). "
        "Bodies over 1 MiB are cut (`truncated`)."
    ),
    auth_scheme="bearer",
    connection_required=False,
    actions=(
        ActionSpec(
            name="request",
            description=(
                "Send one HTTP request (GET, POST, PUT, PATCH, DELETE or HEAD) to a URL on an allowed host and "
                "return the response: status, selected headers, and the body (parsed JSON for JSON responses, "
                "text otherwise). Send a JSON body with `json` or text with `body`; add query parameters with "
                "`query`. Any status, 4xx and 5xx included, is returned as the result; only a refused host, a "
                "non-http URL or no answer is an error. Redirects are followed only to allowed hosts. The "
                "connection's bearer token, when http_tools is connected, replaces any Authorization header."
            ),
            input_schema=INPUT_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
            executor="http.request",
        ),
    ),
)


def _query(values: dict[str, Any]) -> list[tuple[str, str]]:
    return [(name, param_text(item)) for name, value in values.items()
            for item in (value if isinstance(value, list) else [value])]


@executor("http.request")
def request(call: ActionCall) -> dict[str, Any]:
    data = call.input
    method = data["method"]
    if "json" in data and "body" in data:
        raise ActionFailed("Give either `json` or `body`, not both.", code="invalid_input")
    headers = check_headers(data.get("headers") or {})
    refused = sorted(name for name in headers if name.lower() in TRANSPORT_HEADERS)
    if refused:
        raise ActionFailed(f"Header {', '.join(refused)} is set by the request itself and may not be given.",
                           code="invalid_input")
    content: bytes | None = None
    content_type = None
    if "json" in data:
        content = json.dumps(data["json"], separators=(",", ":"), ensure_ascii=False).encode()
        content_type = "application/json"
    elif "body" in data:
        content = data["body"].encode()
        content_type = "text/plain; charset=utf-8"
    if content is not None:
        if len(content) > MAX_REQUEST_BYTES:
            raise ActionFailed(f"The request body is larger than {MAX_REQUEST_BYTES:,} bytes.", code="invalid_input")
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = content_type
    integration = call.action.integration
    authorization = authorize(scheme=integration.auth_scheme, config=integration.auth_config,
                              credentials=call.credentials)
    headers, query = authorization.apply(headers, _query(data.get("query") or {}))
    reply = send(method=method, url=data["url"], allowlist=settings_allowlist(), headers=headers, query=query,
                 content=content)
    return {"status": reply.status, "headers": reply.selected_headers(),
            "body": "" if method == "HEAD" else reply.body(), "truncated": reply.truncated}
