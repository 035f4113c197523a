"""REST endpoints for elements: list, create, get, edit, delete, search, memory entries, template
rendering, export and import. Thin over elements.services and elements.selectors, scoped to the
caller, and guarded by the same scopes as the MCP-AQL tools."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api import ScopedApiView, error_responses
from accounts.authentication import caller_from_request
from core.errors import InvalidInput, NotFound
from core.versions import etag, if_match
from elements import selectors, services, templating
from elements.approvals import MAX_TTL_SECONDS, MIN_TTL_SECONDS
from elements.fields import TYPE_FIELDS
from elements.gatekeeper import (
    EXTERNAL_LISTS,
    MAX_EXTERNAL_DESCRIPTION,
    MAX_EXTERNAL_PATTERN,
    MAX_EXTERNAL_PATTERNS,
    POLICY_LISTS,
)
from elements.models import Element, MemoryEntry
from elements.packages import element_data, element_package, entry_data, package_load
from elements.portfolio import yaml_dump
from elements.selectors import (
    CURSOR_PATTERN,
    GROUP_BY_FIELDS,
    MAX_CURSOR_LENGTH,
    SORT_FIELDS,
    ListQuery,
    list_query_resume,
    page_window,
    pagination,
)
from elements.types import (
    DEFAULT_PAGE_SIZE,
    MAX_CONTENT_LENGTH,
    MAX_DESCRIPTION_LENGTH,
    MAX_OFFSET,
    MAX_PAGE,
    MAX_PAGE_SIZE,
    MAX_TAG_LENGTH,
    MAX_TAGS,
    MAX_TRIGGER_LENGTH,
    MAX_TRIGGERS,
    ElementType,
    element_type_parse,
)
from elements.validation import CATEGORY_PATTERN, MAX_VERSION_LENGTH, TRIGGER_PATTERN, VERSION_PATTERN

READ, WRITE, DELETE = "elements:read", "elements:write", "elements:delete"
# A query string must fit in one request line (config/gunicorn.conf.py: limit_request_line, 8190
# bytes), and a character outside the BMP takes 12 bytes percent-encoded: these bounds keep every
# listing or search the schema allows within it (a longer value is refused 400 invalid_input).
MAX_QUERY_TEXT = 200
MAX_FILTER_TEXT = 60
MAX_QUERY_TAGS = 3


# --- scopes --------------------------------------------------------------------------------

class ElementsApiView(ScopedApiView):
    default_scope = READ


# --- parsing helpers -----------------------------------------------------------------------

def _element_type(value: str) -> ElementType:
    """The type named in the URL (singular or plural); an unknown one is a path that does not exist."""
    try:
        return element_type_parse(value)
    except InvalidInput as exc:
        raise NotFound(exc.message, code=exc.code) from exc


def _unknown_fields(data: object, known: set[str]) -> None:
    if isinstance(data, dict):
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInput(f"Unknown field(s): {', '.join(unknown)}. Accepted: {', '.join(sorted(known))}.",
                               code="unknown_field")


def _params(element_type: ElementType, validated: dict[str, Any], data: object) -> dict[str, Any]:
    """Validated shared fields plus the type-specific fields a client may send top-level."""
    extra = {key: data[key] for key in TYPE_FIELDS[element_type] if isinstance(data, dict) and key in data}
    return {**validated, **extra}


def _list_query(element_type: ElementType, filters: dict[str, Any]) -> ListQuery:
    cursor = filters.get("cursor")
    page, size = page_window(page=filters.get("page"), page_size=filters.get("pageSize"),
                             limit=filters.get("limit"), offset=filters.get("offset"), cursor=cursor)
    query = ListQuery(
        element_type=element_type, name_contains=filters.get("nameContains", ""),
        description_contains=filters.get("descriptionContains", ""), tags_all=tuple(filters.get("tags", ())),
        tags_any=tuple(filters.get("tagsAny", ())), author=filters.get("author", ""),
        category=filters.get("category", ""), created_after=filters.get("createdAfter"),
        created_before=filters.get("createdBefore"), sort_by=filters.get("sortBy", "name"),
        sort_order=filters.get("sortOrder", "asc"), page=page, page_size=size,
    )
    return query if cursor is None else list_query_resume(query, cursor)


def _entries(element: Element) -> list[MemoryEntry] | None:
    return selectors.memory_entries(memory=element) if element.element_type == ElementType.MEMORY else None


# --- shared serializers --------------------------------------------------------------------

class IsoDateTimeField(serializers.DateTimeField):
    """ISO 8601 exactly as get_element gives it (`+00:00`, not `Z`)."""

    def to_representation(self, value: Any) -> Any:
        return value if value is None or isinstance(value, str) else value.isoformat()


def _text(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, **kwargs)


TYPE_FIELDS_TEXT = "; ".join(f"{kind.plural}: {', '.join(fields)}" for kind, fields in TYPE_FIELDS.items() if fields)


_TYPE_NAMES = [t.value for t in ElementType] + [t.plural for t in ElementType]
_PATTERNS = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 100, "pattern": "^[^\\x00]*$"}}
_EXTERNAL_PATTERNS = {"type": "array", "maxItems": MAX_EXTERNAL_PATTERNS, "items": {
    "type": "string", "minLength": 1, "maxLength": MAX_EXTERNAL_PATTERN, "pattern": "^[^\\x00]*$"}}


# What elements.gatekeeper.clean_policy takes (anything else is invalid_gatekeeper).
@extend_schema_field({"type": "object", "additionalProperties": False, "properties": {
    **{key: _PATTERNS for key in POLICY_LISTS},
    "scopeRestrictions": {"type": "object", "additionalProperties": False, "properties": {
        key: {"type": "array", "items": {"type": "string", "enum": _TYPE_NAMES}}
        for key in ("allowedTypes", "blockedTypes")}},
    "externalRestrictions": {"type": "object", "additionalProperties": False, "properties": {
        "description": {"type": "string", "maxLength": MAX_EXTERNAL_DESCRIPTION, "pattern": "^[^\\x00]*$"},
        **{key: _EXTERNAL_PATTERNS for key in EXTERNAL_LISTS},
        "approvalPolicy": {"type": "object", "additionalProperties": False, "properties": {
            "requireApproval": _EXTERNAL_PATTERNS,
            "ttlSeconds": {"type": "integer", "minimum": MIN_TTL_SECONDS, "maximum": MAX_TTL_SECONDS}}},
    }},
}})
class GatekeeperField(serializers.DictField):
    """An element's gatekeeper policy."""


