"""Every playbook, template and dashboard tool through the official SDK client against a live server,
with exactly the documented scopes: templates browsed and instantiated, a webhook trigger activated and
fired with a signed delivery whose AI step the server's model backend (a local fake) answers, a playbook
executed by the host and answered through advance_run, a playbook generated, the dashboard and the
executions; and a token with one scope sees only that scope's tools."""

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from core.caller import Caller
from elements.services import element_create
from elements.types import ElementType
from integrations.executors.webhook import signature
from runs.models import Run
from tests.conftest import make_member
from tests.fakes import FakeCompletions
from tests.live.conftest import Tools, serve
from workflows.models import TriggerFiring

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PLAYBOOK_SCOPES = ["playbooks:read", "playbooks:create", "playbooks:execute", "playbooks:manage", "templates:read",
                   "templates:use", "dashboard:read"]
# What a host needs besides, to answer the AI step of an execution it started; and what a template's
# capability steps need of the token that makes a playbook of it (a memory entry: elements:write).
HOST_SCOPES = ["runs:read", "runs:execute"]
STEP_SCOPES = ["capabilities:execute", "elements:write"]
PLAYBOOK_TOOLS = {"playbooks_list", "playbooks_get", "playbooks_generate", "playbooks_execute",
                  "playbooks_trigger_activate", "playbooks_history", "templates_search", "templates_list",
                  "templates_get", "templates_instantiate", "dashboard_overview", "executions_list", "executions_get",
                  "executions_messages"}
G = {"global": True}


@pytest.fixture
def completions(fake_server):
    return FakeCompletions(fake_server)


@pytest.fixture
def playbook_server(transactional_db, tmp_path, completions):
    """A hosted server with the catalogue and the templates, and a model backend (the fake)."""
    call_command("sync_catalogue", verbosity=0)
    call_command("sync_templates", verbosity=0)
    with serve(tmp_path, CELERY_BROKER_URL="", ATRIUM_MODEL_BACKEND_URL=completions.url,
               ATRIUM_MODEL_BACKEND_MODEL="fake-model", ATRIUM_MODEL_BACKEND_KEY="sk-live-test") as server:
        yield server


