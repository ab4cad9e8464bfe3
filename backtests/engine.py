"""The Backtrader engine: the only module that imports backtrader (it runs inside the sandbox child).

Bars arrive as plain lists and feed a list-backed data feed (1.7x the stock pandas feed, notes §2) with
`preload`/`runonce` on. Results leave as plain data: reconstructed trades, the equity curve, daily returns and
backtrader's TradeAnalyzer output; statistics are computed from them by `statistics.py` outside the sandbox.
"""

import functools
import inspect
import json
import math
import os
import sys
import types
from collections.abc import Callable
from datetime import date
from typing import Any

import backtrader as bt

from backtests import policy
from backtests.policy import (
    ENGINE_NAMES,
    ORDER_TYPES_HELP,
    Guards,
    PolicyViolation,
    PrintBuffer,
    Refused,
    agent_line,
    compile_plain,
    compile_strategy,
    lookahead,
    strategy_classes,
    validate_source,
)
from backtests.probing import EPOCH_ORDINAL, STEP_END, STEP_NEXT, STEP_ROW, aligned, iso
from backtests.statistics import trade_sign

MAX_EQUITY_POINTS = 2000


class EngineError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _facade() -> types.SimpleNamespace:
    """The curated `bt` that strategies see: never the real module (it carries bt.os, bt.sys, bt.io...)."""
    names = [
        "Strategy", "SignalStrategy", "Indicator", "Order", "TimeFrame", "Position", "Trade", "num2date",
        "date2num", "And", "Or", "If", "Max", "Min", "Sum", "All", "Any", "Cmp", "DivByZero", "LineSeries",
    ]  # fmt: skip
    members: dict[str, Any] = {name: getattr(bt, name) for name in names}
    members.update({name: getattr(bt, name) for name in dir(bt) if name.startswith("SIGNAL_")})
    members.update(indicators=bt.indicators, ind=bt.indicators)
    return types.SimpleNamespace(**members)


ORDER_STATES = frozenset(bt.Order.Status) | (frozenset(bt.Order.ExecTypes) - {"Historical"}) | {"Buy", "Sell"}
READ_ONLY = (
    (bt.BrokerBase, frozenset({"getvalue", "getcash", "get_value", "get_cash", "getposition", "startingcash",
                               "get_fundvalue", "get_fundshares", "fundvalue", "fundshares", "getcommissioninfo"})),
    (bt.CommInfoBase, frozenset({"getcommission", "getoperationcost", "getvaluesize", "getsize", "get_leverage",
                                 "getvalue", "profitandloss", "p", "params"})),
    (bt.Position, frozenset({"size", "price", "adjbase", "datetime", "upopened", "upclosed"})),
    (bt.Trade, frozenset({"ref", "tradeid", "data", "size", "price", "value", "commission", "pnl", "pnlcomm",
                          "justopened", "isopen", "isclosed", "baropen", "dtopen", "barclose", "dtclose", "barlen",
                          "status", "long", "Created", "Open", "Closed", "open_datetime", "close_datetime"})),
    (bt.OrderBase, ORDER_STATES | {"ref", "status", "data", "size", "price", "pricelimit", "exectype", "ordtype",
                                   "created", "executed", "isbuy", "issell", "alive", "getstatusname",
                                   "getordername", "info", "tradeid"}),
    (bt.OrderData, frozenset({"dt", "size", "remsize", "price", "pricelimit", "value", "comm", "pnl", "margin",
                              "psize", "pprice"})),
)  # fmt: skip
FEED_NAMES = frozenset(
    {"open", "high", "low", "close", "volume", "openinterest", "datetime", "lines", "get", "date", "time",
     "num2date", "date2num", "getlinealiases"}
)  # fmt: skip
GUARDS = Guards(
    allowed_modules=(bt.indicators, math),
    writable=(bt.LineRoot, bt.lineseries.Lines),
    read_only=READ_ONLY,
    protected_names=FEED_NAMES,
    series=(bt.LineRoot,),
    containers=(bt.lineseries.Lines,),
    orders=(bt.OrderBase,),
)
# Filled from the bars by the broker's own simulation; `Historical` fills at whatever price the strategy names.
SIMULATED_ORDER_TYPES = frozenset(
    {None, bt.Order.Market, bt.Order.Close, bt.Order.Limit, bt.Order.Stop, bt.Order.StopLimit, bt.Order.StopTrail,
     bt.Order.StopTrailLimit}
)  # fmt: skip


# --- the runtime look-ahead layer -------------------------------------------------------------------------------
# RestrictedPython's guards see `obj[key]` and `obj.name` in agent code, but not the reads that happen on its
# behalf: `sum(line)`, `sorted(line)`, unpacking, iteration, a lambda the engine calls. So the line objects
# themselves refuse, whenever agent code is on the stack, every read that would reach past the current bar
# (Backtrader wraps a negative offset to the end of the preloaded series). Engine reads (the feed peeking at its
# next timestamp, runonce indicators filling their buffers) carry no agent frame and are unchanged, so built-in
# indicators keep their exact values. The first refusal is kept (policy.REFUSALS), so catching it changes nothing.
def _outside(buffer: Any, ago: int) -> bool:
    return ago > 0 or buffer.idx + ago < 0