class ElementFieldsSerializer(serializers.Serializer):
    """The shared fields a client sends to create or edit an element. Type-specific fields (template
    variables, agent goal, ensemble elements...) go top-level or under metadata."""

    description = _text(help_text="Short summary (1-2 sentences)")
    instructions = _text(help_text="Behavioural directives; required for personas")
    content = _text(help_text="Reference material or template body; required for skills and templates")
    tags = serializers.ListField(child=serializers.CharField(), required=False)
    triggers = serializers.ListField(child=serializers.CharField(), required=False)
    category = _text()
    author = _text()
    version = serializers.CharField(required=False)
    gatekeeper = GatekeeperField(required=False, allow_null=True,
                                 help_text="Policy: {allow?, confirm?, deny?, scopeRestrictions?, "
                                           "externalRestrictions?}")
    metadata = serializers.DictField(required=False, help_text="Type-specific and free-form fields. "
                                     f"The type-specific ones: {TYPE_FIELDS_TEXT}")


# What elements.validation refuses in the shared fields, as the schema says it (without the
# surrounding whitespace the server would trim).
REQUEST_FIELD_RULES: dict[str, dict[str, Any]] = {
    "description": {"maxLength": MAX_DESCRIPTION_LENGTH},
    "instructions": {"maxLength": MAX_CONTENT_LENGTH},
    "content": {"maxLength": MAX_CONTENT_LENGTH},
    "category": {"pattern": f"^({CATEGORY_PATTERN})?$"},
    "version": {"pattern": f"^{VERSION_PATTERN}$", "maxLength": MAX_VERSION_LENGTH},
    "tags": {"maxItems": MAX_TAGS},
    "triggers": {"maxItems": MAX_TRIGGERS},
}
REQUEST_ITEM_RULES: dict[str, dict[str, Any]] = {
    "tags": {"maxLength": MAX_TAG_LENGTH},
    "triggers": {"pattern": f"^{TRIGGER_PATTERN}$", "maxLength": MAX_TRIGGER_LENGTH},
}


