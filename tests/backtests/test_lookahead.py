"""Strategies that try to read bars after the current one: every path is refused, none completes a report."""

import time
from datetime import UTC, datetime

import pytest

from backtests import probing, sandbox
from backtests.dryrun import walk
from backtests.probing import iso
from backtests.sandbox import ALL_LAYERS, Limits
from tests.backtests.conftest import SMA_CROSS
from tests.backtests.test_engine import PAIR_CODE

DATA = [walk("TEST", bars=80)]
SIM = {"initial_cash": 10_000, "commission": 0, "leverage": 1, "buy_on_close": False}
FAST = Limits(cpu_seconds=5, wall_seconds=30, memory_bytes=768 * 1024 * 1024, output_bytes=1024 * 1024, uid=61000)
RUNTIME_ONLY = frozenset(ALL_LAYERS - {"ast", "restricted_python"})  # the agent's code runs as plain Python


def day(data, index):
    return f"{datetime.fromtimestamp(data['ts_us'][index] / 1e6, UTC):%Y-%m-%dT%H:%M:%SZ}"


def run(source, layers=ALL_LAYERS, datas=DATA, probe=0):
    return sandbox.run_job(
        source=source, datas=datas, simulation=SIM, parameters={}, layers=layers, limits=FAST, probe=probe
    )


def peeking(body: str, init: str = "self.sma = bt.ind.SMA(self.data.close, period=3)") -> str:
    """A strategy that buys when `body` (an expression over the future) says the price will rise."""
    return (
        "class Peek(bt.Strategy):\n"
        "    def __init__(self):\n"
        f"        {init}\n\n"
        "    def next(self):\n"
        f"        ahead = {body}\n"
        "        if ahead > self.data.close[0] and not self.position:\n"
        "            self.buy(size=1)\n"
    )


# (name, strategy source, the error code with every layer on, the line it names)
FUTURE_READERS = [
    ("negative wrap", peeking("self.data.close[-len(self)]"), "lookahead_refused", 6),
    ("positive index", peeking("self.data.close[1]"), "lookahead_refused", 6),
    ("indicator positive index", peeking("self.sma[2]"), "lookahead_refused", 6),
    ("get ago +n", peeking("self.data.close.get(ago=1)[0]"), "lookahead_refused", 6),
    ("get wrapping past the first bar", peeking("self.data.close.get(ago=-len(self), size=1)[0]"),
     "lookahead_refused", 6),
    ("raw array", peeking("self.data.close.array[len(self)]"), "validation_error", 6),
    ("lines[0].array", peeking("self.sma.lines[0].array[len(self)]"), "validation_error", 6),
    ("getzeroval", peeking("self.sma.lines[0].getzeroval(len(self) + 1)"), "lookahead_refused", 6),
    ("getzero slice", peeking("self.data.close.getzero(0, len(self) + 2)[-1]"), "lookahead_refused", 6),
    ("plotrange", peeking("self.data.close.plotrange(0, 10 ** 6)[-1]"), "lookahead_refused", 6),
    ("buflen", peeking("self.data.close[0] + self.data.buflen() - len(self)"), "lookahead_refused", 6),
    ("buffer slicing", peeking("max(self.data.close[0:3])"), "lookahead_refused", 6),
    ("iteration by sum", peeking("sum(self.data.close) / len(self)"), "lookahead_refused", 6),
    ("iteration by sorted", peeking("sorted(self.sma)[-1]"), "lookahead_refused", 6),
    ("unpacking", peeking("list(self.data.close)[len(self)]"), "lookahead_refused", 6),
    ("future timestamp", peeking("self.data.close[0] + self.data.datetime.date(1).day"), "lookahead_refused", 6),
    # A bool or an int subclass is the int it stands for (found from outside: `datetime(True)` read the next bar's
    # close as a date number, and an int subclass of -len(self) the series' last bar, so a strategy could tell the
    # last bar of any data it was given and decide there as its full run did: the probe passed every time).
    ("a bool as the offset", peeking("bt.date2num(self.data.close.datetime(True))"), "lookahead_refused", 6),
    ("an int subclass as the offset", "class Ago(int):\n    pass\n\n\n" + peeking(
        "bt.date2num(self.data.close.datetime(Ago(1)))"), "lookahead_refused", 10),
    ("an int subclass wrapping to the last bar", "class Ago(int):\n    pass\n\n\n" + peeking(
        "bt.date2num(self.data.close.datetime(Ago(-len(self))))"), "lookahead_refused", 10),
    ("an indicator's next value by tm_lt", peeking("self.sma.lines[0].tm_lt(0, True) + self.data.close[0]"),
     "lookahead_refused", 6),
    ("forward-shifted line", peeking("self.sma[0]", init="self.sma = self.data.close(1)"),
     "lookahead_refused", 3),
    ("Ichimoku's chikou span", peeking("self.ichi.chikou_span[0]", init="self.ichi = bt.ind.Ichimoku()"),
     "lookahead_refused", 3),
    ("moving an indicator's cursor", peeking("self.sma.lines[0].forward() or self.sma[0]"), "lookahead_refused", 6),
    ("reading in __init__ (before the first bar)", peeking("self.last", init="self.last = self.data.close[0]"),
     "lookahead_refused", 3),
    ("a delay's warm-up set shorter", peeking(
        "self.late[0]", init="self.late = self.data.close(-78)\n        self.late.setminperiod(1)"
    ), "lookahead_refused", 4),
    ("a delay's warm-up added a negative", peeking(
        "self.late[0]", init="self.late = self.data.close(-78)\n        self.late.addminperiod(-77)"
    ), "lookahead_refused", 4),
    ("a delay's warm-up decremented", peeking(
        "self.late[0]", init="self.late = self.data.close(-78)\n        self.late.incminperiod(-77)"
    ), "lookahead_refused", 4),
    ("a delay's own once", peeking(
        "self.late.once(len(self) - 1, len(self)) or self.late[0]", init="self.late = self.data.close(-3)"
    ), "lookahead_refused", 6),
    ("an indicator's own next", peeking("self.sma.next() or self.sma[0]"), "lookahead_refused", 6),
    ("a lambda the engine calls", peeking(
        "self.apply[0]",
        init="self.apply = bt.ind.ApplyN(self.data.close, period=1, func=lambda bars: self.data.close[1])",
    ), "lookahead_refused", 3),
]  # fmt: skip


