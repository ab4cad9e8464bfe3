import math
import sys
import types
from datetime import UTC, datetime, timedelta

import backtrader as bt
import numpy as np
import pandas as pd
import pytest

from backtests import sandbox, statistics
from backtests.dryrun import walk
from tests.backtests.conftest import SMA_CROSS

RETURNS = [["2024-01-02", 0.01], ["2024-01-03", -0.02], ["2024-01-04", 0.03], ["2024-01-05", 0.0]]
ANALYSIS = {
    "total": {"total": 3, "open": 0, "closed": 3},
    "won": {"total": 2, "pnl": {"total": 300.0, "average": 150.0}},
    "lost": {"total": 1, "pnl": {"total": -100.0, "average": -100.0}},
    "pnl": {"net": {"total": 200.0, "average": 200.0 / 3}},
    "len": {"average": 4.0},
}


DRAWDOWN = {"percentage": 2.5, "money": 2600.0}  # bar by bar: deeper than the daily returns show


def test_all_fourteen_contract_metrics_are_computed_in_order():
    values = statistics.compute(
        {
            "daily_returns": RETURNS, "trade_analyzer": ANALYSIS, "max_drawdown": DRAWDOWN,
            "initial_cash": 100_000.0, "final_value": 101_950.0,
        }
    )  # fmt: skip

    assert list(values) == list(statistics.METRICS)
    assert len(values) == 14
    assert all(value is not None for value in values.values())


def test_return_metrics_use_daily_returns_a_zero_risk_free_rate_and_the_bar_level_drawdown():
    values = statistics.return_metrics(RETURNS, drawdown=DRAWDOWN, net_profit=1950.0)
    series = [r for _, r in RETURNS]
    mean = sum(series) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in series) / 3)
    total = 1.01 * 0.98 * 1.03 - 1

    assert values["total_return"] == pytest.approx(total, rel=1e-12)
    assert values["annualized_sharpe_ratio"] == pytest.approx(mean / std * math.sqrt(252), rel=1e-12)
    assert values["maximum_drawdown_percentage"] == 2.5
    assert values["std_dev_returns"] == pytest.approx(std, rel=1e-12)
    assert values["cagr"] == pytest.approx((1 + total) ** (252 / 4) - 1, rel=1e-9)
    assert values["calmar_ratio"] == pytest.approx(values["cagr"] / 0.025, rel=1e-9)
    assert values["recovery_factor"] == 1950.0 / 2600.0  # net profit / maximum drawdown, both in money


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
    flat = statistics.return_metrics(
        [["2024-01-02", 0.0], ["2024-01-03", 0.0]], drawdown={"percentage": 0.0, "money": 0.0}, net_profit=0.0
    )

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


def minute_bars(name: str, *, days: int = 3, seed: int = 5) -> dict:
    """A random walk on 1-minute bars of regular XNYS sessions (390 a day), in the sandbox's plain-list shape."""
    data = walk(name, bars=390 * days, seed=seed)
    opens = [datetime(2024, 1, 2 + day, 14, 30, tzinfo=UTC) for day in range(days)]
    data["ts_us"] = [int((o + timedelta(minutes=m)).timestamp() * 1e6) for o in opens for m in range(390)]
    return data


class Values(bt.Analyzer):
    def start(self):
        self.values = []

    def next(self):
        self.values.append(self.strategy.broker.getvalue())

    def get_analysis(self):
        return self.values


def direct_values(code, datas, simulation, parameters):
    """The account value at every bar, from plain Backtrader and its stock pandas feed."""
    module = types.ModuleType("direct_values_strategy")
    sys.modules[module.__name__] = module
    module.__dict__["bt"] = bt
    exec(code, module.__dict__)  # noqa: S102 - our own test source
    cerebro = bt.Cerebro(stdstats=False)
    for data in datas:
        frame = pd.DataFrame(
            {k: data[k] for k in ("open", "high", "low", "close", "volume")},
            index=pd.to_datetime(data["ts_us"], unit="us"),
        )
        cerebro.adddata(bt.feeds.PandasData(dataname=frame, timeframe=bt.TimeFrame.Minutes), name=data["name"])
    cerebro.addstrategy(module.SmaCross, **parameters)
    cerebro.broker.setcash(simulation["initial_cash"])
    cerebro.addanalyzer(Values, _name="values")
    (result,) = cerebro.run()
    return result.analyzers.values.get_analysis()