class ElementFieldsExtension(OpenApiSerializerExtension):
    """Any other field is refused (unknown_field). One operation serves every element type, and
    OpenAPI cannot make a body depend on a path parameter, so the schema documents the fields every
    type takes; a type's own fields go under metadata, where every type takes them (the server also
    takes them top-level for their own type, as the description says). An edit must change something."""

    target_class = ElementFieldsSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction != "request":
            return schema
        properties = {name: {**rule, **REQUEST_FIELD_RULES.get(name, {})} for name, rule in
                      schema.get("properties", {}).items()}
        for name in ("tags", "triggers"):
            if name in properties:
                properties[name] = {**properties[name], "items": {**properties[name]["items"],
                                                                  **REQUEST_ITEM_RULES[name]}}
        schema = {**schema, "properties": properties, "additionalProperties": False,
                  "description": "The element's fields; any other is refused (unknown_field). Type-specific "
                                 f"fields go under metadata, or top-level for their own type ({TYPE_FIELDS_TEXT})."}
        if not schema.get("required"):
            schema["minProperties"] = 1
        return schema


class EntryOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    timestamp = IsoDateTimeField()
    content = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    metadata = serializers.DictField()
    expiresAt = IsoDateTimeField(allow_null=True)
    privacyLevel = serializers.CharField()
    trustLevel = serializers.CharField()
    source = serializers.CharField(allow_null=True)


class ElementOutputSerializer(serializers.Serializer):
    """An element as get_element returns it; memories carry their entries."""

    element_name = serializers.CharField()
    element_type = serializers.CharField()
    description = serializers.CharField()
    instructions = serializers.CharField()
    content = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    triggers = serializers.ListField(child=serializers.CharField())
    category = serializers.CharField()
    author = serializers.CharField()
    version = serializers.CharField()
    format_version = serializers.CharField()
    created = IsoDateTimeField()
    modified = IsoDateTimeField()
    metadata = serializers.DictField()
    entries = EntryOutputSerializer(many=True, required=False)


def _element_out(element: Element) -> dict[str, Any]:
    return ElementOutputSerializer(element_data(element, entries=_entries(element))).data


def _element_response(element: Element, **kwargs: Any) -> Response:
    """An element with its ETag, which PATCH takes back in If-Match to refuse a stale edit."""
    return Response(_element_out(element), headers={"ETag": etag(selectors.element_version(element))}, **kwargs)


class PaginationSerializer(serializers.Serializer):
    page = serializers.IntegerField()
    pageSize = serializers.IntegerField()
    totalItems = serializers.IntegerField()
    totalPages = serializers.IntegerField()
    hasNextPage = serializers.BooleanField()
    hasPrevPage = serializers.BooleanField()
    nextCursor = serializers.CharField(required=False, help_text="When another page follows: send it back as "
                                                                  "cursor for that page, read by keyset")


class ElementListItemSerializer(serializers.Serializer):
    element_name = serializers.CharField(source="name")
    description = serializers.CharField()
    type = serializers.CharField(source="element_type")
    version = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    created = IsoDateTimeField()
    author = serializers.CharField()


class SearchResultSerializer(serializers.Serializer):
    type = serializers.CharField(source="element_type")
    element_name = serializers.CharField(source="name")
    description = serializers.CharField()
    matchedIn = serializers.ListField(child=serializers.CharField(), source="matched_in")


SEARCH_TYPE_PARAM = OpenApiParameter(
    "type", OpenApiTypes.STR, OpenApiParameter.QUERY,
    enum=[t.value for t in ElementType] + [t.plural for t in ElementType], description="Only this element type")
