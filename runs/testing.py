"""test_workflow: run a workflow end to end on the real engine, answering every paused step from
mocks, then delete the run.

The run is an ordinary run of kind "test": it is created and driven by runs.engine, and each
answer goes through `run_answer`, exactly as a host's advance_* or resume_run call would, so what
passes here passes in production. Mocks are keyed by node id; how a mock becomes an answer depends
on the tool that answers the node (ANSWER_BUILDERS). The run and its children are deleted in every
case, so a test never shows in list_runs.

Mock format (`mock_responses: {nodeId: mock}`):
- ai_agent, ai_judge: the response text; human: the transition to choose.
- consensus, map: raw answers, one per agent of each phase, taken in order across phases (usc:
  agentCount generate answers, then 1 aggregate; map with extract: 1 extract answer, then one per
  branch, then 1 reduce).
- round_robin: per phase, the raw resolve answer; or one entry per outstanding matchup in order,
  each "A"/"B" or an object {winner, margin?, reasoning?} (margin defaults to 50).
A string mock answers every answer slot of every visit; a list is consumed entry by entry and goes
on where it left off when a loop comes back to the node. An entry that is not a string is sent as
its JSON text where the answer is text (a judge envelope may be given as an object).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.caller import Caller
from core.errors import DomainError
from runs import engine
from runs.handlers import HANDLERS
from runs.models import Run
from runs.selectors import pending_step, run_history
from workflows.errors import DefinitionInvalid, WorkflowNotFound
from workflows.models import Workflow
from workflows.scoping import Scope
from workflows.selectors import definition_parse, definition_validate, workflow_find

MIN_TIMEOUT_MS, MAX_TIMEOUT_MS, DEFAULT_TIMEOUT_MS = 100, 600_000, 60_000
DEFAULT_MARGIN = 50
# How often to look again while a worker runs a script of the test run.
POLL_SECONDS = 0.05
INLINE_KEY = "inline"


class WorkflowTestFailed(DomainError):
    """Answered by test_workflow as {ok: false, code, message, ...fields}; over HTTP with {error, code}
    beside them."""

    STATUSES = {"invalid_input": 400, "invalid_config": 400, "no_repo_source": 400, "workflow_not_found": 404}

    def __init__(self, code: str, message: str, **fields: Any) -> None:
        self.fields = fields
        self.payload: dict[str, Any] = {"ok": False, "code": code, "message": message, **fields}
        super().__init__(message, code=code, extra={k: v for k, v in self.payload.items() if k != "code"})
        # The test ran and the workflow failed it: the request was fine, its subject was not.
        self.http_status = self.STATUSES.get(code, 422)


# --- mocks -----------------------------------------------------------------------------------------

Mock = str | list[Any]


@dataclass
class Mocks:
    responses: dict[str, Mock]
    # Node id -> how many entries of its list mock are used up.
    used: dict[str, int] = field(default_factory=dict)

    def take(self, step: dict[str, Any], count: int) -> list[Any]:
        """The next `count` answers for the step's node, or missing_mock."""
        node_id = step["nodeId"]
        if node_id not in self.responses:
            raise _missing(step, f"The run reached {step['nodeType']} node {node_id!r}, which has no mock in "
                                 "mock_responses.")
        mock = self.responses[node_id]
        if not isinstance(mock, list):
            return [mock] * count
        start = self.used.get(node_id, 0)
        if start + count > len(mock):
            raise _missing(step, f"The mock list for {node_id!r} ran out: it has {len(mock)} entries, and "
                                 f"{start + count} were needed by now.")
        self.used[node_id] = start + count
        return mock[start:start + count]


def _missing(step: dict[str, Any], message: str) -> WorkflowTestFailed:
    return WorkflowTestFailed("missing_mock", message, nodeId=step["nodeId"], nodeType=step["nodeType"])


def _text(entry: Any) -> str:
    return entry if isinstance(entry, str) else json.dumps(entry)