@pytest.mark.parametrize(("name", "source", "code", "line"), FUTURE_READERS, ids=[row[0] for row in FUTURE_READERS])
def test_every_future_read_is_refused_and_names_its_line(name, source, code, line):
    outcome = run(source)

    assert outcome.ok is False, name
    assert outcome.result is None
    assert outcome.error["code"] == code, outcome.error
    assert outcome.error["line"] == line


# Slices and cursor moves are refused by the curated surface only (plain Python slices fail on lines anyway).
RUNTIME_READERS = [row for row in FUTURE_READERS if row[2] != "validation_error" and row[0] not in (
    "buffer slicing", "moving an indicator's cursor", "a delay's warm-up set shorter",
    "a delay's warm-up added a negative", "a delay's warm-up decremented", "a delay's own once",
    "an indicator's own next")]  # fmt: skip


@pytest.mark.parametrize(("name", "source", "code", "line"), RUNTIME_READERS, ids=[row[0] for row in RUNTIME_READERS])
def test_the_line_objects_refuse_future_reads_with_no_in_process_layer(name, source, code, line):
    outcome = run(source, layers=RUNTIME_ONLY)

    assert outcome.ok is False, name
    assert outcome.error["code"] == "lookahead_refused", outcome.error
    assert outcome.error["line"] == line
    assert "would read bars after the current one" in outcome.error["message"]


def test_the_raw_buffer_is_refused_by_the_line_objects_too():
    outcome = run(peeking("self.data.close.array[len(self)]"), layers=RUNTIME_ONLY)

    assert outcome.error["code"] == "lookahead_refused"
    assert outcome.error["line"] == 6


def test_a_caught_refusal_still_fails_the_run():
    source = peeking("self.data.close[0]").replace(
        "        ahead = self.data.close[0]\n",
        "        try:\n            ahead = self.data.close[1]\n        except Exception:\n"
        "            ahead = self.data.close[0]\n",
    )

    outcome = run(source, layers=frozenset({"restricted_python"}))

    assert outcome.ok is False
    assert outcome.error["code"] == "lookahead_refused"
    assert outcome.error["line"] == 7


def test_past_reads_and_builtin_indicators_are_unchanged():
    source = (
        "class Past(bt.Strategy):\n"
        "    def __init__(self):\n"
        "        self.sma = bt.ind.SMA(self.data.close, period=5)\n\n"
        "    def next(self):\n"
        "        if len(self) == 10:\n"
        "            print(self.data.close[-9], self.data.close[0], list(self.data.close.get(size=3)),\n"
        "                  self.sma[0], list(self.data.close.get(size=20)), self.data.datetime.date(-9))\n"
    )

    outcome = run(source)

    closes = DATA[0]["close"]
    assert outcome.ok is True, outcome.error
    assert outcome.prints == f"{closes[0]} {closes[9]} {closes[7:10]} {sum(closes[5:10]) / 5} [] 2024-01-02\n"


