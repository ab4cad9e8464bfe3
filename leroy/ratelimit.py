"""Fixed-window rate limits in the shared cache; the ground floor: imports no app and nothing of leroy.mcp.

When the shared cache fails (Redis down, timing out), limiting fails *open*: the call is served, counted in a
per-process in-memory window with the same limit (so one node still cannot be flooded), a warning is logged at
most once per `DEGRADED_SECONDS` and `leroy_rate_limit_fail_open_total` counts every such decision. For the next
`DEGRADED_SECONDS` the cache is not tried again, so a dead Redis costs one refused connect, not one per call.
"""

import logging
import math
import threading
import time

from asgiref.sync import sync_to_async
from django.core.cache import cache, caches

from leroy import metrics
from leroy.cache import FailSoftRedisCache
from leroy.clock import now

logger = logging.getLogger(__name__)

DEGRADED_SECONDS = 5.0


class _LocalWindows:
    """One process's fixed windows, used only while the shared cache is unreachable."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int], int] = {}

    def incr(self, identity: str, window: int) -> int:
        with self._lock:
            if len(self._counts) > 10_000:  # old windows: keep memory bounded
                self._counts = {k: v for k, v in self._counts.items() if k[1] >= window}
            key = (identity, window)
            self._counts[key] = self._counts.get(key, 0) + 1
            return self._counts[key]


_local = _LocalWindows()
_degraded_until = 0.0  # time.monotonic() until which the shared cache is skipped
_warned_at = -math.inf


def degraded() -> bool:
    """True while rate limits are being kept per process because the shared cache failed."""
    return time.monotonic() < _degraded_until


def _mark_degraded(error: Exception) -> None:
    global _degraded_until, _warned_at
    _degraded_until = time.monotonic() + DEGRADED_SECONDS
    if time.monotonic() - _warned_at >= DEGRADED_SECONDS:
        _warned_at = time.monotonic()
        # The class and message only: a traceback per refused connect would flood the log.
        logger.warning(
            "rate limit cache unavailable (%s: %s); failing open with per-process limits for %.0f s",
            type(error).__name__,
            error,
            DEGRADED_SECONDS,
        )


def degraded_reset() -> None:
    """Forget a past cache failure (tests, and an operator who fixed Redis and does not want to wait 5 s)."""
    global _degraded_until, _warned_at
    _degraded_until, _warned_at = 0.0, -math.inf


def _shared_count(key: str, timeout: int) -> int:
    """Count one call in the window's key, in one hop to a thread (and on Redis one round trip)."""
    backend = caches["default"]
    if isinstance(backend, FailSoftRedisCache):
        return backend.count(key, timeout)
    cache.add(key, 0, timeout=timeout)
    return cache.incr(key)


async def rate_limit_retry_after(identity: str, limit: int, window_seconds: int = 60) -> int | None:
    """Fixed windows (one minute unless told) in the shared cache; seconds to wait when over `limit`, else None."""
    instant = now().timestamp()
    window = math.floor(instant / window_seconds)
    identity = identity if window_seconds == 60 else f"{identity}:per{window_seconds}s"
    count: int | None = None
    if not degraded():
        key = f"leroy:rl:{identity}:{window}"
        try:
            count = await sync_to_async(_shared_count)(key, 2 * window_seconds)
        except Exception as error:  # any cache failure must degrade the limiter, never fail the request
            _mark_degraded(error)
    if count is None:
        metrics.RATE_LIMIT_FAIL_OPEN.inc()
        count = _local.incr(identity, window)
    if count > limit:
        return max(1, math.ceil((window + 1) * window_seconds - instant))
    return None
