"""Celery tasks: ids in, one service call. Acks are late and a lost worker's task is redelivered, which the
services turn into FAILED + voided credits instead of a second run."""

import uuid

from celery import Task, current_app, shared_task
from celery.signals import worker_process_init

from backtests import sandbox, services, statistics

SANDBOX_QUEUES = frozenset({"backtests", "optimizations", "dryruns"})


@worker_process_init.connect
def _warm_sandbox(**_: object) -> None:
    """Start this pool process's sandbox template now, so it imports backtrader while the process waits for its
    first task, and import what statistics computes with (empyrical and pandas: 0.8 s, which a pool process's
    first result paid); a worker taking no sandbox queue does neither."""
    consumed = set(current_app.amqp.queues.consume_from or {})
    if not consumed or consumed & SANDBOX_QUEUES:
        sandbox.warm()
        statistics.warm()


@shared_task(name="backtests.dry_run")
def dry_run(run_id: str) -> None:
    services.dry_run_execute(run_id=run_id)


@shared_task(name="backtests.backtest_run")
def backtest_run(report_id: str) -> None:
    services.backtest_execute(report_id=report_id)


@shared_task(name="backtests.optimization_point", bind=True)
def optimization_point(self: Task, run_id: int) -> None:
    """One point (messages queued before points were chunked)."""
    services.optimization_point_execute(run_id=run_id, claim=_claim(self))


@shared_task(name="backtests.optimization_points", bind=True)
def optimization_points(self: Task, run_ids: list[int]) -> None:
    services.optimization_points_execute(run_ids=run_ids, claim=_claim(self))


def _claim(task: Task) -> str:
    """What a task's claims on grid points are recorded as: its id, which a redelivery keeps."""
    return task.request.id or uuid.uuid4().hex


@shared_task(name="backtests.optimization_probe_cut")
def optimization_probe_cut(cut_id: int) -> None:
    services.optimization_probe_cut_execute(cut_id=cut_id)


@shared_task(name="backtests.stale_jobs_reap")
def stale_jobs_reap() -> int:
    return services.stale_jobs_reap()
