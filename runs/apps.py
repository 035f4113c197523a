from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from runs.costs import models_forget
        from workflows.models import ConfiguredModel

        # A model added, repriced or removed in this process is priced so at once.
        for signal in (post_save, post_delete):
            signal.connect(models_forget, sender=ConfiguredModel, dispatch_uid="runs.models_forget")
