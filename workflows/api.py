"""REST endpoints for workflows and projects: the workflow tools over HTTP. Thin over
workflows.services and workflows.selectors, guarded by the same scopes (workflows:read and
workflows:write), answering the same shapes, and refusing with the same codes as `{error, code}`.

Every workflow call names its store as the tools do: `cwd` (a path inside a registered project root)
or `global=true`, as query parameters, or in the JSON body of a POST or PUT."""

from __future__ import annotations

import copy
from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api import ScopedApiView, error_responses
from accounts.authentication import caller_from_request
from core.versions import etag, if_match, row_version
from elements.api import IsoDateTimeField
from workflows import selectors, services
from workflows.definition import AUTHORING, MAX_ID_LENGTH, executors, json_schema
from workflows.models import Project, Workflow
from workflows.scoping import MAX_CWD_CHARS, Scope, scope_resolve

READ, WRITE = "workflows:read", "workflows:write"
SCOPE_KEYS = ("cwd", "global")
SOURCES = (Workflow.Source.GLOBAL.value, Workflow.Source.REPO.value)


# --- scopes --------------------------------------------------------------------------------

# DRF refuses some strings whatever the field says: one holding a NUL character, and a blank one
# (after trimming, where the field trims) unless it allows blank. The schema of every request field
# of the API says so, so a client (or a generator of requests) knows before it sends. A JSON field
# without allow_null refuses null, which OpenAPI 3.0 says by listing the other types.
_NO_NUL = "^[^\\x00]*$"
_NOT_BLANK = "^[^\\x00]*[^\\x00\\s\\x1c-\\x1f\\x85][^\\x00]*$"
_ANY_BUT_NULL = [{"type": "object", "additionalProperties": True}, {"type": "array", "items": {}},
                 {"type": "string"}, {"type": "number"}, {"type": "boolean"}]


class RequestStringExtension(OpenApiSerializerFieldExtension):
    target_class = serializers.CharField
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        field = self.target
        if direction != "request" or schema.get("type") != "string" or "pattern" in schema or "enum" in schema:
            return schema
        if any(isinstance(validator, RegexValidator) for validator in field.validators):
            return schema  # its own pattern (a RegexField's), which the generator adds only where none is set
        if field.allow_blank:
            return {**schema, "pattern": _NO_NUL}
        if not field.trim_whitespace:
            return {**schema, "pattern": _NO_NUL, "minLength": max(schema.get("minLength", 0), 1)}
        return {**schema, "pattern": _NOT_BLANK}


class RequestListExtension(OpenApiSerializerFieldExtension):
    """A list of objects that may not be empty says so (the schema generator leaves allow_empty out)."""

    target_class = serializers.ListSerializer
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if direction == "request" and not self.target.allow_empty and schema.get("type") == "array":
            return {**schema, "minItems": max(schema.get("minItems", 0), 1)}
        return schema


class RequestJsonExtension(OpenApiSerializerFieldExtension):
    target_class = serializers.JSONField
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if direction != "request" or self.target.allow_null or schema.keys() - {"description", "readOnly",
                                                                                 "writeOnly"}:
            return schema
        return {**schema, "oneOf": copy.deepcopy(_ANY_BUT_NULL)}


class ScopedBodySchema(AutoSchema):
    """A body that names the store (cwd or global: true) must be sent, though none of its fields is
    required on its own: the schema generator would mark it optional."""

    def _get_request_body(self, direction: Any = "request") -> Any:
        body = super()._get_request_body(direction)
        if not body:
            return body
        requested = self.get_request_serializer()
        documented = requested.values() if isinstance(requested, dict) else [requested]
        if body and any(isinstance(s, type) and issubclass(s, ScopeParams) for s in documented):
            body["required"] = True
        return body


class WorkflowsApiView(ScopedApiView):
    """A workflow endpoint: every method it has names its scope in `required_scope`."""

    schema = ScopedBodySchema()


