import pytest
from asgiref.sync import sync_to_async
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from backtests import services
from backtests.models import DryRunPass, Optimization, Report
from billing.selectors import credit_usage
from leroy.clock import now
from leroy.mcp.registry import load_tools
from tests.backtests.conftest import SMA_CROSS, import_walk, optimization_args
from tests.conftest import MCP_URL

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


def client(mcp_http, key):
    return Client(streamable_http_client(MCP_URL, http_client=mcp_http(key)), mode="2026-07-28")


def _saved_strategy_and_coin(owner):
    DryRunPass.objects.create(user=owner, code_sha256=services.code_sha256(SMA_CROSS), created_at=now())
    strategy = services.strategy_create(user=owner, name="SMA", code=SMA_CROSS)
    return str(strategy.pk), str(import_walk("TSTUSD").pk)


def backtest_args(strategy_id, data_id, **overrides):
    return {
        "strategy_id": strategy_id, "data_ids": [data_id], "frequency": "1d",
        "start_date": "2024-01-01", "end_date": "2024-12-31",
    } | overrides  # fmt: skip


def test_every_credit_tool_states_its_cost_rule():
    tools = load_tools()

    assert "a flat LEROY_BACKTEST_CREDITS (default 10)\ncredits per backtest" in tools["run_backtest"].description
    assert "LEROY_LOOKAHEAD_PROBE_CREDITS (default 5) for its\nlook-ahead probe" in tools["run_backtest"].description
    assert "credits per grid point" in tools["run_optimization"].description
    assert "use_free_optimization is true" in tools["run_optimization"].description
    walk_forward = tools["run_walk_forward_optimization"].description
    assert "LEROY_OPTIMIZATION_POINT_CREDITS (default 5) per grid point per fold and per fold's test run" in (
        walk_forward.replace("\n", " ")
    )
    assert "LEROY_PBO_CREDITS (default 1) for the verdict's PBO" in tools["run_optimization"].description
    assert "refunded" in tools["cancel_optimization"].description
    for spec in tools.values():
        if spec.metering == "lookup":
            assert "lookup" in spec.description.lower(), spec.name


async def test_backtest_above_max_credits_is_refused_and_reserves_nothing(mcp_http, owner, write_key):
    strategy_id, coin_id = await sync_to_async(_saved_strategy_and_coin)(owner)
    before = await sync_to_async(credit_usage)(user=owner)
    async with client(mcp_http, write_key) as session:
        result = await session.call_tool("run_backtest", backtest_args(strategy_id, coin_id, max_credits=14))

    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "over_max_credits"
    assert result.structured_content["error"]["credits_required"] == 15  # 10 + 5 for the look-ahead probe
    assert result.structured_content["error"]["max_credits"] == 14
    assert await Report.objects.acount() == 0
    assert await sync_to_async(credit_usage)(user=owner) == before


async def test_optimization_above_max_credits_is_refused_and_reserves_nothing(mcp_http, owner, write_key):
    strategy_id, coin_id = await sync_to_async(_saved_strategy_and_coin)(owner)
    before = await sync_to_async(credit_usage)(user=owner)
    async with client(mcp_http, write_key) as session:  # 4 grid points at 5 credits, 5 for the probe, 1 for PBO
        result = await session.call_tool("run_optimization", optimization_args(strategy_id, coin_id, max_credits=25))

    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "over_max_credits"
    assert result.structured_content["error"]["credits_required"] == 26
    assert await Optimization.objects.acount() == 0
    assert await sync_to_async(credit_usage)(user=owner) == before


