"""Aident's auth tools: always available, whatever the token's scopes."""

from typing import Any

from accounts.mcp_registry import Toolset, tool
from accounts.selectors import caller_describe
from accounts.services import credential_revoke


class AuthTools(Toolset):
    @tool(name="auth_status", title="Authentication status", scope=None,
          read_only=True, destructive=False, idempotent=True, open_world=False)
    def auth_status(self) -> dict[str, Any]:
        """Check your current authentication: which user you are, which token this connection
        uses (kind, label, expiry), the scopes it carries, and the MCP session. Always
        accessible, even to a token without scopes; call it first when a tool is missing."""
        return caller_describe(caller=self.caller)

    @tool(name="auth_logout", title="Log out", scope=None,
          read_only=False, destructive=True, idempotent=True, open_world=False)
    def auth_logout(self) -> dict[str, Any]:
        """Revoke the access token this connection uses and end its MCP session. Every later
        call with that token gets HTTP 401; reconnect (sign in again, or configure a new
        token) to continue, for example as a different account."""
        kind = credential_revoke(caller=self.caller)
        return {"logged_out": True, "revoked": kind,
                "message": "Token revoked. Reconnect to sign in again."}