async def connected(url: str, token: str, work: Any) -> None:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, streamable_http_client(url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        await work(session)


def deliver(url: str, secret: str, body: dict[str, Any]) -> httpx.Response:
    raw = json.dumps(body).encode()
    timestamp = str(int(time.time()))
    return httpx.post(url, content=raw, timeout=30, headers={
        "Content-Type": "application/json", "X-Atrium-Timestamp": timestamp,
        "X-Atrium-Signature": signature(secret, timestamp, raw)})


def test_the_sdk_client_uses_every_playbook_template_and_dashboard_tool(playbook_server, completions):
    alice = make_member("alice", scopes=PLAYBOOK_SCOPES + HOST_SCOPES + STEP_SCOPES)
    reader = make_member("reader", scopes=["playbooks:read"])
    make_member("bob")
    element_create(caller=Caller.trusted(alice.user, via="command"), element_type=ElementType.MEMORY,
                   name="deploy-log", params={"description": "Deploys"})
    completions.says("Deploy of billing-api finished: success.", prompt_tokens=120, completion_tokens=12)

    async def main(session: ClientSession) -> None:
        names = {t.name for t in (await session.list_tools()).tools}
        assert names >= PLAYBOOK_TOOLS
        call = Tools(session)

        listed = await call.ok("templates_list", limit=50)
        assert listed["total"] >= 10 and len(listed["templates"]) == listed["total"]
        found = await call.ok("templates_search", query="webhook memory log")
        assert found["templates"][0]["templateId"] == "webhook-to-memory"
        template = await call.ok("templates_get", templateId="webhook-to-memory")
        assert template["requiredIntegrations"][0]["integrationId"] == "atrium_tools" and template["ready"] is True
        error, missing = await call("templates_get", templateId="nope")
        assert error and missing["code"] == "template_not_found"

        made = await call.ok("templates_instantiate", templateId="webhook-to-memory", name="Deploy log")
        playbook_id = made["playbookId"]
        assert made["name"] == "Deploy log" and made["status"] == "Not Ready"
        assert [t["type"] for t in made["triggers"]] == ["webhook"] and not made["triggers"][0]["enabled"]

        # The webhook's URL and secret are shown once, in the answer that made the trigger.
        hook = made["createdTriggers"][0]
        assert hook["webhookUrl"].startswith(f"{playbook_server.url}/hooks/playbooks/") and hook["secret"]
        fetched = await call.ok("playbooks_get", playbookId=playbook_id)
        assert hook["secret"] not in json.dumps(fetched) and hook["webhookUrl"] not in json.dumps(fetched)
        activated = await call.ok("playbooks_trigger_activate", playbookId=playbook_id, enabled=True)
        assert activated["status"] == "Healthy" and all(t["enabled"] for t in activated["triggers"])

        refused = deliver(hook["webhookUrl"], "not-the-secret", {"source": "ci"})
        assert refused.status_code == 401
        delivered = deliver(hook["webhookUrl"], hook["secret"], {"memory": "deploy-log", "source": "ci",
                                                                 "service": "billing-api"})
        assert delivered.status_code == 202, delivered.text
        execution_id = delivered.json()["executionId"]
        execution = await call.ok("executions_get", executionId=execution_id)
        assert execution["status"] == "completed", execution
        assert execution["result"]["summary"] == "Deploy of billing-api finished: success."
        assert execution["startedBy"] == "trigger" and execution["costs"]["inputTokens"] == 120
        messages = await call.ok("executions_messages", sessionId=execution_id)
        assert messages["done"] and [m["role"] for m in messages["messages"]][:3] == ["system", "user", "assistant"]
        assert "sk-live-test" not in json.dumps(messages)

        history = await call.ok("playbooks_history", playbookId=playbook_id)
        assert [e["executionId"] for e in history["executions"]] == [execution_id]
        overview = await call.ok("dashboard_overview")
        assert [p["playbookId"] for p in overview["playbooks"]] == [playbook_id]
        assert overview["playbooks"][0]["lastExecution"]["status"] == "completed"

        # Executed by the host: its AI step is the host's to answer.
        started = await call.ok("playbooks_execute", playbookId=playbook_id, input={"memory": "deploy-log"})
        status = await call.ok("get_run_status", run_id=started["executionId"], **G)
        assert status["pendingStep"]["nodeId"] == "summarise" and status["waitingFor"]["who"] == "host"
        done = await call.ok("advance_run", run_id=started["executionId"], response="Answered by the host.",
                             step_id=status["pendingStep"]["stepId"], **G)
        assert done["status"] == "completed"
        error, invalid = await call("playbooks_execute", playbookId=playbook_id, input={"source": "no memory"})
        assert error and invalid["code"] == "invalid_input" and invalid["problems"]

        generated = await call.ok("playbooks_generate", prompt="Log every webhook delivery into a memory")
        assert generated["draft"]["source"] in ("template", "capabilities", "model") and generated["refinePrompt"]
        fetched = await call.ok("playbooks_get", playbookId=generated["playbookId"])
        assert fetched["workflowId"] == generated["workflowId"] and fetched["plan"]["steps"]

        listed_playbooks = await call.ok("playbooks_list")
        assert {p["playbookId"] for p in listed_playbooks["playbooks"]} == {playbook_id, generated["playbookId"]}
        executions = await call.ok("executions_list")
        assert executions["total"] == 2

    async def reader_sees_only_its_scope(session: ClientSession) -> None:
        names = {t.name for t in (await session.list_tools()).tools}
        assert names & PLAYBOOK_TOOLS == {"playbooks_list", "playbooks_get", "playbooks_history"}

    asyncio.run(connected(playbook_server.mcp_url, alice.token, main))
    asyncio.run(connected(playbook_server.mcp_url, reader.token, reader_sees_only_its_scope))
    assert TriggerFiring.objects.filter(outcome="started").count() == 1
    assert TriggerFiring.objects.filter(outcome="refused").count() == 1
    assert completions.requests[0].headers["authorization"] == "Bearer sk-live-test"
    assert Run.objects.filter(owner__username="bob").count() == 0
