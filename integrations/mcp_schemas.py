"""Output schemas of Aident's capability and vault tools (integrations.mcp): what the
structuredContent of each answer that is not an error holds. The vault's connect answers and an
integration's connection state are defined once here and reused wherever a tool answers with them
(capabilities_execute's missingIntegrations, capabilities_integration_list's rows)."""

from __future__ import annotations

from typing import Any

from core.output_schemas import (
    ANY,
    BOOLEAN,
    DATETIME,
    DATETIME_OR_NULL,
    INTEGER,
    NUMBER,
    OBJECT,
    TEXT,
    TEXT_OR_NULL,
    TEXTS,
    array_of,
    enum,
    obj,
    one_of,
)
from integrations.models import AuthScheme

JSON_SCHEMA = {**OBJECT, "description": "A JSON Schema (2020-12)."}

# --- the vault -------------------------------------------------------------------------------------

# One integration and the caller's connection to it (vault status); never a credential.
CONNECTION_STATE_FIELDS: dict[str, Any] = {
    "integrationId": TEXT,
    "name": TEXT,
    "authScheme": enum(*AuthScheme.values),
    "firstParty": BOOLEAN,
    "connectionRequired": BOOLEAN,
    "connected": BOOLEAN,
    "state": enum("connected", "expired", "not_connected"),
    "connectedAt": DATETIME_OR_NULL,
    "lastUsedAt": DATETIME_OR_NULL,
    "expiresAt": DATETIME_OR_NULL,
}

CONNECTED = obj({"status": enum("connected"), "integrationId": TEXT},
                description="Connected at once: with credentials, or an integration that needs none.")
CONFIRMATION_REQUIRED = obj(
    {"status": enum("confirmation_required"), "integrationId": TEXT, "message": TEXT},
    description="A first-party integration costs credits: ask the user, then connect again with confirmed: true.")
PENDING = obj(
    {"status": enum("pending"), "integrationId": TEXT, "connectUrl": TEXT, "expiresAt": DATETIME, "instructions": TEXT},
    description="The user opens connectUrl to enter the secret or consent with the provider.")
# What vault connect answers, and what capabilities_execute lists for each integration it lacks.
CONNECT_ANSWER = one_of(CONNECTED, CONFIRMATION_REQUIRED, PENDING)

VAULT_STATUS = obj({"integrations": array_of(obj(CONNECTION_STATE_FIELDS))},
                   description="status: every enabled integration (or the one asked for) and your connection.")
DISCONNECTED = obj({"status": enum("disconnected"), "integrationId": TEXT, "affectedSkills": TEXTS},
                   description="disconnect: the credentials are deleted; affectedSkills need the integration.")
NOTHING_TO_DISCONNECT = obj({"status": enum("not_connected"), "integrationId": TEXT, "message": TEXT},
                            description="disconnect when there was no connection: nothing changed.")
VAULT_OUTPUT = one_of(VAULT_STATUS, CONNECTED, CONFIRMATION_REQUIRED, PENDING, DISCONNECTED, NOTHING_TO_DISCONNECT)

INTEGRATION_LIST_OUTPUT = obj({
    "integrations": array_of(obj({**CONNECTION_STATE_FIELDS, "description": TEXT, "category": TEXT,
                                  "actionCount": INTEGER})),
    "total": INTEGER,
})

# --- search and details ----------------------------------------------------------------------------

CAPABILITY_TYPE = enum("integration", "action", "skill")

SEARCH_OUTPUT = obj({"results": array_of(obj({
    "type": CAPABILITY_TYPE,
    "name": TEXT,
    "description": TEXT,
    "integrationId": TEXT_OR_NULL,  # null for a skill that needs no integration
    "connected": BOOLEAN,
    "score": NUMBER,
}))}, description="Hits, best first.")

INTEGRATION_DETAILS = obj(
    {"name": TEXT, "type": enum("integration"), "displayName": TEXT, "connected": BOOLEAN},
    {"description": TEXT, "agentFriendlyInstructions": TEXT,
     "availableSkills": array_of(obj({"name": TEXT, "type": enum("action", "skill"), "description": TEXT}))},
)
# The parts an action or a skill shows when asked for (description is the default).
CAPABILITY_PARTS: dict[str, Any] = {"description": TEXT, "inputSchema": JSON_SCHEMA, "outputSchema": JSON_SCHEMA}
ACTION_DETAILS = obj({"name": TEXT, "type": enum("action"), "integrationId": TEXT},
                     {**CAPABILITY_PARTS, "sourceCode": {"type": "null"}})
SKILL_DETAILS = obj({"name": TEXT, "type": enum("skill"), "integrations": TEXTS},
                    {**CAPABILITY_PARTS, "sourceCode": TEXT})
GET_OUTPUT = one_of(INTEGRATION_DETAILS, ACTION_DETAILS, SKILL_DETAILS)

# --- execution -------------------------------------------------------------------------------------

# An action's answer is its own output, as its outputSchema (capabilities_get) says: nothing can be
# known of it here, so this branch admits any object, and with it any answer.
ACTION_OUTPUT = obj(description="An integration action's own output (a value that is not an object comes as "
                                "{result}); no timing fields.")
ACTION_CONNECTION_REQUIRED = obj(
    {"status": enum("connection_required"), "message": TEXT, "missingIntegrations": array_of(CONNECT_ANSWER)},
    description="An action's integration is not connected: nothing ran.")
SKILL_SUCCEEDED = obj({"success": {"const": True}, "output": ANY, "executionTimeMs": INTEGER},
                      description="A skill's answer; output is the skill's own.")
SKILL_CONNECTION_REQUIRED = obj(
    {"success": {"const": False}, "status": enum("connection_required"), "error": TEXT,
     "code": enum("connection_required"), "executionTimeMs": INTEGER, "missingIntegrations": array_of(CONNECT_ANSWER)},
    description="A skill's integrations are not all connected: nothing ran.")
EXECUTE_OUTPUT = one_of(SKILL_SUCCEEDED, SKILL_CONNECTION_REQUIRED, ACTION_CONNECTION_REQUIRED, ACTION_OUTPUT)
