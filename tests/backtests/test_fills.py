"""Strategies that try to invent fills or tamper with the broker, the feeds or the engine: refused."""

from datetime import UTC, datetime, timedelta

import pytest

from backtests import sandbox
from backtests.dryrun import walk
from backtests.sandbox import ALL_LAYERS, Limits

DATA = [walk("TEST", bars=60)]
SIM = {"initial_cash": 10_000, "commission": 0, "leverage": 1, "buy_on_close": False}
FAST = Limits(cpu_seconds=5, wall_seconds=30, memory_bytes=768 * 1024 * 1024, output_bytes=1024 * 1024, uid=61000)
OS_ONLY = frozenset(ALL_LAYERS - {"ast", "restricted_python"})


def run(source, layers=ALL_LAYERS):
    return sandbox.run_job(source=source, datas=DATA, simulation=SIM, parameters={}, layers=layers, limits=FAST)


def on_bar_five(body: str) -> str:
    return f"class Cheat(bt.Strategy):\n    def next(self):\n        if len(self) == 5:\n            {body}\n"


@pytest.mark.parametrize(
    ("body", "layers", "code"),
    [
        ("self.buy(size=1000, exectype=bt.Order.Historical, price=0.01)", ALL_LAYERS, "order_refused"),
        ("self.buy(size=1000, exectype=bt.Order.Historical, price=0.01)", OS_ONLY, "order_refused"),
        ("self.sell(size=1000, exectype=7, price=10 ** 6)", ALL_LAYERS, "order_refused"),
        ("self.buy(size=1000, exectype=7.0, price=0.01)", OS_ONLY, "order_refused"),
        ("self.buy(size=1000, price=0.01, histnotify=True)", ALL_LAYERS, "order_refused"),
        ("self.buy(size=10 ** 9, _checksubmit=False)", OS_ONLY, "order_refused"),
        ("self.buy(size=1, exectype=self.buy(size=1).Historical)", ALL_LAYERS, "order_refused"),
        ("self.order_target_size(target=1000, exectype=7, price=0.01)", ALL_LAYERS, "order_refused"),
    ],
)
def test_orders_the_broker_does_not_simulate_are_refused_with_the_line(body, layers, code):
    outcome = run(on_bar_five(body), layers=layers)

    assert outcome.ok is False
    assert outcome.result is None
    assert outcome.error["code"] == code
    assert outcome.error["line"] == 4
    assert "Market, Close, Limit, Stop, StopLimit, StopTrail and StopTrailLimit" in outcome.error["message"]


@pytest.mark.parametrize(
    ("body", "layers", "message"),
    [
        ("self.buy(size=10, exectype=bt.Order.Limit, price=self.data.low)", ALL_LAYERS,
         "`price` must be a finite number or None, not a LineBuffer"),
        ("self.buy(size=10, exectype=bt.Order.Limit, price=self.data.low)", OS_ONLY,
         "`price` must be a finite number or None, not a LineBuffer"),
        ("self.sell(size=10, exectype=bt.Order.StopLimit, price=1.0, plimit=self.data.high)", ALL_LAYERS,
         "`plimit` must be a finite number or None, not a LineBuffer"),
        ("self.buy(size=10, exectype=bt.Order.StopTrail, trailamount=self.data.low)", ALL_LAYERS,
         "`trailamount` must be a finite number or None, not a LineBuffer"),
        ("self.buy(size=10, exectype=bt.Order.StopTrail, trailpercent=float('nan'))", ALL_LAYERS,
         "`trailpercent` must be a finite number or None, not nan"),
        ("self.buy(size=float('inf'))", ALL_LAYERS, "`size` must be a finite number or None, not inf"),
    ],
)  # fmt: skip
def test_an_order_whose_size_or_prices_are_not_finite_numbers_is_refused_with_the_line(body, layers, message):
    # A line as a limit price was read by the broker on the bar it filled: every buy filled at that bar's low and
    # every sell at its high (+325 %, 100 % winners, found from outside).
    outcome = run(on_bar_five(body), layers=layers)

    assert (outcome.ok, outcome.result) == (False, None)
    assert (outcome.error["code"], outcome.error["line"]) == ("order_refused", 4)
    assert outcome.error["message"] == f"line 4 (`{body}`): {message}"


