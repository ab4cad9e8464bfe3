"""The in-process layers that stand between agent-authored strategy source and the interpreter.

Layer 1 is a static AST allow-list with line/column errors (the friendly, first line of defence). Layer 2 is
RestrictedPython with our own guards around a curated `bt` facade. Neither is the security boundary — the
sandboxed child process is (see `sandbox.py`). This module imports no Django and no backtrader, so the sandbox
child can load it before dropping privileges.
"""

import ast
import builtins
import datetime
import math
import operator
import re
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from RestrictedPython import compile_restricted
from RestrictedPython.Guards import (
    INSPECT_ATTRIBUTES,
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    safe_builtins,
    safer_getattr_raise,
)

MAX_SOURCE_BYTES = 64 * 1024
MAX_PRINT_BYTES = 64 * 1024  # the documented cap on what `print` returns (UTF-8 bytes)
MAX_ERROR_BYTES = 4 * 1024  # the cap on an error message
# Between a child's outcome JSON and a run's packed daily returns on its stdout (JSON text never holds a NUL byte).
RETURNS_MARK = b"\0"
# Opens the first line a child writes to its stderr, before the agent's code runs: the layers then in force, so a
# job killed mid-run (wall clock, output, CPU) still reports what it ran under.
LAYERS_MARK = b"\0layers:"
IN_PROCESS_LAYERS = ("ast", "restricted_python")  # applied by the child's own compile, not by the OS
STRATEGY_MODULE = "strategy"
STRATEGY_FILENAME = "<strategy>"

FORBIDDEN_CALLS = frozenset(
    {
        "exec", "eval", "compile", "open", "__import__", "globals", "locals", "vars", "getattr", "setattr",
        "delattr", "hasattr", "breakpoint", "input", "help", "memoryview", "type", "object", "dir", "id",
        "classmethod", "staticmethod", "property", "exit", "quit", "bytearray", "super",
    }
)  # fmt: skip
# Attribute names that lead from ordinary objects to the interpreter, the engine or the raw data.
FORBIDDEN_ATTRIBUTES = frozenset(INSPECT_ATTRIBUTES) | {
    "env", "cerebro", "dataname", "format", "format_map", "mro", "owner", "analyzers", "observers", "stats",
    "f_lasti", "func_globals", "im_func", "im_self", "gi_running", "tb_lasti", "modules", "array", "plines",
    # A binding copies every value written to one line into another: bound to a feed's or the strategy's clock
    # line, an indicator's writes would rewrite the bars the broker fills against, or blank the clock the probe
    # reads decisions by.
    "addbinding", "oncebinding", "bind2line", "bind2lines", "bindlines", "bindings",
}  # fmt: skip
ALLOWED_DUNDER_METHODS = frozenset({"__init__"})  # as method names only; `super().__init__` is refused
FORBIDDEN_NODES: dict[type[ast.AST], str] = {
    ast.Import: "imports are not allowed; the environment provides `bt` and `math`",
    ast.ImportFrom: "imports are not allowed; the environment provides `bt` and `math`",
    ast.Global: "`global` is not allowed",
    ast.Nonlocal: "`nonlocal` is not allowed",
    ast.With: "`with` blocks are not allowed",
    ast.AsyncWith: "`async with` is not allowed",
    ast.AsyncFunctionDef: "async functions are not allowed",
    ast.AsyncFor: "`async for` is not allowed",
    ast.Await: "`await` is not allowed",
    ast.Yield: "generators (`yield`) are not allowed",
    ast.YieldFrom: "generators (`yield from`) are not allowed",
    ast.GeneratorExp: "generator expressions are not allowed; use a list comprehension",
    ast.Try: "`try` blocks are not allowed",
    ast.TryStar: "`try` blocks are not allowed",
    ast.Raise: "`raise` is not allowed",
    ast.Delete: "`del` is not allowed",
}


@dataclass(frozen=True)
class PolicyViolation(Exception):
    """Agent source refused before it runs: what, and where."""

    code: str
    message: str
    line: int | None = None
    column: int | None = None

    def payload(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "line": self.line, "column": self.column}


REFUSALS: list["Refused"] = []


