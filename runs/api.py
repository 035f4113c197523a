"""REST endpoints for runs: the run tools over HTTP. Thin over runs.engine, runs.selectors and
runs.testing, guarded by the same scopes (runs:read to look, runs:execute to start, answer, cancel
and test), answering the same shapes, and refusing with the same codes as `{error, code}`; a run of
another project or user is 404 "Run not found.".

Every call names its scope as the tools do: `cwd` (a path inside a registered project root) or
`global=true`, as query parameters, or in the JSON body of a POST."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api import error_responses, validated
from accounts.authentication import caller_from_request
from runs import engine, selectors, testing
from runs.models import Run
from workflows.api import (
    JSON,
    SCOPE_QUERY,
    ScopeParams,
    WorkflowsApiView,
    scope_of,
    source_field,
    source_of,
)

READ, EXECUTE = "runs:read", "runs:execute"
RUN_PARAM = OpenApiParameter("run_id", OpenApiTypes.STR, OpenApiParameter.PATH, description="The run's id (runId).")


class RunsApiView(WorkflowsApiView):
    """A run endpoint: the same scope check ({method: scope}) and scope inputs as the workflow endpoints."""


# --- shapes --------------------------------------------------------------------------------

class ErrorSerializer(serializers.Serializer):
    class Meta:
        ref_name = "RunError"

    error = serializers.CharField()
    code = serializers.CharField(help_text="run_not_found, run_terminal, not_waiting, wrong_tool, answer_rejected, "
                                           "invalid_context, not_found, CWD_REQUIRED, ...")


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    return error_responses(ErrorSerializer, *statuses)


# The scope goes in one required query parameter (workflows.api.SCOPE_QUERY), not as two optional ones.
SCOPE_FIELDS_EXCLUDED = [OpenApiParameter("cwd", exclude=True), OpenApiParameter("global", exclude=True)]


class AdvanceResultSerializer(serializers.Serializer):
    class Meta:
        ref_name = "AdvanceResult"

    runId = serializers.CharField()
    status = serializers.ChoiceField(choices=Run.Status.choices)
    url = serializers.URLField(help_text="The run's live page")
    pendingStep = serializers.DictField(required=False, help_text="{runId, stepId, nodeId, nodeType, prompt, "
                                        "validTransitions, label?, transitions, agentCount?, model?, agents?, "
                                        "consensusPhase?, criterion?, matchups?, roundRobinPhase?, mapPhase?}")
    hostHint = serializers.CharField(required=False)
    awaitingChild = serializers.DictField(required=False, help_text="{childRunId}")
    stop_reason = serializers.CharField(required=False)
    error = serializers.CharField(required=False)
    output = serializers.JSONField(required=False)
    totalCostUsd = serializers.FloatField()
    meteredCostUsd = serializers.FloatField()
    subscriptionEquivCostUsd = serializers.FloatField()
    billingMode = serializers.CharField()
    inputTokens = serializers.IntegerField()
    outputTokens = serializers.IntegerField()


class StartedSerializer(AdvanceResultSerializer):
    class Meta:
        ref_name = "RunStarted"

    workflow = serializers.DictField(help_text="{id, name, description}")
    narration = serializers.CharField(help_text="A ready-to-send opening line naming the workflow and its URL")


class RunRowSerializer(serializers.Serializer):
    class Meta:
        ref_name = "RunListItem"

    id = serializers.CharField()
    workflowId = serializers.CharField()
    workflowName = serializers.CharField()
    status = serializers.CharField()
    startedAt = serializers.DateTimeField()
    completedAt = serializers.DateTimeField(allow_null=True)
    source = serializers.CharField(help_text="The run's project id, or global")
    workflowSource = serializers.CharField()
    kind = serializers.CharField()


class HistorySerializer(serializers.Serializer):
    class Meta:
        ref_name = "RunHistory"

    run = serializers.DictField(help_text="{id, workflowId, ..., context, parentRunId, childRunIds, awaitingChild}")
    nodes = serializers.ListField(child=serializers.DictField(), help_text="[{id, nodeId, nodeType, status, "
                                  "startedAt, completedAt, durationMs, attempts, input, output, error, turns, "
                                  "children}]")


def _shown(request: Request, run: Run, *, after_answer: bool = False) -> dict[str, Any]:
    """The AdvanceResult, remembering the step it shows to this token."""
    result = selectors.advance_result(run)
    engine.steps_shown_record(caller=caller_from_request(request, via="api"), result=result, after_answer=after_answer)
    return result


# --- list and start ------------------------------------------------------------------------

class RunListStartView(RunsApiView):
    required_scope = {"GET": READ, "POST": EXECUTE}

    class FilterParams(ScopeParams):
        class Meta:
            ref_name = "RunListParams"

        workflow_id = serializers.CharField(required=False, help_text="Only this workflow's runs")
        status = serializers.ChoiceField(choices=Run.Status.choices, required=False,
                                         help_text="Only runs in this status")
        since = serializers.DateTimeField(required=False, help_text="Only runs started at or after this time")
        limit = serializers.IntegerField(required=False, default=25, min_value=1, max_value=500)
        kind = serializers.ChoiceField(choices=["real", "test", "all"], required=False, default="real")

    class InputSerializer(ScopeParams):
        class Meta:
            ref_name = "RunStartInput"

        workflow_id = serializers.CharField(help_text="The workflow to run")
        context = serializers.DictField(required=False, allow_null=True,
                                        help_text="The start context (checked against the workflow's context "
                                                  "schema)")
        source = source_field()
        host = serializers.ChoiceField(choices=["claude_code", "cowork", "desktop_chat"], required=False,
                                       allow_null=True, help_text="Your surface: decides whether fan-out runs on "
                                                                  "the user's subscription")
        # A number, as start_workflow takes it (kept to the micro-dollar the run stores); at most
        # what the run's cap column holds.
        spending_cap_usd = serializers.FloatField(min_value=0, max_value=engine.MAX_SPENDING_CAP_USD, required=False,
                                                  allow_null=True, help_text="Stop the run once its cost (in US "
                                                                             "dollars) exceeds this")
        spending_cap_tokens = serializers.IntegerField(min_value=0, max_value=engine.MAX_SPENDING_CAP_TOKENS,
                                                       required=False, allow_null=True,
                                                       help_text="Stop the run once its input plus output tokens "
                                                                 "exceed this")

    @extend_schema(parameters=[FilterParams, SCOPE_QUERY, *SCOPE_FIELDS_EXCLUDED],
                   responses={200: RunRowSerializer(many=True), **_errors(400)},
                   summary="Recent runs in this project (or the global namespace), newest first",
                   operation_id="runs_list")
    def get(self, request: Request) -> Response:
        filters = validated(self.FilterParams, request.query_params)
        return Response(selectors.run_list(
            scope=scope_of(request), workflow_id=filters.get("workflow_id"), status=filters.get("status"),
            since=filters.get("since"), limit=filters["limit"], kind=filters["kind"]))

    @extend_schema(request={JSON: InputSerializer},
                   responses={201: StartedSerializer, **_errors(400, 404)},
                   summary="Start a workflow: it runs to its first AI or human step", operation_id="run_start")
    def post(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.data)
        caller = caller_from_request(request, via="api")
        run = engine.run_start(
            caller=caller, scope=scope_of(request, params),
            workflow_id=params["workflow_id"], source=source_of(params.get("source")), context=params.get("context"),
            host=params.get("host"), caps=engine.caps_from(usd=params.get("spending_cap_usd"),
                                                           tokens=params.get("spending_cap_tokens")))
        result = selectors.start_result(run)
        engine.steps_shown_record(caller=caller, result=result, started=True)
        return Response(result, status=status.HTTP_201_CREATED)


# --- one run -------------------------------------------------------------------------------

class RunStatusView(RunsApiView):
    required_scope = {"GET": READ}

    @extend_schema(parameters=[RUN_PARAM, SCOPE_QUERY], responses={200: AdvanceResultSerializer, **_errors(400, 404)},
                   summary="A run's status and its pending step", operation_id="run_status")
    def get(self, request: Request, run_id: str) -> Response:
        run = engine.run_get(scope=scope_of(request), run_id=run_id, kind=None)
        return Response(_shown(request, run))


class RunHistoryView(RunsApiView):
    required_scope = {"GET": READ}

    @extend_schema(parameters=[RUN_PARAM, SCOPE_QUERY], responses={200: HistorySerializer, **_errors(400, 404)},
                   summary="A run's full per-node trace", operation_id="run_history")
    def get(self, request: Request, run_id: str) -> Response:
        run = engine.run_get(scope=scope_of(request), run_id=run_id, kind=None)
        return Response(selectors.run_history(run))


class RunCancelView(RunsApiView):
    required_scope = {"POST": EXECUTE}

    @extend_schema(parameters=[RUN_PARAM], request={JSON: ScopeParams},
                   responses={200: AdvanceResultSerializer, **_errors(400, 404)},
                   summary="Cancel a running or paused run (and its child runs); an error once it has ended",
                   operation_id="run_cancel")
    def post(self, request: Request, run_id: str) -> Response:
        params = validated(ScopeParams, request.data)
        run = engine.run_cancel(caller=caller_from_request(request, via="api"), scope=scope_of(request, params),
                                run_id=run_id)
        return Response(_shown(request, run))


# --- answers: one endpoint per answering tool, each posting that tool's payload -------------

class AnswerParams(ScopeParams):
    class Meta:
        ref_name = "RunAnswerParams"

    step_id = serializers.CharField(required=False, allow_null=True,
                                    help_text="The pendingStep's stepId: the answer applies to that step only, else "
                                              "not_waiting. Left out, it applies only to the step last shown to "
                                              "this token, and never twice")


class RawSerializer(serializers.Serializer):
    class Meta:
        ref_name = "RunAgentResult"

    raw = serializers.CharField(allow_blank=True, trim_whitespace=False, help_text="The agent's answer")
    usage = serializers.DictField(required=False, allow_null=True)
    thinking = serializers.CharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)


class AdvanceInput(AnswerParams):
    class Meta:
        ref_name = "RunAdvanceInput"

    response = serializers.CharField(allow_blank=True, trim_whitespace=False,
                                     help_text='The answer to the step\'s prompt; ai_judge: {"verdict", '
                                               '"reasoning"}')
    usage = serializers.DictField(required=False, allow_null=True,
                                  help_text="{inputTokens, outputTokens, cacheCreationTokens, cacheReadTokens, "
                                            "costUsd}; otherwise cost is estimated")
    thinking = serializers.CharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)


class ResumeInput(AnswerParams):
    class Meta:
        ref_name = "RunResumeInput"

    transition = serializers.CharField(help_text="The person's choice, one of validTransitions")


class ResultsInput(AnswerParams):
    class Meta:
        ref_name = "RunResultsInput"

    results = RawSerializer(many=True, allow_empty=False, help_text="One {raw} per agent, in agents[] order")


class RoundRobinInput(AnswerParams):
    class Meta:
        ref_name = "RunRoundRobinInput"

    verdicts = serializers.ListField(child=serializers.DictField(), required=False, allow_null=True,
                                     help_text='Matchup phases: [{id, winner: "A" or "B", margin: 0-100, '
                                               "reasoning?}]")
    result = RawSerializer(required=False, allow_null=True, help_text="Resolve phase: {raw}")


class RunAnswerView(RunsApiView):
    """Answers the run's paused step through engine.run_answer as `tool`, with the body's payload fields."""

    required_scope = {"POST": EXECUTE}
    tool: str
    InputSerializer: type[AnswerParams]

    def post(self, request: Request, run_id: str) -> Response:
        params = validated(self.InputSerializer, request.data)
        fields = [name for name in self.InputSerializer().fields if name not in ("cwd", "global", "step_id")]
        payload = {name: params.get(name) for name in fields}
        run = engine.run_answer(caller=caller_from_request(request, via="api"), scope=scope_of(request, params),
                                run_id=run_id, tool=self.tool, payload=payload, step_id=params.get("step_id"))
        return Response(_shown(request, run, after_answer=True))


def _answer_schema(input_serializer: type[AnswerParams], summary: str, operation_id: str) -> Any:
    return extend_schema_view(post=extend_schema(
        parameters=[RUN_PARAM], request={JSON: input_serializer},
        responses={200: AdvanceResultSerializer, **_errors(400, 404)}, summary=summary, operation_id=operation_id))


@_answer_schema(AdvanceInput, "Answer a pending ai_agent or ai_judge step", "run_advance")
class RunAdvanceView(RunAnswerView):
    tool, InputSerializer = "advance_run", AdvanceInput


@_answer_schema(ResumeInput, "Continue a run paused at a human step with the person's choice", "run_resume")
class RunResumeView(RunAnswerView):
    tool, InputSerializer = "resume_run", ResumeInput


@_answer_schema(ResultsInput, "Answer a consensus step: every agent's raw answer", "run_consensus")
class RunConsensusView(RunAnswerView):
    tool, InputSerializer = "advance_consensus", ResultsInput


@_answer_schema(RoundRobinInput, "Answer a round_robin step: verdicts, or the resolve result", "run_round_robin")
class RunRoundRobinView(RunAnswerView):
    tool, InputSerializer = "advance_round_robin", RoundRobinInput


@_answer_schema(ResultsInput, "Answer a map step: every agent's raw answer, in order", "run_map")
class RunMapView(RunAnswerView):
    tool, InputSerializer = "advance_map", ResultsInput


# --- test ----------------------------------------------------------------------------------

@extend_schema_field({"type": "object", "additionalProperties": {"oneOf": [{"type": "string"},
                                                                         {"type": "array", "items": {}}]}})
class MockResponsesField(serializers.DictField):
    """Node id -> a string, or a list (else invalid_input)."""


class RunTestView(RunsApiView):
    required_scope = {"POST": EXECUTE}

    class InputSerializer(ScopeParams):
        class Meta:
            ref_name = "RunTestInput"

        one_of_required = ("workflow_id", "config")  # exactly one of them (else invalid_input)

        workflow_id = serializers.CharField(required=False, allow_null=True,
                                            help_text="A stored workflow to test (or config)")
        source = source_field()
        config = serializers.JSONField(required=False, allow_null=True,
                                       help_text="A workflow to test, as an object or YAML text (or workflow_id)")
        context = serializers.DictField(required=False, allow_null=True)
        mock_responses = MockResponsesField(required=False, allow_null=True, help_text=(
            "Node id -> mock. ai_agent/ai_judge: the response; human: the transition; consensus and map: a list "
            "of raw answers, one per agent of each phase, in order across phases; round_robin: a list with, per "
            'phase, the resolve answer or one entry per outstanding matchup ("A", "B" or {winner, margin?, '
            "reasoning?}). A string answers every visit; a list goes on where it left off."))
        timeout_ms = serializers.IntegerField(required=False, default=testing.DEFAULT_TIMEOUT_MS,
                                              min_value=testing.MIN_TIMEOUT_MS, max_value=testing.MAX_TIMEOUT_MS)

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "RunTestResult"

        ok = serializers.BooleanField()
        finalStatus = serializers.CharField()
        durationMs = serializers.IntegerField()
        nodeTrace = serializers.ListField(child=serializers.DictField(),
                                         help_text="get_run_history's nodes; a subworkflow node's children are "
                                                   "its child run's nodes")

    class FailureSerializer(ErrorSerializer):
        class Meta:
            ref_name = "RunTestFailure"

        # Absent when the request itself was refused (its scope or its fields), as every endpoint refuses.
        ok = serializers.BooleanField(required=False)
        message = serializers.CharField(required=False)
        nodeId = serializers.CharField(required=False)
        nodeType = serializers.CharField(required=False)
        finalStatus = serializers.CharField(required=False)
        durationMs = serializers.IntegerField(required=False)
        nodeTrace = serializers.ListField(child=serializers.DictField(), required=False)
        details = serializers.ListField(child=serializers.CharField(), required=False)

    @extend_schema(
        request={JSON: InputSerializer},
        responses={200: OutputSerializer,
                   400: OpenApiResponse(FailureSerializer,
                                        description="invalid_input, invalid_config or no_repo_source"),
                   404: OpenApiResponse(FailureSerializer, description="workflow_not_found"),
                   422: OpenApiResponse(FailureSerializer, description="missing_mock, runner_error or timeout"),
                   **error_responses(ErrorSerializer)},
        summary="Run a workflow end to end with mocked answers, then delete the test run",
        operation_id="run_test",
    )
    def post(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.data)
        return Response(testing.workflow_test(
            caller=caller_from_request(request, via="api"), scope=scope_of(request, params),
            workflow_id=params.get("workflow_id"), source=source_of(params.get("source")), config=params.get("config"),
            context=params.get("context"), mock_responses=params.get("mock_responses"),
            timeout_ms=params["timeout_ms"]))
