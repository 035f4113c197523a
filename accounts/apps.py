from importlib.metadata import version

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and access"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed
        from mcp_server import mcp_server
        from oauth2_provider.signals import app_authorized

        from accounts.mcp_registry import install_guard
        from accounts.oauth import record_authorization
        from accounts.ratelimit import login_failure_record

        install_guard(mcp_server)
        # serverInfo names Atrium's version, not the SDK's.
        mcp_server._mcp_server.version = version("atrium")
        app_authorized.connect(record_authorization, dispatch_uid="accounts.record_authorization")
        user_login_failed.connect(login_failure_record, dispatch_uid="accounts.login_failure_record")
