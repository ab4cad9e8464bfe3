"""The one refusal type of Leroy's domain, shared by every app."""

import logging
from typing import Any

from django.db import DatabaseError

from leroy import metrics

logger = logging.getLogger(__name__)
DATABASE_RETRY_AFTER = 2  # seconds: a pool timeout or a restarting server is usually over by then
QUEUE_RETRY_AFTER = 5  # seconds: a broker restarting, or a disk being freed


class DomainError(Exception):
    """A rule refused the request and nothing changed: no charge, no partial row.

    `code` is machine-readable. MCP tools return it in band (`isError` with `error.code`, see leroy.mcp.server);
    the REST mirror returns the same object as JSON.
    """

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def payload(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


def database_unavailable(error: DatabaseError, where: str) -> DomainError:
    """The retryable refusal for a database that failed under a request (pool timeout, server gone, disk full),
    counted and logged without a traceback: an outage is the operator's to see in the metrics, not a bug."""
    metrics.DEPENDENCY_ERRORS.labels("database").inc()
    logger.warning("%s refused: database unavailable (%s: %s)", where, type(error).__name__, error)
    message = "The database is temporarily unavailable; retry shortly."
    return DomainError("database_unavailable", message, retry_after_seconds=DATABASE_RETRY_AFTER)


def queue_unavailable(what: str, **details: Any) -> DomainError:
    """The retryable refusal for a job the broker did not take (leroy.broker.sent): the job was failed, so nothing
    waits on it and its reserved credits were returned."""
    message = (
        f"The job queue did not take the {what}: it was stopped and the credits it held were returned; retry shortly."
    )
    return DomainError("queue_unavailable", message, retry_after_seconds=QUEUE_RETRY_AFTER, **details)
