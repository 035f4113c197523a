"""REST endpoints for accounts: who am I, personal tokens, scopes. Thin over services/selectors."""

from __future__ import annotations

import logging
import re
from typing import Any

from django.db import InterfaceError, OperationalError
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from accounts import selectors, services
from accounts.authentication import caller_from_request
from accounts.models import PersonalToken
from accounts.scopes import ALL_SCOPES
from core.errors import DomainError, NotFound
from core.parsers import refuse_unsound_text

logger = logging.getLogger(__name__)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every API error is `{error, code}` with its HTTP status (validation errors add `fields`; some
    domain errors add their own details)."""
    if isinstance(exc, DomainError):
        return Response({"error": exc.message, "code": exc.code, **exc.extra}, status=exc.http_status)
    if isinstance(exc, OperationalError | InterfaceError):
        logger.warning("API request failed on the database: %s", exc)
        return Response({"error": "The database is unavailable; try again shortly.", "code": "database_unavailable"},
                        status=503, headers={"Retry-After": "5"})
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, APIException):
        return response
    if isinstance(exc, ValidationError):
        response.data = {"error": "Invalid input.", "code": "invalid_input", "fields": response.data}
    else:
        codes = exc.get_codes()
        response.data = {"error": str(exc.detail), "code": codes if isinstance(codes, str) else "error"}
    return response


class InsufficientScope(PermissionDenied):
    default_code = "insufficient_scope"

    def __init__(self, scope: str) -> None:
        self.scope = scope
        super().__init__(f"This request needs the scope '{scope}', which this token does not carry. "
                         f"Use a token that has '{scope}'.")


class HasRequiredScope(BasePermission):
    """The view's `required_scope` for this method ({method: scope}, else its `default_scope`) must be
    among the caller's scopes. A signed-in browser session holds every scope."""

    def has_permission(self, request: Request, view: Any) -> bool:
        method = "GET" if request.method in ("HEAD", "OPTIONS") else request.method
        scope = view.required_scope.get(method, view.default_scope)
        # No scope named: a method the view does not have, which is answered 405.
        if scope is not None and scope not in caller_from_request(request, via="api").scopes:
            raise InsufficientScope(scope)
        return True


class ScopedApiView(APIView):
    """An endpoint that needs a scope per method, like the MCP tools over the same operations."""

    permission_classes = [IsAuthenticated, HasRequiredScope]
    required_scope: dict[str, str] = {}
    default_scope: str | None = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        refuse_unsound_text({key: values if len(values) > 1 else values[0]
                             for key, values in request.query_params.lists()})

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)
        if isinstance(exc, InsufficientScope):
            # RFC 6750: an OAuth client can step up to the scope it was refused for.
            response["WWW-Authenticate"] = f'Bearer error="insufficient_scope", scope="{exc.scope}"'
        return response


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """The request data through an input serializer; invalid data answers 400 {error, code, fields}."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class BearerAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.BearerAuthentication"
    name = "bearer"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer",
                "description": "A personal access token (atr_...) or an OAuth access token."}


class ApiErrorSerializer(serializers.Serializer):
    class Meta:
        ref_name = "ApiError"

    error = serializers.CharField()
    code = serializers.CharField()


# What authentication (401) and the scope check (403) answer, the same for every app's endpoints.
AUTH_ERROR_MEANINGS = {401: "No token, or one that is invalid, expired or revoked",
                       403: "The token lacks the scope this method needs (code insufficient_scope)"}
UNAUTHENTICATED = OpenApiResponse(ApiErrorSerializer, description=AUTH_ERROR_MEANINGS[401])


def error_responses(serializer: type[serializers.Serializer], *statuses: int, meanings: dict[int, str] | None = None,
                    auth: tuple[int, ...] = (401, 403)) -> dict[int, OpenApiResponse]:
    """The error answers an endpoint documents in OpenAPI: its own `statuses` (described by
    `meanings`), then those of authentication and the scope check (`auth`: none for public
    endpoints, 401 alone for those any valid token may call)."""
    described = {**AUTH_ERROR_MEANINGS, **(meanings or {})}
    return {code: OpenApiResponse(serializer, description=described.get(code, "")) for code in (*statuses, *auth)}


class MeView(APIView):
    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "Me"

        authenticated = serializers.BooleanField()
        user = serializers.DictField()
        token = serializers.DictField()
        scopes = serializers.ListField(child=serializers.CharField())
        mcp_url = serializers.URLField()
        session = serializers.DictField(required=False, help_text="{id, transport, client, protocol_version}: "
                                                                  "the MCP session the call came through, if any")

    @extend_schema(responses={200: OutputSerializer, 401: UNAUTHENTICATED},
                   summary="Who you are and what your credential allows")
    def get(self, request: Request) -> Response:
        return Response(selectors.caller_describe(caller=caller_from_request(request, via="api")))


class TokenOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    label = serializers.CharField()
    prefix = serializers.CharField()
    scopes = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)

    def get_scopes(self, token: Any) -> list[str]:
        return sorted(s.name for s in token.scopes.all())


def _errors(described: dict[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """A token endpoint's error answers: its own ({status: meaning}), and that of authentication."""
    return error_responses(ApiErrorSerializer, *(described or {}), meanings=described, auth=(401,))