def test_a_drawdown_that_is_the_rounding_of_an_account_value_counts_as_none():
    rounded = statistics.return_metrics(
        [["2024-01-02", 0.01], ["2024-01-03", 0.02]], drawdown={"percentage": 3.1e-14, "money": 2.7e-9},
        net_profit=300.0,
    )  # fmt: skip

    assert (rounded["maximum_drawdown_percentage"], rounded["calmar_ratio"], rounded["recovery_factor"]) == (
        0.0,
        None,
        None,
    )


def test_a_break_even_trade_is_not_a_winner_in_the_statistics_nor_in_the_per_symbol_table():
    # Bought and sold on the same bar: every round trip nets 0 (TradeAnalyzer counts each as won: 100 % against
    # the per-symbol table's 0 %, found from outside).
    source = (
        "class Flat(bt.Strategy):\n"
        "    def next(self):\n"
        "        if len(self) % 10 == 0:\n"
        "            self.buy(size=10)\n"
        "            self.sell(size=10)\n"
    )
    datas = [walk("FLAT", bars=100)]
    simulation = {"initial_cash": 10_000, "commission": 0, "leverage": 1, "buy_on_close": False}
    outcome = sandbox.run_job(source=source, datas=datas, simulation=simulation, parameters={})

    computed = statistics.compute(outcome.result)
    (row,) = statistics.per_symbol(outcome.result)
    assert outcome.result["trade_tally"] == {"won": 0, "won_pnl": 0.0, "lost": 0, "lost_pnl": 0.0}
    assert computed["percentage_of_winning_trades"] == row["percentage_of_winning_trades"] == 0.0
    assert (computed["profit_factor"], computed["payoff_ratio"]) == (None, None)


def test_the_payoff_ratio_and_profit_factor_leave_break_even_trades_out():
    tally = {"won": 3, "won_pnl": 196.0, "lost": 1, "lost_pnl": -40.0}
    analysis = {
        "total": {"closed": 5},
        "won": {"total": 4, "pnl": {"total": 196.0, "average": 49.0}},  # a break-even trade among them
        "lost": {"total": 1, "pnl": {"total": -40.0, "average": -40.0}},
        "pnl": {"net": {"total": 156.0}},
    }

    values = statistics.trade_metrics(analysis, tally=tally)

    assert (values["payoff_ratio"], values["profit_factor"], values["percentage_of_winning_trades"]) == (
        196.0 / 3 / 40.0,
        196.0 / 40.0,
        60.0,
    )


def test_intraday_drawdown_is_the_bar_level_one_computed_independently():
    datas = [minute_bars("MIN")]
    simulation = {"initial_cash": 10_000.0, "commission": 0.0, "leverage": 1.0, "buy_on_close": False}
    parameters = {"fast": 5, "slow": 30, "size": 60}

    outcome = sandbox.run_job(source=SMA_CROSS, datas=datas, simulation=simulation, parameters=parameters)
    values = statistics.compute(outcome.result)

    equity = np.array(direct_values(SMA_CROSS, datas, simulation, parameters))
    peaks = np.maximum.accumulate(equity)
    bar_level = float(np.max((peaks - equity) / peaks) * 100)
    daily = [r for _, r in outcome.result["daily_returns"]]
    daily_level = float(
        -np.min(np.cumprod(1 + np.array(daily)) / np.maximum.accumulate(np.cumprod(1 + np.array(daily))) - 1) * 100
    )
    assert len(equity) == 1170
    assert values["maximum_drawdown_percentage"] == pytest.approx(bar_level, rel=1e-12)
    assert outcome.result["max_drawdown"]["money"] == pytest.approx(float(np.max(peaks - equity)), rel=1e-12)
    assert daily_level < bar_level  # what the daily-returns figure understated
    net = outcome.result["final_value"] - 10_000.0
    assert values["recovery_factor"] == pytest.approx(net / float(np.max(peaks - equity)), rel=1e-12)
