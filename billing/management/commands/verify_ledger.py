"""Check that every ledger account's cached balances equal the sums of its transfers; exit 1 on drift."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing.selectors import ledger_drift


class Command(BaseCommand):
    help = "Recompute every ledger account's balances from its transfers; exit non-zero on any drift."

    def handle(self, *args: Any, **options: Any) -> None:
        drift = ledger_drift()
        for row in drift:
            self.stderr.write(json.dumps(row))
        if drift:
            raise CommandError(f"ledger drift in {len(drift)} account(s)")
        self.stdout.write("ledger ok: cached balances equal the transfer sums")
