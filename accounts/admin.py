from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from oauth2_provider.admin import ApplicationAdmin as OAuthApplicationAdmin
from oauth2_provider.models import get_application_model

from accounts import services
from accounts.caller import Caller
from accounts.errors import DomainError
from accounts.models import AuditEvent, McpSession, PersonalToken, Scope, ToolCall, User


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


class ServiceFormAdmin(admin.ModelAdmin):
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


class AuditedAdmin(admin.ModelAdmin):
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