async def test_backtest_at_max_credits_runs_and_returns_what_it_reserved(mcp_http, owner, write_key):
    strategy_id, coin_id = await sync_to_async(_saved_strategy_and_coin)(owner)
    async with client(mcp_http, write_key) as session:
        result = await session.call_tool("run_backtest", backtest_args(strategy_id, coin_id, max_credits=15))

    assert result.is_error is False, result.content[0].text
    assert result.structured_content["credits_reserved"] == 15
    assert await Report.objects.acount() == 1


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"use_free_optimization": "yes"}, "use_free_optimization"),
        ({"use_free_optimization": 1}, "use_free_optimization"),
        ({"max_credits": "50"}, "max_credits"),
        ({"grids": [{"name": "fast", "min": "3", "max": 6, "step": 1}]}, "grids.0.min"),
        ({"simulation_parameters": {"initial_cash": 1000, "commission_schema": {"commission": 0, "leverage": 1},
                                    "buy_on_close": "false"}}, "simulation_parameters.buy_on_close"),
        # A report cannot state a run at 1e308 honestly (its profit is lost to rounding) nor one at 1e-300.
        ({"simulation_parameters": {"initial_cash": 1e308, "commission_schema": {"commission": 0, "leverage": 1},
                                    "buy_on_close": False}}, "simulation_parameters.initial_cash"),
        ({"simulation_parameters": {"initial_cash": 1e-300, "commission_schema": {"commission": 0, "leverage": 1},
                                    "buy_on_close": False}}, "simulation_parameters.initial_cash"),
    ],
)  # fmt: skip
async def test_loose_booleans_and_numbers_are_refused_as_invalid_arguments_and_charge_nothing(
    mcp_http, owner, write_key, overrides, field
):
    strategy_id, coin_id = await sync_to_async(_saved_strategy_and_coin)(owner)
    before = await sync_to_async(credit_usage)(user=owner)
    async with client(mcp_http, write_key) as session:
        result = await session.call_tool("run_optimization", optimization_args(strategy_id, coin_id, **overrides))

    assert result.is_error is True
    error = result.structured_content["error"]
    assert error["code"] == "invalid_arguments"
    assert [p["field"] for p in error["problems"]] == [field]
    assert await Optimization.objects.acount() == 0
    assert await sync_to_async(credit_usage)(user=owner) == before


WALK_FORWARD = {"train_period": {"months": 2}, "test_period": {"months": 1}}


@pytest.mark.parametrize(("tool", "extra"), [("run_optimization", {}), ("run_walk_forward_optimization", WALK_FORWARD)])
@pytest.mark.parametrize(
    ("parameters", "problem"),
    [
        # Given twice, the last once won silently and the run was charged; run_backtest refused it.
        ([{"name": "slow", "value": 30}, {"name": "slow", "value": 60}],
         {"field": "parameters", "problem": "Value error, parameter names must be unique"}),
        # A string once reserved credits and created the row, whose runs then failed with a TypeError.
        ([{"name": "slow", "value": "abc"}],
         {"field": "parameters.0.value", "problem": "Input should be a valid boolean or Input should be a valid "
                                                    "integer or Input should be a valid number"}),
    ],
)  # fmt: skip
async def test_fixed_parameters_are_refused_as_a_backtests_are_and_reserve_nothing(
    mcp_http, owner, write_key, tool, extra, parameters, problem
):
    strategy_id, coin_id = await sync_to_async(_saved_strategy_and_coin)(owner)
    before = await sync_to_async(credit_usage)(user=owner)
    arguments = optimization_args(strategy_id, coin_id, parameters=parameters, **extra)
    async with client(mcp_http, write_key) as session:
        result = await session.call_tool(tool, arguments)
        backtest = await session.call_tool("run_backtest", backtest_args(strategy_id, coin_id, parameters=parameters))

    error = result.structured_content["error"]
    assert (result.is_error, error["code"], error["problems"]) == (True, "invalid_arguments", [problem])
    assert backtest.structured_content["error"]["problems"] == [problem]
    assert await Optimization.objects.acount() == 0
    assert await Report.objects.acount() == 0
    assert await sync_to_async(credit_usage)(user=owner) == before


@pytest.mark.parametrize("cash", [1e308, 1e12 * 1.01, 0.5, 1e-300])
async def test_a_backtest_with_starting_cash_a_report_cannot_state_is_refused_and_charges_nothing(
    mcp_http, owner, write_key, cash
):
    strategy_id, coin_id = await sync_to_async(_saved_strategy_and_coin)(owner)
    before = await sync_to_async(credit_usage)(user=owner)
    async with client(mcp_http, write_key) as session:
        result = await session.call_tool("run_backtest", backtest_args(strategy_id, coin_id, initial_cash=cash))

    assert result.is_error is True
    error = result.structured_content["error"]
    assert (error["code"], [p["field"] for p in error["problems"]]) == ("invalid_arguments", ["initial_cash"])
    assert await Report.objects.acount() == 0
    assert await sync_to_async(credit_usage)(user=owner) == before
