"""Celery tasks for the Market Memory build: ids in, one service call out."""

from celery import shared_task
from django.conf import settings

from evidence.live import frames
from evidence.memory import artifact, services
from evidence.memory import build as memory
from evidence.models import MarketMemoryBuild


@shared_task(acks_late=True, max_retries=2, default_retry_delay=30)
def market_memory_symbol_task(build_id: int, ticker: str) -> None:
    build = MarketMemoryBuild.objects.get(pk=build_id)
    if build.status != "running":
        return
    # Partials are stored whole (never visible half-written), so a retried task simply rewrites them.
    memory.build_symbol_partial(artifact.BuildPlan(**build.params), ticker, services.market_memory_build_dir(build_id))
    services.market_memory_partial_done(build_id=build_id)


@shared_task(acks_late=True)
def market_memory_reduce_task(build_id: int) -> None:
    services.market_memory_reduce(build_id=build_id)


@shared_task(ignore_result=True)
def frames_tick_task() -> None:
    """One tick of the frame feed: replay the next minutes in the demo, then recompute the current frames."""
    if settings.LEROY_FRAME_FEED == "replay":
        frames.replay_tick()
    elif settings.LEROY_MARKET_DATA_TOKEN:
        frames.provider_tick()
    frames.frames_refresh()


@shared_task(ignore_result=True)
def frames_compact_task() -> None:
    """Hourly: move closed sessions' provider bars into the verified store."""
    frames.live_bars_compact()


@shared_task(ignore_result=True)
def market_memory_verify_task() -> None:
    """Scheduled: re-hash the active artifact; a mismatch withdraws it from every process."""
    services.market_memory_verify_active()


from evidence.eod import tasks as _eod_tasks  # noqa: E402, F401
from evidence.publication import tasks as _publication_tasks  # noqa: E402, F401