class Refused(Exception):
    """Agent code asked for something a strategy may not have (a future bar, an invented fill, a write to the
    engine); raised at run time, where it happens, and named by the strategy line that asked."""

    def __init__(self, code: str, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.line = code, message, line
        if not REFUSALS:  # the first refusal fails the run even if the strategy catches it
            REFUSALS.append(self)

    def payload(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "line": self.line}


# How many strategy frames are running, counted by sys.monitoring on the strategy's own code objects (each one the
# compiler made, set before any runs; a frame counts from its start or resume to its return, yield or unwind). The
# engine asks "is agent code on the stack?" on every bar (the feed peeks at its next timestamp): with no strategy
# frame running the answer is known without walking the stack. Only code objects made by a compile of this module
# count, which is every strategy frame there can be under RestrictedPython (no `__code__`, no `type`, no threads);
# plain mode (no in-process layer) could build new code objects or race the count from threads, but it can read
# the raw buffers anyway. The count only lets a check skip the walk; a refusal's line still comes from the walk.
MONITORING_TOOL = 3  # sys.monitoring's ids 0-2 and 5 are the debugger, coverage, profilers and optimizer
_RUNNING = [0]
_MONITORED = [False]


_CODES: dict[int, types.CodeType] = {}  # the counted code objects, by id (kept alive, so ids are never reused)


class RanAhead(Exception):
    """Strategy code was about to run while the engine computed indicators over every bar at once (runonce): an
    indicator of the strategy's own, or a function it handed to a built-in one, would see every future bar."""


# Set while runonce computes the indicators ahead of the strategy's first bar; a strategy frame starting then is
# stopped before its first line (its caller is the engine's loop), so the run can be redone bar by bar.
AHEAD = [False]


def _enter(*_: object) -> None:
    _RUNNING[0] += 1  # first: the frame stopped below still unwinds, and its unwind counts it out
    if AHEAD[0]:
        raise RanAhead


def _leave(*_: object) -> None:
    _RUNNING[0] -= 1


def _thrown(code: types.CodeType, *_: object) -> None:
    if id(code) in _CODES:  # a global event: only a counted frame's resume by throw() counts
        _RUNNING[0] += 1


def _unwound(code: types.CodeType, *_: object) -> None:
    if id(code) in _CODES:  # a global event: only a counted frame's exit by an exception counts
        _RUNNING[0] -= 1


def _monitoring() -> bool:
    """Register the frame counter once per process; False when another tool holds the id (then every check walks)."""
    if _MONITORED[0]:
        return True
    monitoring = sys.monitoring
    if monitoring.get_tool(MONITORING_TOOL) is not None:
        return False
    monitoring.use_tool_id(MONITORING_TOOL, "leroy-agent-frames")
    events = monitoring.events
    callbacks: dict[int, Callable[..., object]] = {
        events.PY_START: _enter, events.PY_RESUME: _enter, events.PY_THROW: _thrown,
        events.PY_RETURN: _leave, events.PY_YIELD: _leave, events.PY_UNWIND: _unwound,
    }  # fmt: skip
    for event, callback in callbacks.items():
        monitoring.register_callback(MONITORING_TOOL, event, callback)
    monitoring.set_events(MONITORING_TOOL, events.PY_THROW | events.PY_UNWIND)  # not settable per code object
    _MONITORED[0] = True
    return True


def _count_frames(code: types.CodeType) -> bool:
    """Count the frames of `code` and of every code object nested in it, and the frames of the functions that call
    on the strategy's behalf (`on_behalf`); False when they cannot be counted."""
    if not _monitoring():
        return False
    events = sys.monitoring.events
    local = events.PY_START | events.PY_RESUME | events.PY_RETURN | events.PY_YIELD
    pending = [code, ON_BEHALF_CODE]
    while pending:
        current = pending.pop()
        _CODES[id(current)] = current
        sys.monitoring.set_local_events(MONITORING_TOOL, current, local)
        pending.extend(const for const in current.co_consts if isinstance(const, types.CodeType))
    return True


# What a strategy reaches through an attribute and can call, other than its own functions: a bound method of a dict
# or a list, a C function, a method of an engine object. None runs strategy code, so the frame counter would not
# see one start: handed to an indicator (`bt.ind.ReduceN(self.data.open, period=2,
# function=self.nextopen.setdefault)`), runonce called it over every bar before the first, and what it stored held
# the future. The strategy gets each wrapped in `on_behalf`, whose frames count as the strategy's: runonce stops
# at one, and the run is redone bar by bar, as for a function of the strategy's own. The math module's functions
# are pure and are given as they are.
CALLABLE_TYPES = (
    types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.MethodDescriptorType,
    types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType,
)  # fmt: skip


def on_behalf(function: Callable[..., Any]) -> Callable[..., Any]:
    def called(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return called


ON_BEHALF_CODE = on_behalf(len).__code__


def _reached(value: Any) -> Any:
    """`value` as the strategy gets it from an attribute: a callable that runs no strategy code, wrapped."""
    if not isinstance(value, CALLABLE_TYPES):
        return value
    if isinstance(value, types.BuiltinFunctionType) and value.__self__ is math:
        return value
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    if code is not None and id(code) in _CODES:  # the strategy's own (or already wrapped): counted
        return value
    return on_behalf(value)


_COUNTED = [True]  # every strategy compiled in this process so far has its frames counted


def frames_counted() -> bool:
    """Whether every strategy frame this process can run is counted (and so seen starting)."""
    return _COUNTED[0] and _MONITORED[0]


def agent_line() -> int | None:
    """The line of the innermost strategy frame on the current stack, or None when no agent code is running."""
    if _COUNTED[0] and _RUNNING[0] == 0:
        return None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == STRATEGY_FILENAME:
            return frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return None


LOOKAHEAD_HELP = "read [0] for the current bar and [-n] (n < len(self)) for past ones"


def lookahead(what: str, line: int | None = None) -> Refused:
    return Refused("lookahead_refused", f"{what} would read bars after the current one; {LOOKAHEAD_HELP}", line)


def _refuse(node: ast.AST, message: str) -> PolicyViolation:
    return PolicyViolation(
        "validation_error", message, getattr(node, "lineno", None), getattr(node, "col_offset", -1) + 1 or None
    )


def validate_source(source: str) -> ast.Module:
    """Layer 1: parse and check the source against the allow-list; raises PolicyViolation."""
    if len(source.encode()) > MAX_SOURCE_BYTES:
        raise PolicyViolation("validation_error", f"the source exceeds {MAX_SOURCE_BYTES} bytes")
    try:
        tree = ast.parse(source, filename="<strategy>")
    except SyntaxError as error:
        raise PolicyViolation("syntax_error", error.msg, error.lineno, error.offset) from None
    strategies = 0
    for node in ast.walk(tree):
        for kind, message in FORBIDDEN_NODES.items():
            if isinstance(node, kind):
                raise _refuse(node, message)
        if isinstance(node, ast.Name):
            if node.id in FORBIDDEN_CALLS:
                raise _refuse(node, f"`{node.id}` is not available in strategies")
            if node.id.startswith("_"):
                raise _refuse(node, f"names starting with an underscore (`{node.id}`) are not allowed")
        elif isinstance(node, ast.Attribute):
            name = node.attr
            if name in FORBIDDEN_ATTRIBUTES:
                raise _refuse(node, f"the attribute `{name}` is not available in strategies")
            if name.startswith("_"):
                raise _refuse(node, f"attributes starting with an underscore (`{name}`) are not allowed")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            if node.name.startswith("_") and node.name not in ALLOWED_DUNDER_METHODS:
                raise _refuse(node, f"names starting with an underscore (`{node.name}`) are not allowed")
            if isinstance(node, ast.ClassDef):
                if node.keywords:
                    raise _refuse(node, "class keywords (metaclasses) are not allowed")
                strategies += any(_is_bt_strategy(base) for base in node.bases)
        elif isinstance(node, (ast.arg, ast.keyword)) and (node.arg or "").startswith("_"):
            raise _refuse(node, f"names starting with an underscore (`{node.arg}`) are not allowed")
    if strategies == 0:
        raise PolicyViolation("validation_error", "the code must define a class derived from bt.Strategy")
    return tree


def _is_bt_strategy(base: ast.expr) -> bool:
    return (
        isinstance(base, ast.Attribute)
        and base.attr in {"Strategy", "SignalStrategy"}
        and isinstance(base.value, ast.Name)
        and base.value.id == "bt"
    )


def declared_parameters(source: str) -> set[str] | None:
    """The parameter names of the strategy that runs (the first bt.Strategy subclass), read statically.

    None when they cannot be read without running the code (then the engine checks them at run time).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(_is_bt_strategy(base) for base in node.bases):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and [getattr(t, "id", None) for t in statement.targets] == [
                    "params"
                ]:
                    try:
                        value = ast.literal_eval(statement.value)
                    except ValueError:
                        return None
                    if isinstance(value, dict):
                        return {str(name) for name in value}
                    if isinstance(value, tuple) and all(isinstance(item, tuple) and item for item in value):
                        return {str(item[0]) for item in value}
                    return None
            return set()
    return None


_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_text(text: str) -> str:
    """Text that is valid UTF-8 and safe in JSON and PostgreSQL: control characters (newline and tab excepted)
    and lone surrogates become visible escapes (`\\x00`, `\\ud800`); NUL never survives."""
    return _UNSAFE.sub(_escape, text)


def clip(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to at most `limit` UTF-8 bytes on a character boundary, and whether anything was cut."""
    encoded = text.encode("utf-8", "backslashreplace")
    if len(encoded) <= limit:
        return text, False
    return encoded[:limit].decode("utf-8", "ignore"), True


def clean_error(error: dict[str, Any]) -> dict[str, Any]:
    """A run error as it may leave the sandbox: a short code, an escaped message capped at 4 KiB (`truncated`
    says it was cut), an integer line or null."""
    message, cut = clip(escape_text(str(error.get("message", ""))), MAX_ERROR_BYTES)
    code, _ = clip(escape_text(str(error.get("code", "execution_error"))), 40)
    line, column = error.get("line"), error.get("column")
    cleaned: dict[str, Any] = {"code": code, "message": message, "line": line if type(line) is int else None}
    if "column" in error:
        cleaned["column"] = column if type(column) is int else None
    if cut or error.get("truncated") is True:
        cleaned["truncated"] = True
    return cleaned


def clean_strings(value: Any) -> Any:
    """Every string inside plain JSON data (keys too) escaped as `escape_text` does."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, dict):
        return {escape_text(str(k)): clean_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_strings(v) for v in value]
    return value


class PrintBuffer:
    """Where `print` inside strategies goes: one bounded buffer per run (RestrictedPython's `_print_`)."""

    def __init__(self, limit: int = MAX_PRINT_BYTES) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0
        self.truncated = False

    def collector(self, _getattr_: object = None) -> "PrintBuffer._Collector":
        return PrintBuffer._Collector(self)

    def write(self, text: str) -> None:
        room = self.limit - self.size
        if room <= 0:
            self.truncated = self.truncated or bool(text)
            return
        kept, cut = clip(escape_text(text[:room]), room)  # `room` bytes never hold more than `room` characters
        self.truncated = self.truncated or cut or len(text) > room
        self.parts.append(kept)
        self.size += len(kept.encode())

    def text(self) -> str:
        return "".join(self.parts)

    class _Collector:
        def __init__(self, buffer: "PrintBuffer") -> None:
            self.buffer = buffer

        def write(self, text: str) -> None:
            self.buffer.write(text)

        def _call_print(self, *objects: object, **kwargs: object) -> None:
            if AHEAD[0]:
                # `print` handed to an indicator as its function (`func=print`) is this method, no strategy frame:
                # runonce would print every future bar's window, for `printed` to read. Stopped as strategy code is.
                raise RanAhead
            sep = kwargs.get("sep", " ")
            end = kwargs.get("end", "\n")
            self.buffer.write(str(sep).join(str(item) for item in objects) + str(end))

        def __call__(self) -> str:
            return self.buffer.text()


_INPLACE: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.add, "-=": operator.sub, "*=": operator.mul, "/=": operator.truediv,
    "//=": operator.floordiv, "%=": operator.mod, "**=": operator.pow, "&=": operator.and_,
    "|=": operator.or_, "^=": operator.xor, "<<=": operator.lshift, ">>=": operator.rshift,
}  # fmt: skip


def _inplacevar(op: str, target: Any, value: Any) -> Any:
    if op not in _INPLACE:
        raise SyntaxError(f"unsupported in-place operator {op}")
    return _INPLACE[op](target, value)


# Reads that reach bars after the current one whatever the argument: the raw buffer, absolute positions, the
# series' total length, or moving a line's cursor. Refused on every line series (data, indicator, strategy).
LOOKAHEAD_ATTRIBUTES = frozenset(
    {"array", "getzeroval", "getzero", "plotrange", "buflen", "advance_peek", "advance", "forward", "backwards",
     "safebackwards", "rewind", "home", "set_idx", "extend", "reset", "qbuffer", "minbuffer", "preload", "load",
     # The engine's own steps: called by a strategy, they compute (or read) where the bars seen so far do not
     # reach (a delayed line's `once` or `next` before its warm-up reads the series' end).
     "once", "oncestart", "preonce", "next", "nextstart", "prenext"}
)  # fmt: skip
# A line's warm-up (its minimum period) keeps it from computing before it has the bars it reads: a delay of k bars
# computed sooner reads the end of the series. A strategy may only lengthen it.
MINPERIOD_SETTERS = frozenset({"setminperiod", "addminperiod", "incminperiod", "updateminperiod"})
# Names a strategy may not rebind on itself or its lines: the engine's objects and a line's cursor and storage.
ENGINE_NAMES = frozenset(
    {"broker", "datas", "data", "ddatas", "dnames", "position", "positions", "sizer", "env", "cerebro", "lines", "l",
     "params", "p", "datetime", "array", "idx", "lencount", "extension", "analyzers", "observers", "stats", "owner"}
)  # fmt: skip
_DATA_ALIAS = re.compile(r"^data(\d+|_.*)$")
REFUSED_ORDER_TYPES = frozenset({"Historical"})
# The machine's clock, on a date or datetime (bt.num2date gives them): a run's decisions would depend on when it ran.
WALL_CLOCK = frozenset({"now", "today", "utcnow"})


@dataclass(frozen=True)
class Guards:
    """What RestrictedPython's rewritten code calls for every attribute read, item access and write."""

    allowed_modules: tuple[types.ModuleType, ...]
    writable: tuple[type, ...]
    # Engine-owned objects a strategy may read but not drive (broker, positions, trades, orders): by type,
    # the only attribute names readable on them. Keeps a strategy from rewriting its own report.
    read_only: tuple[tuple[type, frozenset[str]], ...] = ()
    # ids of the data feeds and their lines (registered by the engine before the run): read-only, allow-listed.
    protected: set[int] = field(default_factory=set)
    protected_names: frozenset[str] = frozenset()
    # Line series (data, indicators, the strategy): `[ago]` counts back from the current bar. With
    # preload/runonce every future value is already in memory, so each read is bounded to the bars seen so far.
    series: tuple[type, ...] = ()
    # Line containers (`.lines`): `[i]` picks the i-th line, it is not a bar offset.
    containers: tuple[type, ...] = ()
    # Order classes: `Historical` (fills at a price the strategy names) is not an order type strategies get.
    orders: tuple[type, ...] = ()
    # (type, name) pairs that passed every check that follows from the type and the name: read again without them
    # (1.15 us a read, 0.52 once cleared; a daily SMA cross reads ~7,500 times). Filled by each job in its own
    # process (the template runs no strategy), and the verdict depends on the type, the name and this configuration.
    cleared: set[tuple[type, str]] = field(default_factory=set, compare=False, repr=False)

    def getattr(self, obj: Any, name: str) -> Any:
        kind = type(obj)
        cleared = (kind, name) in self.cleared and obj.__class__ is kind
        if not cleared:
            self._by_type(obj, name)
        if id(obj) in self.protected and name not in self.protected_names:
            raise AttributeError(f"the attribute `{name}` of market data is not available in strategies")
        if cleared:
            value = getattr(obj, name)
        else:
            value = safer_getattr_raise(obj, name)  # raises on a missing attribute instead of returning None
            # Every check so far follows from the object's type and the name alone (RestrictedPython's too; a name
            # that is not a string raised above), unless the object is a class (an order class's `Historical`), a
            # module (its `string.Formatter` check) or reports another class than its own (isinstance reads
            # `__class__`).
            if obj.__class__ is kind and not isinstance(obj, (type, types.ModuleType)):
                self.cleared.add((kind, name))
        if isinstance(value, types.ModuleType) and not any(value is module for module in self.allowed_modules):
            raise AttributeError(f"`{name}` is a module and is not available in strategies")
        if isinstance(value, (types.FrameType, types.CodeType, types.TracebackType)):
            raise AttributeError(f"the attribute `{name}` is not available in strategies")
        if isinstance(obj, type) and obj.__module__ != "builtins" and not _class_value(value):
            raise AttributeError(
                f"`{name}` of the class {obj.__name__} is not available in strategies: call methods on objects "
                f"(self.{name}(...)), not on classes"
            )
        if isinstance(obj, self.series):
            if name == "get":
                return _reached(_past_only(obj, value))
            if name in MINPERIOD_SETTERS:
                return _reached(_lengthening(obj, name, value))
            if name == "datas" and isinstance(value, list):
                return tuple(value)  # the feed list is the engine's: readable, not reorderable
        return _reached(value)

    def _by_type(self, obj: Any, name: str) -> None:
        """The refusals that follow from the object's type and the attribute's name (the market-data check, which
        follows from the object itself, is the caller's)."""
        if name in LOOKAHEAD_ATTRIBUTES and isinstance(obj, self.series + self.containers):
            raise lookahead(f"`.{name}`", agent_line())
        if name in FORBIDDEN_ATTRIBUTES or name.startswith("_"):
            raise AttributeError(f"the attribute `{name}` is not available in strategies")
        if name in REFUSED_ORDER_TYPES and (isinstance(obj, self.orders) or _subclass(obj, self.orders)):
            raise Refused("order_refused", ORDER_TYPES_HELP, agent_line())
        if name in WALL_CLOCK and (isinstance(obj, datetime.date) or _subclass(obj, (datetime.date,))):
            raise AttributeError(f"`{name}` reads the machine's clock; a backtest's time is its bars' (self.datetime)")
        for kind, names in self.read_only:
            if isinstance(obj, kind) and name not in names:
                raise AttributeError(f"the attribute `{name}` of {kind.__name__} is not available in strategies")

    def getitem(self, obj: Any, key: Any) -> Any:
        line: Any = obj  # isinstance against the tuples of types below narrows to `object` otherwise
        if isinstance(obj, self.containers) or not isinstance(obj, self.series):
            return line[key]
        if type(key) is not int:
            raise lookahead(f"`[{_short(key)}]` (read whole-number offsets, or .get(ago, size))", agent_line())
        if key > 0 or key <= -len(line):
            raise lookahead(f"`[{key}]` with {len(line)} bar(s) seen", agent_line())
        return line[key]

    def write(self, obj: Any) -> Any:
        if id(obj) in self.protected:
            raise TypeError("market data cannot be modified by strategies")
        if isinstance(obj, (dict, list)):
            return obj
        if isinstance(obj, self.writable) and not isinstance(obj, type):
            return _Writer(obj)
        raise TypeError(f"objects of type {type(obj).__name__} cannot be modified by strategies")


ORDER_TYPES_HELP = (
    "only order types whose fills the broker simulates from the bars are available: Market, Close, Limit, Stop, "
    "StopLimit, StopTrail and StopTrailLimit"
)


# What a strategy may read from a class (Backtrader's or its own): classes, constants (`bt.Order.Limit`,
# `bt.TimeFrame.Days`) and its own functions. A function read from a class is called with the object as an argument,
# which passes by every check made on the object: `bt.Position.update(self.position, 10 ** 4, 0.01)` would bypass
# the position's read-only names, `bt.ind.LineActions.advance(line)` move a line's cursor onto future bars, and an
# unbound `getpositions` hand over the broker's own dict.
CLASS_VALUES = (type, int, float, complex, str, bytes, bool, type(None), tuple, list, dict, set, frozenset)


def _class_value(value: Any) -> bool:
    if isinstance(value, CLASS_VALUES):
        return True
    code = getattr(value, "__code__", None)
    return code is not None and id(code) in _CODES and isinstance(value, types.FunctionType)


def _subclass(obj: Any, kinds: tuple[type, ...]) -> bool:
    return isinstance(obj, type) and issubclass(obj, kinds)


def _short(key: Any) -> str:
    return repr(key)[:40]


class _Writer:
    """The strategy's handle for assigning to its own objects: the engine's names stay out of reach."""

    __slots__ = ("target",)
    target: Any

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "target", target)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ENGINE_NAMES or _DATA_ALIAS.match(name) or name.startswith("_"):
            raise Refused("write_refused", f"`{name}` belongs to the engine and cannot be assigned", agent_line())
        setattr(self.target, name, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.target[key] = value


def _lengthening(line: Any, name: str, setter: Callable[..., Any]) -> Callable[..., Any]:
    def lengthen(minperiod: int) -> Any:
        current = line._minperiod
        lowest = {"setminperiod": current, "addminperiod": 1, "incminperiod": 0, "updateminperiod": 1}[name]
        if type(minperiod) is not int or minperiod < lowest:
            what = f"`.{name}({_short(minperiod)})` (a warm-up of {current} bar(s) made shorter)"
            raise lookahead(what, agent_line())
        return setter(minperiod)

    return lengthen


def _past_only(line: Any, get: Callable[..., Any]) -> Callable[..., Any]:
    def past(ago: int = 0, size: int = 1) -> Any:
        if type(ago) is not int or type(size) is not int:
            raise lookahead("`.get()` with offsets that are not whole numbers", agent_line())
        if ago > 0 or ago <= -len(line):
            raise lookahead(f"`.get(ago={ago})` with {len(line)} bar(s) seen", agent_line())
        return get(ago=ago, size=size)

    return past


EXTRA_BUILTINS: dict[str, object] = {
    name: getattr(builtins, name)
    for name in (
        "min", "max", "sum", "abs", "round", "len", "range", "enumerate", "zip", "list", "dict", "tuple", "set",
        "frozenset", "sorted", "reversed", "any", "all", "map", "filter", "isinstance", "float", "int", "bool",
        "str", "divmod", "pow",
    )
}  # fmt: skip


def strategy_builtins() -> dict[str, object]:
    unsafe = {"setattr", "delattr", "_getattr_", "id", "hash", "BaseException", "KeyboardInterrupt", "SystemExit"}
    return {k: v for k, v in safe_builtins.items() if k not in unsafe} | EXTRA_BUILTINS


def compile_strategy(source: str, *, bt_facade: object, guards: Guards, prints: PrintBuffer) -> types.ModuleType:
    """Layer 2: compile with RestrictedPython and execute the module body into a fresh module.

    The module is registered in `sys.modules` because backtrader's metaclass looks classes' modules up there.
    """
    try:
        code = compile_restricted(source, filename="<strategy>", mode="exec")
    except SyntaxError as error:
        messages = error.msg if isinstance(error.msg, tuple) else (str(error.msg),)
        line = re.match(r"Line (\d+):", messages[0])
        lineno = error.lineno or (int(line.group(1)) if line else None)
        raise PolicyViolation("validation_error", "; ".join(messages), lineno, error.offset) from None
    module = types.ModuleType(STRATEGY_MODULE)
    module.__dict__.update(
        {
            "__builtins__": strategy_builtins(),
            "__name__": STRATEGY_MODULE,
            "__metaclass__": type,
            "_getattr_": guards.getattr,
            "_getitem_": guards.getitem,
            "_getiter_": iter,
            "_write_": guards.write,
            "_inplacevar_": _inplacevar,
            "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
            "_unpack_sequence_": guarded_unpack_sequence,
            "_apply_": lambda func, *args, **kwargs: func(*args, **kwargs),
            "_print_": prints.collector,
            "bt": bt_facade,
            "math": math,
        }
    )
    sys.modules[STRATEGY_MODULE] = module
    _count(code)
    exec(code, module.__dict__)  # noqa: S102 - restricted bytecode, the point of this module
    return module


def compile_plain(source: str, *, bt_module: object) -> types.ModuleType:
    """No in-process layers: the code runs as written (used to prove the OS layers on their own)."""
    module = types.ModuleType(STRATEGY_MODULE)
    module.__dict__.update({"__name__": STRATEGY_MODULE, "bt": bt_module, "math": math})
    sys.modules[STRATEGY_MODULE] = module
    code = compile(source, STRATEGY_FILENAME, "exec")
    _count(code)
    exec(code, module.__dict__)  # noqa: S102
    return module


def _count(code: types.CodeType) -> None:
    """Before a strategy's code first runs: count its frames or, where they cannot be counted, walk the stack on
    every check in this process from now on."""
    if not _count_frames(code):
        _COUNTED[0] = False


def strategy_classes(module: types.ModuleType, base: type) -> list[type]:
    """The strategy classes the source defined, in definition order."""
    found: Iterable[Any] = module.__dict__.values()
    return [
        obj for obj in found if isinstance(obj, type) and issubclass(obj, base) and obj.__module__ == module.__name__
    ]
