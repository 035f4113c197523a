"""Curating elements in Django admin. Every write goes through elements.services, as the
curator (Caller via admin), so it is validated, revisioned and audited like any client's."""

from __future__ import annotations

import difflib
import json
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.text import Truncator
from django.views.decorators.http import require_POST

from accounts.admin import (
    AtriumAdmin,
    JsonEditorField,
    ServiceFormAdmin,
    admin_caller,
    code_editor,
    since_filter,
    validate_through,
)
from accounts.services import audit_record
from core.caller import Caller
from core.errors import DomainError
from docs_kb.rendering import text_html
from elements import selectors, services, submissions
from elements.models import (
    Activation,
    AgentBlock,
    AgentExecution,
    CliApproval,
    CollectionSubmission,
    Confirmation,
    Element,
    ElementRevision,
    ExecutionStep,
    MemoryEntry,
    PortfolioRemote,
    UserSettings,
    VerificationChallenge,
)
from elements.packages import element_package
from elements.types import MAX_CONTENT_LENGTH, ElementType

# The fields a curator edits, named as element_create's params and element_edit's changes.
EDITABLE = ("description", "instructions", "content", "tags", "triggers", "category", "author", "version",
            "gatekeeper", "metadata")


class BodyField(forms.CharField):
    """Instructions or content: Markdown, kept exactly as typed."""

    def __init__(self, **kwargs: Any) -> None:
        # Not stripped: an untouched body must compare equal to what is stored, or every save
        # would count it as changed.
        super().__init__(required=False, strip=False, widget=code_editor("markdown"), **kwargs)

    def to_python(self, value: Any) -> str:
        # Browsers submit textarea lines with CRLF.
        return super().to_python(value).replace("\r\n", "\n")


class CommaSeparatedField(forms.CharField):
    """A list of short strings (tags, triggers) edited as "a, b, c"."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, help_text="Separate them with commas.", **kwargs)

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:
        return [part.strip() for part in super().to_python(value).split(",") if part.strip()]


class JsonObjectField(JsonEditorField):
    """A JSON object, or nothing."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, **kwargs)

    def to_python(self, value: Any) -> Any:
        data = super().to_python(value)
        if data is not None and not isinstance(data, dict):
            raise ValidationError("Enter a JSON object, {…}.", code="not_an_object")
        return data


class ElementForm(forms.ModelForm):
    """The element editor.

    Validity is decided by the services alone: clean() makes the very call save_model will make,
    in a savepoint that is rolled back, so a refusal is shown as a form error and nothing is written
    while the input is invalid. Validating in clean() (rather than catching the error in save_model,
    where admin can no longer show it on the form) keeps admin's own flow, its messages and its
    inline handling intact.
    """

    caller: Caller  # set per request by ElementAdmin.get_form

    instructions = BodyField()
    content = BodyField()
    tags = CommaSeparatedField()
    triggers = CommaSeparatedField()
    metadata = JsonObjectField(help_text="The type-specific fields and any others, as one JSON object.")
    gatekeeper = JsonObjectField(help_text="A policy with allow, confirm, deny, scopeRestrictions or "
                                           "externalRestrictions; empty for none.")
    # The version the editor was opened at: saving over a change made since (by a client or another
    # curator) is refused instead of silently undoing it.
    loaded_version = forms.CharField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Element
        fields = ("owner", "element_type", "name", "format_version", *EDITABLE)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["loaded_version"].initial = selectors.element_version(self.instance)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned  # the field errors say what to fix; the service would only repeat them
        validate_through(self.write)
        return cleaned

    def _post_clean(self) -> None:
        """Skip the model's own checks: clean() ran the service, whose rules are the ones that count
        (the model's would repeat a duplicate-name refusal in other words), and save_model reloads
        the instance from what the service stored."""

    def write(self) -> Element:
        """The service call this form stands for: element_create on add, element_edit with the
        changed fields on change."""
        data = self.cleaned_data
        if self.instance.pk is None:
            params = {field: data[field] for field in EDITABLE if field in data}
            if not params.get("author"):
                params.pop("author", None)  # so the service credits the owner
            return services.element_create(
                caller=self.caller, element_type=ElementType(data["element_type"]), name=data["name"],
                params=params, format_version=data["format_version"], owner=data["owner"],
            )
        # A fresh copy: element_edit updates the instance it is given, and a dry run must not.
        element = Element.objects.get(pk=self.instance.pk)
        changes = {field: data[field] for field in self.changed_data if field in EDITABLE}
        if not changes:
            return element
        # The editor shows metadata and the policy whole, so what is posted replaces them.
        loaded = data.get("loaded_version")
        return services.element_edit(caller=self.caller, element=element, changes=changes,
                                     replace=frozenset(changes) & {"metadata", "gatekeeper"},
                                     if_match={loaded} if loaded else None)


