"""atrium_tools: Atrium's own memories, elements, workflows and docs as actions, run through
capabilities_execute with the caller's own scopes."""

import pytest

from core.caller import Caller
from elements.models import MemoryEntry
from elements.services import element_create
from elements.types import ElementType
from integrations.services import catalogue_sync
from runs.models import Run
from tests.conftest import make_member
from workflows.scoping import Scope
from workflows.services import workflow_save

FLOW = {"name": "Tiny", "start": "ask",
        "nodes": {"ask": {"type": "ai_agent", "prompt": "Say hi", "transitions": {"done": "end"}},
                  "end": {"type": "end"}}}


@pytest.fixture
def atrium(db):
    catalogue_sync(documents=[])


def execute(client, name, input):
    result = client.call("capabilities_execute", {"name": name, "input": input})
    import json

    return result["isError"], json.loads(result["content"][0]["text"])


@pytest.fixture
def client(alice, mcp_client):
    connected = mcp_client(alice)
    connected.initialize()
    return connected


def test_memories_elements_workflows_and_docs_as_actions(atrium, alice, client, kb):
    caller = Caller.trusted(alice.user, via="command")
    element_create(caller=caller, element_type=ElementType.MEMORY, name="notes", params={"description": "Notes"})
    element_create(caller=caller, element_type=ElementType.PERSONA, name="reviewer",
                   params={"description": "Reviews code carefully.", "instructions": "You ARE a reviewer."})
    workflow_save(caller=caller, scope=Scope(owner=alice.user, project=None), workflow_id="tiny", source="global",
                  config=FLOW, overwrite=False)

    error, added = execute(client, "atrium_tools.add_memory_entry", {"memory": "notes", "content": "Ship on Friday."})
    assert error is False and added["memory"] == "notes"
    assert MemoryEntry.objects.get(entry_id=added["entryId"]).content == "Ship on Friday."

    error, element = execute(client, "atrium_tools.get_element", {"type": "persona", "name": "reviewer"})
    assert error is False and element["instructions"] == "You ARE a reviewer."

    error, found = execute(client, "atrium_tools.search_elements", {"query": "reviews", "limit": 5})
    assert error is False and [r["name"] for r in found["results"]] == ["reviewer"]

    error, started = execute(client, "atrium_tools.start_workflow", {"workflowId": "tiny"})
    assert error is False and started["status"] == "paused"
    assert Run.objects.get(pk=started["runId"]).owner == alice.user

    error, docs = execute(client, "atrium_tools.search_docs", {"query": "cancel a run"})
    assert error is False and docs["results"]


def test_an_action_needs_the_scope_its_tool_would(atrium, mcp_client):
    member = make_member("executor", scopes=["capabilities:execute", "elements:read"])
    element_create(caller=Caller.trusted(member.user, via="command"), element_type=ElementType.MEMORY,
                   name="notes", params={"description": "Notes"})
    client = mcp_client(member)
    client.initialize()
    error, refused = execute(client, "atrium_tools.add_memory_entry", {"memory": "notes", "content": "x"})
    assert error is True and refused["code"] == "insufficient_scope"
    assert not MemoryEntry.objects.exists()


def test_another_users_elements_are_not_found(atrium, alice, charlie, mcp_client):
    element_create(caller=Caller.trusted(alice.user, via="command"), element_type=ElementType.PERSONA,
                   name="reviewer", params={"description": "Reviews.", "instructions": "You ARE a reviewer."})
    client = mcp_client(charlie)
    client.initialize()
    error, missing = execute(client, "atrium_tools.get_element", {"type": "persona", "name": "reviewer"})
    assert error is True and "not found" in missing["error"].lower()
