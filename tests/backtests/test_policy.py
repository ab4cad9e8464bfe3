"""The strategy-frame counter behind `agent_line`: exact through calls, generators, throws and exceptions."""

import contextlib
import types

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