@pytest.mark.parametrize(
    ("source", "datas"),
    [(SMA_CROSS, [walk("ONE", bars=200)]), (PAIR_CODE, [walk("ONE", bars=200), walk("TWO", bars=200)])],
    ids=["one symbol", "two symbols"],
)
def test_the_probe_streams_the_bars_and_passes_honest_strategies(source, datas):
    outcome = run(source, datas=datas, probe=3)

    decided = [d for d in recorded(source, datas)["decisions"] if d["bar"] is not None]
    assert outcome.ok is True, outcome.error
    assert outcome.result["lookahead_check"] == {
        "status": "passed", "method": "streamed", "k": 0, "cuts": [], "decisions_checked": len(decided)
    }  # fmt: skip
    assert len(decided) > 2


def test_datas_with_different_bar_times_are_probed_by_cut_runs_on_bars_where_the_full_run_decided():
    datas = [walk("ONE", bars=200), walk("TWO", bars=200, start=datetime(2024, 1, 3, tzinfo=UTC))]

    outcome = run(PAIR_CODE, datas=datas, probe=3)

    check = outcome.result["lookahead_check"]
    assert (outcome.ok, check["status"], check["method"], check["k"], len(check["cuts"])) == (
        True, "passed", "cuts", 3, 3
    )  # fmt: skip
    decided = [iso(d["bar"]) for d in recorded(PAIR_CODE, datas)["decisions"]]
    assert check["cuts"] == sorted(set(check["cuts"])) and set(check["cuts"]) <= set(decided)
    assert check["cuts"][-1] == decided[-1]


PRIVATE_FUTURE = """
class Foresight(bt.Strategy):
    def next(self):
        bars = self.data._bars["close"]
        i = len(self)
        if i < len(bars) and bars[i] > self.data.close[0] and not self.position:
            self.buy(size=1)
        elif self.position and i < len(bars) and bars[i] < self.data.close[0]:
            self.close()
"""


def test_the_probe_fails_a_strategy_that_peeks_where_no_guard_sees_it():
    outcome = run(PRIVATE_FUTURE, layers=RUNTIME_ONLY, datas=[walk("ONE", bars=200)], probe=3)

    check = outcome.result["lookahead_check"]
    assert (outcome.ok, check["status"], check["method"]) == (True, "failed", "streamed")
    difference = check["first_difference"]
    assert (difference["cut"], difference["bar"], difference["full_run"], difference["cut_run"]) == (
        None,
        None,
        None,
        None,
    )
    # the streamed run holds no bars ahead of its step: the feed it reads has none to give
    assert difference["reason"] == (
        "the streamed run failed before its end: AttributeError: 'Lines_LineSeries_DataSeries_OHLC_OHLCDateTime_"
        "AbstractDataBase_DataBase_ArrayData' object has no attribute '_bars'"
    )


# Peeks at one decision of its 36 (the 20th), where the next bar's open is below this one's, and decides as the
# others there; a cut run checks the decisions next to its cut only, so three cuts miss it most of the time.
ONE_PEEK = """
class OnePeek(bt.Strategy):
    def next(self):
        n = len(self)
        if n < 10 or n > 190 or n % 5:
            return
        if self.position:
            self.close()
        bars = getattr(self.data, "_bars", None)
        down = n // 5 == 20 and bars is not None and bars["open"][n] < self.data.open[0]
        if down:
            self.sell(size=40)
        else:
            self.buy(size=40)
"""


def test_a_single_peeked_decision_among_many_fails_the_streamed_probe_at_that_decision():
    datas = [walk("ONE", bars=200)]

    outcome = run(ONE_PEEK, layers=RUNTIME_ONLY, datas=datas, probe=3)

    check = outcome.result["lookahead_check"]
    peeked = iso(datas[0]["ts_us"][99] / 86_400_000_000 + 719163.0)  # the 100th bar
    assert datas[0]["open"][100] < datas[0]["open"][99]  # these bars make the peek change that decision
    assert (outcome.ok, check["status"], check["method"]) == (True, "failed", "streamed")
    difference = check["first_difference"]
    assert (difference["cut"], difference["bar"], difference["reason"]) == (None, peeked, None)
    assert (difference["full_run"]["side"], difference["cut_run"]["side"]) == ("sell", "buy")


def recording(init: str) -> str:
    """A strategy that hands the engine a callable storing what it is called with (`init` sets `self.seen`), and
    buys as soon as it holds more than the bars seen so far: runonce would have called it over every bar."""
    return (
        "class Record(bt.Strategy):\n"
        "    def __init__(self):\n"
        f"        {init}\n\n"
        "    def next(self):\n"
        "        if len(self.seen) > len(self) and not self.position:\n"
        "            self.buy(size=1)\n"
    )


CALLABLES_HANDED_TO_THE_ENGINE = [
    recording("self.seen = {}\n        bt.ind.ReduceN(self.data.open, period=2, function=self.seen.setdefault)"),
    recording("self.seen = {}\n        both = self.data.open + self.data.close\n"
              "        both.operation = self.seen.setdefault"),
]  # fmt: skip


