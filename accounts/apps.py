from django.apps import AppConfig, apps

# The admin index names each app once: allauth's "Accounts" would sit next to ours, and a library's
# name ("Django OAuth Toolkit") says nothing to a curator about what is listed under it.
ADMIN_APP_NAMES = {"account": "Sign-in email addresses", "oauth2_provider": "OAuth applications and tokens"}


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and access"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed
        from django.db.models.signals import post_delete, post_save
        from mcp_server import mcp_server
        from oauth2_provider.models import AccessToken
        from oauth2_provider.signals import app_authorized

        from accounts.authentication import authenticated_forget
        from accounts.models import PersonalToken, User
        from accounts.oauth import record_authorization
        from accounts.ratelimit import login_failure_record
        from core.tools import server_prepare

        for label, name in ADMIN_APP_NAMES.items():
            apps.get_app_config(label).verbose_name = name
        server_prepare(mcp_server, label="mcp")
        app_authorized.connect(record_authorization, dispatch_uid="accounts.record_authorization")
        user_login_failed.connect(login_failure_record, dispatch_uid="accounts.login_failure_record")
        # A token revoked, or a user deactivated, in this process is refused by it at once.
        for model in (PersonalToken, AccessToken, User):
            for signal in (post_save, post_delete):
                signal.connect(authenticated_forget, sender=model, dispatch_uid=f"accounts.forget.{model.__name__}")
