"""Send queued overage meter events to Stripe (run every minute; safe to run from several workers)."""

from typing import Any

from django.core.management.base import BaseCommand

from billing import payments


class Command(BaseCommand):
    help = "Send pending Stripe meter events from the outbox."

    def handle(self, *args: Any, **options: Any) -> None:
        client = payments.stripe_client()
        if client is None:
            self.stdout.write("Stripe is not configured (LEROY_STRIPE_SECRET_KEY): ledger-only, nothing to send")
            return
        self.stdout.write(f"sent {payments.meter_reports_send(client=client)} meter event(s)")
