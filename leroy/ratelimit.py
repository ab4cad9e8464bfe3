"""Fixed-window rate limits in the shared cache; the ground floor: imports no app and nothing of leroy.mcp."""

import math

from django.core.cache import cache

from leroy.clock import now


async def rate_limit_retry_after(identity: str, limit: int) -> int | None:
    """Fixed one-minute windows in the shared cache; seconds to wait when over `limit`, else None."""
    instant = now().timestamp()
    window = math.floor(instant / 60)
    key = f"leroy:rl:{identity}:{window}"
    await cache.aadd(key, 0, timeout=120)
    count = await cache.aincr(key)
    if count > limit:
        return max(1, math.ceil((window + 1) * 60 - instant))
    return None
