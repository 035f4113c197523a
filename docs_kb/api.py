"""REST endpoints for the docs knowledge base: the docs tools over HTTP, read-only and public (the
docs are the same for everyone, as on /docs/). Thin over docs_kb.selectors, answering the tools'
shapes and refusing with the same codes as `{error, code}`."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api import error_responses, validated
from docs_kb import selectors
from docs_kb.models import DocPage

# The URL's <path:slug> holds any character but a line break (a slug never has one).
SLUG_PARAM = OpenApiParameter("slug", {"type": "string", "pattern": "^[^\\n]+$"}, OpenApiParameter.PATH,
                              description="The page's slug from the list, e.g. workflow-format (may hold '/').")


class DocsApiView(APIView):
    # Public: no credential is needed, and none is looked at, so a stale token cannot make a read fail.
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]


class ErrorSerializer(serializers.Serializer):
    class Meta:
        ref_name = "DocsError"

    error = serializers.CharField()
    code = serializers.CharField(help_text="doc_not_found, empty_question or invalid_input (with `fields`)")


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    return error_responses(ErrorSerializer, *statuses, auth=())  # the docs are public


def _words(name: str, description: str) -> OpenApiParameter:
    """A query parameter that must hold something besides whitespace (else 400 empty_question), and no
    NUL character (else 400 invalid_input)."""
    return OpenApiParameter(name, {"type": "string", "pattern": r"^[^\x00]*[^\s\x00\x1c-\x1f\x85][^\x00]*$"},
                            OpenApiParameter.QUERY, required=True, description=description)


class PageRowSerializer(serializers.Serializer):
    class Meta:
        ref_name = "DocsPageRow"

    slug = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField()


class HeadingSerializer(serializers.Serializer):
    class Meta:
        ref_name = "DocsHeading"

    headingId = serializers.CharField(help_text="The heading's anchor: /docs/<slug>#<headingId>")
    headingText = serializers.CharField()
    level = serializers.IntegerField(min_value=1, max_value=6)


class PageListView(DocsApiView):
    @extend_schema(responses={200: PageRowSerializer(many=True)}, summary="Every docs page: slug, title, description",
                   operation_id="docs_list")
    def get(self, request: Request) -> Response:
        return Response(selectors.docs_list())


class PageDetailView(DocsApiView):
    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "DocsPage"

        slug = serializers.CharField()
        title = serializers.CharField()
        description = serializers.CharField()
        markdown = serializers.CharField(help_text="The page's body, without its front matter")
        sections = serializers.SerializerMethodField(help_text="The page's headings, in order")

        @extend_schema_field(HeadingSerializer(many=True))
        def get_sections(self, page: DocPage) -> list[dict[str, Any]]:
            return [{"headingId": s.heading_id, "headingText": s.heading_text, "level": s.level}
                    for s in page.sections.all() if s.heading_id]

    @extend_schema(parameters=[SLUG_PARAM], responses={200: OutputSerializer, **_errors(404)},
                   summary="One docs page: its markdown and its headings", operation_id="docs_get")
    def get(self, request: Request, slug: str) -> Response:
        return Response(self.OutputSerializer(selectors.doc_get(slug=slug)).data)


class SearchView(DocsApiView):
    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "DocsSearchParams"

        q = serializers.CharField(required=False, allow_blank=True, default="",
                                  help_text="Words to look for; prefixes and typos are matched too")
        limit = serializers.IntegerField(required=False, default=20, min_value=1, max_value=50)

    class HitSerializer(serializers.Serializer):
        class Meta:
            ref_name = "DocsSearchHit"

        slug = serializers.CharField()
        title = serializers.CharField()
        headingId = serializers.CharField(allow_null=True, help_text="null for the page's lede")
        headingText = serializers.CharField(allow_null=True)
        snippet = serializers.CharField(help_text="About 80 characters either side of the match")
        score = serializers.FloatField()

    @extend_schema(parameters=[InputSerializer, _words("q", "Words to look for; prefixes and typos are matched too")],
                   responses={200: HitSerializer(many=True), **_errors(400)},
                   summary="Ranked search over the docs' sections, as search_docs", operation_id="docs_search")
    def get(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.query_params)
        return Response(selectors.docs_search(query=params["q"], limit=params["limit"]))


class AskView(DocsApiView):
    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "DocsAskParams"

        question = serializers.CharField(required=False, allow_blank=True, default="",
                                         help_text="A natural-language question")
        maxSections = serializers.IntegerField(required=False, default=5, min_value=1, max_value=20,
                                               help_text="At most this many sections")
        maxChars = serializers.IntegerField(required=False, default=6000, min_value=500, max_value=20000,
                                            help_text="Total characters of section text")

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "DocsAskResult"

        question = serializers.CharField()
        sections = serializers.ListField(child=serializers.DictField(), help_text="[{slug, title, headingId, "
                                         "headingText, text, score}], whole sections (or their own part) in "
                                         "relevance order")
        truncated = serializers.BooleanField(help_text="Some relevant text did not fit in maxChars")
        totalChars = serializers.IntegerField()

    @extend_schema(parameters=[InputSerializer, _words("question", "A natural-language question")],
                   responses={200: OutputSerializer, **_errors(400)},
                   summary="The sections most relevant to a question, packed within maxChars, as ask_docs",
                   operation_id="docs_ask")
    def get(self, request: Request) -> Response:
        params = validated(self.InputSerializer, request.query_params)
        return Response(selectors.docs_ask(question=params["question"], max_sections=params["maxSections"],
                                           max_chars=params["maxChars"]))
