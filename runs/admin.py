"""Looking at runs in Django admin. Runs, their node visits and turns are read-only: only the engine
moves a run. The one write, cancelling, goes through engine.run_cancel in the run's own scope, as
cancel_run would. Script settings are plain model edits, audited by AuditedAdmin."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from accounts.admin import AuditedAdmin, admin_caller, since_filter
from elements.admin import ReadOnlyAdmin
from runs import engine
from runs.models import NodeRun, Run, ScriptSettings, Turn
from workflows.scoping import Scope


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class NodeRunInline(ReadOnlyInline):
    model = NodeRun
    fields = ("seq", "node_id", "node_type", "status", "event", "attempts", "started_at", "duration_ms", "error")
    readonly_fields = fields


class TurnInline(ReadOnlyInline):
    model = Turn
    fields = ("phase", "agent_index", "model", "response", "input_tokens", "output_tokens", "cost_usd", "estimated",
              "created_at")
    readonly_fields = fields


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "workflow_key", "status", "kind", "owner", "project", "started_at", "total_cost")
    list_filter = ("status", since_filter("started_at", "started since"), "kind", "owner", "project")
    search_fields = ("id", "workflow_key", "workflow_name")
    list_select_related = ("owner", "project")
    date_hierarchy = "started_at"
    fields = ("id", "page", "workflow_key", "workflow_name", "workflow_source", "owner", "project", "kind", "host",
              "status", "stop_reason", "error", "current_node", "parent", "parent_node", "context", "outputs",
              "output", "spending_cap_usd", "spending_cap_tokens", "total_cost_usd", "metered_cost_usd",
              "subscription_equiv_cost_usd", "billing_mode", "input_tokens", "output_tokens", "started_at",
              "completed_at", "updated_at")
    readonly_fields = fields
    inlines = [NodeRunInline]
    actions = ["cancel_runs"]

    @admin.display(description="total cost (USD)", ordering="total_cost_usd")
    def total_cost(self, run: Run) -> str:
        return f"{run.total_cost_usd:.4f}"

    @admin.display(description="run page")
    def page(self, run: Run) -> str:
        url = engine.public_url(run)
        return format_html('<a href="{}">{}</a>', url, url)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("runs.change_run")

    @admin.action(description="Cancel selected runs", permissions=["cancel"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        cancelled, finished = [], []
        for run in queryset.select_related("owner", "project"):
            try:
                engine.run_cancel(caller=admin_caller(request), scope=Scope(owner=run.owner, project=run.project),
                                  run_id=run.pk)
            except engine.RunError as exc:
                if exc.code != "run_terminal":
                    raise
                # Ended before the action got to it (possibly cancelled with its parent a moment ago).
                finished.append(f"{run.pk} ({Run.objects.get(pk=run.pk).status})")
            else:
                cancelled.append(run.pk)
        self.message_user(request, f"Cancelled {len(cancelled)} run(s).")
        if finished:
            self.message_user(request, f"Already finished, left as they were: {', '.join(finished)}.",
                              level=messages.WARNING)


@admin.register(NodeRun)
class NodeRunAdmin(ReadOnlyAdmin):
    list_display = ("node_id", "node_type", "status", "run", "seq", "attempts", "started_at", "duration_ms")
    list_filter = ("node_type", "status")
    search_fields = ("node_id", "run__id", "run__workflow_key")
    list_select_related = ("run",)
    fields = ("run_link", "parent", "seq", "node_id", "node_type", "status", "event", "attempts", "input", "output",
              "error", "state", "started_at", "completed_at", "duration_ms")
    readonly_fields = fields
    inlines = [TurnInline]

    @admin.display(description="run")
    def run_link(self, node_run: NodeRun) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:runs_run_change", args=[node_run.run_id]),
                           node_run.run)


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ("id", "node_run", "phase", "agent_index", "model", "input_tokens", "output_tokens", "cost_usd",
                    "estimated", "created_at")
    list_filter = ("phase", "model", "estimated")
    search_fields = ("node_run__run__id", "node_run__node_id", "model")
    list_select_related = ("node_run", "node_run__run")
    fields = ("node_run", "phase", "agent_index", "model", "prompt", "response", "thinking", "usage", "input_tokens",
              "output_tokens", "cost_usd", "estimated", "created_at")
    readonly_fields = fields


class ScriptSettingsForm(forms.ModelForm):
    class Meta:
        model = ScriptSettings
        fields = ("user", "scripts_enabled", "memory_mb")
        help_texts = {"user": "Leave empty for the whole site."}

    def clean_user(self) -> Any:
        user = self.cleaned_data.get("user")
        # The model's one_site_script_settings constraint does not hold on its own: a unique index treats
        # NULLs as distinct, so two site-wide rows would both be accepted.
        others = ScriptSettings.objects.filter(user__isnull=True).exclude(pk=self.instance.pk)
        if user is None and others.exists():
            raise forms.ValidationError("The whole site already has its row; change that one instead.")
        return user


@admin.register(ScriptSettings)
class ScriptSettingsAdmin(AuditedAdmin):
    form = ScriptSettingsForm
    list_display = ("applies_to", "scripts_enabled", "memory_mb")
    list_filter = ("scripts_enabled",)
    search_fields = ("user__username",)
    autocomplete_fields = ("user",)
    fieldsets = ((None, {
        "description": "Turn script nodes off for the whole site or one user. A row without a user is the site's; "
                       "a user's own row overrides it. With no rows at all, scripts run.",
        "fields": ("user", "scripts_enabled", "memory_mb"),
    }),)

    @admin.display(description="applies to", ordering="user__username")
    def applies_to(self, settings: ScriptSettings) -> str:
        return str(settings.user) if settings.user_id else "the whole site"