TYPE_PARAM = OpenApiParameter(
    "element_type", OpenApiTypes.STR, OpenApiParameter.PATH,
    enum=[t.value for t in ElementType] + [t.plural for t in ElementType],
    description="persona, skill, template, agent, memory or ensemble (singular or plural)",
)
# Request bodies are documented as JSON, the API's format: forms cannot carry the nested objects and
# lists some of them hold.
JSON = "application/json"
NAME_PARAM = OpenApiParameter("name", OpenApiTypes.STR, OpenApiParameter.PATH,
                              description="Element name, URL-encoded (may hold spaces and dots)")
IF_MATCH_PARAM = OpenApiParameter("If-Match", OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
                                  description="The ETag a GET answered: the edit is refused with 412 "
                                              "(code version_conflict) if the element changed since")
ETAG_HEADER = OpenApiResponse(ElementOutputSerializer, description="The element; its ETag header is its version")


class ErrorSerializer(serializers.Serializer):
    class Meta:
        ref_name = "ElementError"

    error = serializers.CharField()
    code = serializers.CharField(help_text="element_not_found, unknown_element_type, element_exists, "
                                           "invalid_input (with fields), invalid_pagination, ...")
    fields = serializers.DictField(required=False, help_text="Per field, what is wrong with it")


ERROR_MEANINGS = {400: "The request was refused: its fields, or what they ask for",
                  404: "No such element (or element type) of yours",
                  409: "An element with that name already exists",
                  412: "If-Match is stale: the element changed since (code version_conflict)"}


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    return error_responses(ErrorSerializer, *statuses, meanings=ERROR_MEANINGS)


# --- list and create -----------------------------------------------------------------------

class ElementListCreateView(ElementsApiView):
    required_scope = {"GET": READ, "POST": WRITE}

    class FilterSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ElementListFilter"

        page = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)
        pageSize = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE)
        offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_OFFSET)
        cursor = serializers.RegexField(CURSOR_PATTERN, required=False, max_length=MAX_CURSOR_LENGTH - 1,
                                       help_text="The previous page's pagination.nextCursor, sent with the same "
                                                 "filters and sort and without page or offset: the next page, read "
                                                 "by keyset, as fast at any depth")
        sortBy = serializers.ChoiceField(choices=list(SORT_FIELDS), required=False)
        sortOrder = serializers.ChoiceField(choices=["asc", "desc"], required=False)
        nameContains = serializers.CharField(required=False, max_length=MAX_FILTER_TEXT)
        descriptionContains = serializers.CharField(required=False, max_length=MAX_FILTER_TEXT)
        tags = serializers.ListField(child=serializers.CharField(max_length=MAX_TAG_LENGTH), required=False,
                                     max_length=MAX_QUERY_TAGS, help_text="Repeatable: must have ALL of these tags")
        tagsAny = serializers.ListField(child=serializers.CharField(max_length=MAX_TAG_LENGTH), required=False,
                                        max_length=MAX_QUERY_TAGS, help_text="Repeatable: must have ANY of these tags")
        author = serializers.CharField(required=False, max_length=MAX_FILTER_TEXT)
        category = serializers.CharField(required=False, max_length=MAX_FILTER_TEXT)
        createdAfter = serializers.DateTimeField(required=False)
        createdBefore = serializers.DateTimeField(required=False)
        aggregate = serializers.ChoiceField(choices=["count"], required=False,
                                            help_text="count: answer counts instead of items")
        group_by = serializers.ChoiceField(choices=list(GROUP_BY_FIELDS), required=False,
                                           help_text="Counts per value (it implies aggregate=count)")

    class CountSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ElementCount"

        count = serializers.IntegerField()
        element_type = serializers.CharField()
        groups = serializers.DictField(child=serializers.IntegerField(), required=False,
                                       help_text="With group_by: value -> count")

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ElementList"

        items = ElementListItemSerializer(many=True)
        pagination = PaginationSerializer()
        sorting = serializers.DictField()
        element_type = serializers.CharField()
        filters = serializers.DictField(required=False)

    class InputSerializer(ElementFieldsSerializer):
        class Meta:
            ref_name = "ElementCreateInput"

        element_name = serializers.CharField(trim_whitespace=False)
        description = serializers.CharField(allow_blank=True, trim_whitespace=False,
                                            help_text="Short summary (1-2 sentences)")

    @extend_schema(
        parameters=[TYPE_PARAM, FilterSerializer],
        responses={200: OpenApiResponse(PolymorphicProxySerializer(
            component_name="ElementListOrCount", serializers=[OutputSerializer, CountSerializer],
            resource_type_field_name=None), description="A page of items; with aggregate=count, "
            "{count, element_type, groups?} instead"), **_errors(400, 404)},
        summary="List your elements of one type", operation_id="elements_list",
    )
    def get(self, request: Request, element_type: str) -> Response:
        kind = _element_type(element_type)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        query = _list_query(kind, filters.validated_data)
        caller = caller_from_request(request, via="api")
        if filters.validated_data.get("aggregate") == "count" or "group_by" in filters.validated_data:
            return Response(selectors.element_aggregate(caller=caller, query=query,
                                                        group_by=filters.validated_data.get("group_by")))
        items, paging = selectors.element_list(caller=caller, query=query)
        data: dict[str, Any] = {
            "items": ElementListItemSerializer(items, many=True).data,
            "pagination": paging,
            "sorting": {"sortBy": query.sort_by, "sortOrder": query.sort_order},
            "element_type": query.element_type.value,
        }
        if query.applied:
            data["filters"] = {"applied": {**query.applied, "count": paging["totalItems"]}}
        return Response(data)

    @extend_schema(parameters=[TYPE_PARAM], request={JSON: InputSerializer},
                   responses={201: ElementOutputSerializer, **_errors(400, 404, 409)},
                   summary="Create an element", operation_id="elements_create")
    def post(self, request: Request, element_type: str) -> Response:
        kind = _element_type(element_type)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _unknown_fields(request.data, {*self.InputSerializer().fields, *TYPE_FIELDS[kind]})
        params = _params(kind, {k: v for k, v in data.validated_data.items() if k != "element_name"}, request.data)
        element = services.element_create(caller=caller_from_request(request, via="api"), element_type=kind,
                                          name=data.validated_data["element_name"], params=params)
        return Response(_element_out(element), status=status.HTTP_201_CREATED)


