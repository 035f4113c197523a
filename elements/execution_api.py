"""REST endpoints for agent executions: the caller's executions, and one with its steps. Read-only
(executions are started and advanced through MCP-AQL, in an MCP session), scoped to the caller:
another user's execution is 404, as one that does not exist."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api import error_responses
from accounts.authentication import caller_from_request
from elements import agents
from elements.api import READ, ElementsApiView, IsoDateTimeField, PageSerializer, PaginationSerializer
from elements.models import AgentExecution
from elements.selectors import pagination
from elements.types import MAX_NAME_LENGTH


class ErrorSerializer(serializers.Serializer):
    class Meta:
        ref_name = "AgentExecutionError"

    error = serializers.CharField()
    code = serializers.CharField(help_text="execution_not_found, invalid_input (with fields)")
    fields = serializers.DictField(required=False, help_text="Per query parameter, what is wrong with it")


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    return error_responses(ErrorSerializer, *statuses, meanings={
        400: "A query parameter is refused", 404: "No such execution of yours"})


class ExecutionSerializer(serializers.Serializer):
    """An execution as the list shows it."""

    class Meta:
        ref_name = "AgentExecution"

    goalId = serializers.CharField(source="pk")
    agentName = serializers.CharField(source="agent_name")
    goal = serializers.CharField()
    status = serializers.ChoiceField(choices=AgentExecution.Status.choices)
    outcome = serializers.CharField(help_text="success, failure or partial once finished; empty before")
    summary = serializers.CharField()
    abortReason = serializers.CharField(source="abort_reason")
    parameters = serializers.DictField()
    successCriteria = serializers.ListField(child=serializers.CharField(), source="success_criteria")
    stateVersion = serializers.IntegerField(source="state_version")
    stepCount = serializers.IntegerField(source="step_count")
    maxAutonomousSteps = serializers.SerializerMethodField(help_text="The step limit it runs by (0: unlimited)")
    continuations = serializers.IntegerField()
    retries = serializers.IntegerField()
    resumedFrom = serializers.CharField(source="resumed_from", help_text="The goalId a handoff resumed, or empty")
    startedAt = IsoDateTimeField(source="started_at")
    updatedAt = IsoDateTimeField(source="updated_at")
    finishedAt = IsoDateTimeField(source="finished_at", allow_null=True)

    def get_maxAutonomousSteps(self, execution: AgentExecution) -> int:
        return agents.execution_max_steps(execution)


class StepSerializer(serializers.Serializer):
    class Meta:
        ref_name = "AgentExecutionStep"

    number = serializers.IntegerField()
    decisionId = serializers.CharField(source="decision_id")
    stepDescription = serializers.CharField(source="description")
    outcome = serializers.CharField()
    findings = serializers.CharField()
    confidence = serializers.FloatField(allow_null=True)
    nextActionHint = serializers.CharField(source="next_action_hint")
    riskScore = serializers.IntegerField(source="risk_score", allow_null=True)
    autonomy = serializers.DictField(help_text="The directive answered for the step: {continue, reason?, factors, "
                                               "stepsRemaining?, stopped?, nextStepRisk?, verification?, "
                                               "resilienceAction?, notifications?}")
    createdAt = IsoDateTimeField(source="created_at")


class ExecutionDetailSerializer(ExecutionSerializer):
    class Meta:
        ref_name = "AgentExecutionDetail"

    steps = StepSerializer(many=True)


GOAL_PARAM = OpenApiParameter("goal_id", OpenApiTypes.STR, OpenApiParameter.PATH,
                              description="The execution's goalId (goal_…)")


class ExecutionListView(ElementsApiView):
    required_scope = {"GET": READ}

    class FilterSerializer(PageSerializer):
        class Meta:
            ref_name = "AgentExecutionFilter"

        agent = serializers.CharField(required=False, max_length=MAX_NAME_LENGTH, help_text="Only this agent's")
        status = serializers.ChoiceField(choices=AgentExecution.Status.choices, required=False)

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "AgentExecutionList"

        items = ExecutionSerializer(many=True)
        pagination = PaginationSerializer()

    @extend_schema(parameters=[FilterSerializer], responses={200: OutputSerializer, **_errors(400)},
                   summary="List your agent executions, newest first", operation_id="agent_executions_list")
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params: dict[str, Any] = filters.validated_data
        executions = agents.executions_list(caller=caller_from_request(request, via="api"),
                                          agent_name=params.get("agent"), status=params.get("status"))
        page, size = params["page"], params["pageSize"]
        items = list(executions[(page - 1) * size:page * size])
        return Response({"items": ExecutionSerializer(items, many=True).data,
                         "pagination": pagination(page, size, executions.count())})


class ExecutionDetailView(ElementsApiView):
    required_scope = {"GET": READ}

    @extend_schema(parameters=[GOAL_PARAM], responses={200: ExecutionDetailSerializer, **_errors(404)},
                   summary="Get one of your agent executions, with its steps", operation_id="agent_execution_get")
    def get(self, request: Request, goal_id: str) -> Response:
        execution = agents.execution_get(caller=caller_from_request(request, via="api"), goal_id=goal_id)
        steps = StepSerializer(execution.steps.order_by("number"), many=True).data
        return Response({**ExecutionSerializer(execution).data, "steps": steps})
