"""Curating workflows in Django admin. Workflow writes go through workflows.services as the curator
(Caller via admin), acting in the workflow owner's store, so they are validated, revisioned and
audited like any client's; the change form checks the YAML as it is typed (check_view) and draws the
saved workflow's graph as the run page does. Projects and models are plain model edits, audited by
AuditedAdmin. Playbook templates are edited here, checked by workflows.templates (a shipped one is
the sync's); playbooks, their triggers and firings are for looking at."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from accounts.admin import AuditedAdmin, JsonEditorField, ServiceFormAdmin, admin_caller, code_editor, since_filter
from accounts.models import User
from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError
from elements.admin import ReadOnlyAdmin, RevisionAdmin
from runs.graph import graph_context
from workflows import selectors, services, templates
from workflows.errors import DefinitionInvalid
from workflows.models import (
    ConfiguredModel,
    Playbook,
    PlaybookTemplate,
    Project,
    ProjectRoot,
    Trigger,
    TriggerFiring,
    Workflow,
    WorkflowAsset,
    WorkflowRevision,
)
from workflows.paths import ScopeError, cwd_normalize
from workflows.scoping import Scope
from workflows.sync import workflows_archive

NEW_WORKFLOW_ID = "new-workflow"


def scope_of(workflow: Workflow) -> Scope:
    """The store the workflow lives in: its owner's, with its project."""
    return Scope(owner=workflow.owner, project=workflow.project)


# --- workflows ------------------------------------------------------------------------------------

class YamlField(forms.CharField):
    """The workflow's YAML, kept exactly as typed: comments and layout are what the owner wrote."""

    def __init__(self, **kwargs: Any) -> None:
        # Not stripped: an untouched text must compare equal to what is stored, or every save would
        # count as a change and take a revision.
        super().__init__(strip=False, widget=code_editor("yaml"), **kwargs)

    def to_python(self, value: Any) -> str:
        # Browsers submit textarea lines with CRLF.
        return super().to_python(value).replace("\r\n", "\n")


class _DryRun(Exception):
    """Raised to roll back a service call made only to learn whether it succeeds."""


class WorkflowForm(forms.ModelForm):
    """The workflow editor.

    Validity is decided by the services alone: clean() makes the very call save_model will make, in
    a savepoint that is always rolled back, so schema and integrity errors are shown on the form,
    one per line, and nothing is written while the YAML is invalid.
    """

    caller: Caller  # set per request by WorkflowAdmin.get_form

    yaml_text = YamlField(label="YAML")

    class Meta:
        model = Workflow
        fields = ("owner", "project", "workflow_id", "yaml_text")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        owner, project = cleaned.get("owner"), cleaned.get("project")
        if self.instance.pk is None and owner is not None and project is not None and project.owner_id != owner.pk:
            self.add_error("project", f"That project belongs to {project.owner}, not {owner}.")
        if self.errors:
            return cleaned  # the field errors say what to fix; the service would only repeat them
        try:
            with transaction.atomic():
                self.write()
                raise _DryRun
        except _DryRun:
            pass
        except DefinitionInvalid as exc:
            for line in exc.errors:
                self.add_error("yaml_text", ValidationError(line, code=exc.code))
        except DomainError as exc:
            raise ValidationError(exc.message, code=exc.code) from exc
        return cleaned

    def _post_clean(self) -> None:
        """Skip the model's own checks: clean() ran the service, whose rules are the ones that count
        (the model's would refuse a duplicate id in other words), and save_model reloads the
        instance from what the service stored."""

    def write(self) -> Workflow:
        """The service call this form stands for: workflow_save on add, workflow_update on change."""
        data = self.cleaned_data
        if self.instance.pk is None:
            return services.workflow_save(
                caller=self.caller, scope=Scope(owner=data["owner"], project=data.get("project")),
                workflow_id=data["workflow_id"], source=None, config=data["yaml_text"], overwrite=False)
        workflow = Workflow.objects.select_related("owner", "project").get(pk=self.instance.pk)
        if "yaml_text" not in self.changed_data:
            return workflow
        return services.workflow_update(caller=self.caller, scope=scope_of(workflow),
                                        workflow_id=workflow.workflow_id, source=workflow.source,
                                        config=data["yaml_text"])


