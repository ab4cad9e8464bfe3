"""The Redis cache backend shares one client, and so one connection pool, per process."""

import threading
import uuid

import pytest
import redis
from django.conf import settings

from leroy import cache as leroy_cache
from leroy.cache import FailSoftRedisCache

pytestmark = pytest.mark.skipif(not settings.LEROY_TEST_REDIS_URL, reason="Redis does not answer on 127.0.0.1:6379")


def connections_received() -> int:
    return redis.Redis.from_url(settings.LEROY_TEST_REDIS_URL).info("stats")["total_connections_received"]


def test_cache_objects_built_per_thread_reuse_one_redis_connection(monkeypatch):
    monkeypatch.setattr(leroy_cache, "_clients", {})
    params = {"KEY_PREFIX": f"test-{uuid.uuid4().hex}", "OPTIONS": {"socket_timeout": 1.0}}
    seen = []

    def request() -> None:  # Django builds a cache object per thread and per async context: per request
        backend = FailSoftRedisCache(settings.LEROY_TEST_REDIS_URL, params)
        backend.set("k", 1)
        seen.append(backend.get("k"))

    before = connections_received()
    for _ in range(5):
        thread = threading.Thread(target=request)
        thread.start()
        thread.join()

    assert seen == [1, 1, 1, 1, 1]
    assert connections_received() - before == 2  # the cache's one connection, and this test's own INFO client


def test_different_servers_or_options_get_their_own_client(monkeypatch):
    monkeypatch.setattr(leroy_cache, "_clients", {})
    url = settings.LEROY_TEST_REDIS_URL
    first = FailSoftRedisCache(url, {"OPTIONS": {"socket_timeout": 1.0}})
    second = FailSoftRedisCache(url, {"OPTIONS": {"socket_timeout": 1.0}})
    other_options = FailSoftRedisCache(url, {"OPTIONS": {"socket_timeout": 2.0}})
    other_server = FailSoftRedisCache("redis://127.0.0.1:1/0", {"OPTIONS": {"socket_timeout": 1.0}})

    assert first._cache is second._cache
    assert len({id(c._cache) for c in (first, other_options, other_server)}) == 3


def test_a_server_list_and_the_same_servers_as_a_string_share_a_client(monkeypatch):
    monkeypatch.setattr(leroy_cache, "_clients", {})
    url, other = settings.LEROY_TEST_REDIS_URL, "redis://127.0.0.1:1/0"
    as_string = FailSoftRedisCache(f"{url};{other}", {})
    as_list = FailSoftRedisCache([url, other], {})

    assert as_string._cache is as_list._cache
    assert as_list._cache._servers == [url, other]


def test_every_command_of_a_cache_client_reuses_one_redis_object_per_pool(monkeypatch):
    monkeypatch.setattr(leroy_cache, "_clients", {})
    backend = FailSoftRedisCache(settings.LEROY_TEST_REDIS_URL, {"KEY_PREFIX": f"test-{uuid.uuid4().hex}"})
    built = []
    original = redis.Redis.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting)
    backend.set("k", 1)
    backend.add("n", 0)
    backend.incr("n")

    assert (backend.get("k"), backend.get("n")) == (1, 1)
    assert len(built) == 1
    assert backend._cache.get_client() is backend._cache.get_client(write=True) is built[0]


def test_count_adds_the_key_with_its_expiry_and_counts_in_one_round_trip(monkeypatch):
    monkeypatch.setattr(leroy_cache, "_clients", {})
    backend = FailSoftRedisCache(settings.LEROY_TEST_REDIS_URL, {"KEY_PREFIX": f"test-{uuid.uuid4().hex}"})
    backend.get("warm")  # the connection is open before the counted calls
    sent = []
    original = redis.client.Pipeline.execute

    def counting(self, *args, **kwargs):
        sent.append(len(self.command_stack))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counting)

    assert [backend.count("w", 120) for _ in range(3)] == [1, 2, 3]
    assert sent == [2, 2, 2]  # SET NX EX and INCR, sent together
    assert backend.get("w") == 3
    raw = redis.Redis.from_url(settings.LEROY_TEST_REDIS_URL)
    assert 118 <= raw.ttl(backend.make_key("w")) <= 120  # the first call's expiry, not reset by the later ones
