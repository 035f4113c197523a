"""Curators' view of the catalogue: integrations (with an OpenAPI import and a write-only client
secret), actions, shared skills, everyone's connections (their state, never a secret) and the record
of executions. Writes go through the same services as the tools and the API."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from accounts.admin import AtriumAdmin, AuditedAdmin, ServiceFormAdmin, admin_caller, code_editor, validate_through
from core.caller import Caller
from core.errors import DomainError
from integrations import search, services, vault
from integrations.models import Action, Connection, Execution, Integration, Skill

MAX_UPLOAD_BYTES = 2 * 1024 * 1024


class IntegrationForm(forms.ModelForm):
    base_url = forms.URLField(required=False, max_length=500, assume_scheme="https",
                              help_text="Where an imported integration's actions are sent.")
    client_secret = forms.CharField(
        required=False, strip=False, widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="The OAuth client secret (oauth2 integrations). Stored sealed; leave empty to keep the current one.")

    class Meta:
        model = Integration
        fields = ["name", "description", "category", "agent_instructions", "auth_scheme", "auth_config", "base_url",
                  "connection_required", "first_party", "enabled"]


class ImportForm(forms.Form):
    document = forms.FileField(help_text="An OpenAPI 3.0 or 3.1 document, YAML or JSON.")
    integration_id = forms.CharField(required=False, max_length=63,
                                     help_text="The integration's id; by default the document's x-atrium-integration "
                                               "id, or one made from its title.")
    server_url = forms.URLField(required=False, assume_scheme="https",
                                help_text="Call this base URL instead of the document's server.")


class ActionInline(admin.TabularInline):
    model = Action
    fields = ["name", "description", "executor"]
    readonly_fields = ["name", "description", "executor"]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Integration)
class IntegrationAdmin(AuditedAdmin):
    form = IntegrationForm
    list_display = ["id", "name", "category", "kind", "auth_scheme", "first_party", "enabled", "action_count",
                    "connection_count"]
    list_filter = ["kind", "category", "auth_scheme", "first_party", "enabled"]
    search_fields = ["id", "name", "description"]
    readonly_fields = ["kind", "secret_state", "created_at", "updated_at"]
    inlines = [ActionInline]
    change_list_template = "integrations/admin/integration_changelist.html"
    actions = ["enable", "disable"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Integration]:
        return super().get_queryset(request).annotate(n_actions=Count("actions", distinct=True),
                                                      n_connections=Count("connections", distinct=True))

    @admin.display(description="actions", ordering="n_actions")
    def action_count(self, integration: Integration) -> int:
        return integration.n_actions

    @admin.display(description="connections", ordering="n_connections")
    def connection_count(self, integration: Integration) -> int:
        return integration.n_connections

    @admin.display(description="OAuth client secret")
    def secret_state(self, integration: Integration) -> str:
        return "set (sealed)" if integration.sealed_client_secret else "not set"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # integrations come from code (sync_catalogue) or an OpenAPI import

    def get_readonly_fields(self, request: HttpRequest, obj: Integration | None = None) -> list[str]:
        # A built-in integration's text and auth are its code's: sync_catalogue writes them on every
        # deploy, so an edit here would silently go. Curators may still switch it off.
        fixed = list(self.readonly_fields)
        if obj is not None and obj.kind == Integration.Kind.BUILTIN:
            fixed += ["name", "description", "category", "agent_instructions", "auth_scheme", "auth_config",
                      "connection_required", "first_party"]
        return fixed

    def save_model(self, request: HttpRequest, obj: Integration, form: IntegrationForm, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if form.cleaned_data.get("client_secret"):
            vault.integration_client_secret_set(integration=obj, secret=form.cleaned_data["client_secret"])
        search.index_refresh(integrations=[obj])

    @admin.action(description="Enable selected integrations (offered to users)")
    def enable(self, request: HttpRequest, queryset: QuerySet[Integration]) -> None:
        caller = admin_caller(request)
        self.switch_selected(request, queryset, lambda integration: services.integration_set_enabled(
            caller=caller, integration=integration, enabled=True), "enabled")

    @admin.action(description="Disable selected integrations (withdrawn from users)")
    def disable(self, request: HttpRequest, queryset: QuerySet[Integration]) -> None:
        caller = admin_caller(request)
        self.switch_selected(request, queryset, lambda integration: services.integration_set_enabled(
            caller=caller, integration=integration, enabled=False), "disabled")

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.import_view)
        return [path("import/", view, name="integrations_integration_import"), *super().get_urls()]

    def import_view(self, request: HttpRequest) -> HttpResponse:
        """Upload an OpenAPI document: each operation becomes an action of one integration."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        form = ImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["document"]
            if upload.size > MAX_UPLOAD_BYTES:
                form.add_error("document", f"The document is larger than {MAX_UPLOAD_BYTES // 1024 // 1024} MB.")
            else:
                try:
                    integration, report = services.integration_document_import(
                        document=upload.read(), source=f"upload {upload.name}",
                        integration_id=form.cleaned_data["integration_id"] or None,
                        server_url=form.cleaned_data["server_url"] or None)
                except DomainError as exc:
                    form.add_error(None, exc.message)
                else:
                    self._audit(request, "import", integration, f"from {upload.name}")
                    self.message_user(request, f"Imported {integration.id}: {report.summary()}.", messages.SUCCESS)
                    return HttpResponseRedirect(reverse("admin:integrations_integration_change",
                                                        args=[integration.pk]))
        return TemplateResponse(request, "integrations/admin/import.html", {
            **self.admin_site.each_context(request), "opts": self.opts, "form": form,
            "title": "Import an OpenAPI document",
        })