class CheckForm(forms.Form):
    """What the change form's checks post: the YAML, and the store it is to be saved in (the
    workflow's own; on the add form, the chosen owner's and project's)."""

    yaml_text = YamlField(required=False)
    workflow = forms.ModelChoiceField(Workflow.objects.select_related("owner", "project"), required=False)
    owner = forms.ModelChoiceField(User.objects.all(), required=False)
    project = forms.ModelChoiceField(Project.objects.all(), required=False)

    def scope(self, curator: User) -> Scope:
        data = self.cleaned_data
        if data["workflow"] is not None:
            return scope_of(data["workflow"])
        owner = data["owner"] or curator
        project = data["project"] if data["project"] is not None and data["project"].owner_id == owner.pk else None
        return Scope(owner=owner, project=project)


class SourceFilter(admin.SimpleListFilter):
    title = "source"
    parameter_name = "source"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(selectors.GLOBAL, "global (no project)"), (selectors.REPO, "repo (in a project)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> QuerySet[Workflow]:
        if self.value() == selectors.GLOBAL:
            return queryset.filter(project__isnull=True)
        if self.value() == selectors.REPO:
            return queryset.filter(project__isnull=False)
        return queryset


class WorkflowAssetInline(admin.TabularInline):
    """Bundled files, read-only: they come with a converted skill or a synced folder."""

    model = WorkflowAsset
    fields = ("path", "executable", "size")
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="size")
    def size(self, asset: WorkflowAsset) -> str:
        return f"{len(asset.content)} characters"

    def has_add_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return False


