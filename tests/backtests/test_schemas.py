import pytest
from pydantic import ValidationError

from leroy.errors import DomainError
from leroy.mcp.registry import REGISTRY, load_tools
from leroy.schemas import strict_instant
from tests.backtests.conftest import optimization_args

load_tools()


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("search_symbols_by_name", {"symbol_name": "AAPL"}, "symbolName"),
        ("list_strategies", {"limit": 51}, "less than or equal to 50"),
        ("list_symbols", {"limit": 0}, "greater than or equal to 1"),
        ("list_symbols", {"asset_class": "bond"}, "asset_class"),
        ("get_market_data_sample", {"id": "1", "frequency": "1d", "limit": 10001}, "10000"),
        ("get_market_data_sample", {"id": "1", "frequency": "1m"}, "frequency"),
        ("get_market_data_sample", {"id": "1", "frequency": "1d", "start_date": "2024-02-30"}, "day is out of range"),
        ("get_market_data_sample", {"id": "1", "frequency": "1d", "end_date": "2024/01/05"}, "ISO 8601"),
        ("download_market_data", {"symbol": "AAPL", "frequency": "5m"}, "1d only"),
        ("download_market_data", {"symbol": "   ", "frequency": "1d"}, "must not be empty"),
        (
            "run_backtest",
            {
                "strategy_id": "x",
                "data_ids": [],
                "frequency": "1d",
                "start_date": "2024-01-01",
                "end_date": "2024-02-01",
            },
            "at least 1 item",
        ),
        (
            "run_backtest",
            {
                "strategy_id": "x",
                "data_ids": ["1"],
                "frequency": "0d",
                "start_date": "2024-01-01",
                "end_date": "2024-02-01",
            },
            "pattern",
        ),
        (
            "run_backtest",
            {
                "strategy_id": "x",
                "data_ids": ["1"],
                "frequency": "1d",
                "start_date": "2024-1-1",
                "end_date": "2024-02-01",
            },
            "YYYY-MM-DD",
        ),
        ("list_report_trades", {"id": "x", "limit": 201}, "200"),
        ("list_optimizations", {"limit": 101}, "100"),
        ("list_optimization_results", {"id": "x", "sort_by": "best"}, "sort_by"),
        ("wait_for_reports", {"report_ids": []}, "at least 1 item"),
        ("wait_for_reports", {"reportIds": ["a"]}, "report_ids"),
    ],
)
def test_tool_arguments_follow_the_contract(name, arguments, fragment):
    with pytest.raises(ValidationError) as caught:
        REGISTRY[name].args.model_validate(arguments)

    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"grids": []}, "at least 1 item"),
        ({"grids": [{"name": n, "min": 1, "max": 2, "step": 1} for n in "abc"]}, "at most 2 items"),
        ({"grids": [{"name": "fast", "min": 5, "max": 3, "step": 1}]}, "max must be >= min"),
        ({"grids": [{"name": "fast", "min": 1, "max": 3, "step": 0}]}, "greater than 0"),
        ({"target_metric": "best_return"}, "target_metric"),
        ({"target_direction": "up"}, "target_direction"),
        ({"simulation_parameters": {"initial_cash": 1000, "buy_on_close": False}}, "commission_schema"),
        (
            {
                "simulation_parameters": {
                    "initial_cash": 1000,
                    "commission_schema": {"commission": 0, "leverage": 1},
                    "buy_on_close": False,
                    "lookahead": 1,
                }
            },
            "lookahead",
        ),
        ({"data_ids": [str(i) for i in range(11)]}, "at most 10 items"),
        ({"start_date": "2024-13-01"}, "month must be in 1..12"),
    ],
)
def test_optimization_arguments_follow_the_contract(overrides, fragment):
    with pytest.raises(ValidationError) as caught:
        REGISTRY["run_optimization"].args.model_validate(optimization_args("x", "1", **overrides))

    assert fragment in str(caught.value)


