"""Reseal every vault secret under the first key in ATRIUM_VAULT_KEYS (docs/vault.md, key rotation)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from integrations.crypto import SealBroken
from integrations.vault import vault_reseal


class Command(BaseCommand):
    help = ("Reseal every sealed secret (connection credentials, PKCE verifiers, OAuth client secrets, webhook "
            "signing secrets, GitHub tokens and device codes, verification codes) under the first key in "
            "ATRIUM_VAULT_KEYS, so the keys after it can be dropped.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=200,
                            help="Rows resealed per transaction (default 200).")

    def handle(self, *args: Any, batch_size: int, **options: Any) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        try:
            counts = vault_reseal(batch_size=batch_size)
        except SealBroken as exc:
            raise CommandError(f"{exc.message} Rows before it are resealed; run again once the key is back.") from None
        for label, count in counts.items():
            self.stdout.write(f"Resealed {count} {label}.")
        self.stdout.write(self.style.SUCCESS("Every sealed secret is now under the first key; the others may go."))
