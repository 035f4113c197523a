"""Write the built-in integrations and the shipped OpenAPI documents into the catalogue, and bring the
capability search index up to date. Safe to run on every deploy (make run does)."""

from typing import Any

from django.core.management.base import BaseCommand

from integrations.services import catalogue_sync


class Command(BaseCommand):
    help = "Write the built-in integrations and shipped OpenAPI documents into the catalogue."

    def handle(self, *args: Any, **options: Any) -> None:
        done = catalogue_sync()
        if options["verbosity"]:
            self.stdout.write(f"Built in: {', '.join(done['builtin'])}. "
                              f"Imported: {', '.join(done['imported']) or 'none'}.")
