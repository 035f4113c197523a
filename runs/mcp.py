"""Roscoe's run tools: start a workflow, answer its paused steps, cancel it, and look at runs.
Every tool takes the same `cwd` / `global` scope as the workflow tools; a run of another project
(or user) is "Run not found."."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from mcp import types
from pydantic import Field

from core.errors import DomainError
from core.tools import Toolset, error_payload_result, success_result, tool
from runs import engine, selectors, testing
from runs.mcp_schemas import ADVANCE_OUTPUT, HISTORY_OUTPUT, LIST_OUTPUT, START_OUTPUT, TEST_OUTPUT
from runs.models import Run
from workflows.mcp import Config, Cwd, Global, Source
from workflows.scoping import Scope, scope_resolve

RunId = Annotated[str, Field(description="The run's id (runId).")]
StepId = Annotated[str | None, Field(description=(
    "The pendingStep's stepId (an Atrium extension of the Roscoe reference). Given, the answer is applied "
    "only to that step, else refused with not_waiting. Left out, it is applied only to the step this "
    "session was last shown, and never twice."))]
READ, EXECUTE = "runs:read", "runs:execute"
# The code the tool registry gives a failure it logged: the one run tool error that sets isError.
INTERNAL_ERROR = "internal_error"


class RunTools(Toolset):
    def _error_result(self, exc: DomainError) -> types.CallToolResult:
        """As the reference has it: a user error is `{error, code}` in a result that is not an
        error, so the host reads it and recovers; only a server failure sets isError.
        test_workflow keeps its own `{ok: false, code, message}`."""
        if isinstance(exc, testing.WorkflowTestFailed):
            return error_payload_result(exc.payload)
        payload = {"error": exc.message, "code": exc.code, **exc.extra}
        if exc.code == INTERNAL_ERROR:
            return error_payload_result(payload)
        return success_result(payload)

    def _refusal_result(self, tool_name: str, exc: DomainError) -> types.CallToolResult:
        if tool_name == "test_workflow":
            return self._error_result(testing.WorkflowTestFailed(exc.code, exc.message))
        return self._error_result(exc)

    def _scope(self, cwd: str | None, global_: bool | None) -> Scope:
        return scope_resolve(caller=self.caller, cwd=cwd, global_=global_)

    def _shown(self, run: Run, *, after_answer: bool = False) -> dict[str, Any]:
        """The AdvanceResult, remembering the step it shows to this session."""
        result = selectors.advance_result(run)
        engine.steps_shown_record(caller=self.caller, result=result, after_answer=after_answer)
        return result

    def _answer(self, run_id: str, tool_name: str, payload: dict[str, Any], step_id: str | None, cwd: str | None,
                global_: bool | None) -> dict[str, Any]:
        run = engine.run_answer(caller=self.caller, scope=self._scope(cwd, global_), run_id=run_id, tool=tool_name,
                                payload=payload, step_id=step_id)
        return self._shown(run, after_answer=True)

    @tool(name="start_workflow", title="Start a workflow", scope=EXECUTE, read_only=False, destructive=False,
          idempotent=False, open_world=False, output_schema=START_OUTPUT)
    def start_workflow(
        self, workflow_id: Annotated[str, Field(description="The workflow to run.")],
        context: Annotated[dict[str, Any] | None, Field(description="The start context (checked against the "
                                                                    "workflow's context schema).")] = None,
        source: Source = None,
        host: Annotated[Literal["claude_code", "cowork", "desktop_chat"] | None, Field(
            description="Your surface: decides whether fan-out runs on the user's subscription.")] = None,
        spending_cap_usd: Annotated[float | None, Field(ge=0, le=engine.MAX_SPENDING_CAP_USD,
                                                        description="Stop the run once its cost exceeds this.")] = None,
        spending_cap_tokens: Annotated[int | None, Field(ge=0, le=engine.MAX_SPENDING_CAP_TOKENS, description=(
            "Stop the run once its input plus output tokens exceed this."))] = None,
        cwd: Cwd = None, global_: Global = None,
    ) -> Any:
        """Start a workflow: script and condition nodes run at once, then the run pauses at the first AI or
        human node and returns pendingStep. Answers {runId, status, url, workflow: {id, name, description},
        narration, pendingStep?, waitingFor} plus the cost fields. pendingStep.stepId (an Atrium extension of the Roscoe
        reference) names the step; pass it back as step_id when you answer. Answer ai_agent/ai_judge steps with
        advance_run; consensus, round_robin and map with their advance_* tool; human steps only with the user's
        choice via resume_run (never choose for them)."""
        caps = engine.caps_from(usd=spending_cap_usd, tokens=spending_cap_tokens)
        run = engine.run_start(caller=self.caller, scope=self._scope(cwd, global_), workflow_id=workflow_id,
                               source=source, context=context, host=host, caps=caps)
        result = selectors.start_result(run)
        engine.steps_shown_record(caller=self.caller, result=result, started=True)
        return result

    @tool(name="get_run_status", title="Run status", scope=READ, read_only=True, destructive=False, idempotent=True,
          open_world=False, output_schema=ADVANCE_OUTPUT)
    def get_run_status(self, run_id: RunId, cwd: Cwd = None, global_: Global = None) -> Any:
        """The run's status and its pending step (with its stepId), as AdvanceResult. waitingFor (an Atrium
        extension) says who answers that step, {who: host, model, person or child, message}, or is null: a run a
        trigger started may be answered by the server's model backend, and one waiting for a host is yours to
        answer with advance_run and the stepId. If the step is a human node, show the prompt and the valid
        transitions to the user as a numbered list and wait for their reply; do not call resume_run on your own.
        Nothing about the run changes; the server only notes which step this session was shown, so that an
        answer sent without step_id applies to that step alone."""
        return self._shown(engine.run_get(scope=self._scope(cwd, global_), run_id=run_id, kind=None))

    @tool(name="advance_run", title="Answer an AI step", scope=EXECUTE, read_only=False, destructive=False,
          idempotent=False, open_world=False, output_schema=ADVANCE_OUTPUT)
    def advance_run(
        self, run_id: RunId, response: Annotated[str, Field(description="Your answer to the pending step's "
                                                                        "prompt. ai_judge: the JSON envelope "
                                                                        "{\"verdict\", \"reasoning\"}.")],
        usage: Annotated[dict[str, Any] | None, Field(description="Real usage: {inputTokens, outputTokens, "
                                                                  "cacheCreationTokens, cacheReadTokens, "
                                                                  "costUsd}; otherwise cost is estimated.")]
        = None,
        thinking: Annotated[str | None, Field(description="Your reasoning for this step, kept on the turn.")] = None,
        step_id: StepId = None,
        cwd: Cwd = None, global_: Global = None,
    ) -> Any:
        """Answer a pending ai_agent or ai_judge step. An ai_judge answer that is not the envelope is refused
        and the run stays at the node. With step_id (pendingStep.stepId, an Atrium extension) the answer applies
        to that step only; another step, or a step already answered, is refused with not_waiting. Answers the
        updated AdvanceResult."""
        return self._answer(run_id, "advance_run", {"response": response, "usage": usage, "thinking": thinking},
                            step_id, cwd, global_)

    @tool(name="advance_consensus", title="Answer a consensus step", scope=EXECUTE, read_only=False,
          destructive=False, idempotent=False, open_world=False, output_schema=ADVANCE_OUTPUT)
    def advance_consensus(
        self, run_id: RunId, results: Annotated[list[dict[str, Any]], Field(
            min_length=1, description="One {raw} per subagent, in agents[] order.")],
        step_id: StepId = None,
        cwd: Cwd = None, global_: Global = None,
    ) -> Any:
        """Answer a consensus step: run agentCount independent subagents (none sees another's answer) on the
        pendingStep's agents[i].model and prompt, and return every raw answer. consensusPhase says what they
        answer: vote/retry (the verdict envelope), generate (free prose) or aggregate (one agent: {"reasoning",
        "index"}). step_id: as for advance_run."""
        return self._answer(run_id, "advance_consensus", {"results": results}, step_id, cwd, global_)

    @tool(name="advance_round_robin", title="Answer a round-robin step", scope=EXECUTE, read_only=False,
          destructive=False, idempotent=False, open_world=False, output_schema=ADVANCE_OUTPUT)
    def advance_round_robin(
        self, run_id: RunId,
        verdicts: Annotated[list[dict[str, Any]] | None, Field(description="Matchup rounds: [{id, winner: \"A\" "
                                                                           "or \"B\", margin: 0-100, "
                                                                           "reasoning?}].")] = None,
        result: Annotated[dict[str, Any] | None, Field(description="Resolve round: {raw}.")] = None,
        step_id: StepId = None,
        cwd: Cwd = None, global_: Global = None,
    ) -> Any:
        """Answer a round_robin step by roundRobinPhase: resolve (run agents[0].prompt, return {raw} as result),
        or first/contested (one independent subagent per matchup picks A or B with a 0-100 margin; send verdicts
        as waves finish; the node re-pauses with what is still outstanding, as a new step). step_id: as for
        advance_run."""
        return self._answer(run_id, "advance_round_robin", {"verdicts": verdicts, "result": result}, step_id, cwd,
                            global_)

    @tool(name="advance_map", title="Answer a map step", scope=EXECUTE, read_only=False, destructive=False,
          idempotent=False, open_world=False, output_schema=ADVANCE_OUTPUT)
    def advance_map(
        self, run_id: RunId, results: Annotated[list[dict[str, Any]], Field(
            min_length=1, description="One {raw} per subagent, in agent order.")],
        step_id: StepId = None,
        cwd: Cwd = None, global_: Global = None,
    ) -> Any:
        """Answer a map step: run exactly agentCount independent subagents on agents[i].model and prompt and
        return each raw answer in order, whatever mapPhase is (extract, map, reduce). An empty answer in the map
        round is a failed branch. step_id: as for advance_run."""
        return self._answer(run_id, "advance_map", {"results": results}, step_id, cwd, global_)

    @tool(name="resume_run", title="Resume after a human step", scope=EXECUTE, read_only=False, destructive=False,
          idempotent=False, open_world=False, output_schema=ADVANCE_OUTPUT)
    def resume_run(self, run_id: RunId, transition: Annotated[str, Field(
            description="The choice the user made, one of validTransitions.")], step_id: StepId = None,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Continue a run paused at a human node with the user's choice. Do not call this on your own: show the
        node's prompt and the valid transitions as a numbered list, and wait for the user to choose. step_id: as
        for advance_run."""
        return self._answer(run_id, "resume_run", {"transition": transition}, step_id, cwd, global_)

    @tool(name="cancel_run", title="Cancel a run", scope=EXECUTE, read_only=False, destructive=True,
          idempotent=False, open_world=False, output_schema=ADVANCE_OUTPUT)
    def cancel_run(self, run_id: RunId, cwd: Cwd = None, global_: Global = None) -> Any:
        """Cancel a running or paused run: a running script is stopped, the current node is marked cancelled,
        and child runs are cancelled too. An error if the run has already ended."""
        return self._shown(engine.run_cancel(caller=self.caller, scope=self._scope(cwd, global_), run_id=run_id))

    @tool(name="list_runs", title="List runs", scope=READ, read_only=True, destructive=False, idempotent=True,
          open_world=False, output_schema=LIST_OUTPUT)
    def list_runs(
        self, workflow_id: Annotated[str | None, Field(description="Only this workflow's runs.")] = None,
        status: Annotated[Literal["pending", "running", "paused", "completed", "failed", "cancelled"] | None,
                          Field(description="Only runs in this status.")] = None,
        since: Annotated[datetime | None, Field(description="Only runs started at or after this ISO 8601 "
                                                            "time.")] = None,
        limit: Annotated[int, Field(ge=1, le=500, description="At most this many (default 25).")] = 25,
        kind: Annotated[Literal["real", "test", "all"], Field(description="real (default), test or all.")] = "real",
        cwd: Cwd = None, global_: Global = None,
    ) -> Any:
        """Recent runs in this project (or the global namespace), newest first: [{id, workflowId, workflowName,
        status, startedAt, completedAt, source, workflowSource, kind}]."""
        return selectors.run_list(scope=self._scope(cwd, global_), workflow_id=workflow_id, status=status,
                                  since=since, limit=limit, kind=kind)

    @tool(name="get_run_history", title="Run history", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=HISTORY_OUTPUT)
    def get_run_history(self, run_id: RunId, cwd: Cwd = None, global_: Global = None) -> Any:
        """The full per-node trace of a run: {run: {..., parentRunId, childRunIds, awaitingChild}, nodes: [{id,
        nodeId, nodeType, status, startedAt, completedAt, durationMs, attempts, input, output, error, turns,
        children}]}."""
        run = engine.run_get(scope=self._scope(cwd, global_), run_id=run_id, kind=None)
        return selectors.run_history(run)

    @tool(name="test_workflow", title="Test a workflow", scope=EXECUTE, read_only=False, destructive=False,
          idempotent=False, open_world=False, output_schema=TEST_OUTPUT)
    def test_workflow(
        self, workflow_id: Annotated[str | None, Field(description="A stored workflow to test (or config).")] = None,
        source: Source = None, config: Config = None,
        context: Annotated[dict[str, Any] | None, Field(description="The start context, as for "
                                                                    "start_workflow.")] = None,
        mock_responses: Annotated[dict[str, str | list[str | dict[str, Any]]] | None, Field(
            description="Node id -> mock. ai_agent/ai_judge: the response; human: the transition. consensus "
                        "and map: a list of raw answers, one per agent of each phase, in order across phases. "
                        "round_robin: a list with, per phase, the resolve answer or one entry per outstanding "
                        "matchup (\"A\", \"B\" or {winner, margin?, reasoning?}). A string answers every visit; "
                        "a list goes on where it left off when a loop returns to the node.")] = None,
        timeout_ms: Annotated[int, Field(ge=testing.MIN_TIMEOUT_MS, le=testing.MAX_TIMEOUT_MS,
                                         description="Wall-clock budget for the whole test (default 60000). "
                                                     "It cannot interrupt one running script: give the script "
                                                     "its own timeout.")] = testing.DEFAULT_TIMEOUT_MS,
        cwd: Cwd = None, global_: Global = None,
    ) -> Any:
        """Run a workflow end to end on the real engine, answering every AI and human step it reaches from
        mock_responses, then delete the test run (it never shows in list_runs). Pass exactly one of workflow_id
        (+ source) or config (validated like validate_workflow). Script, condition and subworkflow nodes run
        for real (a child run's steps are answered from the same mocks, by node id); fan-out nodes (consensus,
        round_robin, map) are answered from list mocks, so fanout_in_test_mode_unsupported is never returned.
        Answers {ok: true, finalStatus, durationMs, nodeTrace}; failures {ok: false, code, message, nodeId?,
        nodeType?, finalStatus?, durationMs?, nodeTrace?, details?} with code invalid_input,
        workflow_not_found, invalid_config, missing_mock (a reached node has no mock, or its list ran out),
        runner_error (the engine refused a mock) or timeout."""
        return testing.workflow_test(caller=self.caller, scope=self._scope(cwd, global_), workflow_id=workflow_id,
                                     source=source, config=config, context=context, mock_responses=mock_responses,
                                     timeout_ms=timeout_ms)
