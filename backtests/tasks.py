"""Celery tasks: ids in, one service call. Acks are late and a lost worker's task is redelivered, which the
services turn into FAILED + voided credits instead of a second run."""

from celery import shared_task

from backtests import services


@shared_task(name="backtests.dry_run")
def dry_run(run_id: str) -> None:
    services.dry_run_execute(run_id=run_id)


@shared_task(name="backtests.backtest_run")
def backtest_run(report_id: str) -> None:
    services.backtest_execute(report_id=report_id)


@shared_task(name="backtests.optimization_point")
def optimization_point(run_id: int) -> None:
    services.optimization_point_execute(run_id=run_id)


@shared_task(name="backtests.stale_jobs_reap")
def stale_jobs_reap() -> int:
    return services.stale_jobs_reap()
