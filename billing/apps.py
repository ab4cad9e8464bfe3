from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_plans(sender: AppConfig, **kwargs: Any) -> None:
    from billing.services import plans_ensure

    plans_ensure()


class BillingConfig(AppConfig):
    name = "billing"

    def ready(self) -> None:
        # After migrate and after every test flush, so an installation always has its built-in plans.
        post_migrate.connect(_ensure_plans, sender=self)
