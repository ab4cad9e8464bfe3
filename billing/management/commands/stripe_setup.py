"""Create the Stripe Billing Meter and the metered overage price (idempotent); prints the ids for settings."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing import payments


class Command(BaseCommand):
    help = "Create the overage Billing Meter, product and $0.01/unit metered price in Stripe (safe to repeat)."

    def handle(self, *args: Any, **options: Any) -> None:
        client = payments.stripe_client()
        if client is None:
            raise CommandError("Set LEROY_STRIPE_SECRET_KEY first (billing is ledger-only without it)")
        ids = payments.stripe_meter_setup(client=client)
        self.stdout.write(f"meter {ids['meter']}, product {ids['product']}, price {ids['price']}")
        self.stdout.write(f"Set LEROY_STRIPE_METERED_PRICE_ID={ids['price']}")
