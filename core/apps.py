from django.apps import AppConfig


class CoreConfig(AppConfig):
    """What every app uses: the caller, domain errors, input bounds, the tool registry and the MCP
    protocol layer with its HTTP and stdio transports. No models."""

    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from django.core.signals import request_finished
        from django.db import close_old_connections

        from core.http import records_after_response

        # A request's tool-call records are written after its response has been sent, and before
        # its database connections are released: written after, each would take a connection of
        # its own from the pool again.
        request_finished.disconnect(close_old_connections)
        request_finished.connect(records_after_response, dispatch_uid="core.records_after_response")
        request_finished.connect(close_old_connections)