# `global` is a Python keyword, so the serializer is built rather than declared.
ScopeParams = type("ScopeParams", (serializers.Serializer,), {
    "Meta": type("Meta", (), {"ref_name": "WorkflowScope"}),
    "cwd": serializers.CharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False,
                                 max_length=MAX_CWD_CHARS,
                                 help_text="Absolute path of a directory inside one of your registered project "
                                           "roots. Pass this or global=true."),
    "global": serializers.BooleanField(required=False, allow_null=True,
                                       help_text="true: your global store instead of a project."),
})

CWD_SCHEMA = {"type": "string", "pattern": "^/[^\\x00]*$", "maxLength": MAX_CWD_CHARS,
              "description": "Absolute path of a directory inside one of your registered project roots."}
GLOBAL_SCHEMA = {"type": "boolean", "enum": [True], "description": "Your global store instead of a project."}
# Exactly one of the two: a request with neither (CWD_REQUIRED) or both (CWD_GLOBAL_CONFLICT) is refused.
SCOPE_ONE_OF = [
    {"type": "object", "properties": {"cwd": CWD_SCHEMA}, "required": ["cwd"],
     "not": {"properties": {"global": {"enum": [True]}}, "required": ["global"]}},
    {"type": "object", "properties": {"global": GLOBAL_SCHEMA}, "required": ["global"], "not": {"required": ["cwd"]}},
]
# OpenAPI 3.0 cannot require one of two query parameters, but it can require one object parameter
# exploded into the query string (style form), which is the same `?cwd=...` or `?global=true`.
SCOPE_QUERY = OpenApiParameter(
    "scope", {"oneOf": [{**copy.deepcopy(option), "additionalProperties": False} for option in SCOPE_ONE_OF]},
    OpenApiParameter.QUERY, required=True, style="form", explode=True,
    description="Exactly one of cwd (an absolute path inside one of your registered project roots) or "
                "global=true (your global store).")


class ScopedInputExtension(OpenApiSerializerExtension):
    """A request body that names its store: exactly one of `cwd` or `global: true` is required. (The
    server also reads them from the query string; the schema documents the body.)"""

    target_class = ScopeParams
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        # A copy each time: the schema generator rewrites enums in place, into components of their own.
        scope = {"oneOf": copy.deepcopy(SCOPE_ONE_OF)}
        either = getattr(self.target, "one_of_required", ())
        if not either:
            return {**schema, **scope}
        # null counts as absent.
        subject = {"oneOf": [{"required": [name], "properties": {name: {"not": {"enum": [None]}}}}
                             for name in either]}
        return {**schema, "allOf": [scope, subject]}


def scope_of(request: Request, body: dict[str, Any] | None = None) -> Scope:
    """The store a request is about: `cwd` or `global` from the body, else from the query string."""
    query = ScopeParams(data=request.query_params)
    query.is_valid(raise_exception=True)
    given = {**query.validated_data, **{k: v for k, v in (body or {}).items() if k in SCOPE_KEYS}}
    return scope_resolve(caller=caller_from_request(request, via="api"), cwd=given.get("cwd"),
                         global_=given.get("global"))


def source_of(value: str | None) -> str | None:
    return value or None  # `?source=` means "repo first", as an omitted source does