FAKE_FEED = """
class Fake(bt.Indicator):
    lines = ("open", "high", "low", "close")

    def next(self):
        self.lines.open[0] = 1.0
        self.lines.high[0] = 1.0
        self.lines.low[0] = 0.01
        self.lines.close[0] = 0.01


class Dressed(bt.Strategy):
    def __init__(self):
        self.fake = Fake(self.data)

    def next(self):
        if len(self) == 5:
            self.buy(data=self.fake, size=50)
"""


HEDGED = """
class Hedged(bt.Strategy):
    def __init__(self):
        self.legs = {}
        self.next_id = 3

    def notify_trade(self, trade):
        if trade.justopened:
            self.legs[trade.tradeid] = [1 if trade.size > 0 else -1, trade.price]
        elif trade.isclosed:
            self.legs.pop(trade.tradeid, None)

    def next(self):
        if len(self) == 1:
            self.buy(size=10, tradeid=1)
            self.sell(size=10, tradeid=2)
            return
        for tid in sorted(self.legs):
            side, entry = self.legs[tid]
            if side * (self.data.close[0] - entry) > 0.5:
                self.close(tradeid=tid)
                (self.buy if side > 0 else self.sell)(size=10, tradeid=self.next_id)
                self.next_id = self.next_id + 1
                return
"""


@pytest.mark.parametrize("layers", [ALL_LAYERS, OS_ONLY])
def test_an_order_under_its_own_tradeid_is_refused_so_offsetting_legs_cannot_hide_the_losing_side(layers):
    # Found from outside: a long and a short under two ids, the winner closed and reopened each time, reported
    # only won trades (realized +222, 100 % winners) for an account that made exactly nothing.
    outcome = run(HEDGED, layers=layers)

    assert outcome.ok is False
    assert outcome.result is None
    assert outcome.error == {
        "code": "order_refused",
        "message": "line 15 (`self.buy(size=10, tradeid=1)`): `tradeid` must be 0: a run keeps one trade per data, "
        "the data's position",
        "line": 15,
    }


def bracket(first: str, second: str) -> str:
    legs = {
        "limit": "tp = self.sell(size=50, exectype=bt.Order.Limit, price=c * 1.01, parent=p, transmit=False)",
        "stop": "sl = self.sell(size=50, exectype=bt.Order.Stop, price=c * 0.99, parent=p, transmit=False)",
    }
    return (
        "class Bracket(bt.Strategy):\n"
        "    def __init__(self):\n"
        "        self.live = []\n\n"
        "    def next(self):\n"
        "        if self.position:\n"
        "            return\n"
        "        for order in self.live:\n"
        "            if order.alive():\n"
        "                return\n"
        "        c = self.data.close[0]\n"
        "        p = self.buy(size=50, transmit=False)\n"
        f"        {legs[first]}\n"
        f"        {legs[second].replace('transmit=False', 'transmit=True')}\n"
        "        self.live = [p, tp, sl]\n"
    )


def test_a_bar_reaching_both_legs_of_a_bracket_fills_the_stop_whichever_leg_was_submitted_first():
    # Found from outside: the broker tried pending orders in submission order, so submitting the take-profit
    # first ended every bar that reached both legs at the target (10,423 against 9,929 on the same bars).
    data = [walk("TEST", bars=250)]
    limit_first, stop_first = (
        sandbox.run_job(source=bracket(*legs), datas=data, simulation=SIM, parameters={}, limits=FAST)
        for legs in (("limit", "stop"), ("stop", "limit"))
    )
    both = [
        i for i in range(1, 250)
        if data[0]["low"][i] <= data[0]["close"][i - 1] * 0.99 and data[0]["high"][i] >= data[0]["close"][i - 1] * 1.01
    ]  # fmt: skip

    assert limit_first.ok and stop_first.ok
    assert limit_first.result["trades"] == stop_first.result["trades"]
    assert limit_first.result["final_value"] == stop_first.result["final_value"]
    assert len(both) > 0  # bars that reach both legs exist in these data, so the order of the legs was tested


def test_an_order_on_an_object_that_is_not_one_of_the_runs_feeds_is_refused():
    outcome = run(FAKE_FEED)

    assert (outcome.ok, outcome.error["code"], outcome.error["line"]) == (False, "order_refused", 18)
    assert outcome.error["message"] == (
        "line 18 (`self.buy(data=self.fake, size=50)`): an order's `data` must be one of the run's data feeds"
    )


