import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.conf import settings
from django.test import override_settings

from tests.mcp.test_transport import modern_call, modern_headers

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

FROZEN = datetime(2026, 8, 3, 14, 0, 10, tzinfo=UTC)


async def call(http, name: str, arguments: dict) -> int:
    response = await http.post(
        "/api/mcp", json=modern_call(name, arguments), headers=modern_headers("tools/call", name)
    )
    return response.status_code


async def test_121st_keyed_call_in_a_minute_gets_429_with_retry_after(mcp_http, api_key):
    with time_machine.travel(FROZEN, tick=False):
        async with mcp_http(api_key) as http:
            statuses = [await call(http, "probe_whoami", {}) for _ in range(120)]
            response = await http.post(
                "/api/mcp", json=modern_call("probe_whoami", {}), headers=modern_headers("tools/call", "probe_whoami")
            )

    assert statuses == [200] * 120
    assert response.status_code == 429
    assert response.headers["retry-after"] == "50"
    assert response.json()["error"]["data"] == {
        "code": "rate_limited",
        "limit_per_minute": 120,
        "retry_after_seconds": 50,
    }


async def test_41st_anonymous_call_in_a_minute_gets_429(mcp_http):
    with time_machine.travel(FROZEN, tick=False):
        async with mcp_http() as http:
            statuses = [await call(http, "probe_echo", {"text": "x"}) for _ in range(41)]

    assert statuses == [200] * 40 + [429]


async def test_next_minute_opens_a_new_window(mcp_http):
    async with mcp_http() as http:
        with time_machine.travel(FROZEN, tick=False):
            for _ in range(40):
                await call(http, "probe_echo", {"text": "x"})
            assert await call(http, "probe_echo", {"text": "x"}) == 429
        with time_machine.travel(FROZEN + timedelta(seconds=50), tick=False):
            assert await call(http, "probe_echo", {"text": "x"}) == 200


async def test_each_key_has_its_own_budget(mcp_http, api_key, write_key):
    with time_machine.travel(FROZEN, tick=False):
        async with mcp_http(api_key) as first, mcp_http(write_key) as second:
            for _ in range(120):
                await call(first, "probe_whoami", {})
            assert await call(first, "probe_whoami", {}) == 429
            assert await call(second, "probe_whoami", {}) == 200


@pytest.mark.skipif(not settings.LEROY_TEST_REDIS_URL, reason="Redis does not answer on 127.0.0.1:6379")
async def test_limit_is_shared_across_web_nodes_through_redis(mcp_http):
    from leroy.asgi import LeroyASGI

    redis_cache = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": settings.LEROY_TEST_REDIS_URL,
            "KEY_PREFIX": f"test-{uuid.uuid4().hex}",  # a fresh namespace: other runs may share this database
        }
    }
    with override_settings(CACHES=redis_cache), time_machine.travel(FROZEN, tick=False):
        other_node = LeroyASGI()
        async with mcp_http() as node_a:
            for _ in range(40):
                assert await call(node_a, "probe_echo", {"text": "x"}) == 200
        import httpx2

        async with (
            other_node.session_manager.run(),
            httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=other_node, client=("203.0.113.7", 50001)),
                base_url="http://127.0.0.1",
            ) as node_b,
        ):
            assert await call(node_b, "probe_echo", {"text": "x"}) == 429


LEGACY = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
DOCS_READ = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "resources/read",
    "params": {"uri": "leroy://docs/strategy-authoring"},
}
PROMPT = {"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
          "params": {"name": "author_and_dry_run_strategy", "arguments": {"idea": "buy dips"}}}  # fmt: skip


@pytest.mark.parametrize("message", [DOCS_READ, PROMPT], ids=["resources/read", "prompts/get"])
async def test_resource_reads_and_prompts_count_against_the_callers_limit_as_tool_calls_do(mcp_http, api_key, message):
    with time_machine.travel(FROZEN, tick=False):
        async with mcp_http(api_key) as http:
            statuses = [await call(http, "probe_whoami", {}) for _ in range(60)]
            statuses += [(await http.post("/api/mcp", json=message, headers=LEGACY)).status_code for _ in range(60)]
            refused = await http.post("/api/mcp", json=message, headers=LEGACY)
            tool_after = await call(http, "probe_whoami", {})

    assert statuses == [200] * 120
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "50"
    assert refused.json()["error"]["message"] == "Rate limit of 120 calls per minute exceeded"
    assert refused.json()["error"]["data"] == {
        "code": "rate_limited",
        "limit_per_minute": 120,
        "retry_after_seconds": 50,
    }
    assert tool_after == 429