def _verdict(matchup: dict[str, Any], entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        return {"id": matchup["id"], "winner": _text(entry), "margin": DEFAULT_MARGIN}
    verdict = {"id": matchup["id"], "winner": entry.get("winner"), "margin": entry.get("margin", DEFAULT_MARGIN)}
    if "reasoning" in entry:
        verdict["reasoning"] = entry["reasoning"]
    return verdict


def _agent_count(step: dict[str, Any]) -> int:
    return len(step.get("agents") or ()) or int(step.get("agentCount") or 1)


def _fanout_answer(step: dict[str, Any], mocks: Mocks) -> dict[str, Any]:
    return {"results": [{"raw": _text(entry)} for entry in mocks.take(step, _agent_count(step))]}


def _round_robin_answer(step: dict[str, Any], mocks: Mocks) -> dict[str, Any]:
    if step.get("roundRobinPhase") == "resolve":
        return {"verdicts": None, "result": {"raw": _text(mocks.take(step, 1)[0])}}
    matchups = step.get("matchups") or []
    entries = mocks.take(step, len(matchups))
    return {"verdicts": [_verdict(m, e) for m, e in zip(matchups, entries, strict=True)], "result": None}


# The tool that answers a node (runs.handlers HANDLERS[type].tool) -> how mocks become its payload.
ANSWER_BUILDERS: dict[str, Callable[[dict[str, Any], Mocks], dict[str, Any]]] = {
    "advance_run": lambda step, mocks: {"response": _text(mocks.take(step, 1)[0]), "usage": None,
                                        "thinking": None},
    "resume_run": lambda step, mocks: {"transition": _text(mocks.take(step, 1)[0])},
    "advance_consensus": _fanout_answer,
    "advance_map": _fanout_answer,
    "advance_round_robin": _round_robin_answer,
}


# --- the test --------------------------------------------------------------------------------------

def _subject(*, scope: Scope, workflow_id: str | None, source: str | None,
             config: dict[str, Any] | str | None) -> tuple[dict[str, Any], Workflow | None]:
    """(definition, stored workflow or None for an inline config), or the documented failure."""
    if config is not None:
        try:
            _, definition = definition_parse(config, with_text=False)
            definition_validate(scope=scope, config=definition, workflow_id=None)
        except DefinitionInvalid as exc:
            raise WorkflowTestFailed("invalid_config", exc.message, details=exc.errors) from exc
        return definition, None
    try:
        workflow = workflow_find(scope=scope, workflow_id=workflow_id or "", source=source)
    except WorkflowNotFound as exc:
        raise WorkflowTestFailed("workflow_not_found", exc.message) from exc
    except DomainError as exc:  # no_repo_source: source repo without a project
        raise WorkflowTestFailed(exc.code, exc.message) from exc
    return workflow.config, workflow


def _inputs_check(*, workflow_id: str | None, config: Any, mock_responses: Any, timeout_ms: int) -> None:
    if (workflow_id is None) == (config is None):
        raise WorkflowTestFailed("invalid_input", "Pass exactly one of workflow_id or config.")
    if not MIN_TIMEOUT_MS <= timeout_ms <= MAX_TIMEOUT_MS:
        raise WorkflowTestFailed("invalid_input", f"timeout_ms must be from {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS}.")
    if not isinstance(mock_responses, dict) or not all(
            isinstance(k, str) and isinstance(v, str | list) for k, v in mock_responses.items()):
        raise WorkflowTestFailed("invalid_input", "mock_responses must map node ids to a string or a list.")


def workflow_test(*, caller: Caller, scope: Scope, workflow_id: str | None = None, source: str | None = None,
                  config: dict[str, Any] | str | None = None, context: dict[str, Any] | None = None,
                  mock_responses: dict[str, Mock] | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                  ) -> dict[str, Any]:
    """Run the workflow to its end with mocked answers: {ok: true, finalStatus, durationMs, nodeTrace}.
    Raises WorkflowTestFailed otherwise (with the trace, when the run got that far)."""
    mock_responses = {} if mock_responses is None else mock_responses
    _inputs_check(workflow_id=workflow_id, config=config, mock_responses=mock_responses, timeout_ms=timeout_ms)
    definition, workflow = _subject(scope=scope, workflow_id=workflow_id, source=source, config=config)
    started = time.monotonic()
    try:
        run = engine.run_create(
            caller=caller, scope=scope, definition=definition, context=context, workflow=workflow,
            workflow_key=workflow.workflow_id if workflow else INLINE_KEY,
            source=workflow.source if workflow else INLINE_KEY, kind=Run.Kind.TEST)
    except engine.RunError as exc:  # the context does not match the workflow's schema
        raise WorkflowTestFailed("invalid_input", exc.message) from exc
    try:
        try:
            _run_to_end(caller=caller, scope=scope, run_id=run.pk, mocks=Mocks(mock_responses),
                        deadline=started + timeout_ms / 1000)
        except WorkflowTestFailed as failure:
            raise WorkflowTestFailed(failure.code, failure.message,
                                     **failure.fields, **_report(run.pk, started)) from None
        return {"ok": True, **_report(run.pk, started)}
    finally:
        # Children go with it (Run.parent cascades), and their nodes and turns with them.
        Run.objects.filter(pk=run.pk).delete()


def _run_to_end(*, caller: Caller, scope: Scope, run_id: str, mocks: Mocks, deadline: float) -> None:
    engine.drive(run_id)
    while True:
        if time.monotonic() > deadline:
            raise WorkflowTestFailed("timeout", "The test ran out of time (timeout_ms) before the run ended.")
        run = Run.objects.select_related("project").get(pk=run_id)
        if run.is_terminal:
            return
        step, _ = pending_step(run)
        if step is None:
            # A worker is running a script (of this run or of a child); it carries the run on.
            time.sleep(POLL_SECONDS)
            continue
        _answer(caller=caller, scope=scope, step=step, mocks=mocks)


def _answer(*, caller: Caller, scope: Scope, step: dict[str, Any], mocks: Mocks) -> None:
    """Answer the pending step (of the run or of a child it waits on) from its mock, as the host would."""
    handler = HANDLERS.get(step["nodeType"])
    build = ANSWER_BUILDERS.get(handler.tool) if handler is not None else None
    if build is None:
        raise WorkflowTestFailed("runner_error", f"No mock can answer a {step['nodeType']} node.",
                                 nodeId=step["nodeId"], nodeType=step["nodeType"])
    payload = build(step, mocks)
    try:
        engine.run_answer(caller=caller, scope=scope, run_id=step["runId"], tool=handler.tool, payload=payload,
                          step_id=step["stepId"])
    except DomainError as exc:
        raise WorkflowTestFailed("runner_error", f"The mock for {step['nodeId']!r} was refused: {exc.message}",
                                 nodeId=step["nodeId"], nodeType=step["nodeType"]) from exc


def _report(run_id: str, started: float) -> dict[str, Any]:
    run = Run.objects.select_related("project").get(pk=run_id)
    return {"finalStatus": run.status, "durationMs": int((time.monotonic() - started) * 1000),
            "nodeTrace": node_trace(run)}


def node_trace(run: Run) -> list[dict[str, Any]]:
    """run_history's nodes, with each subworkflow node's child run traced as its children."""
    nodes = run_history(run)["nodes"]
    children = {child.pk: child for child in run.children.select_related("project")}
    for row in nodes:
        child = children.get((row["input"] or {}).get("childRunId")) if row["nodeType"] == "subworkflow" else None
        if child is not None:
            row["children"] = node_trace(child)
    return nodes