@pytest.mark.parametrize("source", CALLABLES_HANDED_TO_THE_ENGINE)
def test_a_callable_the_strategy_hands_an_indicator_sees_no_bar_ahead_of_the_strategy(source):
    # A bound method of a dict or a list runs no strategy code: runonce called it over every bar before the first,
    # so it stored the future (a dry run of such a peek returned +251 %). It is now seen as the strategy's code,
    # and the run is redone bar by bar.
    outcome = run(source)

    assert outcome.ok is True, outcome.error
    assert outcome.result["orders"]["submitted"] == 0


# Calls on a class, with the object as an argument, pass by every check made on the object; `super` gave a proxy
# that passed by them too (found from outside: a one-bar peek certified robust, a position written into the
# broker's own dict for +294 % with no trade).
THROUGH_CLASSES = [
    ("cursor = super(bt.ind.LineActions, self.closes)", "`super` is not available in strategies", 7),
    ("bt.ind.LineActions.advance(self.closes)",
     "`advance` of the class LineActions is not available in strategies: call methods on objects "
     "(self.advance(...)), not on classes", 7),
    ("bt.Position.update(self.position, 10000, 0.01)",
     "`update` of the class Position is not available in strategies: call methods on objects "
     "(self.update(...)), not on classes", 7),
    ("bt.Strategy.getpositions(self)[self.data] = bt.Position(size=10000, price=0.01)",
     "`getpositions` of the class Strategy is not available in strategies: call methods on objects "
     "(self.getpositions(...)), not on classes", 7),
    ("Through.getpositions(self)[self.data] = None",
     "`getpositions` of the class Through is not available in strategies: call methods on objects "
     "(self.getpositions(...)), not on classes", 7),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "message", "line"), THROUGH_CLASSES)
def test_a_method_called_through_its_class_or_super_is_refused(statement, message, line):
    source = (
        "class Through(bt.Strategy):\n"
        "    def __init__(self):\n"
        "        self.closes = self.data.close * 1.0\n\n"
        "    def next(self):\n"
        "        if len(self) == 5:\n"
        f"            {statement}\n"
    )

    outcome = run(source)

    assert (outcome.ok, outcome.result) == (False, None)
    assert (outcome.error["line"], message in outcome.error["message"]) == (line, True), outcome.error


# Peeks as PRIVATE_FUTURE does in the run that sees no memo, and leaves its decisions, by bar, in an object every
# run in one process reaches (a class attribute of Backtrader's); a run that finds them replays them.
REPLAYING_FORESIGHT = """
class Replay(bt.Strategy):
    def __init__(self):
        memos = [item for item in bt.TimeFrame.Names if isinstance(item, dict)]
        self.first = not memos
        self.memo = memos[0] if memos else {}
        if self.first:
            bt.TimeFrame.Names.append(self.memo)

    def next(self):
        i = len(self)
        if self.first:
            bars = self.data._bars["close"]
            act = None
            if i < len(bars) and bars[i] > self.data.close[0] and not self.position:
                act = "buy"
            elif self.position and i < len(bars) and bars[i] < self.data.close[0]:
                act = "close"
            self.memo[i] = act
        else:
            act = self.memo.get(i)
        if act == "buy":
            self.buy(size=1)
        elif act == "close":
            self.close()
"""


def test_a_run_cannot_hand_its_decisions_to_the_probes_cut_runs():
    # Each cut run is a job of its own, on the bars up to its cut: it finds no memo, so it cannot replay the full
    # run's future-informed decisions, and the probe fails the strategy (it passed while the cut runs shared the
    # full run's process).
    outcome = run(REPLAYING_FORESIGHT, layers=RUNTIME_ONLY, datas=[walk("ONE", bars=200)], probe=3)

    check = outcome.result["lookahead_check"]
    assert (outcome.ok, check["status"], check["first_difference"]["cut"]) == (True, "failed", None)
    assert check["first_difference"]["reason"].startswith("the streamed run failed before its end: AttributeError")


# Places the same order on every bar; only how long it lives depends on the next close (found from outside, through
# a peek since closed: lookahead_check passed, verdict robust).
VALID_FORESIGHT = """
class Valid(bt.Strategy):
    def next(self):
        bars = getattr(self.data, "_bars", None)
        later = bars is None or len(self) < len(bars["close"])  # whether a bar follows: known only from the future
        self.buy(size=1, exectype=bt.Order.Limit, price=self.data.close[0] * 0.5, valid=None if later else 1.0)
"""


