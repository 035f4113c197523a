"""A walk through Atrium with the official MCP SDK client of the current major version.

Run by tests/live/sdk_current.py with the venv of tests/live/sdk/requirements.txt, never imported by
the test suite (which runs mcp 1.x). Prints one JSON object of what it saw.

    walk.py http URL TOKEN MODE        Streamable HTTP with a bearer token, then auth_logout
    walk.py stdio MODE -- COMMAND...   stdio, the server started as COMMAND

MODE is the client's connect mode: auto (server/discover, then the handshake if need be), legacy
(initialize), or a protocol version such as 2026-07-28.
"""

import asyncio
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        result = await client.call_tool(tool, arguments)
    except MCPError as exc:
        return {"mcp_error": exc.error.code, "message": exc.error.message}
    except RuntimeError as exc:  # a structured answer that breaks the tool's output schema
        return {"client_error": str(exc)}
    text = result.content[0].text if result.content else ""
    return {"is_error": bool(result.is_error), "structured": result.structured_content, "text": json.loads(text)}


async def walk(server: Callable[[], Any], mode: str, *, logout: bool) -> dict[str, Any]:
    """`server` makes the Client's server argument, one per connection."""
    seen: dict[str, Any] = {}
    async with Client(server(), mode=mode) as client:
        seen["protocol_version"] = client.protocol_version
        tools = await client.list_tools()
        seen["tools"] = [tool.name for tool in tools.tools]
        seen["auth_status"] = await call(client, "auth_status", {})
        seen["list_personas"] = await call(client, "mcp_aql_read", {"operation": "list_elements",
                                                                     "params": {"element_type": "persona"}})
        # The gatekeeper asks for a confirmation once per session: the next call must find it.
        seen["confirm"] = await call(client, "mcp_aql_execute", {"operation": "confirm_operation",
                                                                 "params": {"operation": "create_element"}})
        seen["create_persona"] = await call(client, "mcp_aql_create", {
            "operation": "create_element",
            "params": {"element_name": "SDK walker", "element_type": "persona",
                       "description": "Made by the current SDK", "instructions": "You walk."}})
        if logout:
            fresh = Client(server(), mode=mode)  # a client that has not listed the tools yet
            async with fresh:
                seen["auth_logout"] = await call(fresh, "auth_logout", {})
            seen["after_logout"] = await call(client, "auth_status", {})
    return seen


def main(argv: list[str]) -> None:
    if argv[0] == "http":
        url, token, mode = argv[1:4]
        seen = asyncio.run(walk_http(url, token, mode))
    else:
        mode = argv[1]
        command = argv[argv.index("--") + 1:]
        params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
        seen = asyncio.run(walk(lambda: params, mode, logout=False))
    print(json.dumps(seen))


async def walk_http(url: str, token: str, mode: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        return await walk(lambda: _Transport(url, http), mode, logout=True)


class _Transport:
    """streamable_http_client with the token's HTTP client, as a fresh transport on each connect."""

    def __init__(self, url: str, http: httpx2.AsyncClient) -> None:
        self.url, self.http, self.opened = url, http, None

    async def __aenter__(self):
        self.opened = streamable_http_client(self.url, http_client=self.http, terminate_on_close=True)
        return await self.opened.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.opened.__aexit__(*exc)


if __name__ == "__main__":
    main(sys.argv[1:])
