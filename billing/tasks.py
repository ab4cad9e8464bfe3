"""Celery: drain the Stripe meter-event outbox (enqueued after each overage charge commits), subscribe accounts on
billed plans, close periods, verify the ledger."""

import logging

from celery import shared_task

from billing import selectors, services

logger = logging.getLogger(__name__)


@shared_task(name="billing.meter_reports_send")
def meter_reports_send() -> int:
    from billing import payments  # payments imports services, which enqueues this task

    client = payments.stripe_client()
    return 0 if client is None else payments.meter_reports_send(client=client)


@shared_task(name="billing.subscriptions_sync")
def subscriptions_sync() -> int:
    """Every 10 minutes: the Stripe subscription of each account on a billed plan that has none."""
    from billing import payments

    client = payments.stripe_client()
    return 0 if client is None else payments.subscriptions_sync(client=client)


@shared_task(name="billing.periods_close")
def periods_close() -> int:
    """Hourly (repeat-safe): expire unused credits of months that have ended."""
    return services.periods_close()


@shared_task(name="billing.ledger_verify")
def ledger_verify() -> int:
    """Nightly: cached balances must equal the sums of their transfers; drift is logged as an error."""
    drift = selectors.ledger_drift()
    if drift:
        logger.error("ledger drift in %d account(s): %s", len(drift), drift[:20])
    return len(drift)


@shared_task(name="billing.stripe_subscription_sync", autoretry_for=(Exception,), retry_backoff=30, max_retries=5)
def stripe_subscription_sync(user_id: int, plan_id: int) -> None:
    """Create the Stripe customer and subscription of an account moved to a billed plan (idempotent on Stripe)."""
    from accounts.models import User
    from billing import payments
    from billing.models import Plan

    client, user = payments.stripe_client(), User.objects.get(pk=user_id)
    if client is not None and user.is_active:  # a suspended or closed account is never subscribed
        payments.stripe_subscription_create(user=user, plan=Plan.objects.get(pk=plan_id), client=client)