class MemoryEntryInline(admin.TabularInline):
    """A memory's entries, read-only: entries are appended by clients, and cleared with the action."""

    model = MemoryEntry
    fields = ("entry_id", "timestamp", "excerpt", "tags", "trust_level", "privacy_level")
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="content")
    def excerpt(self, entry: MemoryEntry) -> str:
        return Truncator(entry.content).chars(120)

    def has_add_permission(self, request: HttpRequest, obj: Element | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Element | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Element | None = None) -> bool:
        return False


def _history_query(owner_id: int, element_type: str, name: str) -> dict[str, Any]:
    """The revisions of one element, followed by owner, type and name rather than by row: a
    restore recreates the row, and a delete leaves its backup unlinked."""
    return {"owner_id": owner_id, "element_type": element_type, "name": name}


@admin.register(Element)
class ElementAdmin(ServiceFormAdmin):
    form = ElementForm
    list_display = ("element_type", "name", "owner", "category", "version", "format_version", "published",
                    "modified")
    list_display_links = ("name",)
    # The element_type filter doubles as the per-type lists.
    list_filter = ("element_type", "published", since_filter("modified", "modified since"), "format_version",
                   "category", "owner")
    # "tags" searches the JSON text of the list.
    search_fields = ("name", "description", "tags", "owner__username")
    date_hierarchy = "modified"
    list_select_related = ("owner",)
    autocomplete_fields = ("owner",)
    actions = ("export_elements", "clear_entries", "publish", "withdraw")
    change_form_template = "admin/elements/element/change_form.html"

    _BODY_FIELDSETS = (
        ("Details", {"fields": ("description", "category", "author", "version", "tags", "triggers")}),
        ("Body", {"fields": ("instructions", "content")}),
        ("Structured fields", {"fields": ("metadata", "gatekeeper")}),
    )

    def get_fieldsets(self, request: HttpRequest, obj: Element | None = None) -> Any:
        if obj is None:
            identity = ("owner", "element_type", "name", "format_version")
        else:
            identity = ("owner", "element_type", "name", "unique_id", "format_version", "created", "modified",
                        "revision_history", "loaded_version")
        return ((None, {"fields": identity}), *self._BODY_FIELDSETS)

    def get_readonly_fields(self, request: HttpRequest, obj: Element | None = None) -> Any:
        if obj is None:
            return ()
        fields = ("owner", "element_type", "name", "unique_id", "format_version", "created", "modified",
                  "revision_history")
        # A memory's content is append-only: entries are its content.
        return (*fields, "content") if obj.element_type == ElementType.MEMORY else fields

    def get_inlines(self, request: HttpRequest, obj: Element | None) -> Any:
        return [MemoryEntryInline] if obj is not None and obj.element_type == ElementType.MEMORY else []

    def get_urls(self) -> list[URLPattern]:
        preview = self.admin_site.admin_view(require_POST(self.preview_view))
        return [path("preview/", preview, name="elements_element_preview"), *super().get_urls()]

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        """The Markdown in an editor (`markdown`), rendered as the console's element page renders
        it, without saving anything: the fragment the change form's Preview shows under the editor."""
        if not (self.has_add_permission(request) or self.has_change_permission(request)):
            raise PermissionDenied
        text = request.POST.get("markdown", "")
        if len(text) > MAX_CONTENT_LENGTH:
            return HttpResponse(f"Longer than an element may be ({MAX_CONTENT_LENGTH:,} characters): not previewed.",
                                status=400, content_type="text/plain; charset=utf-8")
        return HttpResponse(text_html(text) if text.strip() else "<p><em>Nothing to preview.</em></p>")

    @admin.display(description="revisions")
    def revision_history(self, element: Element) -> str:
        query = _history_query(element.owner_id, element.element_type, element.name)
        params = {"owner__id__exact": element.owner_id, "element_type": element.element_type, "name": element.name}
        return format_html('<a href="{}?{}">{} revision(s)</a>', reverse("admin:elements_elementrevision_changelist"),
                           urlencode(params), ElementRevision.objects.filter(**query).count())


    def delete_model(self, request: HttpRequest, obj: Element) -> None:
        services.element_delete(caller=admin_caller(request), element=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Element]) -> None:
        caller = admin_caller(request)
        for element in queryset:
            services.element_delete(caller=caller, element=element)

    @admin.action(description="Export selected elements as JSON")
    def export_elements(self, request: HttpRequest, queryset: QuerySet[Element]) -> HttpResponse:
        elements = list(queryset.prefetch_related("entries"))
        packages = [element_package(e, entries=list(e.entries.all())) for e in elements]
        # Curators can read anyone's private elements: an export is recorded like a write.
        audit_record(caller=admin_caller(request), action="element.export", target=f"{len(elements)} element(s)",
                     detail={"elements": [f"{e.element_type} '{e.name}' of {e.owner}" for e in elements]})
        response = HttpResponse(json.dumps(packages, ensure_ascii=False, indent=2), content_type="application/json")
        response["Content-Disposition"] = 'attachment; filename="atrium-elements.json"'
        return response

    @admin.action(description="Clear entries of selected memories")
    def clear_entries(self, request: HttpRequest, queryset: QuerySet[Element]) -> None:
        caller = admin_caller(request)
        memories = list(queryset.filter(element_type=ElementType.MEMORY))
        cleared = sum(services.memory_clear(caller=caller, memory=memory) for memory in memories)
        self.message_user(request, f"Cleared {cleared} entries from {len(memories)} memory(ies).")
        skipped = queryset.count() - len(memories)
        if skipped:
            self.message_user(request, f"Skipped {skipped} selected element(s) that are not memories.",
                              level=messages.WARNING)


    def _set_published(self, request: HttpRequest, queryset: QuerySet[Element], published: bool) -> None:
        caller = admin_caller(request)
        for element in queryset:
            services.element_publish(caller=caller, element=element, published=published)
        where = "in" if published else "out of"
        self.message_user(request, f"{queryset.count()} element(s) are now {where} the collection.")

    @admin.action(description="Publish selected elements to the team collection")
    def publish(self, request: HttpRequest, queryset: QuerySet[Element]) -> None:
        self._set_published(request, queryset, True)

    @admin.action(description="Withdraw selected elements from the team collection")
    def withdraw(self, request: HttpRequest, queryset: QuerySet[Element]) -> None:
        self._set_published(request, queryset, False)


