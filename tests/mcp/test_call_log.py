"""One JSON line per tool call (never a credential, argument or answer) and the per-tool metrics."""

import json
import logging
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from prometheus_client import REGISTRY

from accounts.models import ApiKey
from billing import services as billing
from tests.mcp.test_transport import modern_call, modern_headers, modern_meta, sse_or_json

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def call_lines() -> Iterator[list[str]]:
    handler = Lines()
    logger = logging.getLogger("leroy.mcp.calls")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


async def call(http, name: str, arguments: dict, **headers: str):
    return await http.post(
        "/api/mcp", json=modern_call(name, arguments), headers={**modern_headers("tools/call", name), **headers}
    )


async def test_a_metered_call_logs_one_json_line_without_secrets(mcp_http, api_key, owner, call_lines):
    await sync_to_async(billing.plans_ensure)()
    key = await ApiKey.objects.aget(user=owner)
    before = REGISTRY.get_sample_value("leroy_mcp_tool_calls_total", {"tool": "probe_metered", "outcome": "ok"}) or 0
    async with mcp_http(api_key) as http:
        response = await call(
            http, "probe_metered", {"side": "both", "client_request_id": "secret-arg"}, **{"X-Request-Id": "req-42"}
        )

    assert sse_or_json(response)["result"]["isError"] is False
    assert response.headers["x-request-id"] == "req-42"
    assert len(call_lines) == 1
    line = json.loads(call_lines[0])
    assert line["latency_ms"] > 0
    assert {k: v for k, v in line.items() if k != "latency_ms"} == {
        "event": "mcp_tool_call",
        "tool": "probe_metered",
        "principal": f"apikey:{key.pk}",
        "user_id": owner.pk,
        "protocol": "2026-07-28",
        "status": 200,
        "outcome": "ok",
        "lookups_charged": 2,
        "request_id": "req-42",
    }
    assert api_key not in call_lines[0]
    assert "secret-arg" not in call_lines[0]
    after = REGISTRY.get_sample_value("leroy_mcp_tool_calls_total", {"tool": "probe_metered", "outcome": "ok"})
    assert after - before == 1


async def test_refusals_and_tool_errors_are_logged_with_their_code(mcp_http, settings, call_lines):
    settings.LEROY_RATE_LIMIT_ANONYMOUS_PER_MINUTE = 1
    async with mcp_http() as http:
        await call(http, "probe_echo", {"text": "fail"}, **{"X-Request-Id": "bad id with spaces"})
        await call(http, "probe_echo", {"text": "x"})
        await call(http, "no_such_tool", {})
        await call(http, "probe_whoami", {})

    lines = [json.loads(line) for line in call_lines]
    assert [(x["tool"], x["status"], x["outcome"], x["principal"]) for x in lines] == [
        ("probe_echo", 200, "probe_failed", "anonymous"),
        ("probe_echo", 429, "rate_limited", "anonymous"),
        ("unknown", 429, "rate_limited", "anonymous"),
        ("probe_whoami", 429, "rate_limited", "anonymous"),
    ]
    assert lines[0]["request_id"] != "bad id with spaces"
    assert len(lines[0]["request_id"]) == 32


async def test_an_invalid_key_is_logged_as_invalid_token_and_other_methods_not_at_all(mcp_http, call_lines):
    async with mcp_http("lr_live_not_a_key") as http:
        await call(http, "probe_whoami", {})
    async with mcp_http() as http:
        listed = await http.post(
            "/api/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}},
            headers=modern_headers("tools/list"),
        )

    assert listed.status_code == 200
    assert [json.loads(line)["outcome"] for line in call_lines] == ["invalid_token"]
    assert "lr_live_not_a_key" not in call_lines[0]


async def test_a_replayed_call_is_logged_as_charging_nothing_though_its_answer_carries_the_first_calls_usage(
    mcp_http, api_key, owner, call_lines
):
    await sync_to_async(billing.plans_ensure)()
    arguments = {"side": "both", "client_request_id": "retry-me"}
    async with mcp_http(api_key) as http:
        first = await call(http, "probe_metered", arguments)
        again = await call(http, "probe_metered", arguments)

    answers = [sse_or_json(response)["result"]["structuredContent"] for response in (first, again)]
    assert answers[0] == answers[1]  # the stored answer, replayed unchanged
    assert answers[1]["usage"]["lookup_cost"] == 2
    assert [json.loads(line)["lookups_charged"] for line in call_lines] == [2, 0]
    usage = await sync_to_async(billing_usage)(owner)
    assert usage["used_lookups"] == 2


def billing_usage(user) -> dict:
    from billing.selectors import lookup_usage

    return lookup_usage(user=user)


async def test_a_call_that_meters_nothing_is_logged_with_no_lookup_count(mcp_http, call_lines):
    async with mcp_http() as http:
        await call(http, "probe_echo", {"text": "x"})

    assert json.loads(call_lines[0])["lookups_charged"] is None