# A pattern rather than an enum: drf-spectacular lifts every enum into a component named after its
# field, and this one choice set under four names (source, to, to_source, from_source) only warns.
@extend_schema_field({"type": "string", "pattern": "^(global|repo)$"})
class SourceField(serializers.ChoiceField):
    """global or repo."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "global or repo")
        super().__init__(choices=list(SOURCES), **kwargs)


def source_field() -> SourceField:
    return SourceField(required=False, allow_null=True, allow_blank=True,
                       help_text="global or repo. Omitted: repo first when the call has a project, else global.")


@extend_schema_field({"oneOf": [{"type": "object", "additionalProperties": True}, {"type": "string"}]})
class ConfigField(serializers.JSONField):
    """A workflow definition: an object, or YAML text."""


def _config_field(**kwargs: Any) -> serializers.JSONField:
    kwargs.setdefault("help_text", "The workflow, as an object or as YAML text (comments are kept). "
                                   "GET /api/workflows/schema/ has the format.")
    return ConfigField(**kwargs)


@extend_schema_field({"type": "string", "pattern": f"^[a-zA-Z0-9_-]{{1,{MAX_ID_LENGTH}}}$"})
class WorkflowIdField(serializers.CharField):
    """A workflow id: letters, digits, _ and -. Blank and odd ids are let through so the service
    answers invalid_id, as the tools do; the schema documents the ids that are valid."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, **kwargs)

    def run_validation(self, data: Any = serializers.empty) -> Any:
        return "" if data == "" else super().run_validation(data)


def _id_field(**kwargs: Any) -> serializers.CharField:
    return WorkflowIdField(**kwargs)


# Request bodies are documented as JSON, the API's format: forms cannot carry the nested objects and
# lists some of them hold.
JSON = "application/json"

WORKFLOW_PARAM = OpenApiParameter("workflow_id", OpenApiTypes.STR, OpenApiParameter.PATH,
                                  description="A workflow id: letters, digits, _ and -.")


class ErrorSerializer(serializers.Serializer):
    class Meta:
        ref_name = "WorkflowError"

    error = serializers.CharField()
    code = serializers.CharField(help_text="CWD_REQUIRED, CWD_GLOBAL_CONFLICT, NOT_ABSOLUTE, NOT_FOUND, "
                                           "PROTECTED_PATH, invalid_id, invalid_config, integrity_error, conflict, "
                                           "no_repo_source, confirm_required, referenced, not_found, ...")
    details = serializers.ListField(child=serializers.CharField(), required=False,
                                    help_text="Every schema or integrity error")
    cwd = serializers.CharField(required=False)


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    return error_responses(ErrorSerializer, *statuses)


class WrittenSerializer(serializers.Serializer):
    class Meta:
        ref_name = "WorkflowWritten"

    id = serializers.CharField()
    source = serializers.CharField()
    path = serializers.CharField(help_text="Where the workflow lives: its file in the repository where this server "
                                           "sees the repository, else the URL this API serves it at")


def _written(workflow: Workflow, scope: Scope) -> dict[str, Any]:
    return {"id": workflow.workflow_id, "source": workflow.source, "path": selectors.path_of(workflow, scope)}


class SubjectSerializer(ScopeParams):
    """What validate, lint and audit look at: a config, or a stored workflow's id."""

    class Meta:
        ref_name = "WorkflowSubject"

    one_of_required = ("config", "id")  # exactly one of them (else invalid_input)

    config = _config_field(required=False, allow_null=True)
    id = serializers.CharField(required=False, allow_null=True, help_text="A stored workflow's id, instead of "
                                                                          "config.")
    source = source_field()


def _subject(request: Request) -> tuple[Scope, dict[str, Any]]:
    data = SubjectSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    params = data.validated_data
    return scope_of(request, params), {"config": params.get("config"), "workflow_id": params.get("id"),
                                     "source": source_of(params.get("source"))}


# --- list and create -----------------------------------------------------------------------