def test_date_only_end_bound_covers_the_whole_day():
    assert strict_instant("2024-01-05", end=True).isoformat() == "2024-01-05T23:59:59.999999+00:00"
    assert strict_instant("2024-01-05T10:00:00-05:00").isoformat() == "2024-01-05T15:00:00+00:00"


@pytest.mark.parametrize("instant", ["9999-12-31T23:59:00-01:00", "0001-01-01T00:00:00+01:00"])
def test_an_instant_outside_the_years_1_to_9999_in_utc_is_an_invalid_argument(instant):
    with pytest.raises(DomainError) as refused:
        REGISTRY["get_market_data_sample"].args.from_arguments({"id": "1", "frequency": "1d", "start_date": instant})

    assert refused.value.details["problems"] == [
        {"field": "start_date", "problem": f"Value error, {instant!r} is outside the years 1 to 9999 in UTC"}
    ]


def test_statistics_result_names_exactly_the_contract_metrics_in_order():
    from backtests.schemas import Statistics
    from backtests.statistics import METRICS

    assert tuple(Statistics.model_fields) == METRICS


def test_dates_are_parsed_once_into_typed_values_and_published_as_plain_strings():
    from datetime import UTC, date, datetime

    backtest = REGISTRY["run_backtest"].args.model_validate(
        {"strategy_id": "x", "data_ids": ["1"], "frequency": "1d", "start_date": "2024-01-01", "end_date": "2024-02-01"}
    )
    grid = REGISTRY["run_optimization"].args.model_validate(optimization_args("x", "1", end_date="2024-12-31"))
    sample = REGISTRY["get_market_data_sample"].args.model_validate(
        {"id": "1", "frequency": "1d", "start_date": "2024-01-05T10:00:00-05:00"}
    )

    assert (backtest.start_date, backtest.end_date) == (date(2024, 1, 1), date(2024, 2, 1))
    assert (grid.start_date, grid.end_date) == (
        datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    )  # fmt: skip
    assert (sample.start_date, sample.end_date) == (datetime(2024, 1, 5, 15, tzinfo=UTC), None)
    # Validating the parsed values again (as the MCP bridge does) keeps them as they are.
    assert type(backtest).model_validate(dict(backtest)) == backtest
    assert type(grid).model_validate(dict(grid)) == grid
    assert grid.model_dump(mode="json")["end_date"] == "2024-12-31T23:59:59.999999Z"
    properties = type(backtest).model_json_schema()["properties"]
    assert properties["start_date"] == {"description": "YYYY-MM-DD", "title": "Start Date", "type": "string"}


# Every tool taking a Name, with its other required arguments.
NAMED = [
    ("create_strategy", {"code": "x"}),
    ("update_strategy", {"id": "x"}),
    ("run_optimization", optimization_args("x", "1")),
    (
        "create_evidence_alert",
        {"universe": True, "side": "buy", "horizon_minutes": 15, "endpoint_url": "https://h.example/"},
    ),
]


@pytest.mark.parametrize(("tool", "arguments"), NAMED)
# Whitespace; a zero-width space; a bidi override and a combining mark with nothing to combine with (str.strip()
# kept the last two, so they were once accepted as names shown in lists).
@pytest.mark.parametrize("name", [" \t", "\u200b", "\u202e\u0301"])
def test_a_name_with_no_visible_character_is_an_invalid_argument(tool, arguments, name):
    with pytest.raises(DomainError) as refused:
        REGISTRY[tool].args.from_arguments({**arguments, "name": name})

    assert refused.value.details["problems"] == [{"field": "name", "problem": "Value error, must not be blank"}]


@pytest.mark.parametrize(("tool", "arguments"), NAMED)
@pytest.mark.parametrize("name", ["key\u202egnp.exe", "\u2066key\u2069"])
def test_a_name_holding_a_bidi_control_is_an_invalid_argument(tool, arguments, name):
    with pytest.raises(DomainError) as refused:
        REGISTRY[tool].args.from_arguments({**arguments, "name": name})

    problem = "Value error, must not contain bidirectional control characters"
    assert refused.value.details["problems"] == [{"field": "name", "problem": problem}]