# --- one element ---------------------------------------------------------------------------

class ElementDetailView(ElementsApiView):
    required_scope = {"GET": READ, "PATCH": WRITE, "DELETE": DELETE}

    class InputSerializer(ElementFieldsSerializer):
        class Meta:
            ref_name = "ElementEditInput"

    @extend_schema(parameters=[TYPE_PARAM, NAME_PARAM], responses={200: ETAG_HEADER, **_errors(404)},
                   summary="Get an element, with its content and metadata", operation_id="element_get")
    def get(self, request: Request, element_type: str, name: str) -> Response:
        element = selectors.element_get(caller=caller_from_request(request, via="api"),
                                        element_type=_element_type(element_type), name=name)
        return _element_response(element)

    @extend_schema(parameters=[TYPE_PARAM, NAME_PARAM, IF_MATCH_PARAM], request={JSON: InputSerializer},
                   responses={200: ETAG_HEADER, **_errors(400, 404, 409, 412)},
                   summary="Edit an element: the body is deep-merged into it", operation_id="element_edit")
    def patch(self, request: Request, element_type: str, name: str) -> Response:
        kind = _element_type(element_type)
        data = self.InputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        # name/element_name are let through so the service can say why a rename is refused.
        _unknown_fields(request.data, {*self.InputSerializer().fields, *TYPE_FIELDS[kind], "name", "element_name"})
        changes = _params(kind, data.validated_data, request.data)
        changes.update({k: request.data[k] for k in ("name", "element_name") if k in request.data})
        caller = caller_from_request(request, via="api")
        element = services.element_edit(caller=caller, element=selectors.element_get(
            caller=caller, element_type=kind, name=name), changes=changes, if_match=if_match(request))
        return _element_response(element)

    @extend_schema(parameters=[TYPE_PARAM, NAME_PARAM], responses={204: None, **_errors(404)},
                   summary="Delete an element (a backup revision is kept)", operation_id="element_delete")
    def delete(self, request: Request, element_type: str, name: str) -> Response:
        caller = caller_from_request(request, via="api")
        services.element_delete(caller=caller, element=selectors.element_get(
            caller=caller, element_type=_element_type(element_type), name=name))
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- search --------------------------------------------------------------------------------

