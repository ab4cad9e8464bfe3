"""Close every UTC month that has ended: unused credits expire through visible `expire` transfers."""

from typing import Any

from django.core.management.base import BaseCommand

from billing import services


class Command(BaseCommand):
    help = "Expire unused credits of ended months (run shortly after 00:00Z on the 1st; safe to repeat)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"closed {services.periods_close()} period(s)")
