"""capabilities_search, capabilities_get, capabilities_integration_list and vault through /mcp: their
shapes, parts, errors and scopes."""

import pytest

from integrations import search
from integrations.models import Action, Connection, Integration, Skill
from tests.conftest import make_member

SOURCE = "def run(input, atrium):\n    return input\n"


@pytest.fixture
def catalogue(db):
    mail = Integration.objects.create(id="mail_tools", name="Mail", category="communication",
                                      description="Send and read electronic mail.", auth_scheme="api_key",
                                      agent_instructions="Connect with an API key first.")
    Action.objects.create(integration=mail, name="send_email", executor="email.send",
                          description="Send an email message to recipients.",
                          input_schema={"type": "object", "properties": {"to": {"type": "string"}}},
                          output_schema={"type": "object", "properties": {"sent": {"type": "integer"}}})
    skill = Skill.objects.create(name="weekly_digest", description="Mail a weekly digest of notes.",
                                 source_code=SOURCE, input_schema={"type": "object"})
    skill.integrations.set([mail])
    search.index_refresh(integrations=[mail], skills=[skill])
    return mail


@pytest.fixture
def client(alice, mcp_client):
    connected = mcp_client(alice)
    connected.initialize()
    return connected


def test_search_finds_actions_and_skills_with_their_connection_state(catalogue, client):
    hits = client.call_expecting_success("capabilities_search", {"query": "send email", "mode": "keyword"})["results"]
    top = hits[0]
    assert set(top) == {"type", "name", "description", "integrationId", "connected", "score"}
    assert (top["type"], top["name"], top["integrationId"], top["connected"]) == \
        ("action", "mail_tools.send_email", "mail_tools", False)
    narrowed = client.call_expecting_success("capabilities_search", {
        "query": "mail", "types": ["skill"], "scope": {"category": "communication"}})["results"]
    assert [h["name"] for h in narrowed] == ["weekly_digest"]


def test_search_refuses_a_short_query_and_a_bad_limit(catalogue, client):
    assert client.call_expecting_error("capabilities_search", {"query": "a"})["code"] == "invalid_arguments"
    assert client.call_expecting_error("capabilities_search", {"query": "mail", "limit": 51})["code"] == \
        "invalid_arguments"
    assert client.call_expecting_error("capabilities_search", {"query": "mail", "scope": {"owner": "x"}})["code"] \
        == "invalid_arguments"


def test_get_returns_only_the_parts_asked_for(catalogue, client):
    assert client.call_expecting_success("capabilities_get", {"name": "mail_tools"}) == {
        "name": "mail_tools", "type": "integration", "displayName": "Mail", "connected": False,
        "description": "Send and read electronic mail."}
    everything = client.call_expecting_success("capabilities_get", {
        "name": "mail_tools", "parts": ["agentFriendlyInstructions", "availableSkills"]})
    assert "description" not in everything
    assert everything["agentFriendlyInstructions"] == "Connect with an API key first."
    assert {s["name"] for s in everything["availableSkills"]} == {"mail_tools.send_email", "weekly_digest"}
    action = client.call_expecting_success("capabilities_get", {
        "name": "mail_tools.send_email", "parts": ["inputSchema", "outputSchema", "sourceCode"]})
    assert action["inputSchema"]["properties"] == {"to": {"type": "string"}}
    assert action["outputSchema"]["properties"] == {"sent": {"type": "integer"}} and action["sourceCode"] is None
    skill = client.call_expecting_success("capabilities_get", {"name": "weekly_digest", "parts": ["sourceCode"]})
    assert skill == {"name": "weekly_digest", "type": "skill", "integrations": ["mail_tools"], "sourceCode": SOURCE}


def test_get_refuses_unknown_parts_and_suggests_names(catalogue, client):
    refused = client.call_expecting_error("capabilities_get", {"name": "mail_tools", "parts": ["inputSchema"]})
    assert refused["code"] == "invalid_parts" and "availableSkills" in refused["error"]
    missing = client.call_expecting_error("capabilities_get", {"name": "mail_tools.send_mail"})
    assert missing["code"] == "capability_not_found" and "mail_tools.send_email" in missing["suggestions"]


def test_integration_list_shows_the_callers_connection_state(catalogue, alice, bob, client):
    Connection.objects.create(user=bob.user, integration=catalogue)
    listed = client.call_expecting_success("capabilities_integration_list")
    [row] = [r for r in listed["integrations"] if r["integrationId"] == "mail_tools"]
    assert row["connected"] is False and row["state"] == "not_connected" and row["actionCount"] == 1
    Connection.objects.create(user=alice.user, integration=catalogue)
    listed = client.call_expecting_success("capabilities_integration_list")
    assert [r["connected"] for r in listed["integrations"] if r["integrationId"] == "mail_tools"] == [True]


def test_vault_connects_with_credentials_and_disconnects(catalogue, alice, client):
    assert client.call_expecting_success("vault", {"action": "connect", "integrationId": "mail_tools",
                                                   "credentials": {"apiKey": "k-123456789"}})["status"] == "connected"
    row = Connection.objects.get(user=alice.user)
    assert "k-123456789" not in row.sealed_credentials
    status = client.call_expecting_success("vault", {"action": "status", "integrationId": "mail_tools"})
    assert status["integrations"][0]["connected"] is True and "k-123456789" not in str(status)
    gone = client.call_expecting_success("vault", {"action": "disconnect", "integrationId": "mail_tools"})
    assert gone["status"] == "disconnected" and gone["affectedSkills"] == ["weekly_digest"]
    assert not Connection.objects.filter(user=alice.user).exists()


def test_vault_connect_without_credentials_gives_a_connect_url(catalogue, client):
    pending = client.call_expecting_success("vault", {"action": "connect", "integrationId": "mail_tools"})
    assert pending["status"] == "pending" and "/vault/connect/" in pending["connectUrl"]
    assert client.call_expecting_error("vault", {"action": "connect"})["code"] == "invalid_input"


def test_vault_actions_need_their_own_scopes(catalogue, mcp_client):
    reader = make_member("reader", scopes=["integrations:read"])
    client = mcp_client(reader)
    client.initialize()
    assert {"vault", "capabilities_integration_list"} <= client.tool_names()
    assert client.call_expecting_success("vault", {"action": "status"})["integrations"]
    refused = client.call_expecting_error("vault", {"action": "connect", "integrationId": "mail_tools",
                                                    "credentials": {"apiKey": "k-123456789"}})
    assert refused["code"] == "insufficient_scope"
    assert not Connection.objects.exists()
    connector = make_member("connector", scopes=["integrations:connect"])
    client = mcp_client(connector)
    client.initialize()
    assert client.call_expecting_error("vault", {"action": "status"})["code"] == "insufficient_scope"
    assert "capabilities_integration_list" not in client.tool_names()


def test_each_capability_tool_needs_its_scope(catalogue, mcp_client):
    expected = {"capabilities:search": "capabilities_search", "capabilities:read": "capabilities_get",
                "capabilities:execute": "capabilities_execute", "integrations:read": "capabilities_integration_list"}
    for scope, tool in expected.items():
        member = make_member(scope.replace(":", "_"), scopes=[scope])
        client = mcp_client(member)
        client.initialize()
        visible = client.tool_names() - {"auth_status", "auth_logout"}
        assert tool in visible
        assert visible <= {tool, "vault"}