def _guard_ago(method: Callable[..., Any], position: int) -> Callable[..., Any]:
    """Wrap a LineBuffer method whose argument at `position` (after self) is a bar offset `ago`."""
    default = inspect.signature(method).parameters["ago"].default

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        ago = kwargs["ago"] if "ago" in kwargs else args[position] if len(args) > position else default
        # A bool or an int subclass indexes as the int it is (`datetime(True)` reads the next bar); strategy code
        # cannot redefine an int's arithmetic (dunder names are refused), so int(ago) is the offset read.
        if isinstance(ago, int) and _outside(self, int(ago)) and (line := agent_line()) is not None:
            raise lookahead(f"`.{method.__name__}(ago={ago})`", line)
        return method(self, *args, **kwargs)

    return guarded


def _guard_always(method: Callable[..., Any], what: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if (line := agent_line()) is not None:
            raise lookahead(what, line)
        return method(self, *args, **kwargs)

    return guarded


AGENT_FILES = frozenset({policy.STRATEGY_FILENAME, policy.__file__})


def _array_property(kind: str) -> property:
    def get(self: Any) -> Any:
        if sys._getframe(1).f_code.co_filename in AGENT_FILES:
            raise lookahead("`.array` (every bar of the series, future ones included)", agent_line())
        return self.lines[0].array if kind == "series" else self.__dict__["_leroy_array"]

    def put(self: Any, value: Any) -> None:
        self.__dict__["_leroy_array"] = value

    return property(get, put if kind == "buffer" else None)


def _lookahead_guards() -> None:
    """Install the runtime layer on Backtrader's line classes (once per process: the sandbox child)."""
    buffer = bt.linebuffer.LineBuffer
    if getattr(buffer, "_leroy_guarded", False):
        return
    buffer._leroy_guarded = True  # type: ignore[attr-defined]
    bt.functions.CmpEx.next = _cmpex_next  # type: ignore[method-assign]

    def getitem(self: Any, ago: int) -> Any:
        at = self.idx + ago
        if (ago > 0 or at < 0) and (line := agent_line()) is not None:
            raise lookahead(f"`[{ago}]` with {self.idx + 1} bar(s) seen", line)
        return self.__dict__["_leroy_array"][at]

    original_get = buffer.get

    def get(self: Any, ago: int = 0, size: int = 1) -> Any:
        if (ago > 0 or self.idx + ago < 0) and (line := agent_line()) is not None:
            raise lookahead(f"`.get(ago={ago}, size={size})` with {self.idx + 1} bar(s) seen", line)
        return original_get(self, ago, size)

    original_zeroval, original_zero = buffer.getzeroval, buffer.getzero

    def getzeroval(self: Any, idx: int = 0) -> Any:
        if not 0 <= idx <= self.idx and (line := agent_line()) is not None:
            raise lookahead(f"`.getzeroval({idx})` with {self.idx + 1} bar(s) seen", line)
        return original_zeroval(self, idx)

    def getzero(self: Any, idx: int = 0, size: int = 1) -> Any:
        if not (idx >= 0 and idx + size - 1 <= self.idx) and (line := agent_line()) is not None:
            raise lookahead(f"`.getzero({idx}, {size})` with {self.idx + 1} bar(s) seen", line)
        return original_zero(self, idx, size)

    # The engine's own hot paths keep reaching the raw buffer directly (each `self.array` would now be a guarded
    # property read): the stock methods' bodies, with `self.array` as the raw buffer.
    def forward(self: Any, value: Any = bt.linebuffer.NAN, size: int = 1) -> None:
        self.idx += size
        self.lencount += size
        append = self.__dict__["_leroy_array"].append
        for _ in range(size):
            append(value)

    def setitem(self: Any, ago: int, value: Any) -> None:
        self.__dict__["_leroy_array"][self.idx + ago] = value
        for binding in self.bindings:
            binding[ago] = value

    def set_value(self: Any, value: Any, ago: int = 0) -> None:
        self.__dict__["_leroy_array"][self.idx + ago] = value
        for binding in self.bindings:
            binding[ago] = value

    buffer.forward = forward  # type: ignore[method-assign]
    buffer.__setitem__ = setitem  # type: ignore[method-assign]
    buffer.set = set_value  # type: ignore[method-assign]
    buffer.__getitem__ = getitem  # type: ignore[method-assign]
    buffer.get = get  # type: ignore[method-assign]
    buffer.getzeroval = getzeroval  # type: ignore[method-assign]
    buffer.getzero = getzero  # type: ignore[method-assign]
    buffer.buflen = _guard_always(buffer.buflen, "`.buflen()` (the length of the whole series)")  # type: ignore[method-assign]
    buffer.plotrange = _guard_always(buffer.plotrange, "`.plotrange()` (absolute positions)")  # type: ignore[method-assign]
    for name in ("datetime", "date", "time", "dt", "tm_raw", "tm"):
        setattr(buffer, name, _guard_ago(getattr(buffer, name), 0))
    for name in ("tm_lt", "tm_le", "tm_eq", "tm_gt", "tm_ge", "tm2dtime", "tm2datetime"):
        setattr(buffer, name, _guard_ago(getattr(buffer, name), 1))
    buffer.array = _array_property("buffer")  # type: ignore[assignment]
    bt.lineseries.LineSeries.array = _array_property("series")  # type: ignore[assignment]
    forward_init = bt.linebuffer._LineForward.__init__

    def forward(self: Any, a: Any, ago: int) -> None:
        if (line := agent_line()) is not None:
            what = f"a line shifted {ago} bar(s) forward (`line({ago})`, or Ichimoku's chikou span)"
            raise lookahead(what, line)
        forward_init(self, a, ago)

    bt.linebuffer._LineForward.__init__ = forward  # type: ignore[method-assign]


def _cmpex_next(self: Any) -> None:
    """Backtrader's CmpEx (bt.CmpEx, DemarkPivotPoint's pivot) computes bar by bar the comparison's sign (-1, 0, 1)
    where its runonce pass picks r1, r2 or r3: a run bar by bar (a probe's rerun, datas on different calendars)
    held a pivot of -0.25 where runonce held 99.5 (found from outside). Its `once` done one bar at a time."""
    a, b = self.a[0], self.b[0]
    self[0] = self.r1[0] if a < b else self.r3[0] if a > b else self.r2[0]


def prepare() -> None:
    """What every run needs installed, done once in the sandbox template before it forks jobs."""
    _lookahead_guards()


STOP_TYPES = frozenset({bt.Order.Stop, bt.Order.StopLimit, bt.Order.StopTrail, bt.Order.StopTrailLimit})
STALE_CHECKED = frozenset(
    {bt.Order.Limit, bt.Order.Stop, bt.Order.StopLimit, bt.Order.StopTrail, bt.Order.StopTrailLimit}
)


def _clock(strategy: Any) -> float:
    """The strategy's moment: its latest data's bar (Backtrader sets the strategy's clock so). A data whose bar is
    older has none now, another data's bar having moved the clock."""
    return float(max(data.datetime[0] for data in strategy.datas if len(data)))


ORDER_NUMBERS = ("price", "plimit", "trailamount", "trailpercent")
# The named arguments of the broker's buy and sell; any other is kept in the order's info.
ORDER_ARGUMENTS = frozenset({*ORDER_NUMBERS, "exectype", "valid", "tradeid", "oco", "parent", "transmit",
                             "histnotify", "_checksubmit"})  # fmt: skip


def _finite_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _described(value: Any) -> str:
    return repr(value) if type(value) in (int, float) else f"a {type(value).__name__}"


class GuardedBroker(bt.brokers.BackBroker):
    """The stock broker, taking only the order types it fills from the bars, and keeping every order decision
    (when, which data, what) for the truncation probe. Decisions taken in `stop()` are not kept: a run on cut
    data calls `stop()` earlier."""

    def __init__(self) -> None:
        super().__init__()
        self.decisions: list[dict[str, Any]] = []
        self.decided: dict[int, int] = {}  # order ref -> index of its decision
        self.stopping = False
        self.cancelling = False
        self.not_on_close: set[int] = set()  # refs of orders that may not fill on close (see _order)

    def _decide(self, owner: Any, decision: dict[str, Any], order: Any = None) -> None:
        if self.stopping:
            return
        if order is not None:
            self.decided[order.ref] = len(self.decisions)
        # The latest bar of its datas, as the strategy's clock reads it in next(): a timer fires before that clock
        # moves to the bar the datas are on (read from the clock, a timer's order was a bar early, and missing from
        # a run cut at that earlier bar).
        self.decisions.append({"bar": _clock(owner) if any(len(data) for data in owner.datas) else None, **decision})

    def _order(self, side: str, owner: Any, data: Any, size: Any, args: dict[str, Any]) -> Any:
        if args["exectype"] not in SIMULATED_ORDER_TYPES or args["histnotify"] or args["_checksubmit"] is not True:
            raise Refused("order_refused", ORDER_TYPES_HELP, agent_line())
        if not (type(args["tradeid"]) is int and args["tradeid"] == 0):
            # Backtrader keeps a trade per tradeid but one position per data: a long and a short under two ids net
            # to nothing, and closing only the winning leg each time reported won trades alone (all of them won,
            # the account flat, no open position shown). One trade per data keeps trades and positions the same.
            message = "`tradeid` must be 0: a run keeps one trade per data, the data's position"
            raise Refused("order_refused", message, agent_line())
        if not any(data is feed for feed in owner.datas):
            # An object of the strategy's own dressed as a feed (lines named open...close) would set the prices.
            raise Refused("order_refused", "an order's `data` must be one of the run's data feeds", agent_line())
        for name, value in (("size", size), *((key, args[key]) for key in ORDER_NUMBERS)):
            if value is not None and not _finite_number(value):
                # A line as a limit price is read by the broker on the bar it fills (`price=self.data.low`: every
                # buy at that bar's low); a nan or an infinity is no price at all.
                message = f"`{name}` must be a finite number or None, not {_described(value)}"
                raise Refused("order_refused", message, agent_line())
        make = super().buy if side == "buy" else super().sell
        order = make(owner, data, size, **args)
        if self.p.coc and len(data) and data.datetime[0] < _clock(owner):
            # On close means this bar's close, and this data has no bar now (another data's bar moved the clock):
            # its close is an earlier bar's, seen before what the strategy saw since. It fills at its next open.
            order.addinfo(coc=False)
            self.not_on_close.add(order.ref)
        decision = {"side": side, "data": data._name, "size": size, "exectype": order.exectype, "price": args["price"],
                    "plimit": args["plimit"], "trailamount": args["trailamount"],
                    "trailpercent": args["trailpercent"]}  # fmt: skip
        self._decide(owner, decision | self._terms(args), order)
        return order

    def _terms(self, args: dict[str, Any]) -> dict[str, Any]:
        """An order's other terms where they are not the default, so the probe compares them too: an order that
        lives or expires (`valid`), or is linked to others, by what the strategy saw ahead is a different decision."""
        terms: dict[str, Any] = {}
        if args["valid"] is not None:
            terms["valid"] = args["valid"] if type(args["valid"]) in (int, float) else str(args["valid"])
        for link in ("oco", "parent"):
            if args[link] is not None:  # by the decision that placed it
                terms[link] = self.decided.get(getattr(args[link], "ref", None))
        if args["transmit"] is not True:
            terms["transmit"] = bool(args["transmit"])
        info = {key: value for key, value in args.items() if key not in ORDER_ARGUMENTS}
        if info:  # kept in order.info, where some change the fill (`coc=False` under buy_on_close)
            terms["info"] = {key: info[key] for key in sorted(info)}
        return terms

    def buy(self, owner: Any, data: Any, size: Any, price: Any = None, plimit: Any = None, exectype: Any = None,
            valid: Any = None, tradeid: int = 0, oco: Any = None, trailamount: Any = None, trailpercent: Any = None,
            parent: Any = None, transmit: bool = True, histnotify: bool = False, _checksubmit: bool = True,
            **kwargs: Any) -> Any:  # fmt: skip
        args = {k: v for k, v in locals().items() if k not in ("self", "owner", "data", "size", "kwargs", "__class__")}
        return self._order("buy", owner, data, size, args | kwargs)

    def sell(self, owner: Any, data: Any, size: Any, price: Any = None, plimit: Any = None, exectype: Any = None,
             valid: Any = None, tradeid: int = 0, oco: Any = None, trailamount: Any = None, trailpercent: Any = None,
             parent: Any = None, transmit: bool = True, histnotify: bool = False, _checksubmit: bool = True,
             **kwargs: Any) -> Any:  # fmt: skip
        args = {k: v for k, v in locals().items() if k not in ("self", "owner", "data", "size", "kwargs", "__class__")}
        return self._order("sell", owner, data, size, args | kwargs)

    def cancel(self, order: Any, bracket: bool = False) -> Any:
        # Only the strategy's own cancels are decisions, one per call (the stock cancel cancels the order's
        # bracket again through this method): the broker cancels too (an order refused for margin, the other side
        # of a bracket), a bar after the order, so a run cut at the order's bar would lack them and an honest
        # strategy would fail the probe.
        if self.cancelling:
            return super().cancel(order, bracket=bracket)
        if order.ref in self.decided and agent_line() is not None:
            self._decide(order.owner, {"cancel": self.decided[order.ref]})
        self.cancelling = True
        try:
            return super().cancel(order, bracket=bracket)
        finally:
            self.cancelling = False

    # --- shorts are collateralised like longs -------------------------------------------------------------------
    # Backtrader checks an order's cash only for what it costs, and a short's proceeds add cash: any short passed,
    # so a 1x account could sell 7x its cash short. Here the proceeds are held against the short, and every short
    # needs besides the cash a long of its size would (its value / leverage): an order that opens a position is
    # refused for margin (as an unaffordable buy is) unless the cash after it covers every short at that. With no
    # short after the order, nothing changes. An order that only reduces positions is never refused.
    def _execute(self, order: Any, ago: Any = None, price: Any = None, cash: Any = None, position: Any = None,
                 dtcoc: Any = None) -> Any:  # fmt: skip
        if ago is None:  # the check at submission, on the price the order was made at
            shortfall = self._shortfall(order, order.created.price, cash, position)
            # The cash it would leave, net of what its shorts hold: below zero, so check_submitted refuses it.
            return -shortfall if shortfall else super()._execute(order, cash=cash, position=position)
        if price is None or not self._shortfall(order, price, self.cash, self.positions[order.data]):
            return super()._execute(order, ago=ago, price=price, dtcoc=dtcoc)
        held = self.positions[order.data].size
        closing = min(abs(held), abs(order.executed.remsize)) if held * order.executed.remsize < 0 else 0
        if closing:  # the part that closes fills, as Backtrader fills the closing part of an unaffordable order
            self.p.filler = lambda *_: closing
            try:
                super()._execute(order, ago=ago, price=price, dtcoc=dtcoc)
            finally:
                self.p.filler = None
        order.margin()
        self.notify(order)
        self._ococheck(order)
        self._bracketize(order, cancel=True)
        return None

    def _shortfall(self, order: Any, price: float, cash: float, position: Any) -> float:
        """How much cash the account would lack to hold its shorts if `order` filled at `price` (0: none)."""
        comminfo = self.getcommissioninfo(order.data)
        leverage = comminfo.get_leverage()
        after = position.clone()
        entry = after.price
        size, _, opened, closed = after.update(order.executed.remsize, price)
        if not opened or not (size < 0 or any(p.size < 0 for d, p in self.positions.items() if d is not order.data)):
            return 0.0
        if closed:  # Backtrader's own arithmetic for the part that closes (shortcash, stock-like)
            value = comminfo.getvaluesize(-closed, entry)
            cash += (value / leverage if value > 0 else value) + comminfo.profitandloss(-closed, entry, price)
            cash -= comminfo.getcommission(closed, price)
        value = comminfo.getvaluesize(opened, price)
        cash -= (value / leverage if value > 0 else value) + comminfo.getcommission(opened, price)
        held = max(0.0, -size) * price * (1 + 1 / leverage)
        now = _clock(order.owner)
        for data, other in self.positions.items():
            if data is not order.data and other.size < 0:
                # marked at its last close before the bar being filled: a bar stamped `now` is not over yet
                mark = data.close[0] if data.datetime[0] < now else data.close[-1] if len(data) > 1 else other.price
                held += -other.size * mark * (1 + 1 / self.getcommissioninfo(data).get_leverage())
        return max(0.0, held - cash)

    def _try_exec_market(self, order: Any, popen: Any, phigh: Any, plow: Any) -> None:
        if order.ref in self.not_on_close:  # whatever the strategy wrote into the order's info since
            order.info["coc"] = False
        super()._try_exec_market(order, popen, phigh, plow)

    def _process_order_history(self) -> None:
        # Called by the stock next() just before it tries the pending orders, in the queue's order.
        super()._process_order_history()
        self._stops_first()

    def _stops_first(self) -> None:
        """Orders that cancel one another (a bracket's children, an OCO group) are tried stop first. A bar whose
        range reaches a stop and a limit of one group does not say which price came first, and the queue's order
        (the order of submission) decided it: a strategy could submit its take-profit first and have every such
        bar end at the target. The adverse leg is assumed, whichever was submitted first; unrelated orders keep
        their places."""
        pending = list(self.pending)
        groups: dict[tuple[str, int], list[int]] = {}
        for slot, order in enumerate(pending):
            if order is not None:
                key = (
                    ("parent", order.parent.ref)
                    if order.parent is not None
                    else ("oco", self._ocos.get(order.ref, order.ref))
                )
                groups.setdefault(key, []).append(slot)
        for slots in groups.values():
            if len(slots) > 1:
                members = sorted((pending[slot] for slot in slots), key=lambda o: o.exectype not in STOP_TYPES)
                for slot, order in zip(slots, members, strict=True):
                    pending[slot] = order
        self.pending.clear()
        self.pending.extend(pending)

    def _try_exec(self, order: Any) -> None:
        # A limit or stop order is matched only against a bar of its data after the one it was placed on, as
        # Backtrader already requires of market and close orders: with datas on different calendars, a bar of
        # another data moves the clock while this data still shows the bar the strategy saw when it placed the
        # order (a Friday's low, bought on Saturday at that low).
        if order.exectype in STALE_CHECKED and order.data.datetime[0] <= order.created.dt:
            return
        super()._try_exec(order)


def protect(feed: bt.feed.DataBase) -> None:
    """Make a data feed and its lines read-only (and allow-listed) to strategy code."""
    GUARDS.protected.update({id(feed), id(feed.lines)})
    GUARDS.protected.update(id(feed.lines[i]) for i in range(feed.lines.fullsize()))


def load_strategy(source: str, *, prints: PrintBuffer, layers: frozenset[str] | set[str]) -> type:
    """Compile agent source under the requested in-process layers and return its (first) bt.Strategy subclass."""
    if "ast" in layers:
        validate_source(source)
    if "restricted_python" in layers:
        module = compile_strategy(source, bt_facade=_facade(), guards=GUARDS, prints=prints)
    else:
        module = compile_plain(source, bt_module=bt)
    classes = strategy_classes(module, bt.Strategy)
    if not classes:
        raise PolicyViolation("validation_error", "the code must define a class derived from bt.Strategy")
    for cls in classes:
        _own_names_only(cls)
    return classes[0]


# What a strategy class may define of the names bt.Strategy has: the hooks the engine calls, and what Backtrader's
# metaclass itself puts in every subclass (from `params`, `lines`, `plotinfo`...).
STRATEGY_HOOKS = frozenset(
    {"next", "prenext", "nextstart", "start", "stop", "notify_order", "notify_trade", "notify_cashvalue",
     "notify_fund", "notify_store", "notify_data", "notify_timer", "params", "lines", "plotinfo", "plotlines",
     "alias", "aliased", "frompackages", "linealias", "packages"}
)  # fmt: skip
ENGINE_MEMBERS = (
    frozenset(dir(bt.Strategy)) | frozenset(bt.Strategy.lines.getlinealiases()) | ENGINE_NAMES
) - STRATEGY_HOOKS


def _own_names_only(strategy: type) -> None:
    """Refuse a strategy class that redefines what the engine reads on it: a class-level `datetime` would stand in
    for the clock the daily returns are keyed by, a `getposition` would hide open positions, a `positions` or
    `broker` would stand in for the account. Set at class level, they never pass the per-assignment guard."""
    for cls in strategy.__mro__:
        if cls.__module__ != strategy.__module__:
            continue
        for name in cls.__dict__:
            if name in ENGINE_MEMBERS and not name.startswith("__"):
                raise PolicyViolation(
                    "validation_error",
                    f"`{name}` belongs to the engine and cannot be defined by a strategy class ({cls.__name__}); "
                    "name your own attributes and methods differently",
                )


class ArrayData(bt.feed.DataBase):
    """A feed over plain lists (`setbars`), or over a `Stream` (`setstream`: the probe's streamed run, never
    preloaded), kept in underscore attributes: strategies cannot reach the future bars. One class for both, so a
    strategy cannot tell the runs apart by the feed it is given."""

    def setbars(self, bars: dict[str, list[Any]]) -> None:
        self._stream: Stream | None = None
        self._bars = {
            "dt": [us / 86_400_000_000.0 + EPOCH_ORDINAL for us in bars["ts_us"]],
            **{key: bars[key] for key in ("open", "high", "low", "close", "volume")},
        }
        self._count, self._index = len(bars["ts_us"]), -1

    def setstream(self, stream: "Stream", slot: int) -> None:
        self._stream, self._slot, self._index = stream, slot, -1

    def start(self) -> None:
        super().start()
        self._index = -1

    def _load(self) -> bool:
        if self._stream is not None:
            return self._load_streamed(self._stream)
        self._index += 1
        i = self._index
        if i >= self._count:
            return False
        lines, bars = self.lines, self._bars
        lines.datetime[0] = bars["dt"][i]
        lines.open[0], lines.high[0], lines.low[0] = bars["open"][i], bars["high"][i], bars["low"][i]
        lines.close[0], lines.volume[0], lines.openinterest[0] = bars["close"][i], bars["volume"][i], 0.0
        return True

    def _load_streamed(self, stream: "Stream") -> bool:
        if (line := agent_line()) is not None:  # the engine loads the next bar, never the strategy
            raise lookahead("loading the next bar", line)
        row = stream.row(self._slot, self._index + 1)
        if row is None:
            return False
        self._index += 1
        ts_us, open_, high, low, close, volume = row
        lines = self.lines
        lines.datetime[0] = ts_us / 86_400_000_000.0 + EPOCH_ORDINAL
        lines.open[0], lines.high[0], lines.low[0], lines.close[0] = open_, high, low, close
        lines.volume[0], lines.openinterest[0] = volume, 0.0
        return True


class Stream:
    """The streamed run's end of its channel to the worker. A step (the next bar of every data: the datas have the
    same bar times) is asked for on `ask` and read from `bars` only when a feed needs a bar this process has not
    received, which Backtrader does after the strategy's step on the bar before: until then the next bar is
    nowhere in this process, whatever the strategy reaches."""

    def __init__(self, bars: int, ask: int, count: int) -> None:
        self.bars, self.ask, self.count = bars, ask, count
        self.step = -1
        self.rows: list[tuple[Any, ...]] = []
        self.ended = False

    def row(self, slot: int, index: int) -> tuple[Any, ...] | None:
        if index > self.step and not self.ended:
            os.write(self.ask, STEP_NEXT)
            size = STEP_ROW.size * self.count
            frame = os.read(self.bars, 1 + size)  # the worker writes a step at once: usually one read takes it
            if frame == STEP_END:
                self.ended = True
            else:
                if len(frame) < 1 + size:
                    frame += self._read(1 + size - len(frame))
                self.rows = [STEP_ROW.unpack_from(frame, 1 + i * STEP_ROW.size) for i in range(self.count)]
                self.step += 1
        if self.ended and index > self.step:
            return None
        if index != self.step:
            raise EngineError("sandbox_error", "a streamed data asked for a bar out of step")
        return self.rows[slot]

    def _read(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = os.read(self.bars, size - len(chunks))
            if not chunk:
                raise EngineError("sandbox_error", "the streamed run's bars ended mid-step")
            chunks.extend(chunk)
        return bytes(chunks)


class Ledger(bt.Analyzer):
    """Everything a run reports per bar, in one analyzer (each analyzer costs Backtrader three dispatches a bar):
    the daily returns (Backtrader's TimeReturn on Days), the maximum drawdown (its DrawDown), step for step
    their arithmetic on the same notified account value; the account value per bar and the order outcomes; the
    round trips as they close, reconstructed from backtrader's Trade (gross P&L excludes commission). The
    strategy's own clock line becomes read-only to it."""

    def start(self) -> None:
        broker = self.strategy.broker
        self.fundmode = broker.fundmode
        # TimeReturn (no data: the account value), its period key starting from datetime.min's day
        self.value_start, self.last_value = 0.0, (broker.getvalue() if not self.fundmode else broker.fundvalue)
        self.day, self.day_key = 10101, date(1, 1, 1)
        self.returns: dict[date, float] = {}
        # DrawDown
        self.peak, self.max_drawdown, self.max_moneydown = float("-inf"), 0.0, 0.0
        self.equity: list[tuple[float, float]] = []
        self.orders = {"submitted": 0, "completed": 0, "canceled": 0, "margin": 0, "rejected": 0, "expired": 0}
        self.trades: list[dict[str, Any]] = []
        # Closed trades that won and lost, and their net P&L (TradeAnalyzer's `won` holds the break-even ones too).
        self.tally = {"won": 0, "won_pnl": 0.0, "lost": 0, "lost_pnl": 0.0}
        self.sizes: dict[int, float] = {}
        clock = self.strategy.lines
        GUARDS.protected.update({id(clock), *(id(clock[i]) for i in range(clock.fullsize()))})

    def notify_fund(self, cash: float, value: float, fundvalue: float, shares: float) -> None:
        self.value = value if not self.fundmode else fundvalue
        self.peak = max(self.peak, self.value)

    def next(self) -> None:  # prenext and nextstart too (an analyzer's default)
        strategy = self.strategy
        moment = strategy.datetime.datetime()
        day = moment.year * 10000 + moment.month * 100 + moment.day
        if day > self.day:
            self.day, self.day_key = day, moment.date()
            self.value_start = self.last_value
        self.returns[self.day_key] = (self.value / self.value_start) - 1.0
        self.last_value = self.value
        moneydown = self.peak - self.value
        drawdown = 100.0 * moneydown / self.peak
        self.max_moneydown = max(self.max_moneydown, moneydown)
        self.max_drawdown = max(self.max_drawdown, drawdown)
        self.equity.append((strategy.datetime[0], strategy.broker.getvalue()))

    def notify_order(self, order: bt.Order) -> None:
        key = {
            bt.Order.Submitted: "submitted", bt.Order.Completed: "completed", bt.Order.Canceled: "canceled",
            bt.Order.Margin: "margin", bt.Order.Rejected: "rejected", bt.Order.Expired: "expired",
        }.get(order.status)  # fmt: skip
        if key:
            self.orders[key] += 1

    def notify_trade(self, trade: bt.Trade) -> None:
        if trade.size and abs(trade.size) > abs(self.sizes.get(trade.ref, 0.0)):
            self.sizes[trade.ref] = trade.size
        if not trade.isclosed:
            return
        size = self.sizes.pop(trade.ref, 0.0)
        entry = trade.price
        sign = trade_sign(trade.pnlcomm, size * entry)
        if sign:
            side = "won" if sign > 0 else "lost"
            self.tally[side] += 1
            self.tally[f"{side}_pnl"] += trade.pnlcomm
        self.trades.append(
            {
                "symbol": trade.data._name,
                "side": "long" if size > 0 else "short",
                "entry_time": iso(trade.dtopen),
                "exit_time": iso(trade.dtclose),
                "entry_price": entry,
                "exit_price": entry + trade.pnl / size if size else None,
                "quantity": abs(size),
                "gross_pnl": trade.pnl,
                "pnl_percentage": trade.pnl / (abs(size) * entry) * 100 if size and entry else None,
                "total": trade.pnlcomm,
                "bars_held": trade.barlen,
            }
        )

    def equity_points(self) -> list[list[Any]]:
        step = max(1, math.ceil(len(self.equity) / MAX_EQUITY_POINTS))
        points = self.equity[::step]
        if self.equity and points[-1] is not self.equity[-1]:
            points.append(self.equity[-1])
        return [[iso(t), v] for t, v in points]


def plain(value: Any) -> Any:
    """AutoOrderedDicts, tuples and floats as JSON-safe plain data (nan/inf become null)."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is str or kind is int or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class ShortForOnce(Exception):
    """The runonce pass could not compute the indicators over bars this few (see `_decided`'s `_once`)."""


def _decided(strategy: type) -> type:
    """The strategy as it runs here: identical, except that its broker learns when `stop()` begins."""

    def _stop(self: Any) -> None:
        self.broker.stopping = True
        strategy._stop(self)  # type: ignore[attr-defined]

    def getpositions(self: Any, broker: Any = None) -> Any:
        # The broker's own dict, read-only: written (or updated, cleared) it would hand the account free positions.
        return types.MappingProxyType((broker or self.broker).positions)

    def _once(self: Any) -> None:
        policy.AHEAD[0] = True
        try:
            strategy._once(self)  # type: ignore[attr-defined]
        except IndexError:
            # Backtrader's runonce writes an indicator's first value past the series' end when the bars are fewer
            # than its warm-up (an SMA(20) on 8 bars): an honest run failed. It is made again bar by bar.
            raise ShortForOnce from None
        finally:
            policy.AHEAD[0] = False

    members = {"_stop": _stop, "_once": _once, "getpositions": getpositions, "positions": property(getpositions)}
    return type(strategy.__name__, (strategy,), {**members, "__module__": strategy.__module__})


def _cerebro(
    strategy: type,
    datas: list[dict[str, Any]],
    simulation: dict[str, Any],
    parameters: dict[str, Any],
    *,
    runonce: bool,
    stream: Stream | None = None,
) -> bt.Cerebro:
    """A run's engine; with a `stream`, its feeds read their bars from it, bar by bar and never preloaded."""
    GUARDS.protected.clear()  # ids of an earlier run's objects may be reused by this run's
    streamed = stream is not None
    cerebro = bt.Cerebro(stdstats=False, preload=not streamed, runonce=runonce and not streamed, optreturn=False)
    cerebro.broker = GuardedBroker()
    for slot, data in enumerate(datas):
        feed = ArrayData(name=data["name"])
        if stream is not None:
            feed.setstream(stream, slot)
        else:
            feed.setbars(data)
        protect(feed)
        cerebro.adddata(feed, name=data["name"])
    cerebro.addstrategy(_decided(strategy), **parameters)
    cerebro.broker.setcash(float(simulation["initial_cash"]))
    cerebro.broker.setcommission(commission=float(simulation["commission"]), leverage=float(simulation["leverage"]))
    cerebro.broker.set_coc(bool(simulation["buy_on_close"]))
    return cerebro


def _execute(
    build: Callable[[bool], bt.Cerebro], built: list[bt.Cerebro] | None = None, *, runonce: bool = True
) -> tuple[bt.Cerebro, Any]:
    """Run what `build(runonce)` makes (each one made is appended to `built`), and fail the run on a refusal even
    when the strategy caught it. Indicators are computed over every bar before the first (runonce: about half a
    run's time); when strategy code would run in that pass (an indicator of its own, a function handed to a
    built-in one), it is stopped before its first line and the run is made again bar by bar, where every
    indicator advances with the strategy; so is a run whose bars are fewer than an indicator's warm-up, which that
    pass cannot compute (`ShortForOnce`). Where strategy frames are not counted, or `runonce` is False, the run is
    bar by bar."""
    built = [] if built is None else built
    _lookahead_guards()
    if runonce and policy.frames_counted():
        built.append(build(True))
        try:
            return built[-1], _run_refusing(built[-1])
        except (policy.RanAhead, ShortForOnce):
            pass
    built.append(build(False))
    return built[-1], _run_refusing(built[-1])


def _run_refusing(cerebro: bt.Cerebro) -> Any:
    """Run `cerebro`; a refusal the strategy caught still fails the run."""
    policy.REFUSALS.clear()
    (result,) = cerebro.run()
    if policy.REFUSALS:
        raise policy.REFUSALS[0]
    return result


def run(
    strategy: type,
    *,
    datas: list[dict[str, Any]],
    simulation: dict[str, Any],
    parameters: dict[str, Any],
    summary: bool = False,
) -> dict[str, Any]:
    """Run one backtest; `datas` are {name, ts_us, open, high, low, close, volume} lists, in data order. A `summary`
    (what a grid point keeps: its statistics' inputs, its returns and decisions) has the trades' count instead of
    the trades, and no equity curve, orders or open positions."""
    known = set(strategy.params._getkeys())  # type: ignore[attr-defined]
    unknown = sorted(set(parameters) - known)
    if unknown:
        raise EngineError(
            "unknown_parameter", f"the strategy has no parameter(s) {', '.join(unknown)}; it has {sorted(known)}"
        )

    def build(runonce: bool) -> bt.Cerebro:
        cerebro = _cerebro(strategy, datas, simulation, parameters, runonce=runonce)
        cerebro.addanalyzer(bt.analyzers.TradeAnalyzer, _name="trade_analyzer")
        cerebro.addanalyzer(Ledger, _name="ledger")
        return cerebro

    cerebro, result = _execute(build, runonce=aligned(datas))
    analyzers = result.analyzers
    ledger = analyzers.ledger
    outcome = {
        "initial_cash": float(simulation["initial_cash"]),
        "final_value": cerebro.broker.getvalue(),
        "final_cash": cerebro.broker.getcash(),
        "bars": {data["name"]: len(data["ts_us"]) for data in datas},
        "trade_analyzer": plain(analyzers.trade_analyzer.get_analysis()),
        "daily_returns": [[day.isoformat(), ret] for day, ret in ledger.returns.items()],
        # bar by bar, at the data's own frequency (Backtrader's DrawDown arithmetic on the broker value)
        "max_drawdown": {"percentage": ledger.max_drawdown, "money": ledger.max_moneydown},
        "decisions": cerebro.broker.decisions,
        "trade_tally": ledger.tally,
    }
    if summary:
        return outcome | {"trade_count": len(ledger.trades)}
    return outcome | {
        "trades": ledger.trades,
        "equity": ledger.equity_points(),
        "orders": ledger.orders,
        "open_positions": [
            {"symbol": data._name, "size": result.getposition(data).size, "price": result.getposition(data).price}
            for data in result.datas
            if result.getposition(data).size
        ],
    }


# --- the truncation probe's cut runs -----------------------------------------------------------------------------
def cut_decisions(
    strategy: type,
    *,
    datas: list[dict[str, Any]],
    simulation: dict[str, Any],
    parameters: dict[str, Any],
) -> tuple[list[dict[str, Any]], str | None]:
    """One cut run of the truncation probe: the strategy on `datas`, the bars up to the cut (the job never holds the
    later ones), and the order decisions it took (as `as_recorded` gives them), with what ended the run early when
    it did not reach its end. The worker compares them with the full run's (`probing.judged`): the full run, and
    every other cut, ran in other jobs. A cut inside an indicator's warm-up runs bar by bar (`ShortForOnce`)."""
    return _probe_decisions(
        lambda once: _cerebro(strategy, datas, simulation, parameters, runonce=once), aligned(datas)
    )


def streamed_decisions(
    strategy: type,
    *,
    datas: list[dict[str, Any]],
    simulation: dict[str, Any],
    parameters: dict[str, Any],
    stream: Stream,
) -> tuple[list[dict[str, Any]], str | None]:
    """The probe's streamed run: the strategy on `datas` (their names only) whose bars arrive from `stream` one
    step at a time, and the order decisions it took, with what ended it early when it did not reach its end. Every
    decision is taken before the bars after it exist in this process; the worker compares them all with the full
    run's (`probing.judged`)."""
    return _probe_decisions(lambda _: _cerebro(strategy, datas, simulation, parameters, runonce=False, stream=stream),
                            False)  # fmt: skip


def _probe_decisions(build: Callable[[bool], bt.Cerebro], runonce: bool) -> tuple[list[dict[str, Any]], str | None]:
    """A probe run's decisions and, when it failed before its end, why (a refusal fails it as it fails a full run;
    a failure in `stop()` does not count: decisions taken there are not compared)."""
    built: list[bt.Cerebro] = []
    try:
        _execute(build, built, runonce=runonce)
    except (Refused, PolicyViolation, EngineError):
        raise
    except Exception as error:
        if not built or not built[-1].broker.stopping:
            return as_recorded(built[-1].broker.decisions if built else []), f"{type(error).__name__}: {error}"
    return as_recorded(built[-1].broker.decisions), None


def as_recorded(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decisions as the sandbox's JSON output records them (plain, strings escaped), as both the full run's and
    the cut runs' reach the worker."""
    return json.loads(json.dumps(policy.clean_strings(plain(decisions)), allow_nan=False, default=str))
