"""The MCP-AQL operations of GitHub sign-in: thin over accounts.github, which never hands them the token."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from accounts import github
from accounts.models import GitHubAuth
from elements.gatekeeper import Level
from elements.mcpaql import Call, Endpoint, Param, operation


def _pending(row: GitHubAuth) -> dict[str, Any]:
    return {"userCode": row.user_code, "verificationUri": row.verification_uri,
            "expiresAt": row.expires_at.isoformat() if row.expires_at else None}


def _status(row: GitHubAuth | None) -> dict[str, Any]:
    connected = row is not None and row.state == GitHubAuth.State.CONNECTED
    data: dict[str, Any] = {"authenticated": connected, "username": (row.login or None) if connected else None,
                            "scopes": list(row.scopes) if connected else [],
                            "state": row.state if row is not None else GitHubAuth.State.NONE}
    if connected:
        data["connectedAt"] = row.connected_at.isoformat() if row.connected_at else None
    if row is not None and row.state == GitHubAuth.State.PENDING:
        data["pending"] = _pending(row)
    if row is not None and row.error:
        data["error"] = row.error
    return data


@operation("setup_github_auth", Endpoint.CREATE,
           "Start GitHub device-code authentication: answers at once with the code to enter at the verification "
           "URL and when it expires; Atrium then polls GitHub until the user grants or denies it or the code "
           "expires (check_github_auth shows the outcome). A sign-in already waiting is answered again rather than "
           "restarted; one that expired or was denied is restarted; one already connected is reported as such. "
           "Atrium extends the reference with state, interval and message.",
           returns="{state, authenticated, username?, userCode?, verificationUri?, expiresAt?, interval?, message}")
def setup_github_auth(call: Call) -> dict[str, Any]:
    row = github.github_auth_start(caller=call.caller)
    if row.state == GitHubAuth.State.CONNECTED:
        return {"state": row.state, "authenticated": True, "username": row.login or None,
                "message": f"Already connected to GitHub as {row.login or 'an unknown user'}; clear_github_auth "
                           "first to sign in again."}
    return {"state": row.state, "authenticated": False, **_pending(row), "interval": row.interval,
            "message": f"Open {row.verification_uri} and enter the code {row.user_code} before it expires; then "
                       "call check_github_auth."}


@operation("configure_oauth", Endpoint.CREATE,
           "Configure GitHub OAuth client ID: the client id of your own OAuth app (with the device flow enabled) "
           "that setup_github_auth signs you in through instead of the server's. Without client_id, answers the "
           "current configuration. Atrium validates the id's form: 'Iv1.' or 'Ov23' and its letters, or 20 "
           "characters.", params=(Param("client_id", "string", False, "OAuth client ID"),),
           returns="{clientId, source: user|server|none, message?}")
def configure_oauth(call: Call) -> dict[str, Any]:
    client_id = call.text("client_id")
    if client_id is None:
        client, source = github.client_id_of(GitHubAuth.objects.filter(user=call.caller.user).first())
        return {"clientId": client or None, "source": source}
    row = github.github_client_configure(caller=call.caller, client_id=client_id)
    return {"clientId": row.client_id, "source": "user",
            "message": "GitHub sign-in now uses this client id; call setup_github_auth to sign in."}


@operation("check_github_auth", Endpoint.READ,
           "Check current GitHub authentication status: whether a token is held, for which GitHub user and with "
           "which scopes, and the code to enter while a sign-in is pending. The token itself is never shown. "
           "Atrium extends the reference with state (none, pending, connected, denied, expired) and error.",
           returns="{authenticated, username, scopes, state, connectedAt?, pending?: {userCode, verificationUri, "
                   "expiresAt}, error?}", writes=True)
def check_github_auth(call: Call) -> dict[str, Any]:
    return _status(github.github_auth_status(caller=call.caller))


@operation("oauth_helper_status", Endpoint.READ,
           "Get diagnostic information about OAuth helper process: in Atrium, the device flow's polling for this "
           "user (pending since, polls made, last poll, next poll, last error). With verbose, also the GitHub "
           "endpoints and where the client id comes from (user, server or none).",
           params=(Param("verbose", "boolean", False, "Include verbose diagnostics"),),
           returns="{state, running, pendingSince, expiresAt, polls, lastPolledAt, nextPollAt, interval, "
                   "lastError, endpoints?, clientId?, clientIdSource?, scopesRequested?}", writes=True)
def oauth_helper_status(call: Call) -> dict[str, Any]:
    row = github.github_auth_status(caller=call.caller)
    pending = row is not None and row.state == GitHubAuth.State.PENDING
    data: dict[str, Any] = {
        "state": row.state if row is not None else GitHubAuth.State.NONE, "running": pending,
        "pendingSince": row.started_at.isoformat() if pending and row.started_at else None,
        "expiresAt": row.expires_at.isoformat() if pending and row.expires_at else None,
        "polls": row.polls if row is not None else 0,
        "lastPolledAt": row.last_polled_at.isoformat() if row is not None and row.last_polled_at else None,
        "nextPollAt": github.next_poll_at(row).isoformat() if pending else None,
        "interval": row.interval if pending else None,
        "lastError": (row.error or None) if row is not None else None,
    }
    if call.flag("verbose"):
        client_id, source = github.client_id_of(row)
        data.update(endpoints=github.endpoints(), clientId=client_id or None, clientIdSource=source,
                    scopesRequested=settings.ATRIUM_GITHUB_SCOPES.split())
    return data


@operation("clear_github_auth", Endpoint.DELETE,
           "Remove GitHub authentication and disconnect: forgets the token and any sign-in under way (a client id "
           "set with configure_oauth stays). Atrium answers whether there was one to remove.",
           returns="{cleared, message}", level=Level.CONFIRM_SINGLE_USE, can_be_elevated=False)
def clear_github_auth(call: Call) -> dict[str, Any]:
    cleared = github.github_auth_clear(caller=call.caller)
    return {"cleared": cleared, "message": "Disconnected from GitHub." if cleared else "No GitHub sign-in to clear."}
