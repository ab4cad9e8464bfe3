"""Celery: drain the Stripe meter-event outbox (enqueued after each overage charge commits)."""

from celery import shared_task


@shared_task(name="billing.meter_reports_send")
def meter_reports_send() -> int:
    from billing import payments  # payments imports services, which enqueues this task

    client = payments.stripe_client()
    return 0 if client is None else payments.meter_reports_send(client=client)
