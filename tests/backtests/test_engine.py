import sys
import types
from datetime import UTC, datetime

import backtrader as bt
import pandas as pd

from backtests import engine, sandbox
from backtests.dryrun import walk
from tests.backtests.conftest import SMA_CROSS

PAIR_CODE = """
class Rotate(bt.Strategy):
    params = (("period", 15),)

    def __init__(self):
        self.roc = [bt.ind.ROC(d.close, period=self.p.period) for d in self.datas]

    def next(self):
        best = self.datas[0] if self.roc[0][0] >= self.roc[1][0] else self.datas[1]
        for data in self.datas:
            held = self.getposition(data).size
            if data is best and not held:
                self.buy(data=data, size=7)
            elif data is not best and held:
                self.close(data=data)
"""


class Closed(bt.Analyzer):
    def start(self):
        self.rows = []

    def notify_trade(self, trade):
        if trade.isclosed:
            self.rows.append(
                (
                    trade.data._name,
                    bt.num2date(trade.dtopen).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    bt.num2date(trade.dtclose).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    trade.price,
                    trade.pnl,
                    trade.pnlcomm,
                    trade.barlen,
                )
            )

    def get_analysis(self):
        return self.rows


def direct(code, datas, simulation, parameters, timeframe=bt.TimeFrame.Days):
    """The same source run by plain Backtrader in this process with its stock pandas feed."""
    module = types.ModuleType("direct_strategy")
    sys.modules[module.__name__] = module  # backtrader's metaclass looks the class's module up there
    namespace = module.__dict__
    namespace["bt"] = bt
    exec(code, namespace)  # noqa: S102 - our own test source
    strategy = next(
        v for v in namespace.values() if isinstance(v, type) and issubclass(v, bt.Strategy) and v is not bt.Strategy
    )
    cerebro = bt.Cerebro(stdstats=False)
    for data in datas:
        frame = pd.DataFrame(
            {k: data[k] for k in ("open", "high", "low", "close", "volume")},
            index=pd.to_datetime(data["ts_us"], unit="us"),
        )
        cerebro.adddata(bt.feeds.PandasData(dataname=frame, timeframe=timeframe), name=data["name"])
    cerebro.addstrategy(strategy, **parameters)
    cerebro.broker.setcash(simulation["initial_cash"])
    cerebro.broker.setcommission(commission=simulation["commission"], leverage=simulation["leverage"])
    cerebro.broker.set_coc(simulation["buy_on_close"])
    cerebro.addanalyzer(Closed, _name="closed")
    cerebro.addanalyzer(bt.analyzers.DrawDown, _name="drawdown")
    (result,) = cerebro.run()
    drawdown = result.analyzers.drawdown.get_analysis().max
    return cerebro.broker.getvalue(), result.analyzers.closed.get_analysis(), (drawdown.drawdown, drawdown.moneydown)


def sandboxed(code, datas, simulation, parameters):
    outcome = sandbox.run_job(source=code, datas=datas, simulation=simulation, parameters=parameters)
    assert outcome.ok is True, outcome.error
    trades = [
        (t["symbol"], t["entry_time"], t["exit_time"], t["entry_price"], t["gross_pnl"], t["total"], t["bars_held"])
        for t in outcome.result["trades"]
    ]
    drawdown = outcome.result["max_drawdown"]
    return outcome.result["final_value"], trades, (drawdown["percentage"], drawdown["money"])


def test_sandboxed_run_equals_direct_backtrader_exactly():
    datas = [walk("ONE", bars=400)]
    simulation = {"initial_cash": 50_000.0, "commission": 0.001, "leverage": 1.0, "buy_on_close": False}

    value, trades, drawdown = sandboxed(SMA_CROSS, datas, simulation, {"fast": 7})

    assert (value, trades, drawdown) == direct(SMA_CROSS, datas, simulation, {"fast": 7})
    assert len(trades) >= 5 and drawdown[0] > 0


def test_multi_data_buy_on_close_run_equals_direct_backtrader_exactly():
    datas = [walk("ONE", bars=300), walk("TWO", bars=300)]
    simulation = {"initial_cash": 20_000.0, "commission": 0.0005, "leverage": 2.0, "buy_on_close": True}

    value, trades, drawdown = sandboxed(PAIR_CODE, datas, simulation, {})

    assert (value, trades, drawdown) == direct(PAIR_CODE, datas, simulation, {})
    assert {t[0] for t in trades} == {"ONE", "TWO"}


def test_intraday_run_equals_direct_backtrader_exactly():
    from tests.backtests.test_statistics import minute_bars

    datas = [minute_bars("MIN", days=2)]
    simulation = {"initial_cash": 10_000.0, "commission": 0.0002, "leverage": 1.0, "buy_on_close": False}

    value, trades, drawdown = sandboxed(SMA_CROSS, datas, simulation, {"size": 50})

    assert (value, trades, drawdown) == direct(SMA_CROSS, datas, simulation, {"size": 50}, bt.TimeFrame.Minutes)
    assert len(trades) >= 5 and drawdown[0] > 0


def test_a_date_number_is_formatted_as_its_utc_second_across_days_and_the_rounding_at_midnight():
    def formatted(num: float) -> str:
        seconds = round((num - engine.EPOCH_ORDINAL) * 86400)
        return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")

    day = bt.date2num(datetime(2024, 3, 8, tzinfo=UTC))
    nums = [day + minute / 1440 for minute in range(1440)] + [day + k / 7 for k in range(-9_000, 9_000)]
    nums += [day - 0.4 / 86400, day + 86399.4 / 86400, day + 86399.6 / 86400]
    nums.append(bt.date2num(datetime(1969, 12, 31, 23, tzinfo=UTC)))

    assert [engine.iso(num) for num in nums] == [formatted(num) for num in nums]
    assert engine.iso(day + 86399.6 / 86400) == "2024-03-09T00:00:00Z"
    assert engine.iso(day + (9 * 3600 + 30 * 60 + 5) / 86400) == "2024-03-08T09:30:05Z"


def test_a_run_on_fewer_bars_than_an_indicators_warm_up_completes_bar_by_bar():
    # Backtrader's runonce pass wrote the SMA's first value past the series' end: an honest strategy buying in
    # prenext on 8 bars failed with IndexError (found from outside). The run is made again bar by bar.
    code = (
        "class Early(bt.Strategy):\n"
        "    def __init__(self):\n"
        "        self.sma = bt.ind.SMA(self.data.close, period=20)\n\n"
        "    def prenext(self):\n"
        "        if not self.position:\n"
        "            self.buy(size=1)\n"
    )
    simulation = {"initial_cash": 10_000, "commission": 0, "leverage": 1, "buy_on_close": False}

    outcome = sandbox.run_job(source=code, datas=[walk("SHORT", bars=8)], simulation=simulation, parameters={},
                              probe=3)  # fmt: skip

    assert outcome.ok is True, outcome.error
    assert (outcome.result["orders"]["submitted"], outcome.result["open_positions"][0]["size"]) == (1, 1)
    assert outcome.result["lookahead_check"]["status"] == "passed"
