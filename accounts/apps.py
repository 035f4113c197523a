from django.apps import AppConfig, apps

# The admin index names each app once: allauth's "Accounts" would sit next to ours, and a library's
# name ("Django OAuth Toolkit") says nothing to a curator about what is listed under it.
ADMIN_APP_NAMES = {"account": "Sign-in email addresses", "oauth2_provider": "OAuth applications and tokens"}


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and access"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed
        from mcp_server import mcp_server
        from oauth2_provider.signals import app_authorized

        from accounts.mcp_registry import server_prepare
        from accounts.oauth import record_authorization
        from accounts.ratelimit import login_failure_record

        for label, name in ADMIN_APP_NAMES.items():
            apps.get_app_config(label).verbose_name = name
        server_prepare(mcp_server, label="mcp")
        app_authorized.connect(record_authorization, dispatch_uid="accounts.record_authorization")
        user_login_failed.connect(login_failure_record, dispatch_uid="accounts.login_failure_record")