def test_a_price_on_a_market_order_does_not_set_its_fill():
    source = (
        "class Priced(bt.Strategy):\n"
        "    def next(self):\n"
        "        if len(self) == 5:\n"
        "            self.buy(size=10, price=0.01)\n"
        "        elif len(self) == 10:\n"
        "            self.close(price=10 ** 6)\n"
    )

    outcome = run(source)

    (trade,) = outcome.result["trades"]
    opens = DATA[0]["open"]
    assert (trade["entry_price"], trade["exit_price"]) == (opens[5], pytest.approx(opens[10], rel=1e-12))


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ("self.broker = None", "write_refused", "`broker` belongs to the engine"),
        ("self.datas = []", "write_refused", "`datas` belongs to the engine"),
        ("self.data0 = self.data", "write_refused", "`data0` belongs to the engine"),
        ("self.position = None", "write_refused", "`position` belongs to the engine"),
        ("self.lines.datetime[0] = 0.0", "execution_error", "market data cannot be modified"),
        ("self.datas[0] = None", "execution_error", "objects of type tuple cannot be modified"),
        ("self.broker.cash = 10 ** 9", "execution_error", "cannot be modified by strategies"),
        ("self.broker.setcash(10 ** 9)", "execution_error", "`setcash` of BrokerBase is not available"),
        ("self.broker.add_cash(10 ** 9)", "execution_error", "`add_cash` of BrokerBase is not available"),
        ("self.broker.set_coc(True)", "execution_error", "`set_coc` of BrokerBase is not available"),
        ("self.broker.getposition(self.data).size = 100", "execution_error", "cannot be modified"),
        ("self.position.size = 100", "execution_error", "cannot be modified"),
        ("self.data.close[0] = 0.01", "execution_error", "market data cannot be modified"),
        ("self.datas[0].open.array[5] = 0.01", "lookahead_refused", "`.array`"),
        ("self.broker.getcommissioninfo(self.data).p.commission = 0", "execution_error", "cannot be modified"),
    ],
)
def test_broker_feeds_and_engine_cannot_be_written(body, code, message):
    outcome = run(on_bar_five(body), layers=frozenset({"restricted_python"}))

    assert outcome.ok is False
    assert outcome.error["code"] == code
    assert message in outcome.error["message"]
    assert outcome.error["line"] == 4


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("c = self.env", "`env` is not available"),
        ("c = self.cerebro", "`cerebro` is not available"),
        ("self.analyzers.trade_log.trades.clear()", "`analyzers` is not available"),
        ("b = self.broker.positions", "`positions` of BrokerBase is not available"),
    ],
)
def test_cerebro_and_the_analyzers_are_out_of_reach(body, message):
    outcome = run(on_bar_five(body), layers=frozenset({"restricted_python"}))

    assert outcome.error["code"] == "execution_error"
    assert message in outcome.error["message"]


def test_cash_value_and_position_stay_readable():
    source = on_bar_five(
        "self.buy(size=3)\n        if len(self) == 7:\n"
        "            print(self.broker.getcash(), self.broker.getvalue(), self.position.size, self.position.price,"
        " self.getposition(self.data).size)"
    )

    outcome = run(source)

    cash, value, size, price, again = outcome.prints.split()
    opens, closes = DATA[0]["open"], DATA[0]["close"]
    assert outcome.ok is True
    assert float(cash) == pytest.approx(10_000 - 3 * opens[5], rel=1e-12)
    assert float(value) == pytest.approx(float(cash) + 3 * closes[6], rel=1e-12)
    assert (float(size), float(price), float(again)) == (3.0, opens[5], 3.0)


def calendar(name: str, *, weekends: bool, days: int = 60) -> dict:
    """A data of `days` calendar days from 2024-01-01, with or without its weekend bars (a coin and a stock)."""
    data = walk(name, bars=days)
    moments = [datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=i) for i in range(days)]
    keep = [i for i, moment in enumerate(moments) if weekends or moment.weekday() < 5]
    return {"name": name, **{key: [data[key][i] for i in keep] for key in ("open", "high", "low", "close", "volume")},
            "ts_us": [int(moments[i].timestamp()) * 1_000_000 for i in keep]}  # fmt: skip


