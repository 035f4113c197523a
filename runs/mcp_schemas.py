"""The output schemas of Roscoe's run tools (runs.mcp), after the reference's AdvanceResult and run
history. Every run tool answers a user error as `{error, code}` without isError, so each schema
is one of its own shapes or that error (`or_error`); test_workflow's `{ok: false}` failures set
isError and need none."""

from __future__ import annotations

from typing import Any

from core.output_schemas import (
    ANY,
    BOOLEAN,
    DATETIME,
    DATETIME_OR_NULL,
    INTEGER,
    INTEGER_OR_NULL,
    NULL,
    NUMBER,
    OBJECT,
    TEXT,
    TEXT_OR_NULL,
    TEXTS,
    array_of,
    enum,
    nullable,
    obj,
    one_of,
    or_error,
)
from runs import answerers
from runs.models import NodeRun, Run

RUN_STATUS = enum(*Run.Status.values)

COST_FIELDS = {
    "totalCostUsd": NUMBER, "meteredCostUsd": NUMBER, "subscriptionEquivCostUsd": NUMBER,
    "billingMode": TEXT, "inputTokens": INTEGER, "outputTokens": INTEGER,
}
AWAITING_CHILD = obj({"childRunId": TEXT}, description="The subworkflow's child run the run waits on.")

# --- pendingStep: one shape per pausing node type --------------------------------------------------

STEP_FIELDS = {
    "runId": TEXT,
    "stepId": TEXT,
    "nodeId": TEXT,
    "prompt": TEXT,
    "validTransitions": TEXTS,
    "transitions": array_of(obj({"event": TEXT, "target": TEXT}, {"targetLabel": TEXT})),
}
STEP_OPTIONAL = {"label": TEXT}
AGENTS = {"model": TEXT, "agentCount": INTEGER, "agents": array_of(obj({"model": TEXT, "prompt": TEXT}))}


def _step(node_types: tuple[str, ...], required: dict[str, Any], optional: dict[str, Any] | None = None,
          *, description: str) -> dict[str, Any]:
    return obj({**STEP_FIELDS, "nodeType": enum(*node_types), **required}, {**STEP_OPTIONAL, **(optional or {})},
               description=description)


PENDING_STEP = one_of(
    _step(("ai_agent", "ai_judge"), {"model": TEXT}, description="An AI step: answer it with advance_run."),
    _step(("human",), {}, description="A person's choice among validTransitions: answer it with resume_run, "
                                      "only with the user's choice."),
    _step(("consensus",), {**AGENTS, "consensusPhase": TEXT},
          description="consensusPhase vote, retry, generate or aggregate: answer it with advance_consensus."),
    _step(("round_robin",), {**AGENTS, "roundRobinPhase": TEXT},
          {"criterion": TEXT, "matchups": array_of(obj({"id": TEXT, "a": TEXT, "b": TEXT}))},
          description="roundRobinPhase resolve, or first or contested with criterion and matchups: answer it "
                      "with advance_round_robin."),
    _step(("map",), {**AGENTS, "mapPhase": TEXT},
          description="mapPhase extract, map or reduce: answer it with advance_map."),
)
WAITING_FOR = obj({"who": enum(answerers.HOST, answerers.MODEL, answerers.PERSON, answerers.CHILD),
                   "message": TEXT})

# --- AdvanceResult: one shape per run state ----------------------------------------------------------


def _advance_result(extra: dict[str, Any]) -> dict[str, Any]:
    """AdvanceResult, by the run's state, each with `extra`'s fields too (start_workflow's)."""
    common = {"runId": TEXT, "url": TEXT, **COST_FIELDS, **extra}
    return one_of(
        obj({**common, "status": enum(Run.Status.PAUSED), "waitingFor": nullable(WAITING_FOR)},
            {"pendingStep": PENDING_STEP, "awaitingChild": AWAITING_CHILD, "hostHint": TEXT},
            description="Paused: pendingStep is the step to answer (a child run's, when awaitingChild names "
                        "it); none while a child runs a script."),
        obj({**common, "status": enum(Run.Status.PENDING, Run.Status.RUNNING), "waitingFor": NULL},
            description="Running: a script is running (on a worker)."),
        obj({**common, "status": enum(Run.Status.COMPLETED), "waitingFor": NULL, "output": ANY},
            description="Completed, with the run's output."),
        obj({**common, "status": enum(Run.Status.FAILED), "waitingFor": NULL, "error": TEXT, "stop_reason": TEXT},
            description="Failed: error says why, stop_reason how (error, failed_end, spending_cap_exceeded, ...)."),
        obj({**common, "status": enum(Run.Status.CANCELLED), "waitingFor": NULL}, description="Cancelled."),
    )


ADVANCE_RESULT = _advance_result({})
START_RESULT = _advance_result({
    "workflow": obj({"id": TEXT, "name": TEXT, "description": TEXT_OR_NULL}),
    "narration": TEXT,
})

# --- list_runs, get_run_history, test_workflow -------------------------------------------------------

RUN_ROW_FIELDS = {
    "id": TEXT, "workflowId": TEXT, "workflowName": TEXT, "status": RUN_STATUS, "startedAt": DATETIME,
    "completedAt": DATETIME_OR_NULL, "source": TEXT, "workflowSource": TEXT, "kind": enum(*Run.Kind.values),
}
TURN = obj({
    "phase": TEXT, "agentIndex": INTEGER_OR_NULL, "model": TEXT, "prompt": TEXT, "response": TEXT,
    "thinking": TEXT_OR_NULL, "usage": OBJECT, "costUsd": NUMBER, "estimated": BOOLEAN, "at": DATETIME,
})
NODE_IDENTITY = {"id": INTEGER, "nodeId": TEXT, "nodeType": TEXT, "status": enum(*NodeRun.Status.values)}
NODE_ROW = obj({
    **NODE_IDENTITY, "startedAt": DATETIME, "completedAt": DATETIME_OR_NULL, "durationMs": INTEGER_OR_NULL,
    "attempts": INTEGER, "input": ANY, "output": ANY, "error": TEXT_OR_NULL, "event": TEXT_OR_NULL,
    "turns": array_of(TURN),
    # Empty in a run's history (a fan-out's agents are its turns); in test_workflow's trace, a subworkflow
    # node's child run's nodes.
    "children": array_of(obj(NODE_IDENTITY)),
})
RUN_HISTORY = obj({
    "run": obj({
        **RUN_ROW_FIELDS, "context": ANY, "parentRunId": TEXT_OR_NULL, "childRunIds": TEXTS,
        "awaitingChild": nullable(AWAITING_CHILD), "stop_reason": TEXT_OR_NULL, "error": TEXT_OR_NULL,
        "output": ANY, "url": TEXT, **COST_FIELDS,
    }),
    "nodes": array_of(NODE_ROW),
})
WORKFLOW_TEST = obj({
    "ok": {"const": True}, "finalStatus": enum(*Run.TERMINAL), "durationMs": INTEGER, "nodeTrace": array_of(NODE_ROW),
})

# What each tool declares.
START_OUTPUT = or_error(START_RESULT)
ADVANCE_OUTPUT = or_error(ADVANCE_RESULT)
# A list is answered as {result: [...]} (core.tools.success_result).
LIST_OUTPUT = or_error(obj({"result": array_of(obj(RUN_ROW_FIELDS))}))
HISTORY_OUTPUT = or_error(RUN_HISTORY)
# A scope error (CWD_REQUIRED, ...) reaches test_workflow's caller as {error, code} without isError.
TEST_OUTPUT = or_error(WORKFLOW_TEST)
