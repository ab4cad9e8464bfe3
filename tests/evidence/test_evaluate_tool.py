import json

import pytest
import time_machine
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from evidence.live import frames
from tests.conftest import MCP_URL
from tests.mcp.test_transport import modern_call, modern_headers, sse_or_json

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_agent_evaluates_a_setup_over_mcp_in_both_eras(world, mcp_http, api_key, mode):
    from asgiref.sync import sync_to_async

    with time_machine.travel(world.replay, tick=False):
        await sync_to_async(frames.replay_tick)()
        await sync_to_async(frames.frames_refresh)()
        async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=mode) as client:
            result = await client.call_tool("evaluate_current_setup", {"symbol": "alfa", "side": "buy"})

    assert result.is_error is False
    content = result.structured_content
    assert content["status"] == "evaluated"
    assert content["request"]["symbol"] == "ALFA"
    assert content["provenance"]["artifact_sha256"] == world.sha256
    assert content["usage"]["lookup_cost"] == 1
    assert content["presentation"]["format"] == "markdown"


async def test_anonymous_evaluation_gets_the_subscription_challenge(mcp_http):
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp",
            json=modern_call("evaluate_current_setup", {"symbol": "ALFA", "side": "buy"}),
            headers=modern_headers("tools/call", "evaluate_current_setup"),
        )

    assert response.status_code == 401
    assert response.json()["result"]["structuredContent"]["error"]["code"] == "subscription_required"


async def test_invalid_arguments_are_refused_in_band_without_a_charge(mcp_http, api_key):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode="2026-07-28") as client:
        bad_horizon = await client.call_tool(
            "evaluate_current_setup", {"symbol": "ALFA", "side": "buy", "holding_horizons": [7]}
        )
        bad_side = await client.call_tool("evaluate_current_setup", {"symbol": "ALFA", "side": "long"})

    assert bad_horizon.is_error is True and bad_side.is_error is True
    from billing.models import UsageEvent

    assert await UsageEvent.objects.aexists() is False


NON_FINITE = [("1e999", "entry_price"), ("-1e999", "stop_price")]


@pytest.mark.parametrize(("literal", "field"), NON_FINITE)
async def test_a_non_finite_price_is_refused_in_band_without_a_charge_or_receipt(
    world, mcp_http, api_key, literal, field
):
    # JSON parsers read 1e999 as infinity and many accept NaN: the refusal is the arguments', before anything runs
    # (an infinite entry price once passed `gt=0` and failed the answer's receipt hash, a bare tool error).
    from asgiref.sync import sync_to_async

    from billing.models import UsageEvent
    from evidence.models import AnswerReceipt

    body = json.dumps(modern_call("evaluate_current_setup", {"symbol": "ALFA", "side": "buy", field: 0.5}))
    body = body.replace(f'"{field}": 0.5', f'"{field}": {literal}')
    with time_machine.travel(world.replay, tick=False):
        await sync_to_async(frames.replay_tick)()
        await sync_to_async(frames.frames_refresh)()
        async with mcp_http(api_key) as http:
            response = await http.post(
                "/api/mcp", content=body, headers=modern_headers("tools/call", "evaluate_current_setup")
            )

    result = sse_or_json(response)["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "invalid_arguments"
    problems = result["structuredContent"]["error"]["problems"]
    assert problems == [{"field": field, "problem": "Input should be a finite number"}]
    assert await UsageEvent.objects.aexists() is False
    assert await AnswerReceipt.objects.aexists() is False


async def test_a_nan_price_is_not_json_and_is_refused_before_anything_runs(world, mcp_http, api_key):
    # 1e999 is JSON (a number too large for a double); NaN is not JSON at all (RFC 8259 §6): the body is refused.
    from billing.models import UsageEvent
    from evidence.models import AnswerReceipt

    body = json.dumps(modern_call("evaluate_current_setup", {"symbol": "ALFA", "side": "buy", "target_price": 0.5}))
    body = body.replace('"target_price": 0.5', '"target_price": NaN')
    async with mcp_http(api_key) as http:
        response = await http.post(
            "/api/mcp", content=body, headers=modern_headers("tools/call", "evaluate_current_setup")
        )

    assert response.status_code == 400
    assert response.json()["error"] == {"code": -32700, "message": "Parse error: the body is not JSON"}
    assert await UsageEvent.objects.aexists() is False
    assert await AnswerReceipt.objects.aexists() is False


async def test_the_throughput_bench_tells_an_evaluation_without_market_memory_by_its_raw_answer(
    world, mcp_http, api_key, monkeypatch
):
    # bench/mcp_throughput.py refuses answers that match UNCONSULTED (no frame: no Market Memory, no charge, a far
    # cheaper path); it reads the raw HTTP text, so the patterns are checked here against real answers.
    import importlib

    from asgiref.sync import sync_to_async

    from tests.processes import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    unconsulted = importlib.import_module("mcp_throughput").UNCONSULTED
    body = modern_call("evaluate_current_setup", {"symbol": "ALFA", "side": "buy"})
    headers = modern_headers("tools/call", "evaluate_current_setup")
    async with mcp_http(api_key) as http:
        without_frame = await http.post("/api/mcp", json=body, headers=headers)
        with time_machine.travel(world.replay, tick=False):
            await sync_to_async(frames.replay_tick)()
            await sync_to_async(frames.frames_refresh)()
            with_frame = await http.post("/api/mcp", json=body, headers=headers)

    assert sse_or_json(without_frame)["result"]["structuredContent"]["market_memory"] is None
    assert any(null in without_frame.text for null in unconsulted)
    assert sse_or_json(with_frame)["result"]["structuredContent"]["market_memory"] is not None
    assert not any(null in with_frame.text for null in unconsulted)
