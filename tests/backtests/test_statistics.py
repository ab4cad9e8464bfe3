import math

import pytest

from backtests import statistics

RETURNS = [["2024-01-02", 0.01], ["2024-01-03", -0.02], ["2024-01-04", 0.03], ["2024-01-05", 0.0]]
ANALYSIS = {
    "total": {"total": 3, "open": 0, "closed": 3},
    "won": {"total": 2, "pnl": {"total": 300.0, "average": 150.0}},
    "lost": {"total": 1, "pnl": {"total": -100.0, "average": -100.0}},
    "pnl": {"net": {"total": 200.0, "average": 200.0 / 3}},
    "len": {"average": 4.0},
}


def test_all_fourteen_contract_metrics_are_computed_in_order():
    values = statistics.compute({"daily_returns": RETURNS, "trade_analyzer": ANALYSIS})

    assert list(values) == list(statistics.METRICS)
    assert len(values) == 14
    assert all(value is not None for value in values.values())


def test_return_metrics_use_daily_returns_and_a_zero_risk_free_rate():
    values = statistics.return_metrics(RETURNS)
    series = [r for _, r in RETURNS]
    mean = sum(series) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in series) / 3)
    total = 1.01 * 0.98 * 1.03 - 1

    assert values["total_return"] == pytest.approx(total, rel=1e-12)
    assert values["annualized_sharpe_ratio"] == pytest.approx(mean / std * math.sqrt(252), rel=1e-12)
    assert values["maximum_drawdown_percentage"] == pytest.approx(2.0, rel=1e-12)
    assert values["std_dev_returns"] == pytest.approx(std, rel=1e-12)
    assert values["cagr"] == pytest.approx((1 + total) ** (252 / 4) - 1, rel=1e-9)
    assert values["calmar_ratio"] == pytest.approx(values["cagr"] / 0.02, rel=1e-9)
    assert values["recovery_factor"] == pytest.approx(total / 0.02, rel=1e-12)


def test_trade_metrics_come_from_the_trade_analyzer_per_trade():
    values = statistics.trade_metrics(ANALYSIS)

    assert values == {
        "realized_pnl": 200.0,
        "profit_factor": 3.0,
        "payoff_ratio": 1.5,
        "expectancy": 200.0 / 3,
        "average_trade": 200.0 / 3,
        "percentage_of_winning_trades": 2 / 3 * 100,
        "avg_bars_held": 4.0,
    }


def test_undefined_metrics_stay_null_without_trades_or_losses():
    no_trades = statistics.trade_metrics({"total": {"total": 0}})
    no_losses = statistics.trade_metrics({**ANALYSIS, "lost": {"total": 0, "pnl": {"total": 0.0, "average": 0.0}}})
    flat = statistics.return_metrics([["2024-01-02", 0.0], ["2024-01-03", 0.0]])

    assert no_trades == {
        "realized_pnl": 0.0,
        "profit_factor": None,
        "payoff_ratio": None,
        "expectancy": None,
        "average_trade": None,
        "percentage_of_winning_trades": None,
        "avg_bars_held": None,
    }
    assert (no_losses["profit_factor"], no_losses["payoff_ratio"]) == (None, None)
    assert (flat["calmar_ratio"], flat["recovery_factor"], flat["annualized_sharpe_ratio"]) == (None, None, None)
    assert flat["maximum_drawdown_percentage"] == 0.0
