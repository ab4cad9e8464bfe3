"""Build the Market Memory artifact from the bar store and activate it; prints progress, then the artifact JSON."""

import json
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evidence.memory.build import BuildError
from evidence.memory.services import market_memory_build_run, market_memory_build_start


class Command(BaseCommand):
    help = "Build Market Memory (features, states, labels, tiers) into an immutable artifact and activate it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--through", type=date.fromisoformat, help="last session to include (default: latest completed)"
        )
        parser.add_argument("--celery", action="store_true", help="queue the per-symbol Celery tasks instead")
        parser.add_argument("--no-activate", action="store_true")
        parser.add_argument("--force", action="store_true", help="rebuild even if this plan and code were built")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["celery"]:
                build = market_memory_build_start(through=options["through"])
                self.stdout.write(
                    json.dumps({"build_id": build.pk, "symbols": build.partials_total, "status": "queued"})
                )
                return
            artifact = market_memory_build_run(
                through=options["through"],
                activate=not options["no_activate"],
                force=options["force"],
                progress=self._progress,
            )
        except BuildError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            json.dumps(
                {
                    "version": artifact.version,
                    "sha256": artifact.sha256,
                    "path": artifact.path,
                    "active": artifact.is_active,
                }
            )
        )

    def _progress(self, step: dict[str, Any]) -> None:
        if "reduce" in step:
            self.stderr.write(f"[reduce] {step['reduce']}, {step['elapsed_s']} s elapsed")
            return
        self.stderr.write(
            f"[{step['symbols_done']}/{step['symbols_total']}] {step['symbol']}: {step['rows']:,} rows, "
            f"{step['elapsed_s']} s elapsed, ETA {step['eta_s']} s"
        )
