"""Reads of the alerts app; every one is scoped to the calling account."""

from django.db.models import QuerySet

from accounts.models import User
from alerts.models import AlertRule, Delivery

MAX_DELIVERIES = 50


def rule_list(*, user: User) -> QuerySet[AlertRule]:
    return AlertRule.objects.filter(user=user).order_by("-created_at", "-pk")


def rule_get(*, user: User, alert_id: str) -> AlertRule | None:
    return AlertRule.objects.filter(user=user, public_id=alert_id).first()


def last_delivery(*, rule: AlertRule) -> Delivery | None:
    return Delivery.objects.filter(rule=rule).order_by("-created_at", "-pk").first()


def delivery_list(*, user: User, alert_id: str | None = None, limit: int = 20) -> list[Delivery]:
    """The account's most recent deliveries (newest first), with their attempts prefetched."""
    rows = Delivery.objects.filter(rule__user=user).select_related("rule").prefetch_related("attempts")
    if alert_id is not None:
        rows = rows.filter(rule__public_id=alert_id)
    return list(rows.order_by("-created_at", "-pk")[: min(limit, MAX_DELIVERIES)])
