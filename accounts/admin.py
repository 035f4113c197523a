"""Accounts and access in Django admin, and the pieces every app's admin builds on: the curator as
a Caller (admin_caller), forms that write through a service (ServiceFormAdmin), the audit copy of
plain model edits (AuditedAdmin), the code editors and the `since` filter."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Model, QuerySet
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django_ace import AceWidget
from oauth2_provider.admin import ApplicationAdmin as OAuthApplicationAdmin
from oauth2_provider.models import get_application_model

from accounts import services
from accounts.models import AuditEvent, McpSession, PersonalToken, Scope, ToolCall, User
from console.links import since_parse
from core.caller import Caller
from core.errors import DomainError


def admin_caller(request: HttpRequest) -> Caller:
    return Caller.trusted(request.user, via=AuditEvent.Via.ADMIN)


class _DryRun(Exception):
    """Raised to roll back a service call made only to learn whether it succeeds."""


def validate_through(call: Callable[[], object]) -> None:
    """Run `call` (the service write a form stands for) in a savepoint that is always rolled back;
    its refusal becomes a form error. A form's clean() calls it, so admin shows the service's
    refusal on the form and writes nothing while the input is invalid."""
    try:
        with transaction.atomic():
            call()
            raise _DryRun
    except _DryRun:
        return
    except DomainError as exc:
        raise ValidationError(exc.message, code=exc.code) from exc


# --- code editors -----------------------------------------------------------------------------------

# kind -> how its editor is set up: Markdown is prose, so its lines wrap; code scrolls sideways.
EDITORS: dict[str, dict[str, Any]] = {
    "yaml": {"mode": "yaml", "height": "36rem", "tabsize": 2},
    "json": {"mode": "json", "height": "16rem", "tabsize": 2},
    "markdown": {"mode": "markdown", "height": "26rem", "tabsize": 2, "wordwrap": True},
    "python": {"mode": "python", "height": "30rem", "tabsize": 4},
}


class CodeEditor(AceWidget):
    """django_ace's widget, whose own widget.js sets each editor up from the data- attributes of its
    markup (no inline script, so the Content-Security-Policy lets it run), with one script more:
    atrium-admin-editor.js keeps Ace from starting a worker, which the policy would refuse."""

    @property
    def media(self) -> forms.Media:
        return super().media + forms.Media(js=["atrium-admin-editor.js"])


def code_editor(kind: str, *, height: str | None = None) -> CodeEditor:
    """The admin's editor for text of `kind` (a key of EDITORS): Ace with highlighting, soft tabs
    and bracket matching. No worker: the checks that count are the server's."""
    options = EDITORS[kind]
    return CodeEditor(mode=options["mode"], width="100%", height=height or options["height"], useworker=False,
                      showprintmargin=False, tabsize=options["tabsize"], wordwrap=options.get("wordwrap", False),
                      attrs={"class": f"code-editor code-editor-{kind}", "spellcheck": "false"})


class JsonEditorField(forms.JSONField):
    """JSON in a JSON editor, pretty-printed so it can be read and edited."""

    def __init__(self, *, height: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("widget", code_editor("json", height=height))
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value  # shown back as typed, next to the error
        return "" if value is None else json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)


class AtriumAdmin(admin.ModelAdmin):
    """The base of Atrium's admins: every JSON field of a model is edited in the JSON editor."""

    formfield_overrides = {models.JSONField: {"form_class": JsonEditorField}}

    def switch_selected(self, request: HttpRequest, queryset: QuerySet, switch: Callable[[Any], bool],
                        state: str) -> None:
        """A bulk action that sets a flag: `switch` (the app's service) sets it on one row and says
        whether that changed anything; the curator is told which rows it changed, and which already
        were `state`."""
        changed, unchanged = [], []
        for obj in queryset:
            (changed if switch(obj) else unchanged).append(str(obj.pk))
        if changed:
            names = self.opts.verbose_name if len(changed) == 1 else self.opts.verbose_name_plural
            self.message_user(request, f"{state.capitalize()} {len(changed)} {names}: {', '.join(sorted(changed))}.")
        if unchanged:
            self.message_user(request, f"Already {state}, left as {'it was' if len(unchanged) == 1 else 'they were'}: "
                                       f"{', '.join(sorted(unchanged))}.", level=messages.WARNING)


# --- list filters ------------------------------------------------------------------------------------

class SinceFilter(admin.SimpleListFilter):
    """`since` as the console's lists read it (console.links.since_parse: 24h, 7d, or an ISO time),
    on the date field `field`; since_filter() makes one per field."""

    parameter_name = "since"
    field = ""
    CHOICES = (("1h", "the last hour"), ("24h", "the last 24 hours"), ("7d", "the last 7 days"),
               ("30d", "the last 30 days"))

    def lookups(self, request: HttpRequest, model_admin: Any) -> tuple[tuple[str, str], ...]:
        return self.CHOICES

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if not self.value():
            return queryset
        try:
            since = since_parse(self.value())
        except DomainError as exc:
            raise IncorrectLookupParameters(exc.message) from exc
        return queryset.filter(**{f"{self.field}__gte": since})


def since_filter(field: str, title: str) -> type[SinceFilter]:
    return type(f"SinceFilter_{field}", (SinceFilter,), {"field": field, "title": title})


# --- the bases of the apps' admins -------------------------------------------------------------------