class PageSerializer(serializers.Serializer):
    """page and pageSize of a listing's query, with their defaults: the fields other filters extend."""

    page = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE, default=1)
    pageSize = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE,
                                        default=DEFAULT_PAGE_SIZE)


class ElementSearchView(ElementsApiView):
    required_scope = {"GET": READ}

    class FilterSerializer(PageSerializer):
        class Meta:
            ref_name = "ElementSearchFilter"

        q = serializers.CharField(max_length=MAX_QUERY_TEXT, help_text="Words to find (all of them)")
        type = serializers.CharField(required=False, help_text="Only this element type")

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ElementSearch"

        items = SearchResultSerializer(many=True)
        pagination = PaginationSerializer()
        query = serializers.CharField()

    @extend_schema(parameters=[FilterSerializer, SEARCH_TYPE_PARAM], responses={200: OutputSerializer, **_errors(400)},
                   summary="Search names, descriptions, content and memory entries", operation_id="elements_search")
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = filters.validated_data
        kind = element_type_parse(params["type"]) if params.get("type") else None
        found, total = selectors.element_search(caller=caller_from_request(request, via="api"), text=params["q"],
                                                element_type=kind, page=params["page"], page_size=params["pageSize"])
        items = SearchResultSerializer([{"element_type": e.element_type, "name": e.name, "description": e.description,
                                         "matched_in": where} for e, where in found], many=True).data
        return Response({"items": items, "pagination": pagination(params["page"], params["pageSize"], total),
                         "query": params["q"]})


# --- memory entries ------------------------------------------------------------------------

