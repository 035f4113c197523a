"""Aident's auth tools: always available, whatever the token's scopes."""

from typing import Any

from accounts.selectors import caller_describe
from accounts.services import credential_revoke
from core.output_schemas import (
    BOOLEAN,
    DATETIME,
    DATETIME_OR_NULL,
    INTEGER,
    TEXT,
    TEXT_OR_NULL,
    TEXTS,
    enum,
    obj,
    one_of,
)
from core.tools import Toolset, tool

# The credential this connection uses, by kind; a stdio process or a signed-in session has no token.
TOKEN = one_of(
    obj({"kind": enum("personal"), "description": TEXT, "id": INTEGER, "label": TEXT, "prefix": TEXT,
         "created_at": DATETIME, "expires_at": DATETIME_OR_NULL}),
    obj({"kind": enum("oauth"), "description": TEXT, "client_id": TEXT, "client_name": TEXT, "expires_at": DATETIME}),
    obj({"kind": enum("stdio", "session"), "description": TEXT}),
)
AUTH_STATUS_OUTPUT = obj(
    {"authenticated": {"const": True},
     "user": obj({"id": INTEGER, "username": TEXT, "email": TEXT, "is_staff": BOOLEAN}),
     "token": TOKEN, "scopes": TEXTS, "mcp_url": TEXT},
    {"session": obj({"id": TEXT, "transport": enum("http", "stdio"), "client": TEXT_OR_NULL,
                     "protocol_version": TEXT_OR_NULL})},
)
AUTH_LOGOUT_OUTPUT = obj({"logged_out": {"const": True}, "revoked": enum("personal", "oauth"), "message": TEXT})


class AuthTools(Toolset):
    @tool(name="auth_status", title="Authentication status", scope=None,
          read_only=True, destructive=False, idempotent=True, open_world=False, output_schema=AUTH_STATUS_OUTPUT)
    def auth_status(self) -> dict[str, Any]:
        """Check your current authentication: which user you are, which token this connection
        uses (kind, label, expiry), the scopes it carries, and the MCP session. Always
        accessible, even to a token without scopes; call it first when a tool is missing."""
        return caller_describe(caller=self.caller)

    @tool(name="auth_logout", title="Log out", scope=None,
          read_only=False, destructive=True, idempotent=True, open_world=False, output_schema=AUTH_LOGOUT_OUTPUT)
    def auth_logout(self) -> dict[str, Any]:
        """Revoke the access token this connection uses and end its MCP session. Every later
        call with that token gets HTTP 401, except that for a minute it may still list the tools
        that need no scope (SDK clients list them to check this answer against its output
        schema); reconnect (sign in again, or configure a new token) to continue, for example as
        a different account."""
        kind = credential_revoke(caller=self.caller)
        return {"logged_out": True, "revoked": kind,
                "message": "Token revoked. Reconnect to sign in again."}
