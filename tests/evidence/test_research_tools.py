import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.db import OperationalError
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client import REGISTRY

from billing.models import Transfer, UsageEvent
from evidence import tools as evidence_tools
from evidence.live import frames
from evidence.memory import strategies
from evidence.models import AnswerReceipt, ResearchHypothesis
from tests.conftest import MCP_URL
from tests.mcp.test_transport import modern_call, modern_headers, sse_or_json

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

SETUP = {"symbol": "alfa", "side": "buy", "horizon_minutes": 15}
# tool -> (arguments, lookups it costs on the fed world)
CALLS = {
    "get_current_confluence_leaders": ({"side": "buy", "limit": 5}, 1),
    "search_market_memory": ({"side": "buy", "horizon_minutes": 15, "signals": ["vwap_trend"]}, 1),
    "compare_historical_analogues": (SETUP, 1),
    "get_market_regime": ({}, 0),
    "explain_setup_failure": (SETUP, 1),
    "compare_against_benchmark": (SETUP, 1),
    "simulate_exit_policy": ({**SETUP, "stop_bps": 25, "target_bps": 50}, 1),
    "estimate_execution_conditions": ({"symbol": "ALFA"}, 0),
    "get_data_lineage": ({}, 0),
    "record_research_hypothesis": ({"symbol": "ALFA", "side": "buy", "horizon_minutes": 5, "note": "test"}, 0),
}
SUBSCRIBER_TOOLS = [name for name in CALLS if name != "get_data_lineage"] + ["review_hypothesis_outcome"]


async def feed(world) -> None:
    await sync_to_async(frames.replay_tick)()
    await sync_to_async(frames.frames_refresh)()


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_every_research_tool_answers_over_mcp_in_both_eras(world, mcp_http, write_key, mode):
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
        async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(write_key)), mode=mode) as client:
            results = {name: await client.call_tool(name, arguments) for name, (arguments, _) in CALLS.items()}
            hypothesis_id = results["record_research_hypothesis"].structured_content["hypothesis_id"]
            review = await client.call_tool("review_hypothesis_outcome", {"hypothesis_id": hypothesis_id})

    for name, (_, cost) in CALLS.items():
        assert results[name].is_error is False, name
        content = results[name].structured_content
        if "usage" in content:
            assert content["usage"]["lookup_cost"] == cost, name
        if name not in ("record_research_hypothesis",):
            sha = content.get("artifact_sha256") or content["provenance"]["artifact_sha256"]
            assert sha == world.sha256, name
    assert results["compare_historical_analogues"].structured_content["status"] == "matched"
    assert results["estimate_execution_conditions"].structured_content["spread"]["status"] == "not_available"
    assert review.is_error is False
    assert review.structured_content["outcome_status"] == "not_mature"
    assert await UsageEvent.objects.acount() == sum(cost for _, cost in CALLS.values()) == 6


@pytest.mark.parametrize("name", SUBSCRIBER_TOOLS)
async def test_anonymous_calls_of_subscriber_research_tools_get_the_challenge(mcp_http, name):
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp", json=modern_call(name, CALLS.get(name, ({"hypothesis_id": 1}, 0))[0]),
            headers=modern_headers("tools/call", name),
        )  # fmt: skip

    assert response.status_code == 401
    error = response.json()["result"]["structuredContent"]["error"]
    assert error["code"] == "subscription_required"
    assert "get_data_lineage" in error["free_alternatives"]


async def test_anonymous_caller_reads_the_data_lineage(world, mcp_http):
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp",
            json=modern_call("get_data_lineage", {}),
            headers=modern_headers("tools/call", "get_data_lineage"),
        )

    assert response.status_code == 200
    assert sse_or_json(response)["result"]["structuredContent"]["artifact_sha256"] == world.sha256