class ReadOnlyAdmin(AtriumAdmin):
    """For looking only. Delete stays allowed: admin refuses to delete a user or an element whose
    deletion cascades into a model it may not delete."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


DiffLine = tuple[str, str]  # (kind, text): kind is header, hunk, added, removed or context


def _line_kind(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "header"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "added", "-": "removed"}.get(line[:1], "context")


class RevisionAdmin(ReadOnlyAdmin):
    """A history of snapshots: read-only, each page shows what changed since the revision before,
    and a curator may put it back through the app's restore service."""

    restore_permission = ""  # e.g. "elements.change_element"
    actions = None  # revisions are the history; none is removed in bulk

    def revision_previous(self, revision: Any) -> Any:
        raise NotImplementedError

    def revision_lines(self, revision: Any) -> list[str]:
        """The snapshot as lines of text, for the diff."""
        raise NotImplementedError

    def revision_restore(self, request: HttpRequest, revision: Any) -> Any:
        raise NotImplementedError

    def revision_diff(self, revision: Any, previous: Any) -> list[DiffLine]:
        lines = difflib.unified_diff(
            self.revision_lines(previous) if previous else [], self.revision_lines(revision),
            fromfile=str(previous) if previous else "(no earlier revision)", tofile=str(revision), lineterm="",
        )
        return [(_line_kind(line), line) for line in lines]

    def get_urls(self) -> list[URLPattern]:
        restore = self.admin_site.admin_view(require_POST(self.restore_view))
        name = f"{self.opts.app_label}_{self.opts.model_name}_restore"
        return [path("<int:revision_id>/restore/", restore, name=name), *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        revision = self.get_object(request, object_id)
        if revision is not None:
            previous = self.revision_previous(revision)
            extra_context = {**(extra_context or {}), "previous": previous,
                             "diff_lines": self.revision_diff(revision, previous),
                             "can_restore": request.user.has_perm(self.restore_permission),
                             "revision_change_url": f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                             "revision_restore_url": f"admin:{self.opts.app_label}_{self.opts.model_name}_restore"}
        return super().change_view(request, object_id, form_url, extra_context)

    def restore_view(self, request: HttpRequest, revision_id: int) -> HttpResponse:
        if not request.user.has_perm(self.restore_permission):
            raise PermissionDenied
        revision = get_object_or_404(self.model, pk=revision_id)
        try:
            restored = self.revision_restore(request, revision)
        except DomainError as exc:
            self.message_user(request, f"Could not restore: {exc.message}", level=messages.ERROR)
            return redirect(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", revision.pk)
        self.message_user(request, f"Restored {restored} from its {revision.action} revision of "
                                   f"{revision.created_at:%Y-%m-%d %H:%M:%S}.")
        return redirect(f"admin:{restored._meta.app_label}_{restored._meta.model_name}_change", restored.pk)


@admin.register(ElementRevision)
class ElementRevisionAdmin(RevisionAdmin):
    list_display = ("created_at", "element_type", "name", "owner", "action", "credential")
    list_filter = ("action", "element_type", "created_at", "owner")
    search_fields = ("name", "owner__username", "credential")
    date_hierarchy = "created_at"
    list_select_related = ("owner",)
    fields = ("element", "owner", "element_type", "name", "action", "created_at", "credential")
    change_form_template = "admin/elements/elementrevision/change_form.html"
    restore_permission = "elements.change_element"

    def revision_previous(self, revision: ElementRevision) -> ElementRevision | None:
        """The revision of the same element taken just before `revision`."""
        earlier = ElementRevision.objects.filter(
            **_history_query(revision.owner_id, revision.element_type, revision.name),
            created_at__lte=revision.created_at,
        ).exclude(created_at=revision.created_at, pk__gte=revision.pk)
        return earlier.order_by("-created_at", "-pk").first()

    def revision_lines(self, revision: ElementRevision) -> list[str]:
        return json.dumps(revision.snapshot, ensure_ascii=False, indent=2, sort_keys=True).splitlines()

    def revision_restore(self, request: HttpRequest, revision: ElementRevision) -> Element:
        return services.element_restore(caller=admin_caller(request), revision=revision)


def _session_prefix(session_id: str) -> str:
    return f"{session_id[:10]}…"


@admin.register(Activation)
class ActivationAdmin(ReadOnlyAdmin):
    list_display = ("session_short", "element", "via", "activated_at")
    list_filter = ("element__element_type",)
    search_fields = ("session__id", "element__name", "session__user__username")
    list_select_related = ("element", "via")

    @admin.display(description="session")
    def session_short(self, activation: Activation) -> str:
        return _session_prefix(activation.session_id)


@admin.register(Confirmation)
class ConfirmationAdmin(ReadOnlyAdmin):
    list_display = ("session_short", "operation", "element_type", "level", "pending", "created_at")
    list_filter = ("level", "pending", "operation")
    search_fields = ("session__id", "operation", "session__user__username")

    @admin.display(description="session")
    def session_short(self, confirmation: Confirmation) -> str:
        return _session_prefix(confirmation.session_id)


@admin.register(UserSettings)
class UserSettingsAdmin(ReadOnlyAdmin):
    list_display = ("user", "values")
    search_fields = ("user__username",)
    list_select_related = ("user",)


@admin.register(PortfolioRemote)
class PortfolioRemoteAdmin(ReadOnlyAdmin):
    """Users' GitHub portfolio repositories, as init_portfolio recorded them (no token is kept here)."""

    list_display = ("user", "owner", "repository", "auto_sync", "last_synced_at", "last_sync_direction",
                    "last_error")
    search_fields = ("user__username", "owner", "repository")
    list_select_related = ("user",)


class ExecutionStepInline(admin.TabularInline):
    """An execution's steps as recorded by record_execution_step: its history, never edited."""

    model = ExecutionStep
    fields = ("number", "created_at", "outcome", "excerpt", "confidence", "risk_score", "decision_id")
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="description")
    def excerpt(self, step: ExecutionStep) -> str:
        return Truncator(step.description).chars(120)

    def has_add_permission(self, request: HttpRequest, obj: AgentExecution | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AgentExecution | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AgentExecution | None = None) -> bool:
        return False


@admin.register(AgentExecution)
class AgentExecutionAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent_name", "owner", "status", "outcome", "step_count", "started_at", "finished_at")
    list_filter = ("status", "outcome", "started_at")
    search_fields = ("id", "agent_name", "goal", "owner__username")
    date_hierarchy = "started_at"
    list_select_related = ("owner",)
    inlines = (ExecutionStepInline,)


@admin.register(AgentBlock)
class AgentBlockAdmin(ReadOnlyAdmin):
    list_display = ("agent_name", "owner", "reason", "blocked_at", "released_at", "released_by")
    list_filter = ("released_by", "blocked_at")
    search_fields = ("agent_name", "reason", "owner__username")
    list_select_related = ("owner",)


@admin.register(VerificationChallenge)
class VerificationChallengeAdmin(ReadOnlyAdmin):
    # Named field by field, so the sealed code is never on a page: a code is for its owner alone.
    fields = ("id", "owner", "kind", "agent_name", "block", "execution", "reason", "created_at", "expires_at",
              "failures", "used_at", "outcome")
    list_display = ("agent_name", "kind", "owner", "created_at", "expires_at", "failures", "outcome")
    list_filter = ("kind", "outcome", "created_at")
    search_fields = ("id", "agent_name", "owner__username")
    list_select_related = ("owner",)


@admin.register(CliApproval)
class CliApprovalAdmin(ReadOnlyAdmin):
    list_display = ("tool_name", "owner", "status", "scope", "created_at", "expires_at", "decided_via")
    list_filter = ("status", "scope", "decided_via", "tool_name", "created_at")
    search_fields = ("id", "tool_name", "agent_identity", "owner__username")
    date_hierarchy = "created_at"
    list_select_related = ("owner",)


class SubmissionStatusFilter(admin.SimpleListFilter):
    """By status, pending by default: the review queue is what a curator opens the list for."""

    title = "status"
    parameter_name = "status"
    ALL = "all"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*CollectionSubmission.Status.choices, (self.ALL, "All")]

    def value(self) -> str:
        return super().value() or CollectionSubmission.Status.PENDING

    def choices(self, changelist: Any) -> Any:
        for value, label in self.lookup_choices:
            yield {"selected": self.value() == value, "display": label,
                   "query_string": changelist.get_query_string({self.parameter_name: value})}

    def queryset(self, request: HttpRequest, queryset: QuerySet[CollectionSubmission]) -> Any:
        return queryset if self.value() == self.ALL else queryset.filter(status=self.value())


