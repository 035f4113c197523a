"""The floor: a bare server of the official MCP SDK (the version Atrium runs), with one tool named
and shaped like Atrium's mcp_aql_read, answering a fixed element at once. What a call costs when
nothing but the SDK and the transport does any work.

    python bench/floor_server.py stdio
    python bench/floor_server.py http PORT     (uvicorn, one process, stateless JSON answers)
"""

import sys
from typing import Any

from mcp.server.fastmcp import FastMCP

ELEMENT = {"success": True, "data": {
    "name": "skill-000042", "element_type": "skill", "description": "Skill number 42", "version": "1.0.0",
    "author": "bench", "tags": ["review"], "content": " ".join(["alpha beta gamma delta review debug"] * 10)}}

floor = FastMCP("floor", stateless_http=True, json_response=True, log_level="WARNING")


@floor.tool(name="mcp_aql_read", structured_output=True)
def mcp_aql_read(operation: str, params: dict[str, Any] | None = None,
                 element_type: str | None = None) -> dict[str, Any]:
    """Read (the floor answers every operation with the same element)."""
    return ELEMENT


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        floor.run("stdio")
    else:
        import uvicorn

        uvicorn.run(floor.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
