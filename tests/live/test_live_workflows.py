"""Every workflow tool (CRUD, authoring helpers, skill import) through the official SDK client
against a live server: one run for local use (cwd read on the server's disk) and one for a shared
server (cwd resolved through registered project roots)."""

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from core.caller import Caller
from core.tools import TOOLS
from tests.conftest import make_member
from workflows.models import Workflow, WorkflowAsset
from workflows.services import project_register

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

FIXTURES = Path(__file__).parents[1] / "fixtures" / "skills"
WORKFLOW_TOOLS = {name for name in TOOLS if TOOLS[name].scope in ("workflows:read", "workflows:write")}
G = {"global": True}


class Roscoe:
    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.seen: set[str] = set()

    async def call(self, tool: str, **arguments: Any) -> tuple[bool, Any]:
        result = await self.session.call_tool(tool, arguments)
        self.seen.add(tool)
        return bool(result.isError), json.loads(result.content[0].text)

    async def ok(self, tool: str, **arguments: Any) -> Any:
        is_error, payload = await self.call(tool, **arguments)
        assert not is_error, (tool, payload)
        return payload

    async def err(self, tool: str, **arguments: Any) -> dict[str, Any]:
        is_error, payload = await self.call(tool, **arguments)
        assert is_error, (tool, payload)
        return payload


async def connected(mcp_url: str, token: str, work) -> Any:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, streamable_http_client(mcp_url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        listed = {t.name for t in (await session.list_tools()).tools}
        assert listed >= WORKFLOW_TOOLS
        return await work(Roscoe(session))


def flow(child: str | None = None, name: str = "Flow") -> dict[str, Any]:
    first = ({"type": "subworkflow", "workflow": child, "transitions": {"completed": "end"}} if child else
             {"type": "ai_agent", "prompt": "Do it", "transitions": {"done": "end"}})
    return {"name": name, "start": "work", "nodes": {"work": first, "end": {"type": "end"}}}


def test_the_sdk_client_runs_every_workflow_tool_on_a_local_server(live_atrium_local, tmp_path):
    member = make_member("alice")
    repo = tmp_path / "shop"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", "git@github.com:acme/shop.git"], check=True)
    shutil.copytree(FIXTURES / "release-notes", repo / ".claude" / "skills" / "release-notes")
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "plain").mkdir()
    here = {"cwd": str(repo)}

    async def work(r: Roscoe) -> set[str]:
        # Scoping errors, each with its documented code.
        assert (await r.err("list_workflows"))["code"] == "CWD_REQUIRED"
        assert (await r.err("list_workflows", cwd=str(repo), **G))["code"] == "CWD_GLOBAL_CONFLICT"
        assert (await r.err("list_workflows", cwd="relative"))["code"] == "NOT_ABSOLUTE"
        assert (await r.err("list_workflows", cwd=str(tmp_path / "missing")))["code"] == "NOT_FOUND"
        assert (await r.err("list_workflows", cwd=str(tmp_path / "file.txt")))["code"] == "NOT_DIR"
        assert (await r.err("list_workflows", cwd="/etc"))["code"] == "PROTECTED_PATH"
        assert (await r.err("list_workflows", cwd=str(tmp_path / "plain")))["code"] == "NOT_GIT_REPO"

        schema = await r.ok("get_workflow_schema", **here)
        assert schema["models"]["default"] in schema["models"]["available"]
        assert await r.ok("create_workflow", id="child", config=flow(), **here) == {
            "id": "child", "source": "repo", "path": str(repo / ".atrium" / "workflows" / "child.yaml")}
        await r.ok("create_workflow", id="child", config=flow(name="Global child"), source="global", **here)
        await r.ok("create_workflow", id="parent", config=flow(child="child"), **here)
        listed = await r.ok("list_workflows", **here)
        assert [(w["id"], w["source"], w["shadowed"]) for w in listed] == [
            ("child", "repo", False), ("child", "global", True), ("parent", "repo", False)]
        assert (await r.ok("get_workflow", workflow_id="child", **here))["source"] == "repo"
        assert (await r.err("create_workflow", id="child", config=flow(), **here))["code"] == "conflict"
        assert (await r.err("create_workflow", id="bad id", **here))["code"] == "invalid_id"
        assert (await r.err("create_workflow", id="x", config={"name": "x"}, **here))["code"] == "invalid_config"
        assert (await r.err("create_workflow", id="x", config=flow(child="ghost"), **here))["code"] == \
            "integrity_error"
        assert (await r.err("create_workflow", id="x", source="repo", **G))["code"] == "no_repo_source"
        assert (await r.ok("update_workflow", id="parent", config=flow(child="child", name="Parent"),
                           **here))["ok"] is True
        assert (await r.ok("validate_workflow", id="parent", **here)) == {"valid": True, "errors": []}
        assert (await r.ok("lint_workflow", id="parent", **here))["errors"] == []
        assert (await r.ok("audit_workflow", id="parent", **here))["worstCase"]["modelCalls"] == 1
        assert (await r.ok("list_workflow_references", workflow_id="child", **here))["referrers"] == [
            {"workflowId": "parent", "nodeId": "work", "source": "repo"}]
        refused = await r.err("delete_workflow", id="child", confirm=True, **here)
        assert refused["code"] == "referenced" and refused["referencedBy"][0]["workflowId"] == "parent"
        renamed = await r.ok("rename_workflow", id="child", new_id="kid", **here)
        assert renamed["rewritten"] == ["repo:parent"] and renamed["rolledBack"] is False
        assert (await r.ok("duplicate_workflow", from_id="kid", to_id="kid2", to_source="repo", **here))["id"] == \
            "kid2"
        moved = await r.ok("move_workflow", id="kid2", to="global", **here)
        assert (moved["from"], moved["to"]) == ("repo", "global")
        assert (await r.ok("delete_workflow", id="kid2", source="global", confirm=True, **here))["ok"] is True

        skills = await r.ok("list_skills", **here)
        skill = next(s for s in skills["skills"] if s["name"] == "Release Notes")
        handback = await r.ok("convert_skill", skill_path=str(Path(skill["path"]).parent), **here)
        assert handback["action"] == "run_completion"
        completion = (FIXTURES / "release-notes.completion.md").read_text()
        written = await r.ok("finalize_skill_conversion", raw_model_output=completion, **handback["finalize_args"],
                             **here)
        assert (written["id"], written["assetCount"], written["skippedBundleDirs"]) == (
            "release-notes", 1, ["references"])
        return r.seen

    seen = asyncio.run(connected(live_atrium_local.mcp_url, member.token, work))
    assert seen == WORKFLOW_TOOLS
    assert set(Workflow.objects.filter(owner=member.user).values_list("workflow_id", flat=True)) == {
        "child", "kid", "parent", "release-notes"}
    assert WorkflowAsset.objects.get().path == "scripts/commits.sh"