def test_the_probe_compares_an_orders_other_terms_such_as_how_long_it_lives():
    outcome = run(VALID_FORESIGHT, layers=RUNTIME_ONLY, datas=[walk("ONE", bars=200)], probe=3)

    check = outcome.result["lookahead_check"]
    assert (outcome.ok, check["status"]) == (True, "failed")
    difference = check["first_difference"]
    assert ("valid" in difference["full_run"]) != ("valid" in difference["cut_run"])


def test_a_cut_shorter_than_an_indicators_warm_up_runs_bar_by_bar_and_an_honest_strategy_passes():
    # Deciding once, it is cut at evenly spaced bars too, two of them inside the 150-bar warm-up: Backtrader's
    # runonce failed there (IndexError), which was reported as a failed probe (found from outside). Two datas on
    # different days are probed by cuts; one data is streamed, bar by bar from the first.
    source = (
        "class Late(bt.Strategy):\n"
        "    def __init__(self):\n"
        "        self.sma = bt.ind.SMA(self.data.close, period=150)\n\n"
        "    def next(self):\n"
        "        if not self.position and len(self) >= 230 and self.sma[0] > 0:\n"
        "            self.buy(size=10)\n"
    )
    apart = [walk("ONE", bars=252), walk("TWO", bars=252, start=datetime(2024, 1, 3, tzinfo=UTC))]

    cut = run(source, datas=apart, probe=3).result["lookahead_check"]
    streamed = run(source, datas=[walk("ONE", bars=252)], probe=3).result["lookahead_check"]

    assert (cut["status"], cut["method"], len(cut["cuts"])) == ("passed", "cuts", 3)
    assert (streamed["status"], streamed["method"], streamed["decisions_checked"]) == ("passed", "streamed", 1)


def test_an_order_placed_by_a_timer_is_decided_on_the_bar_the_datas_are_on_and_an_honest_one_passes():
    source = (
        "class Timed(bt.Strategy):\n"
        "    def __init__(self):\n"
        "        self.add_timer(when=bt.num2date(738000.0).time(), cheat=True)\n"
        "        self.calls = 0\n\n"
        "    def notify_timer(self, timer, when, *args, **kwargs):\n"
        "        self.calls = self.calls + 1\n"
        "        if self.calls % 20 == 0:\n"
        "            self.buy(size=1)\n"
    )
    datas = [walk("ONE", bars=200)]

    recorded_ = recorded(source, datas)
    outcome = run(source, datas=datas, probe=3)

    assert [d["bar"] for d in recorded_["decisions"]][:2] == [
        datas[0]["ts_us"][19] / 86_400_000_000 + 719163.0,
        datas[0]["ts_us"][39] / 86_400_000_000 + 719163.0,
    ]
    assert outcome.result["lookahead_check"]["status"] == "passed"


@pytest.mark.parametrize(
    "init", ["self.both = self.data0.close - self.data1.close", "self.both = bt.If(self.data0.close > 0, "
             "self.data0.close - self.data1.close, 0.0)"],
)  # fmt: skip
def test_an_operation_between_datas_listed_on_different_dates_reads_each_ones_current_bar(init):
    # runonce paired the datas' bars by position: with the second data listed a month later, the difference held
    # its close 22 bars ahead (found from outside). Bought whenever what it holds is not the current close.
    source = (
        "class Pair(bt.Strategy):\n"
        "    def __init__(self):\n"
        f"        {init}\n\n"
        "    def next(self):\n"
        "        if len(self.data1) and abs(self.data0.close[0] - self.both[0] - self.data1.close[0]) > 1e-6:\n"
        "            self.buy(data=self.data1, size=1)\n"
    )
    late = datetime(2024, 2, 1, tzinfo=UTC)
    datas = [walk("A", bars=120), walk("B", bars=120, start=late)]

    outcome = run(source, datas=datas)

    assert outcome.ok is True, outcome.error
    assert outcome.result["orders"]["submitted"] == 0


# Decides every 5th bar from bar 20 to 280 (53 decisions): honestly where it expects a cut (when the cuts fell at
# fixed shares of its decisions: bars 100, 190 and 280) and by a peek on every other decision (found from outside:
# passed, 94 % winners).
CUT_DODGER = """
CUTS = (100, 190, 280)


class Dodge(bt.Strategy):
    def next(self):
        n = len(self)
        if n < 20 or n > 280 or n % 5:
            return
        if self.position:
            self.close()
        bars = self.data._bars
        if any(n <= cut < n + 6 for cut in CUTS) or n + 5 >= self.data._count:
            up = True
        else:
            up = bars["open"][n + 5] > bars["open"][n]
        if up:
            self.buy(size=40)
        else:
            self.sell(size=40)
"""


