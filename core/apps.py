from django.apps import AppConfig


class CoreConfig(AppConfig):
    """What every app uses: the caller, domain errors, input bounds, the tool registry and the MCP
    protocol layer with its HTTP and stdio transports. No models."""

    name = "core"
    verbose_name = "Core"
