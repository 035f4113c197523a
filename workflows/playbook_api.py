"""REST endpoints for playbooks, their triggers, templates, executions and the dashboard: the Aident
tools over HTTP, plus what the tools leave to the API (writing a plan, managing triggers one by one).
Thin over workflows.playbooks, workflows.triggers, workflows.templates and
workflows.playbook_selectors, guarded by the same scopes, refusing with `{error, code}`."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api import ScopedApiView, error_responses, validated
from accounts.authentication import caller_from_request
from core.caller import Caller
from core.versions import etag, if_match
from runs.engine import MAX_SPENDING_CAP_USD, caps_from
from workflows import playbook_selectors, playbooks, templates, triggers
from workflows.api import JSON
from workflows.mcp import (
    DASHBOARD_READ,
    PLAYBOOKS_CREATE,
    PLAYBOOKS_EXECUTE,
    PLAYBOOKS_MANAGE,
    PLAYBOOKS_READ,
    TEMPLATES_READ,
    TEMPLATES_USE,
)

PLAYBOOK_ID = OpenApiParameter("playbook_id", str, OpenApiParameter.PATH, description="The playbook's id")
TRIGGER_ID = OpenApiParameter("trigger_id", str, OpenApiParameter.PATH, description="The trigger's id")


class ErrorSerializer(serializers.Serializer):
    class Meta:
        ref_name = "PlaybookError"

    error = serializers.CharField()
    code = serializers.CharField()


def _errors(*statuses: int) -> dict[int, Any]:
    return error_responses(ErrorSerializer, *statuses, meanings={
        400: "Invalid input (invalid_input, invalid_plan with `problems`, invalid_arguments with `fields`)",
        404: "No such playbook, trigger, template or execution of yours", 409: "no_trigger: nothing to enable",
        412: "version_conflict: the playbook changed since you read it"})


def _caller(request: Request) -> Caller:
    return caller_from_request(request, via="api")


def _detail_response(caller: Caller, playbook_id: str, code: int = status.HTTP_200_OK,
                     extra: dict[str, Any] | None = None) -> Response:
    detail = playbook_selectors.playbook_detail(caller=caller, playbook_id=playbook_id)
    response = Response({**detail, **(extra or {})}, status=code)
    response["ETag"] = etag(detail["version"])
    return response


class Page(serializers.Serializer):
    class Meta:
        ref_name = "PlaybookPage"

    limit = serializers.IntegerField(default=20, min_value=1, max_value=100)
    offset = serializers.IntegerField(default=0, min_value=0, max_value=100_000)


class PlaybookChange(serializers.Serializer):
    class Meta:
        ref_name = "PlaybookChange"

    name = serializers.CharField(max_length=200)
    goal = serializers.CharField(max_length=5000, required=False, allow_blank=True, default="")
    plan = serializers.DictField(help_text="The plan: {input, steps, output} (docs: playbooks)")
    integrations = serializers.ListField(child=serializers.CharField(max_length=63), max_length=50, required=False)
    spendingCapUsd = serializers.FloatField(min_value=0, max_value=MAX_SPENDING_CAP_USD, required=False,
                                            allow_null=True, help_text="What one execution may spend on model "
                                                                       "answers, in USD")


class PlaybookInput(PlaybookChange):
    class Meta:
        ref_name = "PlaybookInput"

    triggers = serializers.ListField(child=serializers.DictField(), max_length=20, required=False,
                                     help_text="Trigger specs: {type: schedule|event|webhook, ...}")


def _cap(value: float | None) -> Decimal | None:
    return caps_from(usd=value, tokens=None).usd


class PlaybookListView(ScopedApiView):
    required_scope = {"GET": PLAYBOOKS_READ, "POST": PLAYBOOKS_CREATE}

    @extend_schema(parameters=[Page], responses={200: OpenApiTypes.OBJECT, **_errors(400)},
                   summary="Your playbooks, as playbooks_list", operation_id="playbooks_list")
    def get(self, request: Request) -> Response:
        page = validated(Page, request.query_params)
        return Response(playbook_selectors.playbook_list(caller=_caller(request), **page))

    @extend_schema(request={JSON: PlaybookInput}, responses={201: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="Create a playbook from a plan (triggers start disabled unless a spec says enabled)",
                   operation_id="playbook_create")
    def post(self, request: Request) -> Response:
        params = validated(PlaybookInput, request.data)
        caller = _caller(request)
        playbook = playbooks.playbook_create(
            caller=caller, name=params["name"], goal=params["goal"], plan=params["plan"],
            integrations=params.get("integrations"), triggers=params.get("triggers"),
            spending_cap_usd=_cap(params.get("spendingCapUsd")))
        return _detail_response(caller, playbook.pk, status.HTTP_201_CREATED,
                                {"createdTriggers": playbook_selectors.created_triggers(playbook)})


class PlaybookDetailView(ScopedApiView):
    required_scope = {"GET": PLAYBOOKS_READ, "PATCH": PLAYBOOKS_CREATE, "DELETE": PLAYBOOKS_CREATE}

    @extend_schema(parameters=[PLAYBOOK_ID], responses={200: OpenApiTypes.OBJECT, **_errors(404)},
                   summary="One playbook, as playbooks_get (with its ETag)", operation_id="playbook_get")
    def get(self, request: Request, playbook_id: str) -> Response:
        return _detail_response(_caller(request), playbook_id)

    @extend_schema(parameters=[PLAYBOOK_ID], request={JSON: PlaybookChange(partial=True)},
                   responses={200: OpenApiTypes.OBJECT, **_errors(400, 404, 412)},
                   summary="Change a playbook's name, goal, plan, integrations or cap (If-Match: its ETag); "
                           "triggers change under /triggers/", operation_id="playbook_update")
    def patch(self, request: Request, playbook_id: str) -> Response:
        serializer = PlaybookChange(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        params = dict(serializer.validated_data)
        if "spendingCapUsd" in params:
            params["spending_cap_usd"] = _cap(params.pop("spendingCapUsd"))
        changes = params
        caller = _caller(request)
        playbooks.playbook_update(caller=caller, playbook_id=playbook_id, changes=changes,
                                  if_match=if_match(request))
        return _detail_response(caller, playbook_id)

    @extend_schema(parameters=[PLAYBOOK_ID], responses={204: None, **_errors(404)},
                   summary="Delete a playbook, its triggers and its workflow (its executions stay)",
                   operation_id="playbook_delete")
    def delete(self, request: Request, playbook_id: str) -> Response:
        playbooks.playbook_delete(caller=_caller(request), playbook_id=playbook_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class GenerateView(ScopedApiView):
    required_scope = {"POST": PLAYBOOKS_CREATE}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PlaybookGenerate"

        prompt = serializers.CharField(min_length=10, max_length=4000)

    @extend_schema(request={JSON: InputSerializer}, responses={201: OpenApiTypes.OBJECT, **_errors(400)},
                   summary="Draft and save a playbook from a description, as playbooks_generate",
                   operation_id="playbook_generate")
    def post(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.data)
        return Response(playbooks.playbook_generate(caller=_caller(request), prompt=params["prompt"]),
                        status=status.HTTP_201_CREATED)


class ExecuteView(ScopedApiView):
    required_scope = {"POST": PLAYBOOKS_EXECUTE}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PlaybookExecute"

        input = serializers.JSONField(required=False, default=dict)

    @extend_schema(parameters=[PLAYBOOK_ID], request={JSON: InputSerializer},
                   responses={202: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="Start an execution, as playbooks_execute", operation_id="playbook_execute")
    def post(self, request: Request, playbook_id: str) -> Response:
        params = validated(self.InputSerializer, request.data)
        caller = _caller(request)
        playbook = playbooks.playbook_get_owned(caller=caller, playbook_id=playbook_id)
        run = playbooks.execution_start(caller=caller, playbook=playbook, input=params["input"])
        return Response(playbook_selectors.execution_started(run), status=status.HTTP_202_ACCEPTED)


class ActivateView(ScopedApiView):
    required_scope = {"POST": PLAYBOOKS_MANAGE}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PlaybookActivate"

        enabled = serializers.BooleanField()

    @extend_schema(parameters=[PLAYBOOK_ID], request={JSON: InputSerializer},
                   responses={200: OpenApiTypes.OBJECT, **_errors(400, 404, 409)},
                   summary="Turn all the playbook's triggers on or off, as playbooks_trigger_activate",
                   operation_id="playbook_triggers_activate")
    def post(self, request: Request, playbook_id: str) -> Response:
        params = validated(self.InputSerializer, request.data)
        caller = _caller(request)
        playbooks.playbook_triggers_activate(caller=caller, playbook_id=playbook_id, enabled=params["enabled"])
        return _detail_response(caller, playbook_id)


class HistoryView(ScopedApiView):
    required_scope = {"GET": PLAYBOOKS_READ}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PlaybookHistoryParams"

        limit = serializers.IntegerField(default=10, min_value=1, max_value=100)

    @extend_schema(parameters=[PLAYBOOK_ID, InputSerializer],
                   responses={200: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="The playbook's executions, as playbooks_history", operation_id="playbook_history")
    def get(self, request: Request, playbook_id: str) -> Response:
        params = validated(self.InputSerializer, request.query_params)
        return Response(playbook_selectors.playbook_history(caller=_caller(request), playbook_id=playbook_id,
                                                            limit=params["limit"]))


class TriggerListView(ScopedApiView):
    required_scope = {"GET": PLAYBOOKS_READ, "POST": PLAYBOOKS_MANAGE}

    @extend_schema(parameters=[PLAYBOOK_ID], responses={200: OpenApiTypes.OBJECT, **_errors(404)},
                   summary="The playbook's triggers", operation_id="playbook_triggers_list")
    def get(self, request: Request, playbook_id: str) -> Response:
        detail = playbook_selectors.playbook_detail(caller=_caller(request), playbook_id=playbook_id)
        return Response({"triggers": detail["triggers"]})

    @extend_schema(parameters=[PLAYBOOK_ID], request={JSON: OpenApiTypes.OBJECT},
                   responses={201: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="Add a trigger: {type: schedule, cron | preset} | {type: event, event, filters} | "
                           "{type: webhook}; a webhook's URL and secret are shown only in this answer",
                   operation_id="playbook_trigger_create")
    def post(self, request: Request, playbook_id: str) -> Response:
        caller = _caller(request)
        playbook = playbooks.playbook_get_owned(caller=caller, playbook_id=playbook_id)
        spec = request.data if isinstance(request.data, dict) else None
        if spec is None:
            raise serializers.ValidationError({"trigger": ["Send a trigger spec as a JSON object."]})
        created = triggers.trigger_create(caller=caller, playbook=playbook, spec=dict(spec))
        return Response({**triggers.trigger_describe(created.trigger, tz=playbook_selectors.user_tz(caller)),
                         **(created.secrets or {})}, status=status.HTTP_201_CREATED)


class TriggerDetailView(ScopedApiView):
    required_scope = {"PATCH": PLAYBOOKS_MANAGE, "DELETE": PLAYBOOKS_MANAGE}

    @extend_schema(parameters=[PLAYBOOK_ID, TRIGGER_ID], request={JSON: OpenApiTypes.OBJECT},
                   responses={200: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="Change a trigger (enabled, cron, preset, filters, input)",
                   operation_id="playbook_trigger_update")
    def patch(self, request: Request, playbook_id: str, trigger_id: str) -> Response:
        caller = _caller(request)
        trigger = playbook_selectors.trigger_owned(caller=caller, playbook_id=playbook_id, trigger_id=trigger_id)
        changes = request.data if isinstance(request.data, dict) else None
        if changes is None:
            raise serializers.ValidationError({"trigger": ["Send the changes as a JSON object."]})
        trigger = triggers.trigger_update(caller=caller, trigger=trigger, changes=dict(changes))
        return Response(triggers.trigger_describe(trigger, tz=playbook_selectors.user_tz(caller)))

    @extend_schema(parameters=[PLAYBOOK_ID, TRIGGER_ID], responses={204: None, **_errors(404)},
                   summary="Delete a trigger", operation_id="playbook_trigger_delete")
    def delete(self, request: Request, playbook_id: str, trigger_id: str) -> Response:
        caller = _caller(request)
        trigger = playbook_selectors.trigger_owned(caller=caller, playbook_id=playbook_id, trigger_id=trigger_id)
        triggers.trigger_delete(caller=caller, trigger=trigger)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TriggerSecretView(ScopedApiView):
    required_scope = {"POST": PLAYBOOKS_MANAGE}

    @extend_schema(parameters=[PLAYBOOK_ID, TRIGGER_ID], request=None,
                   responses={200: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="Give a webhook trigger a new URL and secret (the old ones stop working)",
                   operation_id="playbook_webhook_rotate")
    def post(self, request: Request, playbook_id: str, trigger_id: str) -> Response:
        caller = _caller(request)
        created = triggers.webhook_secret_rotate(caller=caller, trigger=playbook_selectors.trigger_owned(
            caller=caller, playbook_id=playbook_id, trigger_id=trigger_id))
        return Response({**triggers.trigger_describe(created.trigger, tz=playbook_selectors.user_tz(caller)),
                         **(created.secrets or {})})


class FiringListView(ScopedApiView):
    required_scope = {"GET": PLAYBOOKS_READ}

    @extend_schema(parameters=[PLAYBOOK_ID, Page], responses={200: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="When the playbook's triggers fired, why, and what each firing started",
                   operation_id="playbook_firings_list")
    def get(self, request: Request, playbook_id: str) -> Response:
        page = validated(Page, request.query_params)
        return Response(playbook_selectors.firing_list(caller=_caller(request), playbook_id=playbook_id, **page))


class TemplateListView(ScopedApiView):
    required_scope = {"GET": TEMPLATES_READ}

    class InputSerializer(Page):
        class Meta:
            ref_name = "TemplateListParams"

        q = serializers.CharField(required=False, max_length=500, allow_blank=True)
        category = serializers.CharField(required=False, max_length=60)

    @extend_schema(parameters=[InputSerializer], responses={200: OpenApiTypes.OBJECT, **_errors(400)},
                   summary="Templates, as templates_list; with q, as templates_search", operation_id="templates_list")
    def get(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.query_params)
        caller = _caller(request)
        if params.get("q"):
            return Response({"templates": templates.template_search(caller=caller, query=params["q"],
                                                                    category=params.get("category"))})
        return Response(templates.template_list(caller=caller, category=params.get("category"),
                                                limit=params["limit"], offset=params["offset"]))


class TemplateDetailView(ScopedApiView):
    required_scope = {"GET": TEMPLATES_READ}

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **_errors(404)}, summary="One template, as templates_get",
                   operation_id="template_get")
    def get(self, request: Request, template_id: str) -> Response:
        return Response(templates.template_get(caller=_caller(request), template_id=template_id))


class InstantiateView(ScopedApiView):
    required_scope = {"POST": TEMPLATES_USE}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "TemplateInstantiate"

        name = serializers.CharField(max_length=200, required=False)

    @extend_schema(request={JSON: InputSerializer}, responses={201: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="Create a playbook from a template, as templates_instantiate",
                   operation_id="template_instantiate")
    def post(self, request: Request, template_id: str) -> Response:
        params = validated(self.InputSerializer, request.data)
        caller = _caller(request)
        playbook = playbooks.playbook_instantiate(caller=caller, template_id=template_id, name=params.get("name"))
        return _detail_response(caller, playbook.pk, status.HTTP_201_CREATED,
                                {"createdTriggers": playbook_selectors.created_triggers(playbook)})


class ExecutionListView(ScopedApiView):
    required_scope = {"GET": DASHBOARD_READ}

    @extend_schema(parameters=[Page], responses={200: OpenApiTypes.OBJECT, **_errors(400)},
                   summary="Executions across your playbooks, as executions_list", operation_id="executions_list")
    def get(self, request: Request) -> Response:
        page = validated(Page, request.query_params)
        return Response(playbook_selectors.executions_list(caller=_caller(request), **page))


class ExecutionDetailView(ScopedApiView):
    required_scope = {"GET": DASHBOARD_READ}

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **_errors(404)}, summary="One execution, as executions_get",
                   operation_id="execution_get")
    def get(self, request: Request, execution_id: str) -> Response:
        run = playbook_selectors.execution_get_owned(caller=_caller(request), execution_id=execution_id)
        return Response(playbook_selectors.execution_detail(run))


class ExecutionMessagesView(ScopedApiView):
    required_scope = {"GET": DASHBOARD_READ}

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **_errors(404)},
                   summary="An execution's messages, as executions_messages", operation_id="execution_messages")
    def get(self, request: Request, execution_id: str) -> Response:
        return Response(playbook_selectors.execution_messages_get(caller=_caller(request), session_id=execution_id))


class DashboardView(ScopedApiView):
    required_scope = {"GET": DASHBOARD_READ}

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **_errors()}, summary="The dashboard, as dashboard_overview",
                   operation_id="dashboard_overview")
    def get(self, request: Request) -> Response:
        return Response(playbook_selectors.dashboard_overview(caller=_caller(request)))