class ServiceFormAdmin(AtriumAdmin):
    """An admin whose form writes through a service: the form gets the admin's caller, checks its
    input with validate_through in clean(), and `write()`s on save."""

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"caller": admin_caller(request)})

    def changeform_view(self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except DomainError as exc:
            # The dry run in clean() passed but the real call was refused: something changed in
            # between (a concurrent create of the same name). Admin's transaction has rolled back.
            self.message_user(request, f"Nothing was saved: {exc.message}", level=messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.pk = form.write().pk
        obj.refresh_from_db()


class AuditedAdmin(AtriumAdmin):
    """Copies the admin's own change log into Atrium's audit log, for models whose writes in
    admin are plain model edits rather than service calls."""

    def _audit(self, request: HttpRequest, verb: str, obj: Model, message: Any = "") -> None:
        services.audit_record(
            caller=admin_caller(request),
            action=f"{obj._meta.model_name}.{verb}",
            target=f"{obj._meta.verbose_name} {obj.pk} '{obj}'",
            detail={"change": message} if message else {},
        )

    def log_addition(self, request: HttpRequest, obj: Model, message: Any) -> Any:
        self._audit(request, "create", obj, message)
        return super().log_addition(request, obj, message)

    def log_change(self, request: HttpRequest, obj: Model, message: Any) -> Any:
        self._audit(request, "update", obj, message)
        return super().log_change(request, obj, message)

    def log_deletions(self, request: HttpRequest, queryset: QuerySet) -> Any:
        for obj in queryset:
            self._audit(request, "delete", obj)
        return super().log_deletions(request, queryset)


@admin.register(User)
class UserAdmin(AuditedAdmin, DjangoUserAdmin):
    list_display = ("username", "email", "is_staff", "is_active", "last_login", "date_joined")


@admin.register(Scope)
class ScopeAdmin(AuditedAdmin):
    """Scope names are referenced by the tools that need them, so only descriptions change here."""

    list_display = ("name", "description")
    search_fields = ("name", "description")

    def get_readonly_fields(self, request: HttpRequest, obj: Scope | None = None) -> tuple[str, ...]:
        return ("name",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Scope | None = None) -> bool:
        return False


class PersonalTokenAddForm(forms.ModelForm):
    class Meta:
        model = PersonalToken
        fields = ("user", "label", "scopes", "expires_at")
        help_texts = {"scopes": "Leave empty for every scope."}


@admin.register(PersonalToken)
class PersonalTokenAdmin(admin.ModelAdmin):
    list_display = ("label", "user", "prefix", "scope_names", "created_at", "expires_at", "last_used_at",
                    "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "created_at", "scopes")
    search_fields = ("label", "prefix", "user__username", "user__email")
    autocomplete_fields = ("user",)
    filter_horizontal = ("scopes",)
    actions = ("revoke",)
    readonly_fields = ("user", "label", "prefix", "scopes", "created_at", "expires_at", "last_used_at",
                       "revoked_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[PersonalToken]:
        return super().get_queryset(request).select_related("user").prefetch_related("scopes")

    @admin.display(description="scopes")
    def scope_names(self, token: PersonalToken) -> str:
        names = [s.name for s in token.scopes.all()]
        return ", ".join(names) if len(names) < 6 else f"{len(names)} scopes"

    def get_form(self, request: HttpRequest, obj: PersonalToken | None = None, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = PersonalTokenAddForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: PersonalToken | None = None) -> Any:
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request: HttpRequest, obj: PersonalToken | None = None) -> Any:
        return self.readonly_fields if obj is not None else PersonalTokenAddForm.Meta.fields

    def save_model(self, request: HttpRequest, obj: PersonalToken, form: Any, change: bool) -> None:
        scopes = [s.name for s in form.cleaned_data["scopes"]] or None
        token, raw = services.token_create(
            caller=admin_caller(request), user=form.cleaned_data["user"], label=form.cleaned_data["label"],
            scopes=scopes, expires_at=form.cleaned_data["expires_at"],
        )
        obj.pk = token.pk
        messages.warning(request, f"Copy the new token now; it is not shown again: {raw}")

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """The service already set the scopes."""

    def log_addition(self, request: HttpRequest, obj: Model, message: Any) -> None:
        """The service audited the creation."""

    def has_delete_permission(self, request: HttpRequest, obj: PersonalToken | None = None) -> bool:
        return False  # revoke instead: the row is the record of what the token did

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[PersonalToken]) -> None:
        caller = admin_caller(request)
        try:
            for token in queryset:
                services.token_revoke(caller=caller, token=token)
        except DomainError as exc:
            self.message_user(request, exc.message, level=messages.ERROR)
            return
        self.message_user(request, f"Revoked {queryset.count()} token(s).")


@admin.register(McpSession)
class McpSessionAdmin(admin.ModelAdmin):
    list_display = ("short_id", "user", "transport", "client_name", "protocol_version", "created_at",
                    "last_seen_at", "closed_at")
    list_filter = ("transport", "protocol_version", ("closed_at", admin.EmptyFieldListFilter))
    search_fields = ("id", "user__username", "client_name")
    list_select_related = ("user",)

    @admin.display(description="session")
    def short_id(self, session: McpSession) -> str:
        return f"{session.id[:10]}…"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: McpSession | None = None) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("at", "actor_name", "via", "action", "target", "credential")
    list_filter = ("via", "action", "at")
    search_fields = ("actor_name", "action", "target", "credential")
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False


@admin.register(ToolCall)
class ToolCallAdmin(admin.ModelAdmin):
    list_display = ("at", "user", "server", "transport", "tool", "operation", "outcome", "error_code", "duration_ms")
    list_filter = ("outcome", "server", "transport", "tool", "at")
    search_fields = ("user__username", "tool", "operation", "error_code")
    list_select_related = ("user",)
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ToolCall | None = None) -> bool:
        return False


Application = get_application_model()
admin.site.unregister(Application)


@admin.register(Application)
class ApplicationAdmin(AuditedAdmin, OAuthApplicationAdmin):
    pass