class MemoryEntriesView(ElementsApiView):
    required_scope = {"GET": READ, "POST": WRITE, "DELETE": DELETE}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "MemoryEntryInput"

        content = serializers.CharField(trim_whitespace=False)
        tags = serializers.ListField(child=serializers.CharField(), required=False)
        metadata = serializers.DictField(required=False)
        privacyLevel = serializers.ChoiceField(choices=MemoryEntry.Privacy.values, required=False)
        expiresAt = serializers.DateTimeField(required=False, allow_null=True)

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "MemoryEntries"

        element_name = serializers.CharField()
        count = serializers.IntegerField()
        entries = EntryOutputSerializer(many=True)

    class ClearedSerializer(serializers.Serializer):
        class Meta:
            ref_name = "MemoryCleared"

        cleared = serializers.IntegerField()
        element_name = serializers.CharField()

    @extend_schema(parameters=[NAME_PARAM], responses={200: OutputSerializer, **_errors(404)},
                   summary="List a memory's entries",
                   operation_id="memory_entries_list")
    def get(self, request: Request, name: str) -> Response:
        memory = selectors.element_get(caller=caller_from_request(request, via="api"),
                                       element_type=ElementType.MEMORY, name=name)
        entries = [entry_data(e) for e in selectors.memory_entries(memory=memory)]
        return Response(self.OutputSerializer({"element_name": memory.name, "count": len(entries),
                                               "entries": entries}).data)

    @extend_schema(parameters=[NAME_PARAM], request={JSON: InputSerializer},
                   responses={201: EntryOutputSerializer, **_errors(400, 404)},
                   summary="Add an entry to a memory", operation_id="memory_entry_add")
    def post(self, request: Request, name: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        caller = caller_from_request(request, via="api")
        entry = services.memory_entry_add(
            caller=caller, memory=selectors.element_get(caller=caller, element_type=ElementType.MEMORY, name=name),
            content=params["content"], tags=params.get("tags"), metadata=params.get("metadata"),
            privacy_level=params.get("privacyLevel"), expires_at=params.get("expiresAt"),
        )
        return Response(EntryOutputSerializer(entry_data(entry)).data, status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[NAME_PARAM], responses={200: ClearedSerializer, **_errors(404)},
                   summary="Clear a memory's entries (a backup revision is kept)", operation_id="memory_clear")
    def delete(self, request: Request, name: str) -> Response:
        caller = caller_from_request(request, via="api")
        memory = selectors.element_get(caller=caller, element_type=ElementType.MEMORY, name=name)
        cleared = services.memory_clear(caller=caller, memory=memory)
        return Response(self.ClearedSerializer({"cleared": cleared, "element_name": memory.name}).data)


# --- templates -----------------------------------------------------------------------------

class TemplateRenderView(ElementsApiView):
    required_scope = {"POST": READ}  # rendering changes nothing

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "TemplateRenderInput"

        variables = serializers.DictField(required=False, allow_null=True,
                                          help_text="Values for the template's variables")
        section = serializers.CharField(required=False, help_text="style or script: return that raw section")
        all_sections = serializers.BooleanField(required=False, default=False,
                                                help_text="Also return {template, style, script}")

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "TemplateRender"

        element_name = serializers.CharField()
        content = serializers.CharField()
        warnings = serializers.ListField(child=serializers.CharField())
        sections = serializers.DictField(child=serializers.CharField(), required=False)

    @extend_schema(parameters=[NAME_PARAM], request={JSON: InputSerializer},
                   responses={200: OutputSerializer, **_errors(400, 404)},
                   summary="Render a template with variables", operation_id="template_render")
    def post(self, request: Request, name: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        template = selectors.element_get(caller=caller_from_request(request, via="api"),
                                         element_type=ElementType.TEMPLATE, name=name)
        result = templating.render(template.content, template.metadata.get("variables") or [],
                                   params.get("variables") or {}, section=params.get("section"),
                                   all_sections=params["all_sections"])
        return Response(self.OutputSerializer({"element_name": template.name, **result}).data)


# --- export and import ---------------------------------------------------------------------

class JsonOnlyNegotiation(DefaultContentNegotiation):
    """`?format=` names the export's format here, not a renderer: answers are JSON, the YAML
    export excepted (a plain text/yaml response)."""

    def select_renderer(self, request: Request, renderers: list[BaseRenderer],
                        format_suffix: str | None = None) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type


class ElementExportView(ElementsApiView):
    required_scope = {"GET": READ}
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonOnlyNegotiation

    class FilterSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ElementExportFilter"

        format = serializers.ChoiceField(choices=["json", "yaml"], required=False, default="json")

    @extend_schema(
        parameters=[TYPE_PARAM, NAME_PARAM, FilterSerializer],
        responses={(200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT, description="The package"),
                   (200, "text/yaml"): OpenApiResponse(OpenApiTypes.STR, description="The package as YAML"),
                   **{(code, "application/json"): response for code, response in _errors(400, 404).items()}},
        summary="Export an element as a package import takes back unchanged", operation_id="element_export",
    )
    def get(self, request: Request, element_type: str, name: str) -> Response | HttpResponse:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        element = selectors.element_get(caller=caller_from_request(request, via="api"),
                                        element_type=_element_type(element_type), name=name)
        package = element_package(element, entries=_entries(element))
        if filters.validated_data["format"] == "yaml":
            return HttpResponse(yaml_dump(package),
                                content_type="text/yaml; charset=utf-8")
        return Response(package)


class ElementImportView(ElementsApiView):
    required_scope = {"POST": WRITE}

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ElementImportInput"

        data = serializers.JSONField(help_text="The export package: an object, or its JSON or YAML text")
        overwrite = serializers.BooleanField(required=False, default=False,
                                             help_text="Replace an element of the same name (kept as a revision)")

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ElementImport"

        created = serializers.BooleanField(help_text="false when an element of the same name was replaced")
        element = ElementOutputSerializer()

    @extend_schema(request={JSON: InputSerializer}, responses={201: OutputSerializer, **_errors(400, 409)},
                   summary="Import an element from an export package", operation_id="element_import")
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        element, created = services.element_import(caller=caller_from_request(request, via="api"),
                                                   package=package_load(data.validated_data["data"]),
                                                   overwrite=data.validated_data["overwrite"])
        return Response({"created": created, "element": _element_out(element)}, status=status.HTTP_201_CREATED)