def test_the_probes_cuts_cannot_be_known_to_the_strategy_so_deciding_honestly_where_it_expects_them_fails():
    outcome = run(CUT_DODGER, layers=RUNTIME_ONLY, datas=[walk("ONE", bars=300)], probe=3)

    assert (outcome.ok, outcome.result["lookahead_check"]["status"]) == (True, "failed")


def test_the_probes_cuts_are_drawn_with_the_servers_key_among_the_decisions_and_end_at_the_last():
    datas = [walk("ONE", bars=300)]
    decisions = recorded(CUT_DODGER, datas, layers=RUNTIME_ONLY)["decisions"]
    decided = sorted({round((d["bar"] - 719163.0) * 86_400_000_000) for d in decisions})

    ours, theirs = (probing.probe_cuts(datas, decisions, key=key) for key in (b"server", b"another server"))

    assert ours == probing.probe_cuts(datas, decisions, key=b"server")  # the same run, the same cuts
    assert len(ours) == 3 and set(ours) <= set(decided) and ours[-1] == decided[-1]
    assert ours != theirs


# Honest strategies the streamed run must decide alike (found from outside: each failed the probe): Backtrader's
# CmpEx (DemarkPivotPoint's pivot) was wrong bar by bar; `printed` was empty in a probe's run; the feed's class
# named the run.
HONEST_EVERYWHERE = [
    "class Pivot(bt.Strategy):\n"
    "    def __init__(self):\n"
    "        self.piv = bt.ind.DemarkPivotPoint(self.data)\n\n"
    "    def next(self):\n"
    "        if self.data.close[0] > self.piv.lines.p[0] and not self.position:\n"
    "            self.buy(size=1)\n"
    "        elif self.data.close[0] < self.piv.lines.p[0] and self.position:\n"
    "            self.close()\n",
    "class Ticks(bt.Strategy):\n"
    "    def next(self):\n"
    "        print('tick')\n"
    "        if printed.count('tick') % 2:\n"
    "            self.buy(size=1)\n"
    "        else:\n"
    "            self.sell(size=1)\n",
    "class Named(bt.Strategy):\n"
    "    def next(self):\n"
    "        if 'Stream' in str(self.data) or 'Array' not in str(self.data):\n"
    "            self.sell(size=1)\n"
    "        else:\n"
    "            self.buy(size=1)\n",
]


@pytest.mark.parametrize("source", HONEST_EVERYWHERE, ids=["DemarkPivotPoint", "printed", "feed class"])
def test_honest_strategies_decide_alike_in_the_streamed_run(source):
    outcome = run(source, datas=[walk("ONE", bars=120)], probe=3)

    assert outcome.ok is True, outcome.error
    assert outcome.result["lookahead_check"]["status"] == "passed", outcome.result["lookahead_check"]


def test_an_orders_extra_terms_kept_in_its_info_are_part_of_its_decision():
    # `coc=False` goes into order.info and changes the fill under buy_on_close: chosen by a peek, it is another
    # decision (found from outside: it was not compared).
    source = "class Info(bt.Strategy):\n    def next(self):\n        self.buy(size=1, coc=False, note='x')\n"

    decisions = recorded(source, [walk("ONE", bars=5)])["decisions"]

    assert {tuple(d["info"].items()) for d in decisions} == {(("coc", False), ("note", "x"))}


# In plain Python (no in-process layer: what code that escaped them could do), the streamed run tells itself apart
# by the feed's private bars and, there, floods the worker with requests for steps and sleeps: the worker blocked
# writing steps into a pipe nobody read, past every deadline (found from outside).
ASKS_AHEAD = """
import os
import time


class Ahead(bt.Strategy):
    def next(self):
        if not hasattr(self.data, "_bars") and len(self) == 3:
            os.write(1, b"\\x01" * 200000)
            time.sleep(10 ** 6)
        if len(self) % 10 == 0:
            self.buy(size=1)
"""


def test_a_streamed_run_asking_for_steps_ahead_of_its_strategy_is_stopped_at_once():
    started = time.monotonic()

    outcome = run(ASKS_AHEAD, layers=RUNTIME_ONLY, datas=[walk("ONE", bars=60)], probe=3)

    assert time.monotonic() - started < 10
    assert (outcome.ok, outcome.result) == (False, None)
    assert outcome.error == {
        "code": "sandbox_error",
        "message": "the probe's streamed run asked for bars ahead of its strategy and was stopped",
        "line": None,
    }


SLOW_PROBE = """
class Slow(bt.Strategy):
    def next(self):
        while not hasattr(self.data, "_bars"):
            pass
        if len(self) % 10 == 0:
            self.buy(size=1)
"""