async def test_the_journal_needs_the_write_scope(world, mcp_http, api_key):
    name = "record_research_hypothesis"
    async with mcp_http(api_key) as http:
        response = await http.post(
            "/api/mcp", json=modern_call(name, CALLS[name][0]), headers=modern_headers("tools/call", name)
        )

    assert response.status_code == 403
    assert "insufficient_scope" in response.headers["www-authenticate"]
    assert await ResearchHypothesis.objects.aexists() is False


async def test_review_of_another_accounts_hypothesis_is_not_found(world, mcp_http, write_key, outsider):
    theirs = await ResearchHypothesis.objects.acreate(
        user=outsider, number=1, symbol="ALFA", side="buy", horizon_minutes=5, note="theirs", recorded_at=world.replay
    )
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(write_key)), mode="2026-07-28") as client:
        result = await client.call_tool("review_hypothesis_outcome", {"hypothesis_id": theirs.number})

    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "not_found"
    assert (await ResearchHypothesis.objects.aget(pk=theirs.pk)).reviewed_at is None


async def search_with_min_sessions(world, mcp_http, key, sessions: int) -> dict:
    """`search_market_memory`'s raw result on the fed world for a minimum of `sessions` distinct sessions."""
    arguments = {"side": "buy", "horizon_minutes": 15, "min_sample_sessions": sessions}
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
        async with mcp_http(key) as http:
            response = await http.post(
                "/api/mcp",
                json=modern_call("search_market_memory", arguments),
                headers=modern_headers("tools/call", "search_market_memory"),
            )
    return sse_or_json(response)["result"]


@pytest.mark.parametrize("sessions", [2**53, 2**62, 10**30])
async def test_an_integer_json_cannot_carry_exactly_is_refused_in_band_without_a_charge(
    world, mcp_http, api_key, sessions
):
    # 2**62 fits the databases' integers but not RFC 8785's: the answer echoing it once failed its receipt hash, a bare
    # tool error.
    result = await search_with_min_sessions(world, mcp_http, api_key, sessions)

    error = result["structuredContent"]["error"]
    assert error["code"] == "invalid_arguments"
    assert error["problems"] == [
        {
            "field": "min_sample_sessions",
            "problem": "Value error, integers must lie between -9007199254740991 and 9007199254740991",
        }
    ]
    assert await UsageEvent.objects.aexists() is False
    assert await AnswerReceipt.objects.aexists() is False


async def test_the_largest_integer_json_carries_exactly_passes_validation_to_the_searchs_own_bound(
    world, mcp_http, api_key
):
    result = await search_with_min_sessions(world, mcp_http, api_key, 2**53 - 1)

    error = result["structuredContent"]["error"]
    assert result["isError"] is True
    assert error["code"] == "invalid_request"  # not invalid_arguments: the search itself bounds it by its coverage
    assert error["message"] == (
        "min_sample_sessions can be at most 13: the historical memory covers 13 sessions "
        "(2025-11-25 to 2025-12-12), so no key has 9007199254740991."
    )
    assert await UsageEvent.objects.aexists() is False


async def test_a_database_failure_inside_an_evaluation_is_a_retryable_refusal_and_charges_nothing(
    world, mcp_http, api_key, monkeypatch, caplog
):
    # The receipt is the last write of the answer's transaction, after the charge: as when the disk fills at commit.
    def disk_full(**_):
        raise OperationalError("database or disk is full")

    monkeypatch.setattr(evidence_tools, "receipt_attach", disk_full)
    before = REGISTRY.get_sample_value("leroy_dependency_errors_total", {"dependency": "database"}) or 0
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
        async with mcp_http(api_key) as http:
            response = await http.post(
                "/api/mcp",
                json=modern_call("evaluate_current_setup", {"symbol": "alfa", "side": "buy"}),
                headers=modern_headers("tools/call", "evaluate_current_setup"),
            )

    assert response.status_code == 200
    result = sse_or_json(response)["result"]
    assert result["isError"] is True
    assert result["structuredContent"] == {
        "error": {
            "code": "database_unavailable",
            "message": "The database is temporarily unavailable; retry shortly.",
            "retry_after_seconds": 2,
        }
    }
    assert REGISTRY.get_sample_value("leroy_dependency_errors_total", {"dependency": "database"}) - before == 1
    assert not [record for record in caplog.records if record.exc_info]
    assert await UsageEvent.objects.aexists() is False
    assert await Transfer.objects.aexists() is False
    assert await AnswerReceipt.objects.aexists() is False


