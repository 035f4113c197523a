"""Curating the docs in Django admin. A curator's save goes through docs_kb.services.page_edit (as
the curator, via admin), which marks the page edited, rebuilds its sections and audits the edit;
import_docs then leaves the page alone unless forced. Pages are neither added nor deleted here:
they are the files under docs/, and import_docs adds and removes them."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from accounts.admin import AtriumAdmin, admin_caller, code_editor
from docs_kb import services
from docs_kb.models import DocPage, DocSection
from docs_kb.parsing import page_parse
from docs_kb.rendering import page_html

EDITABLE = ("title", "description", "markdown")


class MarkdownField(forms.CharField):
    def __init__(self, **kwargs: Any) -> None:
        # Not stripped: an untouched page must compare equal to what is stored, or every save would
        # count as an edit and keep the page from the next import.
        super().__init__(strip=False, widget=code_editor("markdown", height="36rem"), **kwargs)

    def to_python(self, value: Any) -> str:
        return super().to_python(value).replace("\r\n", "\n")  # browsers submit textarea lines with CRLF


class DocPageForm(forms.ModelForm):
    markdown = MarkdownField(help_text="The page's body, without front matter. Headings (## …) become its "
                                       "sections, for search and deep links.")

    class Meta:
        model = DocPage
        fields = EDITABLE


class DocSectionInline(admin.TabularInline):
    """The sections search reads, rebuilt from the markdown on every save: looked at, never edited."""

    model = DocSection
    fields = ("position", "level", "heading_link", "heading_text")
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="heading id")
    def heading_link(self, section: DocSection) -> str:
        if not section.heading_id:
            return "(lede)"
        return format_html('<a href="{}#{}"><code>{}</code></a>', reverse("docs:page", args=[section.page.slug]),
                           section.heading_id, section.heading_id)

    def has_add_permission(self, request: HttpRequest, obj: DocPage | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: DocPage | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: DocPage | None = None) -> bool:
        return False


@admin.register(DocPage)
class DocPageAdmin(AtriumAdmin):
    form = DocPageForm
    list_display = ("slug", "title", "edited", "updated")
    list_filter = ("edited",)
    search_fields = ("slug", "title", "description")
    date_hierarchy = "updated"
    readonly_fields = ("slug", "public_page", "source_path", "edited", "updated", "preview")
    fieldsets = (
        (None, {"fields": ("slug", "public_page", *EDITABLE)}),
        ("Preview of the saved page", {"fields": ("preview",)}),
        ("Source", {"fields": ("source_path", "edited", "updated")}),
    )
    inlines = [DocSectionInline]
    change_form_template = "docs_kb/admin/change_form.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: DocPage | None = None) -> bool:
        return False

    @admin.display(description="public page")
    def public_page(self, page: DocPage) -> str:
        url = reverse("docs:page", args=[page.slug])
        return format_html('<a href="{}">{}</a>', url, url)

    @admin.display(description="rendered")
    def preview(self, page: DocPage) -> str:
        return format_html('<div class="docs-preview">{}</div>',
                           page_html(page.markdown, slug=page.slug, sections=page.sections.all()))

    def save_model(self, request: HttpRequest, obj: DocPage, form: DocPageForm, change: bool) -> None:
        if not form.has_changed():
            return  # an untouched save must not mark the page edited
        services.page_edit(caller=admin_caller(request), page=obj,
                           **{name: form.cleaned_data[name] for name in EDITABLE})
        messages.info(request, f"{obj.slug} is marked edited: import_docs keeps it as it is until run with --force.")

    def get_urls(self) -> list[URLPattern]:
        preview = self.admin_site.admin_view(require_POST(self.preview_view))
        return [path("<int:page_id>/preview/", preview, name="docs_kb_docpage_preview"), *super().get_urls()]

    def preview_view(self, request: HttpRequest, page_id: int) -> HttpResponse:
        """The change form's text rendered as the public page would be, without saving it."""
        page = get_object_or_404(DocPage, pk=page_id)
        if not self.has_change_permission(request, page):
            raise PermissionDenied
        parsed = page_parse(request.POST.get("markdown", "").replace("\r\n", "\n"), fallback_title=page.title)
        return TemplateResponse(request, "docs_kb/admin/preview.html", {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": page,
            "title": f"Preview of {request.POST.get('title') or page.title} (not saved)",
            "body": page_html(parsed.markdown, slug=page.slug, sections=parsed.sections),
        })