@admin.register(Workflow)
class WorkflowAdmin(ServiceFormAdmin):
    form = WorkflowForm
    list_display = ("workflow_id", "name", "source", "project", "owner", "modified")
    list_filter = (SourceFilter, since_filter("modified", "modified since"), "project", "owner")
    search_fields = ("workflow_id", "name")
    list_select_related = ("owner", "project")
    autocomplete_fields = ("owner", "project")
    date_hierarchy = "modified"
    change_form_template = "admin/workflows/workflow/change_form.html"
    actions = ("export_yaml",)

    _IDENTITY = ("owner", "project", "workflow_id", "name", "source", "created", "modified")
    _READ_ONLY = (*_IDENTITY, "lint", "graph", "revision_history")

    class Media:
        css = {"all": ["runs/graph.css"]}

    def get_fieldsets(self, request: HttpRequest, obj: Workflow | None = None) -> Any:
        if obj is None:
            return ((None, {"fields": ("owner", "project", "workflow_id", "yaml_text")}),)
        return ((None, {"fields": self._IDENTITY}),
                ("Definition", {"fields": ("yaml_text", "lint")}),
                ("Graph of the saved workflow", {"fields": ("graph",), "classes": ("workflow-graph",)}),
                ("History", {"fields": ("revision_history",)}))

    def get_readonly_fields(self, request: HttpRequest, obj: Workflow | None = None) -> Any:
        # Moving, renaming and re-owning have their own services (and tools); here only the YAML changes.
        return self._READ_ONLY if obj is not None else ()

    def get_inlines(self, request: HttpRequest, obj: Workflow | None) -> Any:
        return [WorkflowAssetInline] if obj is not None else []

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"yaml_text": services.workflow_template(NEW_WORKFLOW_ID), "workflow_id": NEW_WORKFLOW_ID,
                **super().get_changeform_initial_data(request)}


    @admin.display(description="source")
    def source(self, workflow: Workflow) -> str:
        return workflow.source

    def _lint_warnings(self, workflow: Workflow) -> list[dict[str, Any]]:
        report = selectors.lint_report(scope=scope_of(workflow), workflow_id=workflow.workflow_id,
                                       source=workflow.source)
        return report["warnings"]

    @admin.display(description="lint")
    def lint(self, workflow: Workflow) -> str:
        warnings = self._lint_warnings(workflow)
        if not warnings:
            return "No warnings."
        return format_html("<ul>{}</ul>", format_html_join(
            "", "<li><code>{}</code> {}</li>", ((w["code"], w["message"]) for w in warnings)))

    @admin.display(description="graph")
    def graph(self, workflow: Workflow) -> str:
        return render_to_string("runs/_graph.html", graph_context(workflow.config))

    @admin.display(description="revisions")
    def revision_history(self, workflow: Workflow) -> str:
        rows = format_html_join("", '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td></tr>', (
            (reverse("admin:workflows_workflowrevision_change", args=[r.pk]), r.get_action_display(),
             f"{r.created_at:%Y-%m-%d %H:%M:%S}", r.credential)
            for r in selectors.workflow_revisions(workflow)))
        return format_html('<table><thead><tr><th>action</th><th>when</th><th>credential</th></tr></thead>'
                           "<tbody>{}</tbody></table>", rows)

    def save_model(self, request: HttpRequest, obj: Workflow, form: WorkflowForm, change: bool) -> None:
        super().save_model(request, obj, form, change)
        for warning in self._lint_warnings(obj):
            messages.warning(request, f"Lint ({warning['code']}): {warning['message']}")

    def delete_model(self, request: HttpRequest, obj: Workflow) -> None:
        # Forced: a curator deletes on purpose, and the snapshot the service takes allows a restore.
        services.workflow_delete(caller=admin_caller(request), scope=scope_of(obj), workflow_id=obj.workflow_id,
                                 source=obj.source, confirm=True, force=True)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        for workflow in queryset.select_related("owner", "project"):
            self.delete_model(request, workflow)

    def get_urls(self) -> list[URLPattern]:
        check = self.admin_site.admin_view(require_POST(self.check_view))
        return [path("check/", check, name="workflows_workflow_check"), *super().get_urls()]

    def check_view(self, request: HttpRequest) -> HttpResponse:
        """The YAML in the editor, checked as lint_workflow and POST /api/workflows/lint/ check it
        ({errors, warnings}), in the store the form saves to: the API would check it in the curator's
        own store, where another user's subworkflows are not found. Nothing is written."""
        if not (self.has_change_permission(request) or self.has_add_permission(request)):
            raise PermissionDenied
        form = CheckForm(request.POST)
        if not form.is_valid():
            return JsonResponse({"error": "Nothing to check: " + form.errors.as_text(), "code": "invalid_input"},
                                status=400)
        return JsonResponse(selectors.lint_report(scope=form.scope(request.user),
                                                  config=form.cleaned_data["yaml_text"]))

    @admin.action(description="Export selected workflows as YAML")
    def export_yaml(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> HttpResponse:
        workflows = list(queryset.select_related("owner", "project").prefetch_related("assets"))
        # Curators can read anyone's workflows: an export is recorded like a write.
        audit_record(caller=admin_caller(request), action="workflow.export", target=f"{len(workflows)} workflow(s)",
                     detail={"workflows": [f"{w.workflow_id} ({w.source}) of {w.owner}" for w in workflows]})
        if len(workflows) == 1 and not workflows[0].assets.all():
            response = HttpResponse(workflows[0].yaml_text, content_type="application/yaml; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="{workflows[0].workflow_id}.yaml"'
            return response
        response = HttpResponse(workflows_archive(workflows=workflows), content_type="application/zip")
        response["Content-Disposition"] = 'attachment; filename="atrium-workflows.zip"'
        return response


@admin.register(WorkflowRevision)
class WorkflowRevisionAdmin(RevisionAdmin):
    list_display = ("created_at", "workflow_key", "source", "owner", "action", "credential")
    list_filter = ("action", "created_at", "owner")
    search_fields = ("workflow_key", "owner__username", "credential")
    date_hierarchy = "created_at"
    list_select_related = ("owner", "project")
    fields = ("workflow", "owner", "project", "workflow_key", "action", "created_at", "credential", "bundled")
    change_form_template = "admin/workflows/workflowrevision/change_form.html"
    restore_permission = "workflows.change_workflow"

    @admin.display(description="source")
    def source(self, revision: WorkflowRevision) -> str:
        return selectors.REPO if revision.project_id else selectors.GLOBAL

    @admin.display(description="bundled files")
    def bundled(self, revision: WorkflowRevision) -> str:
        return ", ".join(a["path"] for a in revision.assets) or "none"

    def revision_previous(self, revision: WorkflowRevision) -> WorkflowRevision | None:
        """The revision of the same workflow taken just before `revision`."""
        same = Q(workflow=revision.workflow_id) if revision.workflow_id else Q(
            owner=revision.owner_id, project=revision.project_id, workflow_key=revision.workflow_key)
        earlier = WorkflowRevision.objects.filter(same, created_at__lte=revision.created_at).exclude(
            created_at=revision.created_at, pk__gte=revision.pk)
        return earlier.order_by("-created_at", "-pk").first()

    def revision_lines(self, revision: WorkflowRevision) -> list[str]:
        return revision.yaml_text.splitlines()

    def revision_restore(self, request: HttpRequest, revision: WorkflowRevision) -> Workflow:
        return services.workflow_restore(caller=admin_caller(request), revision=revision)


# --- projects -------------------------------------------------------------------------------------

class ProjectRootForm(forms.ModelForm):
    class Meta:
        model = ProjectRoot
        fields = ("path",)
        help_texts = {"path": "An absolute path on the user's machine: a cwd inside it resolves to this project."}

    def clean_path(self) -> str:
        try:
            return cwd_normalize(self.cleaned_data["path"])
        except ScopeError as exc:
            raise ValidationError(exc.message, code=exc.code) from exc


class ProjectRootFormSet(BaseInlineFormSet):
    """A root is unique per owner, across all of the owner's projects. The form cannot check that
    alone: the owner is the project's, set on save."""

    def clean(self) -> None:
        super().clean()
        owner_id = self.instance.owner_id
        seen: set[str] = set()
        for form in self.forms:
            root = form.cleaned_data.get("path") if hasattr(form, "cleaned_data") else None
            if not root or form.cleaned_data.get("DELETE"):
                continue
            if root in seen:
                form.add_error("path", "This root is listed twice.")
            seen.add(root)
            taken = ProjectRoot.objects.filter(owner_id=owner_id, path=root).exclude(pk=form.instance.pk)
            other = taken.select_related("project").first() if owner_id else None
            if other is not None:
                form.add_error("path", f"Already a root of {other.project.project_id!r}.")


class ProjectRootInline(admin.TabularInline):
    model = ProjectRoot
    form = ProjectRootForm
    formset = ProjectRootFormSet
    fields = ("path", "created")
    readonly_fields = ("created",)
    extra = 1


@admin.register(Project)
class ProjectAdmin(AuditedAdmin):
    list_display = ("project_id", "owner", "root_count", "workflow_count", "created")
    list_filter = ("owner",)
    search_fields = ("project_id", "roots__path", "owner__username")
    autocomplete_fields = ("owner",)
    fields = ("owner", "project_id", "created")
    inlines = [ProjectRootInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        return super().get_queryset(request).select_related("owner").annotate(
            root_total=Count("roots", distinct=True), workflow_total=Count("workflows", distinct=True))

    def get_readonly_fields(self, request: HttpRequest, obj: Project | None = None) -> Any:
        # Roots repeat their project's owner, so the owner is fixed once the project exists.
        return ("owner", "created") if obj is not None else ("created",)

    @admin.display(description="roots", ordering="root_total")
    def root_count(self, project: Project) -> int:
        return project.root_total

    @admin.display(description="workflows", ordering="workflow_total")
    def workflow_count(self, project: Project) -> int:
        return project.workflow_total

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is not ProjectRoot:
            return super().save_formset(request, form, formset, change)
        for root in formset.save(commit=False):
            root.owner_id = form.instance.owner_id
            root.save()
        for root in formset.deleted_objects:
            root.delete()
        return None


# --- models ---------------------------------------------------------------------------------------

class ConfiguredModelForm(forms.ModelForm):
    class Meta:
        model = ConfiguredModel
        fields = ("model_id", "label", "input_usd_per_mtok", "output_usd_per_mtok", "is_default", "active")

    def _get_validation_exclusions(self) -> set[str]:
        # The one-default constraint would refuse a new default while the old one is set; save_model
        # unsets the old one in the same transaction instead.
        return {*super()._get_validation_exclusions(), "is_default"}


@admin.register(ConfiguredModel)
class ConfiguredModelAdmin(AuditedAdmin):
    form = ConfiguredModelForm
    list_display = ("model_id", "label", "input_usd_per_mtok", "output_usd_per_mtok", "is_default", "active")
    list_editable = ("label", "input_usd_per_mtok", "output_usd_per_mtok", "is_default", "active")
    list_filter = ("active", "is_default")
    search_fields = ("model_id", "label")

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> Any:
        return super().get_changelist_form(request, form=ConfiguredModelForm, **kwargs)

    def save_model(self, request: HttpRequest, obj: ConfiguredModel, form: Any, change: bool) -> None:
        if obj.is_default:
            previous = list(ConfiguredModel.objects.filter(is_default=True).exclude(pk=obj.pk))
            # Before the save, or the partial unique index would see two defaults.
            ConfiguredModel.objects.filter(pk__in=[m.pk for m in previous]).update(is_default=False)
            for model in previous:
                self._audit(request, "update", model, "is_default unset: another model became the default")
                self.message_user(request, f"{model} is no longer the default model.")
        super().save_model(request, obj, form, change)


# --- playbook templates ---------------------------------------------------------------------------

class PlaybookTemplateForm(forms.ModelForm):
    """A template as workflows.templates.template_problems checks it (the plan, the integrations its
    steps need, the example input against the plan's input card, the trigger specs' shape), then
    against the integration catalogue. Each problem is shown on the field it is about."""

    category = forms.ChoiceField(choices=[(c, c) for c in templates.CATEGORIES])
    integrations = JsonEditorField(height="5rem", required=False, help_text=(
        'Integration ids the plan needs, e.g. ["github_tools", "slack_tools"].'))
    plan = JsonEditorField(height="36rem", help_text="The plan: input card, steps and output card (docs/playbooks.md).")
    example_input = JsonEditorField(height="10rem", required=False, help_text="An input the plan's input card accepts.")
    triggers = JsonEditorField(height="10rem", required=False, help_text=(
        'Suggested triggers, e.g. [{"type": "schedule", "preset": "every weekday at 9"}], [{"type": "webhook"}] '
        'or [{"type": "event", "event": "run.failed"}].'))

    class Meta:
        model = PlaybookTemplate
        fields = ("id", "name", "description", "category", "integrations", "plan", "example_input", "triggers",
                  "enabled")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if "plan" not in self.fields or self.errors:
            return cleaned  # a shipped template's content is read-only; or the field errors say what to fix
        data = {key: cleaned.get(key) for key in templates.REQUIRED_KEYS + templates.OPTIONAL_KEYS}
        data["id"] = cleaned.get("id", self.instance.pk)
        for key, empty in (("integrations", []), ("example_input", {}), ("triggers", [])):
            if data[key] is None:
                cleaned[key] = data[key] = empty
        found = templates.template_problems(data) or templates.catalogue_problems(data)
        for field, problems in found.items():
            for problem in problems:
                self.add_error(field if field in self.fields else None, problem)
        return cleaned


class ShippedTemplateForm(forms.ModelForm):
    """A shipped template: the sync owns its content, so only `enabled` is a form field."""

    class Meta:
        model = PlaybookTemplate
        fields = ("enabled",)


class TemplateIntegrationFilter(admin.SimpleListFilter):
    title = "integration"
    parameter_name = "integration"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        used = sorted({i for row in PlaybookTemplate.objects.values_list("integrations", flat=True) for i in row or []})
        return [(i, i) for i in used]

    def queryset(self, request: HttpRequest, queryset: QuerySet[PlaybookTemplate]) -> QuerySet[PlaybookTemplate]:
        if not self.value():
            return queryset
        # A JSON list's containment is not portable across SQLite and PostgreSQL; the table is small.
        wanted = [t.pk for t in queryset if self.value() in (t.integrations or [])]
        return queryset.filter(pk__in=wanted)


@admin.register(PlaybookTemplate)
class PlaybookTemplateAdmin(AuditedAdmin):
    form = PlaybookTemplateForm
    list_display = ("name", "id", "category", "integration_list", "step_count", "enabled", "shipped", "updated_at")
    list_filter = ("category", "enabled", "shipped", TemplateIntegrationFilter)
    search_fields = ("id", "name", "description")
    actions = ("duplicate", "enable", "disable")
    _SYNCED = ("name", "description", "category", "integrations", "plan_shown", "example_input_shown",
               "triggers_shown")

    def get_fields(self, request: HttpRequest, obj: PlaybookTemplate | None = None) -> Any:
        if obj is not None and obj.shipped:
            return ("id", "sync_note", *self._SYNCED, "enabled", "shipped", "created_at", "updated_at")
        if obj is not None:
            return (*PlaybookTemplateForm.Meta.fields, "shipped", "created_at", "updated_at")
        return PlaybookTemplateForm.Meta.fields

    def get_form(self, request: HttpRequest, obj: PlaybookTemplate | None = None, change: bool = False,
                 **kwargs: Any) -> Any:
        if obj is not None and obj.shipped:
            kwargs["form"] = ShippedTemplateForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: PlaybookTemplate | None = None) -> Any:
        if obj is None:
            return ()
        if obj.shipped:
            # A sync rewrites all of it from the file; only `enabled` is the curator's.
            return ("id", "sync_note", *self._SYNCED, "shipped", "created_at", "updated_at")
        return ("id", "shipped", "created_at", "updated_at")  # the id is the primary key: duplicate to rename

    @admin.display(description="")
    def sync_note(self, template: PlaybookTemplate) -> str:
        return ("Shipped with Atrium (workflows/playbook_templates/): manage.py sync_templates rewrites its "
                "content from the file, so only `enabled` is changed here. Use the action “Duplicate as my own "
                "template” to make an editable copy.")

    def _json(self, value: Any) -> str:
        return format_html("<pre style=\"white-space: pre-wrap\">{}</pre>",
                           json.dumps(value, ensure_ascii=False, indent=2))

    @admin.display(description="plan")
    def plan_shown(self, template: PlaybookTemplate) -> str:
        return self._json(template.plan)

    @admin.display(description="example input")
    def example_input_shown(self, template: PlaybookTemplate) -> str:
        return self._json(template.example_input)

    @admin.display(description="suggested triggers")
    def triggers_shown(self, template: PlaybookTemplate) -> str:
        return self._json(template.triggers)

    @admin.display(description="integrations")
    def integration_list(self, template: PlaybookTemplate) -> str:
        return ", ".join(template.integrations or [])

    @admin.display(description="steps")
    def step_count(self, template: PlaybookTemplate) -> int:
        return len((template.plan or {}).get("steps", []))

    def save_model(self, request: HttpRequest, obj: PlaybookTemplate, form: Any, change: bool) -> None:
        obj.updated_at = timezone.now()
        super().save_model(request, obj, form, change)

    @admin.action(description="Duplicate as my own template")
    def duplicate(self, request: HttpRequest, queryset: QuerySet[PlaybookTemplate]) -> None:
        copies = [templates.template_duplicate(caller=admin_caller(request), template=t) for t in queryset]
        self.message_user(request, f"Made {len(copies)} cop{'y' if len(copies) == 1 else 'ies'}, disabled until "
                                   f"you enable them: {', '.join(c.pk for c in copies)}.")

    @admin.action(description="Enable selected templates (callers see them)")
    def enable(self, request: HttpRequest, queryset: QuerySet[PlaybookTemplate]) -> None:
        caller = admin_caller(request)
        self.switch_selected(request, queryset, lambda template: templates.template_set_enabled(
            caller=caller, template=template, enabled=True), "enabled")

    @admin.action(description="Disable selected templates (hidden from callers)")
    def disable(self, request: HttpRequest, queryset: QuerySet[PlaybookTemplate]) -> None:
        caller = admin_caller(request)
        self.switch_selected(request, queryset, lambda template: templates.template_set_enabled(
            caller=caller, template=template, enabled=False), "disabled")


# --- playbooks, triggers and firings: for looking at ---------------------------------------------
# Deleting stays allowed (ReadOnlyAdmin): without it admin would refuse to delete their owner.

@admin.register(Playbook)
class PlaybookAdmin(ReadOnlyAdmin):
    list_display = ("name", "id", "owner", "template", "version", "detached", "updated_at")
    list_filter = ("template", ("detached_reason", admin.EmptyFieldListFilter), "owner")
    search_fields = ("id", "name", "goal", "owner__username")
    list_select_related = ("owner", "template")
    date_hierarchy = "updated_at"
    fields = ("id", "owner", "name", "goal", "integrations", "plan_shown", "workflow", "detached_reason", "template",
              "spending_cap_usd", "version", "created_at", "updated_at")

    @admin.display(description="plan")
    def plan_shown(self, playbook: Playbook) -> str:
        return format_html("<pre style=\"white-space: pre-wrap\">{}</pre>",
                           json.dumps(playbook.plan, ensure_ascii=False, indent=2))

    @admin.display(description="detached", boolean=True)
    def detached(self, playbook: Playbook) -> bool:
        return bool(playbook.detached_reason)


@admin.register(Trigger)
class TriggerAdmin(ReadOnlyAdmin):
    # Never the webhook token's digest or the sealed signing secret: the prefix is enough to recognise one.
    list_display = ("__str__", "kind", "enabled", "schedule", "event", "webhook_token_prefix", "next_fire_at",
                    "last_fired_at")
    list_filter = ("kind", "enabled", "event")
    search_fields = ("playbook__id", "playbook__name", "owner__username", "webhook_token_prefix", "event")
    list_select_related = ("playbook", "owner")
    fields = ("playbook", "owner", "kind", "enabled", "cron", "preset", "event", "filters", "webhook_token_prefix",
              "input", "next_fire_at", "last_fired_at", "created_at", "updated_at")

    @admin.display(description="schedule")
    def schedule(self, trigger: Trigger) -> str:
        return trigger.preset or trigger.cron


@admin.register(TriggerFiring)
class TriggerFiringAdmin(ReadOnlyAdmin):
    list_display = ("fired_at", "playbook", "trigger_kind", "outcome", "reason", "run")
    list_filter = ("outcome", "trigger__kind", "fired_at")
    search_fields = ("playbook__id", "playbook__name", "owner__username", "reason", "detail")
    list_select_related = ("playbook", "trigger", "run")
    date_hierarchy = "fired_at"
    fields = ("trigger", "playbook", "owner", "fired_at", "outcome", "reason", "detail", "run")

    @admin.display(description="trigger", ordering="trigger__kind")
    def trigger_kind(self, firing: TriggerFiring) -> str:
        return firing.trigger.kind