def test_a_probe_rerun_over_the_runs_limits_is_not_run_and_the_full_run_is_kept():
    # The rerun, bar by bar, costs a few full runs: an honest strategy whose full run fitted its limits failed as a
    # whole when the probe did not (found from outside). Burning CPU in the rerun only stands for that here.
    limits = Limits(cpu_seconds=2, wall_seconds=30, memory_bytes=768 * 1024 * 1024, output_bytes=1024 * 1024,
                    uid=61000)  # fmt: skip
    job = {"source": SLOW_PROBE, "datas": [walk("ONE", bars=60)], "simulation": SIM, "parameters": {},
           "layers": RUNTIME_ONLY, "limits": limits}  # fmt: skip

    outcome = sandbox.run_job(**job, probe=3)

    assert outcome.ok is True, outcome.error
    check = outcome.result.pop("lookahead_check")
    assert outcome.result == sandbox.run_job(**job).result  # the full run, as it is without a probe
    assert check == {
        "status": "not_run",
        "k": 0,
        "cuts": [],
        "reason": "the probe's rerun did not finish within the run's limits: the strategy exceeded its CPU-time "
        "limit (2 s) and was killed",
    }


def test_a_strategy_that_takes_no_decision_is_not_said_to_pass_the_probe():
    outcome = run("class Idle(bt.Strategy):\n    def next(self):\n        pass\n", datas=[walk("ONE", bars=200)],
                  probe=3)  # fmt: skip

    assert outcome.result["lookahead_check"] == {
        "status": "not_run",
        "k": 0,
        "cuts": [],
        "reason": "the full run took no order decisions, so there are none a rerun could change",
    }


def test_the_cut_probe_is_not_run_on_too_few_common_bars_and_a_short_streamed_run_is_probed():
    apart = [walk("ONE", bars=31), walk("TWO", bars=31, start=datetime(2024, 1, 3, tzinfo=UTC))]
    source = "class Every(bt.Strategy):\n    def next(self):\n        self.buy(size=1)\n"

    cut = run(source, datas=apart, probe=3)
    streamed = run(source, datas=[walk("ONE", bars=30)], probe=3)

    assert cut.result["lookahead_check"] == {
        "status": "not_run",
        "k": 3,
        "cuts": [],
        "reason": "the data have 30 common bars; the probe needs at least 40",
    }
    assert streamed.result["lookahead_check"] == {
        "status": "passed", "method": "streamed", "k": 0, "cuts": [], "decisions_checked": 30
    }  # fmt: skip


def recorded(source, datas, parameters=None, layers=ALL_LAYERS):
    """A full run's result with its order decisions, as a grid point records them."""
    outcome = sandbox.run_job(source=source, datas=datas, simulation=SIM, parameters=parameters or {},
                              layers=layers, limits=FAST, decisions=True)  # fmt: skip
    assert outcome.ok is True, outcome.error
    return outcome.result


def probe_against(source, datas, expected, parameters=None, layers=ALL_LAYERS):
    return sandbox.run_job(source=source, datas=datas, simulation=SIM, parameters=parameters or {}, layers=layers,
                           limits=FAST, probe=3, expected=expected)  # fmt: skip


def test_a_probe_given_the_full_runs_recorded_decisions_runs_only_the_cuts_and_agrees_with_a_full_probe():
    datas = [walk("ONE", bars=200)]
    for source, layers in ((SMA_CROSS, ALL_LAYERS), (PRIVATE_FUTURE, RUNTIME_ONLY)):
        full = run(source, layers=layers, datas=datas, probe=3)
        given = probe_against(source, datas, recorded(source, datas, layers=layers)["decisions"], layers=layers)

        assert given.ok is True, given.error
        assert given.result == {"lookahead_check": full.result["lookahead_check"]}  # no second full run's result
    assert full.result["lookahead_check"]["status"] == "failed"  # the peeking one is still caught


def test_a_probe_given_decisions_the_code_does_not_take_on_those_bars_fails():
    datas = [walk("ONE", bars=200)]
    other = recorded(SMA_CROSS, datas, {"fast": 3, "slow": 10})["decisions"]  # another point's decisions

    given = probe_against(SMA_CROSS, datas, other)

    check = given.result["lookahead_check"]
    assert (given.ok, check["status"]) == (True, "failed")
    assert check["first_difference"]["full_run"] != check["first_difference"]["cut_run"]


# Indicators of the strategy's own, and functions it hands to built-in ones: with runonce, Backtrader computed them
# over every bar before the strategy's first, so whatever they kept (a list, a write into their own line's past)
# reached the strategy with the future in it. They now advance with the strategy, bar by bar.
RECORDING_INDICATOR = """
class Recorder(bt.Indicator):
    lines = ("dummy",)

    def __init__(self):
        self.seen = []

    def next(self):
        self.seen.append(self.data.close[0])
        self.lines.dummy[0] = 0.0


class Peek(bt.Strategy):
    def __init__(self):
        self.recorder = Recorder(self.data)

    def next(self):
        print(len(self), len(self.recorder.seen))
"""

