from typing import Any

from django.core.management.base import BaseCommand

from backtests.services import stale_jobs_reap


class Command(BaseCommand):
    help = "Fail backtests and grid points left EXECUTING by a worker that vanished, and release their credits."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"reaped {stale_jobs_reap()} stale job(s)")