# On Friday, having seen the stock's whole Friday bar, a limit buy at its low; on Saturday (the coin's bar moves the
# clock; the stock still shows Friday) a limit sell at Friday's high.
WEEKEND_LIMITS = """
class WeekendLimit(bt.Strategy):
    def next(self):
        coin, stock = self.datas[0], self.datas[1]
        day = coin.datetime.date(0).weekday()
        held = self.getposition(stock).size
        if day == 4 and not held:
            self.buy(data=stock, size=10, exectype=bt.Order.{kind}, price=stock.{buy}[0], valid=coin.datetime[0] + 1)
        elif day == 5 and held:
            self.sell(data=stock, size=10, exectype=bt.Order.{kind}, price=stock.{sell}[0], valid=coin.datetime[0] + 1)
"""


@pytest.mark.parametrize(("kind", "buy", "sell"), [("Limit", "low", "high"), ("Stop", "high", "low")])
def test_a_limit_or_stop_order_never_fills_on_the_bar_it_was_placed_after(kind, buy, sell):
    source = WEEKEND_LIMITS.replace("{kind}", kind).replace("{buy}", buy).replace("{sell}", sell)
    datas = [calendar("COIN", weekends=True), calendar("STOCK", weekends=False)]

    outcome = sandbox.run_job(
        source=source, datas=datas, simulation=SIM, parameters={}, layers=ALL_LAYERS, limits=FAST, probe=3
    )

    # Each order is valid for one day: the stock has no bar after the one it was placed on within it.
    assert outcome.ok is True
    assert outcome.result["trades"] == []
    assert outcome.result["orders"]["completed"] == 0
    assert outcome.result["orders"]["submitted"] == 8  # every Friday of the 60 days


# On Sunday (the coin's bar moves the clock; the stock still shows Friday) a market buy of the stock on close.
SUNDAY_ON_CLOSE = """
class SundayOnClose(bt.Strategy):
    def next(self):
        coin, stock = self.datas[0], self.datas[1]
        if coin.datetime.date(0).weekday() == 6 and not self.getposition(stock).size:
            self.buy(data=stock, size=10)

    def notify_order(self, order):
        if order.status == order.Completed:
            print(bt.num2date(order.executed.dt).date().isoformat(), order.executed.price)
"""


def test_a_buy_on_close_order_on_a_symbol_without_a_bar_now_fills_at_its_next_open():
    # It filled at Friday's close, dated Friday, after the strategy had seen the weekend's coin bars.
    coin, stock = calendar("COIN", weekends=True, days=10), calendar("STOCK", weekends=False, days=10)
    monday = stock["ts_us"].index(int(datetime(2024, 1, 8, tzinfo=UTC).timestamp()) * 1_000_000)

    outcome = sandbox.run_job(source=SUNDAY_ON_CLOSE, datas=[coin, stock], simulation=SIM | {"buy_on_close": True},
                              parameters={}, layers=ALL_LAYERS, limits=FAST)  # fmt: skip

    assert outcome.ok is True, outcome.error
    assert outcome.prints.splitlines() == [f"2024-01-08 {stock['open'][monday]}"]


def test_a_buy_on_close_order_refused_its_close_stays_refused_whatever_the_strategy_writes_into_its_info():
    coin, stock = calendar("COIN", weekends=True, days=10), calendar("STOCK", weekends=False, days=10)
    monday = stock["ts_us"].index(int(datetime(2024, 1, 8, tzinfo=UTC).timestamp()) * 1_000_000)
    source = SUNDAY_ON_CLOSE.replace(
        "self.buy(data=stock, size=10)", "order = self.buy(data=stock, size=10)\n            order.info['coc'] = True"
    )

    outcome = sandbox.run_job(source=source, datas=[coin, stock], simulation=SIM | {"buy_on_close": True},
                              parameters={}, layers=ALL_LAYERS, limits=FAST)  # fmt: skip

    assert outcome.ok is True, outcome.error
    assert outcome.prints.splitlines() == [f"2024-01-08 {stock['open'][monday]}"]


def test_a_buy_on_close_order_on_a_symbol_with_a_bar_now_fills_at_that_close():
    coin, stock = calendar("COIN", weekends=True, days=10), calendar("STOCK", weekends=False, days=10)
    source = SUNDAY_ON_CLOSE.replace("weekday() == 6", "weekday() == 2")  # a Wednesday: both have a bar

    outcome = sandbox.run_job(source=source, datas=[coin, stock], simulation=SIM | {"buy_on_close": True},
                              parameters={}, layers=ALL_LAYERS, limits=FAST)  # fmt: skip

    assert outcome.ok is True, outcome.error
    assert outcome.prints.splitlines() == [f"2024-01-03 {stock['close'][2]}"]