class WorkflowListCreateView(WorkflowsApiView):
    required_scope = {"GET": READ, "POST": WRITE}

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "WorkflowListItem"

        id = serializers.CharField()
        name = serializers.CharField()
        description = serializers.CharField(allow_null=True)
        source = serializers.CharField()
        shadowed = serializers.BooleanField(help_text="A global workflow hidden by a repo one with the same id")

    class InputSerializer(ScopeParams):
        class Meta:
            ref_name = "WorkflowCreateInput"

        id = _id_field()
        source = source_field()
        config = _config_field(required=False, allow_null=True)
        overwrite = serializers.BooleanField(required=False, default=False,
                                             help_text="Replace an existing workflow with this id")

    @extend_schema(parameters=[SCOPE_QUERY], responses={200: OutputSerializer(many=True), **_errors(400)},
                   summary="List workflows from the global store and the project", operation_id="workflows_list")
    def get(self, request: Request) -> Response:
        return Response(selectors.workflow_list(scope=scope_of(request)))

    @extend_schema(request={JSON: InputSerializer},
                   responses={201: WrittenSerializer, **_errors(400, 409)},
                   summary="Create a workflow (a minimal template when config is omitted)",
                   operation_id="workflow_create")
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        scope = scope_of(request, params)
        workflow = services.workflow_save(
            caller=caller_from_request(request, via="api"), scope=scope, workflow_id=params["id"],
            source=source_of(params.get("source")), config=params.get("config"), overwrite=params["overwrite"])
        return Response(_written(workflow, scope), status=status.HTTP_201_CREATED)


# --- one workflow --------------------------------------------------------------------------

def _etag_header(workflow: Workflow) -> dict[str, str]:
    """The workflow's version, which PUT takes back in If-Match to refuse a stale replace."""
    return {"ETag": etag(row_version(workflow.pk, workflow.modified))}


IF_MATCH_PARAM = OpenApiParameter("If-Match", OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
                                  description="The ETag a GET answered: the replace is refused with 412 "
                                              "(code version_conflict) if the workflow changed since")


