"""Claude Code's permission prompt against a live server, through the official SDK client: the
top-level permission_prompt tool and the MCP-AQL operation decide alike, and an approval relayed
from a second session of the same user lets the first session's retry through."""

import asyncio
import json
from contextlib import asynccontextmanager

import pytest

from core.caller import Caller
from elements.models import CliApproval
from elements.services import element_create
from elements.types import ElementType
from tests.conftest import make_member
from tests.live.conftest import Tools, sdk_session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

DEPLOY = {"command": "make deploy prod"}


@asynccontextmanager
async def sdk_tools(mcp_url: str, token: str):
    async with sdk_session(mcp_url, token) as session:
        yield Tools(session)


async def aql(tools: Tools, endpoint: str, operation: str, **params) -> dict:
    error, envelope = await tools(f"mcp_aql_{endpoint}", operation=operation, params=params)
    assert error is (not envelope["success"]), envelope
    return envelope


async def prompt_approve_retry(mcp_url: str, token: str) -> dict:
    seen: dict = {}
    async with sdk_tools(mcp_url, token) as claude, sdk_tools(mcp_url, token) as bridge:
        await aql(claude, "read", "activate_element", element_type="persona", element_name="guard")
        seen["safe"] = await claude.ok("permission_prompt", tool_name="Bash", input={"command": "git status"},
                                       tool_use_id="toolu_01")
        seen["asked"] = (await aql(claude, "read", "permission_prompt", tool_name="Bash", input=DEPLOY))["data"]
        request_id = seen["asked"]["approvalRequest"]["requestId"]
        seen["own"] = await aql(claude, "execute", "approve_cli_permission", request_id=request_id)
        seen["pending"] = (await aql(claude, "read", "get_pending_cli_approvals"))["data"]
        seen["approved"] = (await aql(bridge, "execute", "approve_cli_permission", request_id=request_id))["data"]
        seen["retried"] = await claude.ok("permission_prompt", tool_name="Bash", input=DEPLOY)
        seen["again"] = await claude.ok("permission_prompt", tool_name="Bash", input=DEPLOY)
        text = (await claude.session.call_tool("permission_prompt", {"tool_name": "Read",
                                                                     "input": {"file_path": "a.py"}})).content[0].text
        seen["text"] = text
    return seen


def test_an_approval_relayed_from_a_second_session_lets_the_first_retry_through(live_atrium):
    alice = make_member("alice")
    element_create(caller=Caller.trusted(alice.user, via="command"), element_type=ElementType.PERSONA, name="guard",
                   params={"description": "Guards.", "instructions": "You ARE careful.", "gatekeeper": {
                       "externalRestrictions": {"description": "Deploys need a person",
                                                "allowPatterns": ["Bash:git status*", "Bash:make*"],
                                                "confirmPatterns": ["Bash:make deploy*"]}}})

    seen = asyncio.run(prompt_approve_retry(live_atrium.mcp_url, alice.token))

    request_id = seen["asked"]["approvalRequest"]["requestId"]
    assert seen["safe"]["behavior"] == "allow" and seen["safe"]["updatedInput"] == {"command": "git status"}
    assert seen["asked"]["behavior"] == "deny" and request_id in seen["asked"]["message"]
    assert seen["asked"]["approvalRequest"]["url"] == f"{live_atrium.url}/approvals/"
    assert seen["own"]["success"] is False and "cannot approve its own request" in seen["own"]["error"]
    assert [p["requestId"] for p in seen["pending"]["pending"]] == [request_id]
    assert seen["approved"]["approved"] is True and seen["approved"]["scope"] == "single"
    assert seen["retried"]["behavior"] == "allow" and seen["retried"]["classification"]["stage"] == "cli_approval"
    assert seen["again"]["behavior"] == "deny" and seen["again"]["approvalRequest"]["requestId"] != request_id
    assert json.loads(seen["text"])["behavior"] == "allow" and seen["text"].startswith('{"behavior": "allow"')
    assert CliApproval.objects.get(pk=request_id).status == "used"
