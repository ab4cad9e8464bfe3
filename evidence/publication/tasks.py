"""The daily commitment of answer hashes, run by beat after the close, and the time-stamp retry."""

from celery import shared_task

from evidence.publication import services
from leroy.clock import now


@shared_task(name="evidence.answers_commit")
def answers_commit_task() -> int:
    return len(services.answers_commit_due(through=now().date()))


@shared_task(name="evidence.log_timestamp")
def log_timestamp_task() -> bool:
    """Retry the RFC 3161 token of the latest checkpoint when its stamping failed (no-op without a TSA)."""
    return services.timestamp_due() is not None
