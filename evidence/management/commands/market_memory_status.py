"""Print the active Market Memory artifact as JSON: {"version", "sha256", "path"}."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from evidence.marketdata import store
from evidence.models import MarketMemoryArtifact


class Command(BaseCommand):
    help = "Print the active Market Memory artifact."

    def handle(self, *args: Any, **options: Any) -> None:
        active = MarketMemoryArtifact.objects.filter(is_active=True).first()
        if active is None:
            raise CommandError("no active Market Memory artifact; run build_market_memory")
        self.stdout.write(
            json.dumps({"version": active.version, "sha256": active.sha256, "path": store.url(active.path)})
        )
