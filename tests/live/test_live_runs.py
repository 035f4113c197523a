"""Every run tool through the official SDK client against a live server: start, every kind of answer,
a human step, a subworkflow, a script, cancel, history, listing and test_workflow."""

import asyncio
import json
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from core.tools import TOOLS
from runs.models import Run
from tests.conftest import make_member

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

RUN_TOOLS = {name for name, spec in TOOLS.items() if spec.scope in ("runs:read", "runs:execute")}
G = {"global": True}

WORKFLOWS = {
    "review": """\
name: Review
start: prepare
nodes:
  prepare:
    type: script
    script: 'echo "{\\"words\\": 3}"'
    timeout: 10
    transitions: {success: draft}
  draft: {type: ai_agent, prompt: "Write {{ prepare.words }} words", transitions: {done: review}}
  review:
    type: ai_judge
    prompt: "Judge {{ draft.output }}"
    verdicts: [approve, revise]
    maxIterations: 2
    transitions: {approve: polish, revise: draft}
  polish:
    type: subworkflow
    workflow: polish
    context: {text: "{{ draft.output }}"}
    transitions: {completed: ask, failed: dropped}
  ask: {type: human, prompt: "Publish {{ polish }}?", transitions: {publish: done, discard: dropped}}
  done: {type: end, output: "{{ polish }}"}
  dropped: {type: end, status: failed}
""",
    "polish": """\
name: Polish
start: polish
nodes:
  polish: {type: ai_agent, prompt: "Polish {{ context.text }}", transitions: {done: end}}
  end: {type: end, output: "{{ polish.output }}"}
""",
    "vote": """\
name: Vote
start: vote
nodes:
  vote:
    type: consensus
    prompt: Ship it?
    agents: 3
    verdicts: [yes, no]
    transitions: {yes: pick, no: pick, no_consensus: pick}
  pick:
    type: round_robin
    candidates: [red, blue]
    criterion: Which colour is calmer?
    transitions: {done: fan}
  fan:
    type: map
    items: [a, b]
    prompt: "Describe {{ item }}"
    transitions: {done: end, failed: end}
  end: {type: end, output: "{{ pick.winner }}"}
""",
}

YES = '{"verdict": "yes", "reasoning": "ok"}'


class Session:
    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.seen: set[str] = set()

    async def call(self, tool: str, **arguments: Any) -> tuple[bool, Any]:
        result = await self.session.call_tool(tool, {**arguments, **G})
        self.seen.add(tool)
        return bool(result.isError), json.loads(result.content[0].text)

    async def ok(self, tool: str, **arguments: Any) -> Any:
        is_error, payload = await self.call(tool, **arguments)
        assert not is_error and not (isinstance(payload, dict) and "code" in payload), (tool, payload)
        return payload

    async def err(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """A user error: `{error, code}` without isError, as the reference has it for run tools;
        test_workflow's own `{ok: false, code, message}` is a tool error."""
        is_error, payload = await self.call(tool, **arguments)
        assert is_error is (tool == "test_workflow"), (tool, payload)
        return payload


async def every_run_tool(s: Session) -> None:
    for workflow_id in ("polish", "review", "vote"):  # a subworkflow must exist before its parent
        created = await s.session.call_tool("create_workflow", {"id": workflow_id, "config": WORKFLOWS[workflow_id],
                                                                **G})
        assert not created.isError, created.content[0].text

    started = await s.ok("start_workflow", workflow_id="review", host="claude_code")
    run_id = started["runId"]
    assert started["pendingStep"]["prompt"] == "Write 3 words"
    assert (await s.ok("get_run_status", run_id=run_id))["pendingStep"]["nodeId"] == "draft"
    await s.ok("advance_run", run_id=run_id, response="Owls hunt quietly", thinking="short")
    assert (await s.err("advance_run", run_id=run_id, response="not an envelope"))["code"] == "answer_rejected"
    waiting = await s.ok("advance_run", run_id=run_id, response='{"verdict": "approve", "reasoning": "good"}')
    child_id = waiting["awaitingChild"]["childRunId"]
    asked = await s.ok("advance_run", run_id=child_id, response="Owls hunt in silence")
    assert asked["runId"] == run_id and asked["pendingStep"]["nodeType"] == "human"
    done = await s.ok("resume_run", run_id=run_id, transition="publish")
    assert (done["status"], done["output"]) == ("completed", "Owls hunt in silence")
    history = await s.ok("get_run_history", run_id=run_id)
    assert [n["nodeId"] for n in history["nodes"]] == ["prepare", "draft", "review", "polish", "ask", "done"]
    assert history["run"]["childRunIds"] == [child_id]

    fan = await s.ok("start_workflow", workflow_id="vote")
    step = fan["pendingStep"]
    assert (step["nodeType"], step["agentCount"]) == ("consensus", 3)
    step = (await s.ok("advance_consensus", run_id=fan["runId"], results=[{"raw": YES}] * 3))["pendingStep"]
    assert step["nodeType"] == "round_robin" and len(step["matchups"]) == 1
    matchup = step["matchups"][0]["id"]
    step = (await s.ok("advance_round_robin", run_id=fan["runId"],
                       verdicts=[{"id": matchup, "winner": "B", "margin": 70}]))["pendingStep"]
    assert (step["nodeType"], step["mapPhase"], step["agentCount"]) == ("map", "map", 2)
    finished = await s.ok("advance_map", run_id=fan["runId"], results=[{"raw": "A."}, {"raw": "B."}])
    assert (finished["status"], finished["output"]) == ("completed", "blue")

    cancelled = await s.ok("start_workflow", workflow_id="polish", context={"text": "x"})
    assert (await s.ok("cancel_run", run_id=cancelled["runId"]))["status"] == "cancelled"
    assert (await s.err("cancel_run", run_id=cancelled["runId"]))["code"] == "run_terminal"
    assert (await s.err("get_run_status", run_id="doesnotexist"))["error"] == "Run not found."

    tested = await s.ok("test_workflow", workflow_id="polish", context={"text": "x"},
                        mock_responses={"polish": "polished"})
    assert tested["ok"] is True and tested["finalStatus"] == "completed"
    missing = await s.err("test_workflow", workflow_id="polish", context={"text": "x"})
    assert missing["code"] == "missing_mock"

    listed = await s.ok("list_runs", limit=500)
    assert {r["id"] for r in listed} >= {run_id, child_id, fan["runId"], cancelled["runId"]}
    assert await s.ok("list_runs", kind="test") == []


def test_the_sdk_client_uses_every_run_tool(live_atrium):
    member = make_member("alice")

    async def main() -> set[str]:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {member.token}"}, timeout=60)
        async with http, streamable_http_client(live_atrium.mcp_url, http_client=http) as (read, write, _), \
                ClientSession(read, write) as client:
            await client.initialize()
            listed = {t.name for t in (await client.list_tools()).tools}
            assert listed >= RUN_TOOLS
            session = Session(client)
            await every_run_tool(session)
            return session.seen

    assert asyncio.run(main()) == RUN_TOOLS
    assert not Run.objects.filter(kind="test").exists()
