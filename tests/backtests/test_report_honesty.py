"""Strategies that try to make a normal-looking report dishonest without reading a future bar: rewriting the bars
or the clock through line bindings, granting themselves positions, standing in for the engine's own members.
Each is refused before it can report (with every layer on, as a worker runs them)."""

import pytest

from backtests import sandbox
from tests.backtests.test_lookahead import run

PIPE = """
class Pipe(bt.Indicator):
    lines = ("x",)

    def next(self):
        self.lines.x[0] = 0.0


class Cheap(bt.Strategy):
    def __init__(self):
        self.pipe = Pipe(self.data)
"""

BINDING_TO_THE_BARS = (
    PIPE
    + """        self.pipe.lines.x.{bind}(self.data.open)

    def next(self):
        if len(self) == 10:
            self.pipe.lines.x[1] = 1.0  # tomorrow's open, were the line bound to the feed's
            self.buy(size=50)
        if len(self) == 20:
            self.close()
"""
)

BINDING_TO_THE_CLOCK = """
class Knob(bt.Indicator):
    lines = ("knob",)

    def next(self):
        pass


class Blind(bt.Strategy):
    def __init__(self):
        self.knob = Knob(self.data)
        self.knob.lines.knob.addbinding(self.lines.datetime)

    def next(self):
        now = self.lines.datetime[0]
        self.knob.lines.knob[0] = float("nan")  # the decision below would be recorded at no bar
        if not self.position:
            self.buy(size=1)
        self.knob.lines.knob[0] = now
"""

BINDINGS_LIST = (
    PIPE
    + """        self.pipe.lines.x.bindings.append(self.data.open)

    def next(self):
        pass
"""
)

OWNER_LINES = """
class Pipe(bt.Indicator):
    lines = ("x",)

    def __init__(self):
        self.bind2lines("datetime", "x")

    def next(self):
        self.lines.x[0] = 0.0


class Cheap(bt.Strategy):
    def __init__(self):
        self.pipe = Pipe(self.data)

    def next(self):
        pass
"""


@pytest.mark.parametrize(
    ("source", "line"),
    [
        (BINDING_TO_THE_BARS.replace("{bind}", "addbinding"), 12),
        (BINDING_TO_THE_BARS.replace("{bind}", "bind2line"), 12),
        (BINDING_TO_THE_CLOCK, 12),
        (BINDINGS_LIST, 12),
        (OWNER_LINES, 6),
    ],
    ids=["addbinding to a feed line", "bind2line to a feed line", "addbinding to the clock", "bindings list",
         "bind2lines to the owner's clock"],
)  # fmt: skip
def test_binding_a_line_to_the_bars_or_the_clock_is_refused(source, line):
    outcome = run(source, probe=3)

    assert outcome.ok is False
    assert outcome.result is None
    assert outcome.error["code"] == "validation_error"
    assert outcome.error["line"] == line


GIFT = """
class Gift(bt.Strategy):
    def next(self):
        if len(self) == 5:
            {grant}
        if len(self) == 10:
            self.close()
"""


@pytest.mark.parametrize(
    ("grant", "error"),
    [("self.positions[self.data] = bt.Position(size=100, price=1.0)", "TypeError"),
     ("self.getpositions()[self.data] = bt.Position(size=100, price=1.0)", "TypeError"),
     ("self.positions.update({self.data: bt.Position(size=100, price=1.0)})", "AttributeError")],
    ids=["positions[...] =", "getpositions()[...] =", "positions.update"],
)  # fmt: skip
def test_a_strategy_cannot_grant_itself_a_position(grant, error):
    outcome = run(GIFT.replace("{grant}", grant), probe=3)

    assert outcome.ok is False
    assert outcome.result is None
    assert outcome.error["code"] == "execution_error"
    assert outcome.error["message"].startswith(f"{error}: ")
    assert outcome.error["line"] == 5


def test_reading_positions_still_works():
    source = (
        "class Reader(bt.Strategy):\n"
        "    def next(self):\n"
        "        if len(self) == 5:\n"
        "            self.buy(size=3)\n"
        "        if len(self) == 10:\n"
        "            print(self.positions[self.data].size, self.getpositions()[self.data].size)\n"
    )

    outcome = run(source)

    assert outcome.ok is True
    assert outcome.prints == "3 3\n"


@pytest.mark.parametrize(
    ("member", "body"),
    [
        ("datetime", "    datetime = [0.0, None]\n"),
        ("getposition", "    def getposition(self, data=None, broker=None):\n        return bt.Position()\n"),
        ("positions", "    positions = {}\n"),
        ("close", "    def close(self, data=None):\n        return None\n"),
        ("broker", "    broker = None\n"),
    ],
)
def test_a_strategy_class_cannot_stand_in_for_the_engines_members(member, body):
    source = f"class Shadow(bt.Strategy):\n{body}\n    def next(self):\n        self.buy(size=50)\n"

    outcome = run(source, probe=3)

    assert outcome.ok is False
    assert outcome.result is None
    assert outcome.error["code"] == "validation_error"
    assert outcome.error["message"].startswith(f"`{member}` belongs to the engine and cannot be defined")


def test_a_subclass_of_an_agent_strategy_is_checked_too():
    source = (
        "class Base(bt.Strategy):\n"
        "    def getposition(self, data=None, broker=None):\n"
        "        return bt.Position()\n\n"
        "class Child(Base):\n"
        "    def next(self):\n"
        "        pass\n"
    )

    outcome = run(source)

    assert outcome.error["code"] == "validation_error"
    assert outcome.error["message"].startswith("`getposition` belongs to the engine")


NAMES = ", ".join(repr(f"name{i}") for i in range(24))
STRING_SET = f"class Names(bt.Strategy):\n    def stop(self):\n        print(list({{{NAMES}}}))\n"


def test_a_set_of_strings_iterates_in_the_same_order_on_every_worker():
    # Each interpreter drew its own string hash: a strategy iterating a set decided in another order on another
    # worker (or after a restart), while the probe's reruns, in the job's own process, agreed with it.
    orders = {run(STRING_SET).prints}
    for _ in range(3):
        sandbox._template(sandbox.bubblewrap_usable(), fresh=True)
        orders.add(run(STRING_SET).prints)

    assert len(orders) == 1


@pytest.mark.parametrize(
    "read",
    ["bt.num2date(self.data.datetime[0]).now()", "self.data.datetime.date(0).today()",
     "bt.num2date(self.data.datetime[0]).utcnow()"],
)  # fmt: skip
def test_the_machines_clock_is_out_of_reach(read):
    source = f"class Clock(bt.Strategy):\n    def next(self):\n        print({read})\n"

    outcome = run(source)

    assert outcome.ok is False
    assert outcome.error["code"] == "execution_error"
    assert outcome.error["message"].startswith("AttributeError: `")
    assert "reads the machine's clock" in outcome.error["message"]
    assert outcome.error["line"] == 3
