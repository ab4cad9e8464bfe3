"""One test per evaluation status, each over MCP: evaluated, no_comparable_sample, unavailable, stale_frame, closed."""

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from asgiref.sync import sync_to_async
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from billing.models import UsageEvent
from evidence.live import frames
from evidence.memory.selectors import memory_reader
from tests.conftest import MCP_URL

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


async def evaluate(mcp_http: Any, api_key: str, **arguments: Any) -> dict[str, Any]:
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode="2026-07-28") as client:
        result = await client.call_tool("evaluate_current_setup", arguments)
    assert result.is_error is False
    return result.structured_content  # type: ignore[return-value]


async def feed(world: Any) -> None:
    await sync_to_async(frames.replay_tick)()
    await sync_to_async(frames.frames_refresh)()


async def test_evaluated_rows_name_their_tier_and_their_own_counts(world, mcp_http, api_key):
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
        content = await evaluate(mcp_http, api_key, symbol="ALFA", side="buy")

    assert content["status"] == "evaluated"
    matches = {(m["side"], m["horizon_minutes"], m["source"]): m for m in content["market_memory"]["matches"]}
    for row in content["historical_evidence"]:
        if row["availability"] != "available":
            continue
        strength = row["match_strength"]
        assert strength["score"] >= 2  # the baseline is never the evidence
        match = matches[(row["side"], row["horizon_minutes"], "historical")]
        assert match["match_strength"] == strength
        assert (row["sample_size"], row["distinct_sessions"]) == (match["sample_size"], match["distinct_sessions"])
        assert row["distinct_sessions"] >= content["market_memory"]["lineage"]["min_sample_sessions"]
        assert (
            f"| {strength['tier']} (score {strength['score']}) | {row['sample_size']} |"
            in (content["presentation"]["text"])
        )
    assert {b["match_strength"]["score"] for b in content["market_memory"]["baseline"]} == {1}
    assert "evidence from" in content["assumptions"]["matching"]
    assert "no silent broadening" not in content["assumptions"]["matching"]


async def test_no_tier_with_the_minimum_is_no_comparable_sample_with_null_rows(world, mcp_http, api_key):
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
        reader = await sync_to_async(memory_reader)()
        # The world's own data with a minimum no key reaches: every stronger tier is passed over with its count.
        reader.min_sessions = 10_000
        try:
            content = await evaluate(mcp_http, api_key, symbol="ALFA", side="buy", holding_horizons=[15])
        finally:
            reader.min_sessions = reader.manifest["min_sessions"]

    assert content["status"] == "no_comparable_sample"
    assert content["provenance"]["evidence_status"] == "not_matched"
    assert content["historical_evidence"] == [
        {
            "side": "buy", "horizon_minutes": 15, "availability": "not_available",
            "reason": "No validated comparable sample was available for this setup.", "match_strength": None,
            "sample_size": None, "distinct_sessions": None, "distinct_symbols": None, "average_return_pct": None,
            "win_rate": None, "profit_factor": None, "lift_vs_baseline_bps": None,
        }
    ]  # fmt: skip
    assert content["market_memory"]["matches"] == []
    assert content["market_memory"]["baseline"] == []  # below the minimum too: not shown even as the reference
    assert content["presentation"]["text"] == (
        "## **ALFA** · Buy\n\n🟢 **Market Open**\n\nNo exact historical setup is available for the requested "
        "timeframes. Leroy did not substitute a broader baseline.\n\nData source: synthetic. Every figure here comes "
        "from generated demo data, not market history.\n\nHistorical observations are descriptive, not investment "
        "advice."
    )
    matching = content["assumptions"]["matching"]
    assert "no tier of 2 or more had the minimum sample" in matching
    assert "contextual_analogue (tier 2) had " in matching and "below the minimum of 10000" in matching


async def test_unknown_ticker_is_unavailable_and_free(world, mcp_http, api_key):
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
        content = await evaluate(mcp_http, api_key, symbol="NOPE", side="buy")

    assert content["status"] == "unavailable"
    assert content["market_memory"] is None
    assert content["usage"]["lookup_cost"] == 0
    assert await UsageEvent.objects.aexists() is False


async def test_a_stale_frame_keeps_its_tiered_history(world, mcp_http, api_key):
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
    with time_machine.travel(world.replay + timedelta(minutes=10), tick=False):
        content = await evaluate(mcp_http, api_key, symbol="ALFA", side="buy")

    assert content["status"] == "stale_frame"
    assert content["current_market_frame"]["frame_status"] == "stale"
    available = [row for row in content["historical_evidence"] if row["availability"] == "available"]
    assert available and all(row["match_strength"]["score"] >= 2 for row in available)


async def test_market_closed_is_plain_text_and_free(world, mcp_http, api_key):
    with time_machine.travel(world.replay.replace(hour=22, minute=0), tick=False):
        content = await evaluate(mcp_http, api_key, symbol="ALFA", side="buy")

    assert content["status"] == "unavailable"
    assert content["current_market_frame"]["frame_status"] == "market_closed"
    assert (content["presentation"]["format"], content["presentation"]["state"]) == ("plain_text", "market_closed")
    assert await UsageEvent.objects.aexists() is False


def served_lines(content: dict[str, Any], symbol: str, pool: str) -> list[str]:
    """The matching assumption each available row must carry, spelled from the row's own served figures."""
    lines = []
    for row in content["historical_evidence"]:
        if row["availability"] != "available":
            continue
        strength = row["match_strength"]
        whose = f"of {symbol} alone" if strength["score"] == 5 else pool.format(n=row["distinct_symbols"])
        lines.append(
            f"{row['side'].title()} {row['horizon_minutes']} min: evidence from {strength['tier']} "
            f"(tier {strength['score']}): {row['sample_size']} rows on {row['distinct_sessions']} distinct sessions "
            f"{whose}"
        )
    return lines


async def test_assumptions_name_the_asset_class_an_equity_request_pooled(world, mcp_http, api_key):
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
        content = await evaluate(mcp_http, api_key, symbol="ALFA", side="both")

    assert content["status"] == "evaluated"
    rows = [row for row in content["historical_evidence"] if row["availability"] == "available"]
    pooled = [row for row in rows if row["match_strength"]["score"] < 5]
    assert pooled  # the world's frame has horizons answered by a cross-ticker tier
    assert {row["distinct_symbols"] for row in pooled} == {2}  # ALFA and BRVO, the world's two equities
    matching = content["assumptions"]["matching"]
    lines = served_lines(content, "ALFA", "pooled across {n} US equities (asset class: equity)")
    assert len(lines) == len(rows)
    for line in lines:
        assert line in matching
    assert "pooled across 2 US equities (asset class: equity)" in matching


async def test_an_index_request_never_pools_equities(world, mcp_http, api_key):
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
        content = await evaluate(mcp_http, api_key, symbol="SYNX", side="both")

    assert content["status"] == "evaluated"
    memory = content["market_memory"]
    counted = [row for row in content["historical_evidence"] if row["availability"] == "available"]
    counted += memory["matches"] + memory["baseline"]
    assert counted and {row["distinct_symbols"] for row in counted} == {1}  # SYNX alone: no equity was pooled
    matching = content["assumptions"]["matching"]
    for line in served_lines(content, "SYNX", "pooled across 1 index (asset class: index)"):
        assert line in matching
    assert "equit" not in matching
