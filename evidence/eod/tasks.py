"""The end-of-day run, scheduled by beat after the close on weekdays; it runs only for a closed XNYS session."""

import logging

from celery import shared_task

from evidence.eod.services import EodError, eod_run, latest_closed_session
from evidence.models import EodSnapshot
from leroy.clock import now

logger = logging.getLogger(__name__)


@shared_task(name="evidence.eod_run")
def eod_run_task() -> int | None:
    """The publication id of the latest closed session's snapshot; None when it cannot be published yet (a
    holiday repeats the last session, which is already published; unverified bars are retried by the next run)."""
    session = latest_closed_session(now())
    if session is None or EodSnapshot.objects.filter(session=session).exists():
        return None
    try:
        return eod_run(session=session).log_index
    except EodError as error:
        logger.warning("end-of-day run for %s refused: %s %s", session, error.code, error.message)
        return None