class RejectForm(forms.Form):
    reason = forms.CharField(max_length=submissions.MAX_REASON, widget=forms.Textarea(attrs={"rows": 4, "cols": 80}))


@admin.register(CollectionSubmission)
class CollectionSubmissionAdmin(ReadOnlyAdmin):
    """The review queue of submit_collection_content: each page shows the file, its changes from what
    the collection serves at that path, the validation and the scan, with Approve and Reject."""

    list_display = ("submitted_at", "element_type", "name", "author", "status", "path", "scan_findings",
                    "reviewer", "git_outcome")
    list_display_links = ("name",)
    list_filter = (SubmissionStatusFilter, "element_type")
    search_fields = ("name", "path", "author__username")
    list_select_related = ("author", "reviewer")
    fields = ("author", "element_type", "name", "path", "status", "submitted_at", "resubmissions", "reviewer",
              "decided_at", "reason", "git_branch", "git_commit", "git_error")
    change_form_template = "admin/elements/collectionsubmission/change_form.html"
    actions = None  # each submission is read before it is decided

    @admin.display(description="scan")
    def scan_findings(self, submission: CollectionSubmission) -> str:
        return f"{len(submission.scan)} finding(s)" if submission.scan else "clean"

    @admin.display(description="git")
    def git_outcome(self, submission: CollectionSubmission) -> str:
        if submission.git_commit:
            return f"{submission.git_branch} @ {submission.git_commit[:10]}"
        if submission.git_error:
            return "failed"
        return "queued" if submission.git_branch else ""

    def get_urls(self) -> list[URLPattern]:
        def route(name: str, view: Any) -> URLPattern:
            return path(f"<int:submission_id>/{name}/", self.admin_site.admin_view(require_POST(view)),
                        name=f"elements_collectionsubmission_{name}")

        return [route("approve", self.approve_view), route("reject", self.reject_view),
                route("withdraw", self.withdraw_view), *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        submission = self.get_object(request, object_id)
        if submission is not None:
            against, diff = submissions.submission_diff(submission)
            extra_context = {**(extra_context or {}), "against": against,
                             "diff_lines": [(_line_kind(line), line) for line in diff],
                             "can_decide": request.user.has_perm("elements.change_collectionsubmission"),
                             "reject_form": RejectForm()}
        return super().change_view(request, object_id, form_url, extra_context)

    def _decide(self, request: HttpRequest, submission_id: int, decide: Any, done: str) -> HttpResponse:
        if not request.user.has_perm("elements.change_collectionsubmission"):
            raise PermissionDenied
        try:
            submission = decide(admin_caller(request), submission_id)
        except DomainError as exc:
            self.message_user(request, exc.message, level=messages.ERROR)
            return redirect("admin:elements_collectionsubmission_change", submission_id)
        self.message_user(request, f"{submission.element_type.capitalize()} '{submission.name}' {done}.")
        return redirect("admin:elements_collectionsubmission_changelist")

    def approve_view(self, request: HttpRequest, submission_id: int) -> HttpResponse:
        return self._decide(request, submission_id, lambda caller, pk: submissions.submission_approve(
            caller=caller, submission_id=pk), "is approved: the collection serves it now")

    def reject_view(self, request: HttpRequest, submission_id: int) -> HttpResponse:
        form = RejectForm(request.POST)
        if not form.is_valid():
            self.message_user(request, "A rejection needs a reason: the author is told it.", level=messages.ERROR)
            return redirect("admin:elements_collectionsubmission_change", submission_id)
        return self._decide(request, submission_id, lambda caller, pk: submissions.submission_reject(
            caller=caller, submission_id=pk, reason=form.cleaned_data["reason"]), "is rejected; its author is told why")

    def withdraw_view(self, request: HttpRequest, submission_id: int) -> HttpResponse:
        return self._decide(request, submission_id, lambda caller, pk: submissions.submission_withdraw(
            caller=caller, submission_id=pk), "is withdrawn from the collection")
