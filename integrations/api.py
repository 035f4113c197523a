"""REST endpoints for capabilities and the vault: the Aident tools over HTTP, plus skills and the
execution record. Thin over integrations.services, selectors, search and vault, guarded by the same
scopes (skills are written with workflows:write, "workflows and skills"), refusing with `{error, code}`.

capabilities/execute answers 200 with the action's output or the skill's {success, ...} (also when
an integration it needs is not connected: then with missingIntegrations); an action's own error is
502 with its payload, a skill still running 202 with its executionId."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api import ScopedApiView, error_responses, validated
from accounts.authentication import caller_from_request
from core.errors import NotFound
from core.versions import etag, if_match, row_version
from integrations import search, selectors, services, vault
from integrations.mcp import EXECUTE, INTEGRATIONS_CONNECT, INTEGRATIONS_READ, READ, SEARCH
from integrations.models import Execution, Skill
from workflows.api import JSON

SKILLS_WRITE = "workflows:write"
ID_PARAM = OpenApiParameter("item_id", {"type": "string", "pattern": "^[0-9]{1,18}$"}, OpenApiParameter.PATH,
                            description="The id, as the list gives it")


def _row_id(item_id: str, *, missing: Callable[[], NotFound]) -> int:
    """The id in the URL. Digits only, and short enough for a database integer: anything else names
    no row, and is answered as one that does not exist."""
    if not re.fullmatch(r"[0-9]{1,18}", item_id):
        raise missing()
    return int(item_id)


class ErrorSerializer(serializers.Serializer):
    class Meta:
        ref_name = "CapabilityError"

    error = serializers.CharField()
    code = serializers.CharField()


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    return error_responses(ErrorSerializer, *statuses, meanings={
        400: "Invalid input (invalid_input with `fields` or `problems`)", 404: "No such capability or row",
        409: "skill_exists: you have, or the catalogue has, a skill of that name",
        412: "version_conflict: changed since read",
        429: "rate_limited (with retryAfter)", 502: "The action's own error payload"})


class HitSerializer(serializers.Serializer):
    class Meta:
        ref_name = "CapabilityHit"

    type = serializers.ChoiceField(choices=["integration", "action", "skill"])
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    integrationId = serializers.CharField(allow_null=True)
    connected = serializers.BooleanField()
    score = serializers.FloatField()


class SearchView(ScopedApiView):
    required_scope = {"GET": SEARCH}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CapabilitySearchParams"

        # Not trimmed here: the search trims it and refuses what is left with query_required, so a
        # query of two characters (the schema's minLength) is never refused for being one.
        q = serializers.CharField(min_length=2, max_length=500, trim_whitespace=False,
                                  help_text="The query, with the keyword operators * - \"phrase\" |")
        types = serializers.ListField(child=serializers.ChoiceField(choices=["integration", "action", "skill"]),
                                      required=False, max_length=3)
        integration_id = serializers.CharField(required=False, max_length=63)
        category = serializers.CharField(required=False, max_length=60)
        mode = serializers.ChoiceField(choices=["keyword", "semantic", "hybrid"], default="hybrid")
        limit = serializers.IntegerField(default=20, min_value=1, max_value=50)

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CapabilitySearchResult"

        results = HitSerializer(many=True)

    @extend_schema(parameters=[InputSerializer], responses={200: OutputSerializer, **_errors(400)},
                   summary="Search integrations, actions and skills, as capabilities_search",
                   operation_id="capabilities_search")
    def get(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.query_params)
        return Response({"results": search.capabilities_search(
            caller=caller_from_request(request, via="api"), query=params["q"], types=params.get("types"),
            integration_id=params.get("integration_id"), category=params.get("category"), mode=params["mode"],
            limit=params["limit"])})


class DetailsView(ScopedApiView):
    required_scope = {"GET": READ}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CapabilityDetailsParams"

        name = serializers.CharField(max_length=200)
        parts = serializers.ListField(child=serializers.CharField(max_length=40), required=False, max_length=4)

    @extend_schema(parameters=[InputSerializer], responses={200: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="An integration, action or skill by exact name, as capabilities_get",
                   operation_id="capabilities_get")
    def get(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.query_params)
        return Response(selectors.capability_get(caller=caller_from_request(request, via="api"),
                                                 name=params["name"], parts=params.get("parts")))


class ExecuteView(ScopedApiView):
    required_scope = {"POST": EXECUTE}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CapabilityExecuteInput"

        name = serializers.CharField(max_length=200)
        input = serializers.DictField(required=False, default=dict)

    @extend_schema(request={JSON: InputSerializer},
                   responses={200: OpenApiTypes.OBJECT, 202: OpenApiTypes.OBJECT, 502: OpenApiTypes.OBJECT,
                              **_errors(400, 404, 429)},
                   summary="Execute an action or skill, as capabilities_execute", operation_id="capabilities_execute")
    def post(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.data)
        outcome = services.capability_execute(caller=caller_from_request(request, via="api"), name=params["name"],
                                              input=params["input"])
        payload = outcome.payload
        if not outcome.is_error:
            return Response(payload)
        if isinstance(payload, dict) and "executionId" in payload:
            return Response(payload, status=status.HTTP_202_ACCEPTED)
        if isinstance(payload, dict) and "success" in payload:
            return Response(payload)  # the skill ran and failed: its result says so
        return Response(payload, status=status.HTTP_502_BAD_GATEWAY)


class ExecutionSerializer(serializers.Serializer):
    class Meta:
        ref_name = "CapabilityExecution"

    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=Execution.Kind.choices)
    integrationId = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=Execution.Status.choices)
    via = serializers.CharField()
    inputKeys = serializers.ListField(child=serializers.CharField())
    errorCode = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    result = serializers.JSONField(allow_null=True, help_text="A skill's {success, output?, error?, executionTimeMs}")
    parentId = serializers.IntegerField(allow_null=True, help_text="The skill execution that made this call")
    startedAt = serializers.DateTimeField()
    finishedAt = serializers.DateTimeField(allow_null=True)
    durationMs = serializers.IntegerField(allow_null=True)


class ExecutionListView(ScopedApiView):
    required_scope = {"GET": READ}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CapabilityExecutionFilter"

        name = serializers.CharField(required=False, max_length=200)
        status = serializers.ChoiceField(choices=Execution.Status.choices, required=False)
        limit = serializers.IntegerField(default=50, min_value=1, max_value=500)
        offset = serializers.IntegerField(default=0, min_value=0, max_value=1_000_000)

    @extend_schema(parameters=[InputSerializer], responses={200: ExecutionSerializer(many=True), **_errors(400)},
                   summary="Your capability executions, newest first", operation_id="capability_executions_list")
    def get(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.query_params)
        found = selectors.executions(caller=caller_from_request(request, via="api"), name=params.get("name"),
                                     status=params.get("status"))
        page = found[params["offset"]:params["offset"] + params["limit"]]
        return Response([selectors.execution_describe(e) for e in page])


class ExecutionDetailView(ScopedApiView):
    required_scope = {"GET": READ}

    @extend_schema(parameters=[ID_PARAM], responses={200: ExecutionSerializer, **_errors(404)},
                   summary="One of your capability executions", operation_id="capability_execution_get")
    def get(self, request: Request, item_id: str) -> Response:
        execution = selectors.execution_get(caller=caller_from_request(request, via="api"), execution_id=_row_id(
            item_id, missing=selectors.execution_not_found))
        return Response(selectors.execution_describe(execution))


class IntegrationListView(ScopedApiView):
    required_scope = {"GET": INTEGRATIONS_READ}

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **_errors()},
                   summary="Every integration with your connection state, as capabilities_integration_list",
                   operation_id="integrations_list")
    def get(self, request: Request) -> Response:
        return Response(selectors.integration_list(caller=caller_from_request(request, via="api")))


class VaultStatusView(ScopedApiView):
    required_scope = {"GET": INTEGRATIONS_READ}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "VaultStatusParams"

        integration_id = serializers.CharField(required=False, max_length=63)

    @extend_schema(parameters=[InputSerializer], responses={200: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="Connection state per integration, as vault status", operation_id="vault_status")
    def get(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.query_params)
        return Response(vault.vault_status(caller=caller_from_request(request, via="api"),
                                           integration_id=params.get("integration_id")))


class VaultConnectView(ScopedApiView):
    required_scope = {"POST": INTEGRATIONS_CONNECT}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "VaultConnectInput"

        integrationId = serializers.CharField(max_length=63)
        confirmed = serializers.BooleanField(default=False)
        credentials = serializers.DictField(child=serializers.CharField(max_length=4096, trim_whitespace=False),
                                            required=False, allow_null=True,
                                            help_text="apiKey, token, or username and password")

    @extend_schema(request={JSON: InputSerializer}, responses={200: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="Connect an integration, as vault connect", operation_id="vault_connect")
    def post(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.data)
        return Response(vault.vault_connect(caller=caller_from_request(request, via="api"),
                                            integration_id=params["integrationId"], confirmed=params["confirmed"],
                                            credentials=params.get("credentials")))


class VaultDisconnectView(ScopedApiView):
    required_scope = {"POST": INTEGRATIONS_CONNECT}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "VaultDisconnectInput"

        integrationId = serializers.CharField(max_length=63)

    @extend_schema(request={JSON: InputSerializer}, responses={200: OpenApiTypes.OBJECT, **_errors(400, 404)},
                   summary="Disconnect an integration, as vault disconnect", operation_id="vault_disconnect")
    def post(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.data)
        return Response(vault.vault_disconnect(caller=caller_from_request(request, via="api"),
                                               integration_id=params["integrationId"]))


# --- skills --------------------------------------------------------------------------------------

class SkillInputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "CapabilitySkillInput"

    name = serializers.RegexField(r"^[a-z][a-z0-9_]{1,62}(\.[a-z0-9_]{1,100})?$", max_length=164)
    description = serializers.CharField(allow_blank=True, max_length=10_000, default="")
    source_code = serializers.CharField(max_length=services.MAX_SKILL_SOURCE_CHARS, trim_whitespace=False,
                                        help_text="Python defining run(input, atrium); see docs/capabilities")
    input_schema = serializers.DictField(required=False, default=dict)
    output_schema = serializers.DictField(required=False, default=dict)
    integrations = serializers.ListField(child=serializers.CharField(max_length=63), required=False, default=list,
                                         max_length=20, help_text="Ids of the integrations whose actions it calls")
    timeout_seconds = serializers.IntegerField(min_value=1, max_value=services.MAX_SKILL_TIMEOUT_SECONDS,
                                               default=30)


class SkillSerializer(SkillInputSerializer):
    class Meta:
        ref_name = "CapabilitySkill"

    id = serializers.IntegerField(read_only=True)
    version = serializers.CharField(read_only=True, help_text="The ETag of this version")


def _skill(skill: Skill) -> dict[str, Any]:
    return {"id": skill.pk, "name": skill.name, "description": skill.description, "source_code": skill.source_code,
            "input_schema": skill.input_schema, "output_schema": skill.output_schema,
            "integrations": [i.id for i in skill.integrations.all()], "timeout_seconds": skill.timeout_seconds,
            "version": row_version(skill.pk, skill.updated_at)}


def _skill_response(skill: Skill, status_code: int = status.HTTP_200_OK) -> Response:
    response = Response(_skill(skill), status=status_code)
    response["ETag"] = etag(row_version(skill.pk, skill.updated_at))
    return response


class SkillListView(ScopedApiView):
    required_scope = {"GET": READ, "POST": SKILLS_WRITE}

    @extend_schema(responses={200: SkillSerializer(many=True), **_errors()}, summary="Your own skills",
                   operation_id="skills_list")
    def get(self, request: Request) -> Response:
        return Response([_skill(s) for s in selectors.skills_own(caller=caller_from_request(request, via="api"))])

    @extend_schema(request={JSON: SkillInputSerializer}, responses={201: SkillSerializer, **_errors(400, 409)},
                   summary="Write a new skill of your own", operation_id="skill_create")
    def post(self, request: Request) -> Response:
        params = validated(SkillInputSerializer, request.data)
        skill = services.skill_create(caller=caller_from_request(request, via="api"), **params)
        return _skill_response(skill, status.HTTP_201_CREATED)


class SkillDetailView(ScopedApiView):
    required_scope = {"GET": READ, "PATCH": SKILLS_WRITE, "DELETE": SKILLS_WRITE}

    @extend_schema(parameters=[ID_PARAM], responses={200: SkillSerializer, **_errors(404)},
                   summary="One of your skills", operation_id="skill_get")
    def get(self, request: Request, item_id: str) -> Response:
        return _skill_response(selectors.skill_get(caller=caller_from_request(request, via="api"),
                                                   skill_id=_row_id(item_id, missing=selectors.skill_not_found)))

    @extend_schema(parameters=[ID_PARAM], request={JSON: SkillInputSerializer(partial=True)},
                   responses={200: SkillSerializer, **_errors(400, 404, 409, 412)},
                   summary="Change one of your skills (If-Match: its ETag, to refuse a lost update)",
                   operation_id="skill_update")
    def patch(self, request: Request, item_id: str) -> Response:
        caller = caller_from_request(request, via="api")
        skill = selectors.skill_get(caller=caller, skill_id=_row_id(item_id, missing=selectors.skill_not_found))
        changes = validated_partial(request.data)
        return _skill_response(services.skill_update(caller=caller, skill=skill, changes=changes,
                                                     expected_versions=if_match(request)))

    @extend_schema(parameters=[ID_PARAM], responses={204: None, **_errors(404)}, summary="Delete one of your skills",
                   operation_id="skill_delete")
    def delete(self, request: Request, item_id: str) -> Response:
        caller = caller_from_request(request, via="api")
        skill = selectors.skill_get(caller=caller, skill_id=_row_id(item_id, missing=selectors.skill_not_found))
        services.skill_delete(caller=caller, skill=skill)
        return Response(status=status.HTTP_204_NO_CONTENT)


def validated_partial(data: Any) -> dict[str, Any]:
    serializer = SkillInputSerializer(data=data, partial=True)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