def test_a_shared_server_resolves_cwd_only_through_registered_roots(live_atrium, tmp_path):
    alice, bob = make_member("alice"), make_member("bob")
    project_register(caller=Caller.trusted(alice.user, via="command"), path="/home/alice/shop", project_id="shop")
    shop = {"cwd": "/home/alice/shop/src"}

    async def as_alice(r: Roscoe) -> None:
        await r.ok("create_workflow", id="deploy", config=flow(), **shop)
        assert [w["id"] for w in await r.ok("list_workflows", **shop)] == ["deploy"]
        missing = await r.err("list_workflows", cwd="/home/alice/blog")
        assert missing["code"] == "NOT_FOUND" and "register" in missing["error"]
        # The server never reads its own disk for a client.
        repo = tmp_path / "server-repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        assert (await r.err("list_workflows", cwd=str(repo)))["code"] == "NOT_FOUND"
        assert (await r.err("convert_skill", skill_path=str(FIXTURES / "release-notes"), **G))["stage"] == "resolve"

    async def as_bob(r: Roscoe) -> None:
        assert (await r.err("list_workflows", **shop))["code"] == "NOT_FOUND"
        assert await r.ok("list_workflows", **G) == []

    asyncio.run(connected(live_atrium.mcp_url, alice.token, as_alice))
    asyncio.run(connected(live_atrium.mcp_url, bob.token, as_bob))
    assert Workflow.objects.get().project.project_id == "shop"
