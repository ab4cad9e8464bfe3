"""Verify the active Market Memory artifact and print it as JSON: {"version", "sha256", "path"}.

Every file is re-hashed against the manifest; on a mismatch the artifact is withdrawn and the command exits non-zero.
"""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from evidence.marketdata import store
from evidence.memory.services import market_memory_refusal, market_memory_verify_active
from evidence.models import MarketMemoryArtifact


class Command(BaseCommand):
    help = "Verify and print the active Market Memory artifact (non-zero exit when it fails verification)."

    def handle(self, *args: Any, **options: Any) -> None:
        refusal = market_memory_verify_active()
        if refusal is not None:
            raise CommandError(f"Market Memory {refusal['artifact_version']} failed verification: {refusal['reason']}")
        active = MarketMemoryArtifact.objects.filter(is_active=True).first()
        if active is None:
            last = market_memory_refusal()
            hint = (
                f" ({last['artifact_version']} failed verification and was withdrawn: {last['reason']})" if last else ""
            )
            raise CommandError(f"no active Market Memory artifact; run build_market_memory{hint}")
        self.stdout.write(
            json.dumps({"version": active.version, "sha256": active.sha256, "path": store.url(active.path)})
        )
