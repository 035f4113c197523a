from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    name = "integrations"
    verbose_name = "Integrations and capabilities"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every executor module registers its executors on import: a process must have them all
        # before it runs its first action, whichever module it happened to import first.
        from integrations import catalogue
        from integrations.executors import openapi  # noqa: F401

        catalogue.builtin_specs()