@admin.register(Action)
class ActionAdmin(AuditedAdmin):
    list_display = ["full_name", "integration", "executor"]
    list_filter = ["integration", "executor"]
    search_fields = ["name", "description", "integration__id"]
    fields = ["integration", "name", "description", "input_schema", "output_schema", "executor", "config"]
    readonly_fields = ["integration", "name", "input_schema", "output_schema", "executor", "config"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Action, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        search.index_refresh(integrations=[obj.integration])


class SkillForm(forms.ModelForm):
    """A skill, written by skills' service alone: clean() makes the very call save_model will make,
    in a savepoint that is rolled back, so a refusal (source that does not compile, a schema that is
    not JSON Schema, a name taken) is shown on the form and nothing is written."""

    caller: Caller  # set per request by SkillAdmin.get_form

    # As typed: the source is code, whose whitespace is the curator's.
    source_code = forms.CharField(strip=False, widget=code_editor("python"))

    class Meta:
        model = Skill
        fields = ["name", "description", "source_code", "input_schema", "output_schema", "integrations",
                  "timeout_seconds"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned  # the field errors say what to fix; the service would only repeat them
        validate_through(self.write)
        return cleaned

    def _post_clean(self) -> None:
        """Skip the model's own checks: clean() ran the service, whose rules are the ones that count,
        and save_model reloads the instance from what the service stored."""

    def write(self) -> Skill:
        """skill_create (a shared skill) on add, skill_update on change."""
        data = {key: self.cleaned_data[key] for key in self.Meta.fields if key in self.cleaned_data}
        data["integrations"] = [i.id for i in data.get("integrations", [])]
        if self.instance.pk is None:
            return services.skill_create(caller=self.caller, shared=True, **data)
        return services.skill_update(caller=self.caller, skill=Skill.objects.get(pk=self.instance.pk), changes=data)


@admin.register(Skill)
class SkillAdmin(ServiceFormAdmin):
    """Shared skills are written here (a skill added in admin belongs to everyone); users' own skills
    are shown for review."""

    form = SkillForm
    list_display = ["name", "owner", "timeout_seconds", "version", "updated_at"]
    list_filter = [("owner", admin.EmptyFieldListFilter), "integrations"]
    search_fields = ["name", "description", "owner__username"]
    filter_horizontal = ["integrations"]

    def save_related(self, request: HttpRequest, form: SkillForm, formsets: Any, change: bool) -> None:
        pass  # the service has set the integrations

    def delete_model(self, request: HttpRequest, obj: Skill) -> None:
        services.skill_delete(caller=admin_caller(request), skill=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Skill]) -> None:
        for skill in queryset:
            services.skill_delete(caller=admin_caller(request), skill=skill)


class RecordAdmin(AtriumAdmin):
    """Rows curators read but never write here: they are what users and executions left behind."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Connection)
class ConnectionAdmin(RecordAdmin):
    """State only: which user connected what and when. The sealed credentials are never shown."""

    list_display = ["user", "integration", "state", "connected_at", "last_used_at", "expires_at"]
    list_filter = ["state", "integration"]
    search_fields = ["user__username", "integration__id"]
    fields = ["user", "integration", "state", "granted_scopes", "confirmed_usage", "connected_at", "last_used_at",
              "expires_at"]
    readonly_fields = fields


@admin.register(Execution)
class ExecutionAdmin(RecordAdmin):
    list_display = ["name", "user", "kind", "status", "error_code", "duration_ms", "via", "started_at"]
    list_filter = ["status", "kind", "via", "integration"]
    search_fields = ["name", "user__username", "error_code"]
    date_hierarchy = "started_at"
    list_select_related = ["user"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Execution._meta.fields]