@pytest.mark.parametrize("symbol", ["   ", "ß", "alfa\u200f"])
async def test_search_refuses_a_symbol_as_every_evidence_tool_does_and_charges_nothing(mcp_http, api_key, symbol):
    # search_market_memory once took any text and upper-cased it: blanks became an unknown "" and ß became SS.
    pattern = "String should match pattern '^[A-Za-z][A-Za-z0-9.\\-]{0,9}$'"
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode="2026-07-28") as client:
        search = await client.call_tool("search_market_memory", {"side": "buy", "horizon_minutes": 5, "symbol": symbol})
        analogues = await client.call_tool("compare_historical_analogues", {**SETUP, "symbol": symbol})

    error = search.structured_content["error"]
    assert (search.is_error, error["code"]) == (True, "invalid_arguments")
    assert error["problems"] == [{"field": "symbol", "problem": pattern}]
    assert analogues.structured_content["error"]["problems"] == error["problems"]
    assert await UsageEvent.objects.aexists() is False
    assert await AnswerReceipt.objects.aexists() is False


async def test_search_takes_at_most_one_signal_per_registered_strategy_and_charges_nothing(mcp_http, api_key):
    # The bound was written out as 41 beside the registry it counts; it is now the registry's MAX_ACTIVE_SIGNALS.
    names = [strategy.name for strategy in strategies.STRATEGIES]
    arguments = {"side": "buy", "horizon_minutes": 5, "signals": [*names, names[0]]}
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode="2026-07-28") as client:
        over = await client.call_tool("search_market_memory", arguments)

    most = strategies.MAX_ACTIVE_SIGNALS
    problem = f"List should have at most {most} items after validation, not {most + 1}"
    assert (most, over.is_error) == (len(names), True)
    assert over.structured_content["error"]["problems"] == [{"field": "signals", "problem": problem}]
    assert await UsageEvent.objects.aexists() is False
    assert await AnswerReceipt.objects.aexists() is False


@pytest.mark.parametrize(
    "tool",
    [
        "evaluate_current_setup",
        "get_current_confluence_leaders",
        "search_market_memory",
        "compare_historical_analogues",
        "record_research_hypothesis",
    ],
)
@pytest.mark.parametrize("request_id", ["retry-\x1b[2J", "a\tb", "x\x85"])
async def test_a_client_request_id_holding_a_control_character_is_refused_and_charges_nothing(
    world, mcp_http, write_key, tool, request_id
):
    # An id is an opaque token: ESC, tab or a C1 character in one was stored and exported raw to finance.
    arguments = CALLS.get(tool, ({"symbol": "alfa", "side": "buy"}, 1))[0]
    with time_machine.travel(world.replay, tick=False):
        await feed(world)
        http = mcp_http(write_key)
        async with Client(streamable_http_client(MCP_URL, http_client=http), mode="2026-07-28") as client:
            result = await client.call_tool(tool, {**arguments, "client_request_id": request_id})

    error = result.structured_content["error"]
    assert (result.is_error, error["code"]) == (True, "invalid_arguments")
    assert error["problems"] == [
        {"field": "client_request_id", "problem": "Value error, must not contain control characters"}
    ]
    assert await UsageEvent.objects.aexists() is False
    assert await AnswerReceipt.objects.aexists() is False
    assert await ResearchHypothesis.objects.aexists() is False