# Every order's status as the strategy is told it, and its position at the end.
SHORTS = """
class Shorts(bt.Strategy):
    def next(self):
        if len(self) == 5:
            {first}
        elif len(self) == 8:
            {second}

    def notify_order(self, order):
        if order.status in (order.Completed, order.Margin):
            print(order.getstatusname(), order.executed.size)

    def stop(self):
        print("held", self.position.size)
"""


def shorts(first: str, second: str = "pass", leverage: float = 1) -> list[str]:
    source = SHORTS.format(first=first, second=second)
    outcome = sandbox.run_job(source=source, datas=DATA, simulation=SIM | {"leverage": leverage}, parameters={},
                              layers=ALL_LAYERS, limits=FAST)  # fmt: skip
    assert outcome.ok is True, outcome.error
    return outcome.prints.splitlines()


@pytest.mark.parametrize(
    ("first", "leverage", "told"),
    [
        ("self.sell(size=700)", 1, ["Margin 0", "held 0"]),  # 7x the account's cash short: refused
        ("self.sell(size=100)", 1, ["Completed -100", "held -100"]),  # 9,741 short on 10,000: held
        ("self.sell(size=200)", 2, ["Completed -200", "held -200"]),  # 2x leverage, 19,482 on 10,000
        ("self.sell(size=210)", 2, ["Margin 0", "held 0"]),  # 20,456 is more than 2x
    ],
)
def test_a_short_needs_the_cash_a_long_of_its_size_would(first, leverage, told):
    assert shorts(first, leverage=leverage) == told


def test_a_second_short_beyond_the_collateral_is_refused_and_covering_always_fills():
    assert shorts("self.sell(size=100)", "self.sell(size=5)") == [
        "Completed -100", "Margin 0", "held -100"
    ]  # fmt: skip
    assert shorts("self.sell(size=100)", "self.buy(size=100)") == ["Completed -100", "Completed 100", "held 0"]


def test_selling_a_long_through_zero_into_a_short_it_cannot_hold_is_refused_whole():
    assert shorts("self.buy(size=50)", "self.sell(size=800)") == ["Completed 50", "Margin 0", "held 50"]


def test_a_gap_that_leaves_the_short_uncovered_at_the_fill_closes_the_long_and_refuses_the_rest():
    # Flat at 100, then a gap to 150 at the open of the bar the sell fills on: accepted on the close it was
    # placed at (50 closed and 100 short need 20,000, the account has 10,000 + 10,000 of proceeds), refused at the
    # fill (100 short at 150 needs 30,000 against 27,500), where the long's 50 are still sold.
    flat = walk("GAP", bars=12)
    prices = [100.0] * 5 + [150.0] * 7
    gapped = flat | {key: prices for key in ("open", "high", "low", "close")}
    source = SHORTS.format(first="self.sell(size=150)", second="pass").replace(
        "if len(self) == 5:", "if len(self) == 2:\n            self.buy(size=50)\n        elif len(self) == 5:"
    )
    outcome = sandbox.run_job(source=source, datas=[gapped], simulation=SIM, parameters={}, layers=ALL_LAYERS,
                              limits=FAST)  # fmt: skip

    assert outcome.prints.splitlines() == ["Completed 50", "Margin -50", "held 0"]


def test_a_long_is_refused_while_its_cash_holds_a_short_on_another_data():
    two = [DATA[0], walk("OTHER", bars=60)]
    source = SHORTS.format(first="self.sell(data=self.datas[1], size=100)", second="self.buy(size=50)")
    outcome = sandbox.run_job(source=source, datas=two, simulation=SIM, parameters={}, layers=ALL_LAYERS, limits=FAST)

    assert outcome.prints.splitlines() == ["Completed -100", "Margin 0", "held 0"]


def test_a_short_beyond_the_collateral_is_refused_at_submission_not_accepted_first():
    source = SHORTS.format(first="self.sell(size=210)", second="pass").replace(
        "if order.status in (order.Completed, order.Margin):", "if True:"
    )
    outcome = sandbox.run_job(source=source, datas=DATA, simulation=SIM | {"leverage": 2}, parameters={},
                              layers=ALL_LAYERS, limits=FAST)  # fmt: skip

    assert outcome.prints.splitlines() == ["Submitted 0", "Margin 0", "held 0"]
