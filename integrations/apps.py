from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    name = "integrations"
    verbose_name = "Integrations and capabilities"
    default_auto_field = "django.db.models.BigAutoField"
