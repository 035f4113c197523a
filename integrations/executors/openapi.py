"""openapi.operation: one operation of an imported OpenAPI document (integrations.openapi writes its
Action rows), sent to the integration's base URL with the caller's credentials.

The action's config says how input maps onto the request: {method, path, parameters: [{name, in,
allowReserved?}], hasBody}. Each parameter is the input property of the same name; `body` is the
JSON request body. The base URL's host is the only one the request (and its redirects) may reach:
an operator imported the document, so it needs no listing in ATRIUM_HTTP_ALLOWED_HOSTS.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

from integrations.executors import ActionCall, ActionFailed, executor
from integrations.executors.transport import MAX_RESPONSE_BYTES, Reply, authorize, origin_allowlist, param_text, send

OPERATION_EXECUTOR = "openapi.operation"
MAX_ERROR_DETAILS = 4000
PATH_TEMPLATE = re.compile(r"\{([^{}]+)\}")


def _text(value: Any) -> str:
    return ",".join(map(param_text, value)) if isinstance(value, list) else param_text(value)


def _path(template: str, values: dict[str, Any], reserved: set[str]) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match[1]
        if values.get(name) is None:
            raise ActionFailed(f"Path parameter {name} is required.", code="invalid_input")
        text = _text(values[name])
        # A "." or ".." segment would move the request to another path of the API once the URL
        # is normalised; an empty one would leave the path's shape ambiguous.
        segments = text.split("/") if name in reserved else [text]
        if any(segment in ("", ".", "..") for segment in segments):
            raise ActionFailed(f"Path parameter {name} may not be empty, '.' or '..' (or contain such a segment).",
                               code="invalid_input")
        return quote(text, safe="/" if name in reserved else "")

    return PATH_TEMPLATE.sub(fill, template)


def _details(reply: Reply) -> Any:
    """The error body for the caller: parsed JSON when it is short enough to give whole, else text cut short."""
    body = reply.body()
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    if not isinstance(body, str) and len(text) <= MAX_ERROR_DETAILS:
        return body
    return text if len(text) <= MAX_ERROR_DETAILS else text[:MAX_ERROR_DETAILS] + "…"


@executor(OPERATION_EXECUTOR)
def run_operation(call: ActionCall) -> Any:
    integration = call.action.integration
    config = call.action.config
    if not integration.base_url:
        raise ActionFailed(f"{integration.id} has no base URL: import it again with a server URL.",
                           code="not_configured")
    values = call.input
    parameters = config.get("parameters", [])
    reserved = {p["name"] for p in parameters if p["in"] == "path" and p.get("allowReserved")}
    path = _path(config["path"], values, reserved)
    headers = {"Accept": "application/json"}
    query: list[tuple[str, str]] = []
    for parameter in parameters:
        name, where = parameter["name"], parameter["in"]
        value = values.get(name)
        if value is None or where == "path":
            continue
        if where == "query":
            query.extend((name, param_text(item)) for item in (value if isinstance(value, list) else [value]))
        elif where == "header":
            headers[name] = _text(value)
    content = None
    if config.get("hasBody") and "body" in values:
        content = json.dumps(values["body"], separators=(",", ":"), ensure_ascii=False).encode()
        headers["Content-Type"] = "application/json"
    authorization = authorize(scheme=integration.auth_scheme, config=integration.auth_config,
                              credentials=call.credentials)
    headers, query = authorization.apply(headers, query)
    method = config["method"]
    reply = send(method=method, url=integration.base_url.rstrip("/") + path,
                 allowlist=origin_allowlist(integration.base_url, owner=integration.id),
                 headers=headers, query=query, content=content)
    if not reply.ok:
        raise ActionFailed(f"{integration.name} answered HTTP {reply.status} to {method} {config['path']}.",
                           code="http_error", status=reply.status, details=_details(reply))
    if reply.truncated:
        raise ActionFailed(f"{integration.name}'s answer is larger than {MAX_RESPONSE_BYTES:,} bytes: ask for less "
                           "(a smaller page, fewer fields).", code="response_too_large")
    if not reply.content.strip():
        return {}
    try:
        return json.loads(reply.content)
    except ValueError:
        return reply.text()
