"""Redis down: rate limiting fails open (logged, counted, per-process limits), no request gets a 500."""

import logging
import time
import uuid
from datetime import UTC, datetime

import httpx2
import pytest
import time_machine
from asgiref.sync import async_to_sync
from django.core.cache import cache
from django.test import Client, override_settings
from prometheus_client import REGISTRY
from redis.exceptions import ConnectionError as RedisConnectionError

from leroy import ratelimit
from tests.accounts.conftest import REDIRECT_URI
from tests.mcp.test_transport import modern_call, modern_headers, sse_or_json
from tests.processes import uvicorn_server

FROZEN = datetime(2026, 8, 3, 14, 0, 10, tzinfo=UTC)


def fail_open_count() -> float:
    return REGISTRY.get_sample_value("leroy_rate_limit_fail_open_total") or 0.0


async def call(http, name: str, arguments: dict):
    return await http.post("/api/mcp", json=modern_call(name, arguments), headers=modern_headers("tools/call", name))


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_keyed_tool_call_is_served_with_a_logged_warning_when_redis_is_down(
    redis_down, mcp_http, api_key, caplog
):
    before = fail_open_count()
    with caplog.at_level(logging.WARNING, logger="leroy.ratelimit"):
        async with mcp_http(api_key) as http:
            responses = [await call(http, "probe_whoami", {}) for _ in range(3)]

    assert [r.status_code for r in responses] == [200, 200, 200]
    assert [sse_or_json(r)["result"]["isError"] for r in responses] == [False, False, False]
    assert fail_open_count() - before == 3
    warnings = [r for r in caplog.records if r.name == "leroy.ratelimit"]
    assert len(warnings) == 1  # once per degraded window, not once per call
    assert "failing open" in warnings[0].getMessage()
    assert "ConnectionError" in warnings[0].getMessage()
    assert warnings[0].exc_info is None


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_per_process_fallback_still_limits_anonymous_calls_when_redis_is_down(redis_down, mcp_http):
    with time_machine.travel(FROZEN, tick=False):
        async with mcp_http() as http:
            statuses = [(await call(http, "probe_echo", {"text": "x"})).status_code for _ in range(41)]

    assert statuses == [200] * 40 + [429]


@pytest.mark.django_db
def test_oauth_registration_is_served_and_still_limited_when_redis_is_down(redis_down):
    client = Client()
    before = fail_open_count()
    with time_machine.travel(FROZEN, tick=False):
        statuses = [
            client.post("/oauth/register/", {"redirect_uris": [REDIRECT_URI]}, content_type="application/json")
            for _ in range(11)
        ]

    assert [r.status_code for r in statuses] == [201] * 10 + [429]
    assert statuses[-1]["Retry-After"] == "50"
    assert fail_open_count() - before == 11


def test_limiter_uses_redis_again_once_the_degraded_window_ends(dead_redis_url, monkeypatch):
    from django.conf import settings

    monkeypatch.setattr(ratelimit, "DEGRADED_SECONDS", 0.2)
    dead = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": dead_redis_url}}
    live = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": settings.LEROY_TEST_REDIS_URL,
            "KEY_PREFIX": f"test-{uuid.uuid4().hex}",
        }
    }
    with override_settings(CACHES=dead):
        assert async_to_sync(ratelimit.rate_limit_retry_after)("ip:x", 5) is None
    assert ratelimit.degraded() is True
    with override_settings(CACHES=live):
        before = fail_open_count()
        async_to_sync(ratelimit.rate_limit_retry_after)("ip:x", 5)
        assert fail_open_count() - before == 1  # still inside the window: Redis is not retried
        time.sleep(0.3)
        assert ratelimit.degraded() is False
        async_to_sync(ratelimit.rate_limit_retry_after)("ip:x", 5)
        assert fail_open_count() - before == 1  # Redis answered
        assert cache.get(f"leroy:rl:ip:x:{int(time.time() // 60)}") == 1


def test_read_through_caching_misses_and_skips_writes_when_redis_is_down(redis_down):
    before = REGISTRY.get_sample_value("leroy_dependency_errors_total", {"dependency": "cache"}) or 0

    cache.set("evaluation", {"cached": True}, 60)
    assert cache.get("evaluation", "miss") == "miss"
    assert cache.get_many(["a", "b"]) == {}
    with pytest.raises(RedisConnectionError):
        cache.add("counter", 0)  # counters must know: the rate limiter fails open on this

    after = REGISTRY.get_sample_value("leroy_dependency_errors_total", {"dependency": "cache"})
    assert after - before == 3


@pytest.mark.django_db(transaction=True)
def test_a_real_server_with_redis_down_serves_tool_calls_and_registrations(dead_redis_url):
    from accounts import services as accounts
    from billing import services as billing

    billing.plans_ensure()
    user = accounts.user_create(email="down@example.com", password="correct horse battery staple")
    accounts.mcp_activate(user=user)
    key = accounts.api_key_create(user=user, name="agent").plaintext
    with (
        uvicorn_server(LEROY_TEST_SERVER_REDIS_URL=dead_redis_url) as server,
        httpx2.Client(base_url=server.url, timeout=10) as http,
    ):
        tool = http.post(
            "/api/mcp",
            json=modern_call("probe_metered", {"side": "buy"}),
            headers={**modern_headers("tools/call", "probe_metered"), "Authorization": f"Bearer {key}"},
        )
        registration = http.post("/oauth/register/", json={"redirect_uris": [REDIRECT_URI]})
        ready = http.get("/readyz")
        log = server.output()

    assert tool.status_code == 200
    assert sse_or_json(tool)["result"]["isError"] is False
    assert registration.status_code == 201
    assert ready.json()["checks"]["cache"]["status"] == "degraded"
    assert "failing open" in log
    assert "Traceback" not in log
