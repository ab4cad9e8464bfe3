"""The strategy-frame counter behind `agent_line` (exact through calls, generators, throws and exceptions) and the
guards' cache of cleared reads."""

import contextlib
import types

import pytest

from backtests import policy

SOURCE = """
def line_here():
    return probe.line()

def gen():
    yield probe.line()
    yield probe.line()

def fails():
    raise ValueError("out")

def caught():
    try:
        fails()
    except ValueError:
        return probe.line()

def through(callback):
    return callback()

def deep(n):
    return deep(n + 1)
"""


def compiled() -> types.ModuleType:
    module = policy.compile_plain(SOURCE, bt_module=None)
    module.__dict__["probe"] = types.SimpleNamespace(line=policy.agent_line)
    return module


def test_a_strategy_frame_is_found_and_none_is_reported_outside_one():
    module = compiled()

    assert module.line_here() == 3
    assert policy.agent_line() is None
    assert policy._COUNTED == [True]  # answered by the counter, not by a walk


def test_a_generator_counts_only_while_it_runs():
    module = compiled()
    values = module.gen()

    assert next(values) == 6
    assert policy.agent_line() is None
    assert next(values) == 7
    values.close()
    assert policy.agent_line() is None


def test_frames_left_by_an_exception_or_a_throw_stop_counting():
    module = compiled()
    values = module.gen()
    next(values)

    with contextlib.suppress(KeyError):
        values.throw(KeyError("in"))
    with contextlib.suppress(ValueError):
        module.fails()

    assert module.caught() == 16
    assert policy.agent_line() is None


def test_engine_code_called_by_a_strategy_still_sees_it_on_the_stack():
    module = compiled()

    assert module.through(lambda: policy.agent_line()) == 19


def test_a_recursion_that_hits_the_limit_leaves_the_count_exact():
    module = compiled()

    with contextlib.suppress(RecursionError):
        module.deep(0)

    assert policy._RUNNING == [0]
    assert module.line_here() == 3


class Bars:
    close = 1.0
    volume = 2.0


class Meta(type):
    pass


class OrderKind(metaclass=Meta):
    Market = 0
    Historical = 1


class OtherKind(metaclass=Meta):
    Historical = 1


class Broker:
    cash = 3.0


class Claims:
    """Reports whatever class it is told to (isinstance reads `__class__`)."""

    secret = 4.0

    def __init__(self, claimed: type | None = None) -> None:
        self.claimed = claimed

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return self.claimed or type(self)


def guards(**config) -> policy.Guards:
    return policy.Guards(allowed_modules=(), writable=(), **config)


def test_a_read_cleared_for_a_type_still_refuses_the_market_data_of_that_type():
    checks = guards(protected_names=frozenset({"close"}))
    free, data = Bars(), Bars()
    checks.protected.add(id(data))
    assert checks.getattr(free, "volume") == 2.0
    assert checks.cleared == {(Bars, "volume")}
    with pytest.raises(AttributeError, match="of market data is not available"):
        checks.getattr(data, "volume")
    assert checks.getattr(data, "close") == 1.0


def test_a_class_is_checked_on_every_read_never_cleared_by_its_metaclass():
    checks = guards(orders=(OrderKind,))
    assert checks.getattr(OtherKind, "Historical") == 1
    assert checks.getattr(OrderKind, "Market") == 0
    with pytest.raises(policy.Refused):
        checks.getattr(OrderKind, "Historical")
    assert checks.cleared == set()


def test_an_object_claiming_a_read_only_class_is_refused_after_its_type_was_cleared():
    checks = guards(read_only=((Broker, frozenset({"cash"})),))
    assert checks.getattr(Claims(), "secret") == 4.0
    assert checks.cleared == {(Claims, "secret")}
    with pytest.raises(AttributeError, match="of Broker is not available"):
        checks.getattr(Claims(Broker), "secret")


def test_a_refused_read_is_refused_again_and_never_cleared():
    checks = guards()
    for _ in range(2):
        with pytest.raises(AttributeError, match="`_hidden` is not available"):
            checks.getattr(Bars(), "_hidden")
    assert checks.cleared == set()


def test_print_handed_to_an_indicator_is_stopped_in_the_pass_ahead_of_the_strategy_and_writes_nothing():
    # `func=print` is the collector's _call_print, no strategy frame: runonce would have printed every future
    # window into what `printed` reads (found from outside; only storing its None failed the run).
    prints = policy.PrintBuffer()
    printing = prints.collector()._call_print
    policy.AHEAD[0] = True
    try:
        with pytest.raises(policy.RanAhead):
            printing(101.5)
    finally:
        policy.AHEAD[0] = False
    printing(99.0)

    assert prints.text() == "99.0\n"
