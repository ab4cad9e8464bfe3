"""The Redis cache backend: read-through caching that fails soft (the ground: imports no app).

A cache is an optimisation, so `get`/`get_many`/`has_key` answer a miss and `set`/`delete`/`touch` do nothing when
Redis fails: the caller recomputes, the request is served. Failures are counted in
`leroy_dependency_errors_total{dependency="cache"}` and logged at most once per 5 s, without a traceback. `add` and
`incr` still raise: their callers (the rate limiter) must know that a count was not kept, and decide.

Django builds a cache object per thread and per async context, so each MCP request (its own context, its own
threads) built a client and a connection pool of its own and opened new Redis connections. Every cache object of
a process shares one client per server list and options: redis-py's pools are thread-safe and reopen after a fork.
That client also keeps one `redis.Redis` per pool, where Django's builds a new one for every command (118 µs each,
three or four per MCP request).
"""

import logging
import math
import threading
import time
from collections.abc import Callable
from functools import cached_property
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.exceptions import RedisError

from leroy import metrics

logger = logging.getLogger(__name__)
_warned_at = -math.inf
_clients: dict[str, RedisCacheClient] = {}
_clients_lock = threading.Lock()


def failed(operation: str, error: Exception) -> None:
    """Count and log (at most once per 5 s, no traceback) a cache operation that failed and was served without."""
    global _warned_at
    metrics.DEPENDENCY_ERRORS.labels("cache").inc()
    if time.monotonic() - _warned_at >= 5:
        _warned_at = time.monotonic()
        logger.warning("cache %s failed (%s: %s); serving without the cache", operation, type(error).__name__, error)


class SharedRedisCacheClient(RedisCacheClient):
    """Django's Redis cache client, with one `redis.Redis` per connection pool instead of one per command."""

    _client: Any  # RedisCacheClient's (django-stubs declares neither it nor the pool getter)
    _get_connection_pool: Callable[[bool], Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._redis: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)
        client = self._redis.get(id(pool))
        if client is None:  # two threads may both build one; either serves (a client holds no state of its own)
            client = self._redis[id(pool)] = self._client(connection_pool=pool)
        return client


class FailSoftRedisCache(RedisCache):
    _servers: list[str]  # parsed by RedisCache.__init__ (django-stubs does not declare them)
    _options: dict[str, Any]

    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = SharedRedisCacheClient

    @cached_property
    def _cache(self) -> RedisCacheClient:
        key = repr((list(self._servers), sorted(self._options.items())))
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = super()._cache  # built the way RedisCache builds it
        return client

    def count(self, key: Any, timeout: int, version: int | None = None) -> int:
        """Add `key` at 0 when absent (expiring in `timeout` s), increment it and return the count, in one round trip
        (`add` then `incr` take three: SET NX, EXISTS, INCR). Raises on a Redis failure, as `incr` does."""
        key = self.make_and_validate_key(key, version=version)
        pipeline = self._cache.get_client(key, write=True).pipeline(transaction=False)
        pipeline.set(key, 0, ex=timeout, nx=True)
        pipeline.incr(key)
        return int(pipeline.execute()[1])

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        try:
            return super().get(key, default, version)
        except RedisError as error:
            failed("get", error)
            return default

    def get_many(self, keys: Any, version: int | None = None) -> dict[Any, Any]:
        try:
            return super().get_many(keys, version)
        except RedisError as error:
            failed("get_many", error)
            return {}

    def has_key(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().has_key(key, version)
        except RedisError as error:
            failed("has_key", error)
            return False

    def set(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        try:
            super().set(key, value, timeout, version)
        except RedisError as error:
            failed("set", error)

    def set_many(self, data: dict[Any, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> list[Any]:
        try:
            return super().set_many(data, timeout, version)
        except RedisError as error:
            failed("set_many", error)
            return list(data)

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        try:
            return super().touch(key, timeout, version)
        except RedisError as error:
            failed("touch", error)
            return False

    def delete(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().delete(key, version)
        except RedisError as error:
            failed("delete", error)
            return False

    def delete_many(self, keys: Any, version: int | None = None) -> None:
        try:
            super().delete_many(keys, version)
        except RedisError as error:
            failed("delete_many", error)
