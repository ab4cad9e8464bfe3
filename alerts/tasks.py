"""Celery tasks of the alerts app: ids in, one service call out.

Beat runs `alerts.frames_evaluate` right behind the frame feed (leroy.settings CELERY_BEAT_SCHEDULE) and
`alerts.deliveries_sweep`, which re-enqueues due deliveries whose message was lost or whose worker died. A send is
idempotent on the delivery id: a duplicate or early message finds the delivery delivered, leased or not yet due.
"""

from celery import shared_task

from alerts import services


@shared_task(name="alerts.frames_evaluate", ignore_result=True)
def frames_evaluate() -> int:
    return services.frames_evaluate()


@shared_task(name="alerts.delivery_send", ignore_result=True)
def delivery_send(delivery_id: int) -> None:
    services.delivery_attempt(delivery_id=delivery_id)


@shared_task(name="alerts.deliveries_sweep", ignore_result=True)
def deliveries_sweep() -> int:
    return services.deliveries_sweep()