PAST_WRITING_INDICATOR = """
class Oracle(bt.Indicator):
    lines = ("next_close",)

    def next(self):
        if len(self) > 1:
            self.lines.next_close[-1] = self.data.close[0]


class Smart(bt.Strategy):
    def __init__(self):
        self.oracle = Oracle(self.data)

    def next(self):
        print(self.oracle.next_close[0])
"""

HANDED_FUNCTION = """
class Peek(bt.Strategy):
    def __init__(self):
        self.seen = []
        self.apply = bt.ind.ApplyN(self.data.close, period=1, func=self.record)

    def record(self, bars):
        self.seen.append(bars[-1])
        return bars[-1]

    def next(self):
        print(len(self), len(self.seen))
"""


@pytest.mark.parametrize("source", [RECORDING_INDICATOR, HANDED_FUNCTION], ids=["own indicator", "handed function"])
def test_strategy_code_inside_an_indicator_runs_bar_by_bar_with_the_strategy(source):
    outcome = run(source, probe=3)

    assert outcome.ok is True
    assert outcome.prints == "".join(f"{bar} {bar}\n" for bar in range(1, 81))


def test_an_indicator_writing_into_its_past_shows_the_strategy_nothing_of_the_next_bar():
    outcome = run(PAST_WRITING_INDICATOR)

    assert outcome.ok is True
    assert outcome.prints == "nan\n" * 80


def trend(sma: str, indicator: str = "") -> str:
    return (
        f"{indicator}class Trend(bt.Strategy):\n"
        "    def __init__(self):\n"
        f"        self.sma = {sma}\n\n"
        "    def next(self):\n"
        "        if not self.position and self.data.close[0] > self.sma[0]:\n"
        "            self.buy(size=10)\n"
        "        elif self.position and self.data.close[0] < self.sma[0]:\n"
        "            self.close()\n"
    )


OWN_SMA = """
class OwnSma(bt.Indicator):
    lines = ("sma",)
    params = (("period", 5),)

    def __init__(self):
        self.addminperiod(self.p.period)

    def next(self):
        self.lines.sma[0] = math.fsum(self.data.close.get(size=self.p.period)) / self.p.period


"""


def test_an_indicator_of_the_strategys_own_computes_what_the_built_in_one_does():
    built_in = run(trend("bt.ind.SMA(self.data.close, period=5)"), probe=3)
    own = run(trend("OwnSma(self.data)", OWN_SMA), probe=3)

    assert own.ok is True
    assert own.result["trades"] == built_in.result["trades"] != []
    assert own.result["final_value"] == built_in.result["final_value"]
    assert own.result["lookahead_check"]["status"] == built_in.result["lookahead_check"]["status"] == "passed"


def test_reads_made_for_strategy_code_are_still_refused_in_a_run_redone_bar_by_bar():
    # The frame stopped in the first pass must not leave the count of running strategy frames short: the line
    # objects refuse only while one runs.
    source = RECORDING_INDICATOR.replace("print(len(self), len(self.recorder.seen))", "print(sum(self.data.close))")

    outcome = run(source)

    assert outcome.ok is False
    assert outcome.error["code"] == "lookahead_refused"
    assert outcome.error["line"] == 18


def test_orders_the_broker_refuses_for_margin_leave_an_honest_strategys_probe_passing():
    # The broker cancels a refused order a bar after it was placed; kept as the strategy's decision, a run cut at
    # the order's bar lacked it and the probe failed a strategy that reads no future bar.
    outcome = sandbox.run_job(
        source=SMA_CROSS, datas=[walk("TEST", bars=250, seed=3)], simulation=SIM, parameters={"size": 120},
        layers=ALL_LAYERS, limits=FAST, probe=3,
    )  # fmt: skip

    assert outcome.ok is True
    assert outcome.result["orders"]["margin"] == outcome.result["orders"]["submitted"] == 10
    assert outcome.result["lookahead_check"]["status"] == "passed"


def test_a_cancel_the_strategy_makes_is_one_of_its_decisions():
    source = (
        "class Canceller(bt.Strategy):\n"
        "    def next(self):\n"
        "        if len(self) == 5:\n"
        "            self.order = self.buy(size=1, exectype=bt.Order.Limit, price=1.0)\n"
        "        if len(self) == 7:\n"
        "            self.cancel(self.order)\n"
    )

    outcome = sandbox.run_job(
        source=source, datas=DATA, simulation=SIM, parameters={}, layers=ALL_LAYERS, limits=FAST, decisions=True
    )

    decisions = outcome.result["decisions"]
    assert [decision.get("cancel") for decision in decisions] == [None, 0]
    assert decisions[1]["bar"] == decisions[0]["bar"] + 2