# The schema's enum is the catalogue (accounts.scopes); the server answers any other name with
# unknown_scope, and trims the names it is sent.
@extend_schema_field({"type": "string", "enum": sorted(ALL_SCOPES)})
class ScopeNameField(serializers.CharField):
    pass


TOKEN_NOT_FOUND = _errors({404: "No token of yours with that id (code token_not_found)"})


class TokenListCreateView(APIView):
    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "TokenCreateInput"

        label = serializers.CharField(max_length=100)
        scopes = serializers.ListField(child=ScopeNameField(), required=False,
                                       help_text="Scope names; omitted, every scope you hold.")
        expires_at = serializers.DateTimeField(required=False, allow_null=True,
                                               help_text="In the future (else expiry_in_past); omitted or null, "
                                                         "never")

    class CreatedSerializer(TokenOutputSerializer):
        class Meta:
            ref_name = "TokenCreated"

        token = serializers.CharField(help_text="The raw token. It is shown this once and never again.")

    @extend_schema(responses={200: TokenOutputSerializer(many=True), **_errors()}, summary="List your active tokens")
    def get(self, request: Request) -> Response:
        tokens = selectors.token_list(caller=caller_from_request(request, via="api"))
        return Response(TokenOutputSerializer(tokens, many=True).data)

    @extend_schema(request={"application/json": InputSerializer},
                   responses={201: CreatedSerializer, **_errors({
                       400: "invalid_input (with fields), unknown_scope or expiry_in_past",
                       403: "scope_escalation: a scope you do not hold"})},
                   summary="Make a token")
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        caller = caller_from_request(request, via="api")
        token, raw = services.token_create(caller=caller, user=caller.user, **data.validated_data)
        return Response({**TokenOutputSerializer(token).data, "token": raw}, status=status.HTTP_201_CREATED)


TOKEN_ID_PARAM = OpenApiParameter("token_id", {"type": "string", "pattern": "^[0-9]{1,18}$"}, OpenApiParameter.PATH,
                                  description="The token's id, as GET /api/tokens lists it")


def _token(request: Request, token_id: str) -> PersonalToken:
    """The caller's token by the id in the URL; any id that is not one of theirs is 404 token_not_found."""
    caller = caller_from_request(request, via="api")
    # Digits only, and short enough for a database integer: anything else names no token.
    if not re.fullmatch(r"[0-9]{1,18}", token_id):
        raise NotFound(f"You have no token with id {token_id[:40]!r}.", code="token_not_found")
    return selectors.token_get(caller=caller, token_id=int(token_id))


class TokenDetailView(APIView):
    @extend_schema(parameters=[TOKEN_ID_PARAM], responses={200: TokenOutputSerializer, **TOKEN_NOT_FOUND},
                   summary="One of your tokens")
    def get(self, request: Request, token_id: str) -> Response:
        return Response(TokenOutputSerializer(_token(request, token_id)).data)

    @extend_schema(parameters=[TOKEN_ID_PARAM], responses={204: None, **TOKEN_NOT_FOUND},
                   summary="Revoke one of your tokens")
    def delete(self, request: Request, token_id: str) -> Response:
        services.token_revoke(caller=caller_from_request(request, via="api"), token=_token(request, token_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ScopeListView(APIView):
    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ScopeItem"

        name = serializers.CharField()
        description = serializers.CharField()

    @extend_schema(responses={200: OutputSerializer(many=True), 401: UNAUTHENTICATED},
                   summary="Every scope a token can carry")
    def get(self, request: Request) -> Response:
        return Response(self.OutputSerializer(selectors.scope_list(), many=True).data)


def scopes_of_api() -> set[str]:
    """Every scope some REST endpoint needs, from the ScopedApiView classes loaded."""
    found: set[str] = set()
    pending = list(ScopedApiView.__subclasses__())
    while pending:
        view = pending.pop()
        pending.extend(view.__subclasses__())
        found.update(scope for scope in (*view.required_scope.values(), view.default_scope) if scope)
    return found
