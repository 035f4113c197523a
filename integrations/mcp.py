"""Aident's capability and vault tools: search, read and execute integration actions and skills, and
connect the integrations they need. Errors are `{error, code}` (plus the fields the tool names) with
isError set; an action's own error is its payload, a skill answers `{success, output?, error?,
executionTimeMs}`."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from mcp import types as mcp_types
from mcp.shared.exceptions import UrlElicitationRequiredError
from pydantic import BaseModel, ConfigDict, Field

from core.errors import DomainError, Forbidden, InvalidInput
from core.tools import Toolset, error_payload_result, success_result, tool
from integrations import search, selectors, services, vault
from integrations.mcp_schemas import (
    EXECUTE_OUTPUT,
    GET_OUTPUT,
    INTEGRATION_LIST_OUTPUT,
    SEARCH_OUTPUT,
    VAULT_OUTPUT,
)

SEARCH, READ, EXECUTE = "capabilities:search", "capabilities:read", "capabilities:execute"
INTEGRATIONS_READ, INTEGRATIONS_CONNECT = "integrations:read", "integrations:connect"

CapabilityName = Annotated[str, Field(min_length=1, max_length=200, description=(
    "A skill name (send_email_skill) or an integration action as integrationId.ACTION_NAME "
    "(email_tools.send_email)."))]
IntegrationId = Annotated[str | None, Field(max_length=63, description=(
    "The integration's id (e.g. github_tools). Required for connect and disconnect."))]


class SearchScope(BaseModel):
    model_config = ConfigDict(extra="forbid")

    integrationId: str | None = Field(default=None, max_length=63, description="Only this integration's.")
    category: str | None = Field(default=None, max_length=60, description="Only integrations of this category.")


class CapabilityTools(Toolset):
    def _error_result(self, exc: DomainError) -> mcp_types.CallToolResult:
        return error_payload_result({"error": exc.message, "code": exc.code, **exc.extra})

    def _url_elicitation(self, pending: list[dict[str, Any]]) -> None:
        """Send the user to each connect page by URL elicitation, when this client declared it
        (2025-11-25). The connect page is where the secret goes, never through the client."""
        session = self.caller.session
        urls = [p for p in pending if p.get("status") == "pending"]
        if not urls or session is None or "url" not in session.elicitation_modes.split(","):
            return
        raise UrlElicitationRequiredError([
            mcp_types.ElicitRequestURLParams(
                mode="url", url=p["connectUrl"], message=p["instructions"],
                elicitationId=hashlib.sha256(p["connectUrl"].encode()).hexdigest()[:32],
            ) for p in urls
        ])

    @tool(name="capabilities_search", title="Search capabilities", scope=SEARCH, read_only=True,
          destructive=False, idempotent=True, open_world=False, output_schema=SEARCH_OUTPUT)
    def capabilities_search(
        self,
        query: Annotated[str, Field(min_length=2, max_length=500, description=(
            "What you need, in words. Keyword operators: word* (prefix), -word (exclude), \"a phrase\", "
            "a | b (either)."))],
        types: Annotated[list[Literal["integration", "action", "skill"]] | None, Field(
            max_length=3, description="Only these kinds (default all). `action` is an Atrium "
                                                     "extension: integration actions by themselves.")] = None,
        scope: Annotated[SearchScope | None, Field(description="Narrow to one integration or category.")] = None,
        mode: Annotated[Literal["keyword", "semantic", "hybrid"], Field(description=(
            "keyword (full text with the operators), semantic (meaning, by sentence embeddings) or hybrid "
            "(both, fused by rank; the default)."))] = "hybrid",
        limit: Annotated[int, Field(ge=1, le=50, description="At most this many hits (default 20).")] = 20,
    ) -> Any:
        """Search integrations, their actions and skills. Each hit is {type, name, description, integrationId,
        connected, score}, best first; `connected` says whether you can execute it now (else connect its
        integration with vault). Then capabilities_get for its input schema, and capabilities_execute."""
        narrowed = scope or SearchScope()
        return {"results": search.capabilities_search(
            caller=self.caller, query=query, types=types, integration_id=narrowed.integrationId,
            category=narrowed.category, mode=mode, limit=limit)}

    @tool(name="capabilities_get", title="Read a capability", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=GET_OUTPUT)
    def capabilities_get(
        self,
        name: Annotated[str, Field(min_length=1, max_length=200, description=(
            "Exact integration id (gmail_tools) or capability name (github_tools.create_issue, a skill's name)."))],
        parts: Annotated[list[str] | None, Field(max_length=4, description=(
            "Sections to include (default description). Integration: description, agentFriendlyInstructions, "
            "availableSkills. Action or skill: description, inputSchema, outputSchema, sourceCode."))] = None,
    ) -> Any:
        """Details of a known integration, action or skill by exact name, with the parts asked for. An unknown
        name fails with capability_not_found and `suggestions`, the nearest names. An action's sourceCode is
        null: it runs server code, not a skill's."""
        return selectors.capability_get(caller=self.caller, name=name, parts=parts)

    @tool(name="capabilities_execute", title="Execute a capability", scope=EXECUTE, read_only=False,
          destructive=True, idempotent=False, open_world=True, output_schema=EXECUTE_OUTPUT)
    def capabilities_execute(
        self,
        name: CapabilityName,
        input: Annotated[dict[str, Any] | None, Field(description="Input matching the capability's inputSchema.")]
        = None,
    ) -> Any:
        """Execute a capability. A dotted name runs that integration action when it exists (its output is the
        answer, with no timing fields; its error is its error payload, never retried as a skill); otherwise,
        and for plain names, the skill of that name, answering {success, output?, error?, executionTimeMs}.
        Input is checked against the inputSchema first (invalid_input with `problems`). When an integration it
        needs is not connected nothing runs: the answer (not an error) is status connection_required (a skill's
        also success false) with `missingIntegrations`, each with a connectUrl for the user
        to open; clients that declare URL elicitation get that instead."""
        outcome = services.capability_execute(caller=self.caller, name=name, input=input)
        missing = outcome.payload.get("missingIntegrations") if isinstance(outcome.payload, dict) else None
        if missing:
            self._url_elicitation(missing)
        return error_payload_result(outcome.payload) if outcome.is_error else success_result(outcome.payload)

    @tool(name="capabilities_integration_list", title="List integrations", scope=INTEGRATIONS_READ,
          read_only=True, destructive=False, idempotent=True, open_world=False,
          output_schema=INTEGRATION_LIST_OUTPUT)
    def capabilities_integration_list(self) -> Any:
        """Every integration on this server with your connection state: {integrations: [{integrationId, name,
        description, category, authScheme, firstParty, connectionRequired, connected, state, connectedAt,
        lastUsedAt, expiresAt, actionCount}], total}."""
        return selectors.integration_list(caller=self.caller)

    @tool(name="vault", title="Vault", scope=(INTEGRATIONS_READ, INTEGRATIONS_CONNECT), read_only=False,
          destructive=True, idempotent=False, open_world=True, output_schema=VAULT_OUTPUT)
    def vault(
        self,
        action: Annotated[Literal["status", "connect", "disconnect"], Field(description=(
            "status (needs integrations:read), connect or disconnect (need integrations:connect)."))],
        integrationId: IntegrationId = None,
        confirmed: Annotated[bool, Field(description="Confirm credit usage for first-party integrations.")]
        = False,
        credentials: Annotated[dict[str, Annotated[str, Field(max_length=4096)]] | None, Field(
            max_length=10, description=(
                "User-provided credentials (apiKey, token, username/password), for clients that must. Prefer "
                "the connect URL: a secret typed into a chat is seen by the model."))] = None,
    ) -> Any:
        """Check, connect or disconnect integrations. status: each integration's connection state (never a
        credential). connect: with credentials, stores them sealed and answers {status: connected}; a
        first-party integration needs confirmed: true first (else status confirmation_required); otherwise
        {status: pending, connectUrl, expiresAt, instructions}: give the user the URL, where they sign in and
        enter the secret or consent with the provider (clients that declare URL elicitation get it as such).
        disconnect: deletes the stored credentials and lists the skills that need the integration."""
        needed = INTEGRATIONS_READ if action == "status" else INTEGRATIONS_CONNECT
        if needed not in self.caller.scopes:
            raise Forbidden(f"vault {action} needs the scope '{needed}', which this token does not carry.",
                            code="insufficient_scope")
        if action == "status":
            return vault.vault_status(caller=self.caller, integration_id=integrationId)
        if not integrationId:
            raise InvalidInput(f"vault {action} needs integrationId.", code="invalid_input")
        if action == "disconnect":
            return vault.vault_disconnect(caller=self.caller, integration_id=integrationId)
        result = vault.vault_connect(caller=self.caller, integration_id=integrationId, confirmed=confirmed,
                                     credentials=credentials)
        self._url_elicitation([result])
        return result