class WorkflowDetailView(WorkflowsApiView):
    required_scope = {"GET": READ, "PUT": WRITE, "DELETE": WRITE}

    class SourceParams(serializers.Serializer):
        class Meta:
            ref_name = "WorkflowSourceParams"

        source = source_field()

    class DeleteParams(SourceParams):
        class Meta:
            ref_name = "WorkflowDeleteParams"

        # Text, not a BooleanField: as with delete_workflow, only the literal `true` deletes ("1" or
        # "yes" must not).
        confirm = serializers.CharField(required=False, default="", allow_blank=True, help_text="Must be true.")
        force = serializers.BooleanField(required=False, default=False,
                                         help_text="Delete even when a subworkflow node references it.")

    class AssetSerializer(serializers.Serializer):
        class Meta:
            ref_name = "WorkflowAssetItem"

        path = serializers.CharField()
        executable = serializers.BooleanField()

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "Workflow"

        id = serializers.CharField(source="workflow_id")
        source = serializers.CharField()
        path = serializers.SerializerMethodField()
        name = serializers.CharField()
        description = serializers.CharField()
        config = serializers.JSONField(help_text="The parsed definition")
        yaml = serializers.CharField(source="yaml_text", help_text="The YAML as written, comments kept")
        created = IsoDateTimeField()
        modified = IsoDateTimeField()
        assets = serializers.SerializerMethodField()

        def get_path(self, workflow: Workflow) -> str:
            return selectors.path_of(workflow, self.context.get("scope"))

        def get_assets(self, workflow: Workflow) -> list[dict[str, Any]]:
            return [{"path": a.path, "executable": a.executable} for a in workflow.assets.all()]

    class InputSerializer(ScopeParams):
        class Meta:
            ref_name = "WorkflowUpdateInput"

        config = _config_field(help_text="The whole new workflow, as an object or YAML text.")
        source = source_field()

    class UpdatedSerializer(serializers.Serializer):
        class Meta:
            ref_name = "WorkflowUpdated"

        ok = serializers.BooleanField()
        source = serializers.CharField()
        path = serializers.CharField()

    @extend_schema(parameters=[WORKFLOW_PARAM, SCOPE_QUERY, SourceParams],
                   responses={200: OutputSerializer, **_errors(400, 404)},
                   summary="Get a workflow: its definition, YAML text and bundled files", operation_id="workflow_get")
    def get(self, request: Request, workflow_id: str) -> Response:
        params = self.SourceParams(data=request.query_params)
        params.is_valid(raise_exception=True)
        scope = scope_of(request)
        workflow = selectors.workflow_find(scope=scope, workflow_id=workflow_id,
                                           source=source_of(params.validated_data.get("source")))
        return Response(self.OutputSerializer(workflow, context={"scope": scope}).data,
                        headers=_etag_header(workflow))

    @extend_schema(parameters=[WORKFLOW_PARAM, IF_MATCH_PARAM], request={JSON: InputSerializer},
                   responses={200: UpdatedSerializer, **_errors(400, 404, 412)},
                   summary="Replace a workflow's contents (validated first; the old version stays in its history)",
                   operation_id="workflow_update")
    def put(self, request: Request, workflow_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        scope = scope_of(request, params)
        workflow = services.workflow_update(
            caller=caller_from_request(request, via="api"), scope=scope, workflow_id=workflow_id,
            source=source_of(params.get("source")), config=params["config"], if_match=if_match(request))
        return Response({"ok": True, "source": workflow.source, "path": selectors.path_of(workflow, scope)},
                        headers=_etag_header(workflow))

    @extend_schema(
        parameters=[WORKFLOW_PARAM, SCOPE_QUERY, DeleteParams, OpenApiParameter(
            "confirm", {"type": "boolean", "enum": [True]}, OpenApiParameter.QUERY, required=True,
            description="Must be true: without it the delete is refused (confirm_required).")],
        responses={200: UpdatedSerializer, **_errors(400, 404),
                   409: OpenApiResponse(ErrorSerializer, description="code referenced, with referencedBy: "
                                        "[{workflowId, nodeId, source}]; force=true deletes anyway")},
        summary="Delete a workflow (a snapshot stays in its revision history)", operation_id="workflow_delete",
    )
    def delete(self, request: Request, workflow_id: str) -> Response:
        params = self.DeleteParams(data=request.query_params)
        params.is_valid(raise_exception=True)
        options = params.validated_data
        scope = scope_of(request)
        workflow = services.workflow_delete(
            caller=caller_from_request(request, via="api"), scope=scope, workflow_id=workflow_id,
            source=source_of(options.get("source")), confirm=options["confirm"] == "true", force=options["force"])
        return Response({"ok": True, "path": selectors.path_of(workflow, scope), "source": workflow.source})


class WorkflowReferencesView(WorkflowsApiView):
    required_scope = {"GET": READ}

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "WorkflowReferences"

        referrers = serializers.ListField(child=serializers.DictField(), help_text="[{workflowId, nodeId, source}]")

    @extend_schema(parameters=[WORKFLOW_PARAM, SCOPE_QUERY], responses={200: OutputSerializer, **_errors(400)},
                   summary="The subworkflow nodes that name this workflow, in every source of the scope",
                   operation_id="workflow_references")
    def get(self, request: Request, workflow_id: str) -> Response:
        referrers = selectors.workflow_referrers(scope=scope_of(request), workflow_id=workflow_id)
        return Response({"referrers": selectors.referrer_rows(referrers)})


class WorkflowMoveView(WorkflowsApiView):
    required_scope = {"POST": WRITE}

    class InputSerializer(ScopeParams):
        class Meta:
            ref_name = "WorkflowMoveInput"

        to = SourceField()

    @extend_schema(
        parameters=[WORKFLOW_PARAM], request={JSON: InputSerializer},
        responses={200: inline_serializer("WorkflowMoved", {
            "ok": serializers.BooleanField(), "id": serializers.CharField(), "from": serializers.CharField(),
            "to": serializers.CharField(), "path": serializers.CharField()}), **_errors(400, 404, 409)},
        summary="Move a workflow between the global store and the project", operation_id="workflow_move",
    )
    def post(self, request: Request, workflow_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        scope = scope_of(request, params)
        workflow, origin = services.workflow_move(caller=caller_from_request(request, via="api"), scope=scope,
                                                  workflow_id=workflow_id, to=params["to"])
        return Response({"ok": True, "id": workflow.workflow_id, "from": origin, "to": workflow.source,
                         "path": selectors.path_of(workflow, scope)})


class WorkflowDuplicateView(WorkflowsApiView):
    required_scope = {"POST": WRITE}

    class InputSerializer(ScopeParams):
        class Meta:
            ref_name = "WorkflowDuplicateInput"

        to_id = _id_field()
        to_source = SourceField()
        from_source = source_field()
        overwrite = serializers.BooleanField(required=False, default=False,
                                             help_text="Replace an existing workflow with to_id")

    @extend_schema(parameters=[WORKFLOW_PARAM], request={JSON: InputSerializer},
                   responses={201: WrittenSerializer, **_errors(400, 404, 409)},
                   summary="Copy a workflow (and its bundled files) to a new id", operation_id="workflow_duplicate")
    def post(self, request: Request, workflow_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        scope = scope_of(request, params)
        workflow = services.workflow_duplicate(
            caller=caller_from_request(request, via="api"), scope=scope, from_id=workflow_id,
            from_source=source_of(params.get("from_source")), to_id=params["to_id"], to_source=params["to_source"],
            overwrite=params["overwrite"])
        return Response(_written(workflow, scope), status=status.HTTP_201_CREATED)


class WorkflowRenameView(WorkflowsApiView):
    required_scope = {"POST": WRITE}

    class InputSerializer(ScopeParams):
        class Meta:
            ref_name = "WorkflowRenameInput"

        new_id = _id_field()
        source = source_field()
        rewrite_references = serializers.BooleanField(
            required=False, default=True, help_text="Point every subworkflow node at the new id (default true)")

    class OutputSerializer(WrittenSerializer):
        class Meta:
            ref_name = "WorkflowRenamed"

        rewritten = serializers.ListField(child=serializers.CharField())
        failed = serializers.ListField(child=serializers.CharField())
        rolledBack = serializers.BooleanField()

    @extend_schema(parameters=[WORKFLOW_PARAM], request={JSON: InputSerializer},
                   responses={200: OutputSerializer, **_errors(400, 404, 409)},
                   summary="Rename a workflow, rewriting the subworkflow nodes that use it",
                   operation_id="workflow_rename")
    def post(self, request: Request, workflow_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        scope = scope_of(request, params)
        result = services.workflow_rename(
            caller=caller_from_request(request, via="api"), scope=scope, workflow_id=workflow_id,
            new_id=params["new_id"], source=source_of(params.get("source")),
            rewrite_references=params["rewrite_references"])
        return Response({**_written(result.workflow, scope), "rewritten": result.rewritten, "failed": result.failed,
                         "rolledBack": False})


# --- authoring helpers ---------------------------------------------------------------------

class WorkflowSchemaView(WorkflowsApiView):
    required_scope = {"GET": READ}

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "WorkflowFormat"

        jsonSchema = serializers.JSONField(help_text="The JSON Schema of the workflow YAML")
        executors = serializers.ListField(child=serializers.DictField(), help_text="Every node type and its keys")
        models = serializers.DictField(help_text="{available, default, prices}")
        authoring = serializers.ListField(child=serializers.CharField())

    @extend_schema(responses={200: OutputSerializer, **_errors()},
                   summary="The workflow format: JSON Schema, node types, models",
                   operation_id="workflow_schema")
    def get(self, request: Request) -> Response:
        return Response({"jsonSchema": json_schema(), "executors": executors(),
                         "models": selectors.models_configured(), "authoring": list(AUTHORING)})


class WorkflowValidateView(WorkflowsApiView):
    required_scope = {"POST": READ}  # a dry run writes nothing

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "WorkflowValidation"

        valid = serializers.BooleanField()
        code = serializers.CharField(required=False, help_text="invalid_config or integrity_error")
        errors = serializers.ListField(child=serializers.CharField())

    @extend_schema(request={JSON: SubjectSerializer},
                   responses={200: OutputSerializer, **_errors(400, 404)},
                   summary="Schema and integrity validation of a config or a stored workflow",
                   operation_id="workflow_validate")
    def post(self, request: Request) -> Response:
        scope, subject = _subject(request)
        return Response(selectors.validation_report(scope=scope, **subject))


class WorkflowLintView(WorkflowsApiView):
    required_scope = {"POST": READ}

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "WorkflowLint"

        errors = serializers.ListField(child=serializers.CharField())
        warnings = serializers.ListField(child=serializers.DictField(), help_text="[{code, message, state?}]")

    @extend_schema(request={JSON: SubjectSerializer},
                   responses={200: OutputSerializer, **_errors(400, 404)},
                   summary="Validation plus warnings (dead or unreachable states, unknown models, ...)",
                   operation_id="workflow_lint")
    def post(self, request: Request) -> Response:
        scope, subject = _subject(request)
        return Response(selectors.lint_report(scope=scope, **subject))


class WorkflowAuditView(WorkflowsApiView):
    required_scope = {"POST": READ}

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "WorkflowAudit"

        findings = serializers.ListField(child=serializers.DictField(),
                                         help_text="[{severity: info|warning|error, code, message, state?}]")
        worstCase = serializers.DictField(help_text="{modelCalls, costUsd, bounded}")

    @extend_schema(request={JSON: SubjectSerializer},
                   responses={200: OutputSerializer, **_errors(400, 404)},
                   summary="Risk and cost review of a config or a stored workflow", operation_id="workflow_audit")
    def post(self, request: Request) -> Response:
        scope, subject = _subject(request)
        return Response(selectors.audit_report(scope=scope, **subject))


# --- projects ------------------------------------------------------------------------------

@extend_schema_field({"type": "string", "pattern": "^/[^\\x00]*[^/\\x00][^\\x00]*$"})
class AbsolutePathField(serializers.CharField):
    """An absolute path (else NOT_ABSOLUTE), naming a folder (else PROJECT_ID_UNAVAILABLE)."""


def _project_out(project: Project, workflow_count: int | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"projectId": project.project_id, "roots": [root.path for root in project.roots.all()]}
    if workflow_count is not None:
        row["workflowCount"] = workflow_count
    return row


class ProjectListCreateView(WorkflowsApiView):
    required_scope = {"GET": READ, "POST": WRITE}

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "Project"

        projectId = serializers.CharField()
        roots = serializers.ListField(child=serializers.CharField())
        workflowCount = serializers.IntegerField(required=False)

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ProjectRegisterInput"

        path = AbsolutePathField(trim_whitespace=False, help_text="The repository root on your machine, "
                                                                  "absolute")
        project_id = serializers.CharField(required=False, allow_null=True, allow_blank=True, help_text=(
            "Default: derived from the path (the folder's name, or the git remote where this server can read it)"))

    @extend_schema(responses={200: OutputSerializer(many=True), **_errors()},
                   summary="Your projects, their roots and workflow counts",
                   operation_id="projects_list")
    def get(self, request: Request) -> Response:
        projects = selectors.project_list(owner=caller_from_request(request, via="api").user)
        return Response([_project_out(p, p.workflow_count) for p in projects])

    @extend_schema(request={JSON: InputSerializer}, responses={201: OutputSerializer, **_errors(400, 409)},
                   summary="Register a repository root, so a cwd inside it resolves to the project",
                   operation_id="project_register")
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        project = services.project_register(caller=caller_from_request(request, via="api"),
                                            path=data.validated_data["path"],
                                            project_id=data.validated_data.get("project_id") or None)
        return Response(_project_out(project), status=status.HTTP_201_CREATED)
