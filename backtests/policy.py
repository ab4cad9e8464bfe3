"""The in-process layers that stand between agent-authored strategy source and the interpreter.

Layer 1 is a static AST allow-list with line/column errors (the friendly, first line of defence). Layer 2 is
RestrictedPython with our own guards around a curated `bt` facade. Neither is the security boundary — the
sandboxed child process is (see `sandbox.py`). This module imports no Django and no backtrader, so the sandbox
child can load it before dropping privileges.
"""

import ast
import builtins
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
MAX_PRINT_CHARS = 64 * 1024
STRATEGY_MODULE = "strategy"

FORBIDDEN_CALLS = frozenset(
    {
        "exec", "eval", "compile", "open", "__import__", "globals", "locals", "vars", "getattr", "setattr",
        "delattr", "hasattr", "breakpoint", "input", "help", "memoryview", "type", "object", "dir", "id",
        "classmethod", "staticmethod", "property", "exit", "quit", "bytearray",
    }
)  # fmt: skip
# Attribute names that lead from ordinary objects to the interpreter, the engine or the raw data.
FORBIDDEN_ATTRIBUTES = frozenset(INSPECT_ATTRIBUTES) | {
    "env", "cerebro", "dataname", "format", "format_map", "mro", "owner", "analyzers", "observers", "stats",
    "f_lasti", "func_globals", "im_func", "im_self", "gi_running", "tb_lasti", "modules", "array", "plines",
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


class PrintBuffer:
    """Where `print` inside strategies goes: one bounded buffer per run (RestrictedPython's `_print_`)."""

    def __init__(self, limit: int = MAX_PRINT_CHARS) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0
        self.truncated = False

    def collector(self, _getattr_: object = None) -> "PrintBuffer._Collector":
        return PrintBuffer._Collector(self)

    def write(self, text: str) -> None:
        room = self.limit - self.size
        if room <= 0:
            self.truncated = True
            return
        if len(text) > room:
            text, self.truncated = text[:room], True
        self.parts.append(text)
        self.size += len(text)

    def text(self) -> str:
        return "".join(self.parts)

    class _Collector:
        def __init__(self, buffer: "PrintBuffer") -> None:
            self.buffer = buffer

        def write(self, text: str) -> None:
            self.buffer.write(text)

        def _call_print(self, *objects: object, **kwargs: object) -> None:
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
    # Line series (data, indicators): with preload/runonce their future values are already computed, so
    # reading ahead (`[1]`, `.get(ago=1)`) is refused rather than silently allowed.
    series: tuple[type, ...] = ()

    def getattr(self, obj: Any, name: str) -> Any:
        if name in FORBIDDEN_ATTRIBUTES or name.startswith("_"):
            raise AttributeError(f"the attribute `{name}` is not available in strategies")
        if id(obj) in self.protected and name not in self.protected_names:
            raise AttributeError(f"the attribute `{name}` of market data is not available in strategies")
        for kind, names in self.read_only:
            if isinstance(obj, kind) and name not in names:
                raise AttributeError(f"the attribute `{name}` of {kind.__name__} is not available in strategies")
        value = safer_getattr_raise(obj, name)  # raises on a missing attribute instead of returning None
        if isinstance(value, types.ModuleType) and not any(value is module for module in self.allowed_modules):
            raise AttributeError(f"`{name}` is a module and is not available in strategies")
        if isinstance(value, (types.FrameType, types.CodeType, types.TracebackType)):
            raise AttributeError(f"the attribute `{name}` is not available in strategies")
        if name == "get" and isinstance(obj, self.series):
            return _past_only(value)
        return value

    def getitem(self, obj: Any, key: Any) -> Any:
        if isinstance(obj, self.series) and isinstance(key, int) and key > 0:
            raise IndexError(FUTURE_REFUSED)
        return obj[key]

    def write(self, obj: Any) -> Any:
        if id(obj) in self.protected:
            raise TypeError("market data cannot be modified by strategies")
        if isinstance(obj, (dict, list)) or (isinstance(obj, self.writable) and not isinstance(obj, type)):
            return obj
        raise TypeError(f"objects of type {type(obj).__name__} cannot be modified by strategies")


FUTURE_REFUSED = "future bars are not available: read [0] for the current bar and [-n] for past ones"


def _past_only(get: Callable[..., Any]) -> Callable[..., Any]:
    def past(ago: int = 0, size: int = 1) -> Any:
        if ago > 0:
            raise IndexError(FUTURE_REFUSED)
        return get(ago=ago, size=size)

    return past


EXTRA_BUILTINS: dict[str, object] = {
    name: getattr(builtins, name)
    for name in (
        "min", "max", "sum", "abs", "round", "len", "range", "enumerate", "zip", "list", "dict", "tuple", "set",
        "frozenset", "sorted", "reversed", "any", "all", "map", "filter", "isinstance", "float", "int", "bool",
        "str", "divmod", "pow", "super",
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
    exec(code, module.__dict__)  # noqa: S102 - restricted bytecode, the point of this module
    return module


def compile_plain(source: str, *, bt_module: object) -> types.ModuleType:
    """No in-process layers: the code runs as written (used to prove the OS layers on their own)."""
    module = types.ModuleType(STRATEGY_MODULE)
    module.__dict__.update({"__name__": STRATEGY_MODULE, "bt": bt_module, "math": math})
    sys.modules[STRATEGY_MODULE] = module
    exec(compile(source, "<strategy>", "exec"), module.__dict__)  # noqa: S102
    return module


def strategy_classes(module: types.ModuleType, base: type) -> list[type]:
    """The strategy classes the source defined, in definition order."""
    found: Iterable[Any] = module.__dict__.values()
    return [
        obj for obj in found if isinstance(obj, type) and issubclass(obj, base) and obj.__module__ == module.__name__
    ]
