"""The Backtrader engine: the only module that imports backtrader (it runs inside the sandbox child).

Bars arrive as plain lists and feed a list-backed data feed (1.7x the stock pandas feed, notes §2) with
`preload`/`runonce` on. Results leave as plain data: reconstructed trades, the equity curve, daily returns and
backtrader's TradeAnalyzer output; statistics are computed from them by `statistics.py` outside the sandbox.
"""

import math
import types
from datetime import UTC, datetime, timedelta
from typing import Any

import backtrader as bt

from backtests.policy import (
    Guards,
    PolicyViolation,
    PrintBuffer,
    compile_plain,
    compile_strategy,
    strategy_classes,
    validate_source,
)

EPOCH_ORDINAL = 719163.0  # bt.date2num(1970-01-01)
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


ORDER_STATES = frozenset(bt.Order.Status) | frozenset(bt.Order.ExecTypes) | {"Buy", "Sell"}
READ_ONLY = (
    (bt.BrokerBase, frozenset({"getvalue", "getcash", "get_value", "get_cash", "getposition", "startingcash",
                               "get_fundvalue", "get_fundshares", "fundvalue", "fundshares"})),
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
    {"open", "high", "low", "close", "volume", "openinterest", "datetime", "lines", "get", "buflen", "date", "time",
     "num2date", "date2num", "getlinealiases"}
)  # fmt: skip
GUARDS = Guards(
    allowed_modules=(bt.indicators, math),
    writable=(bt.LineRoot, bt.lineseries.Lines),
    read_only=READ_ONLY,
    protected_names=FEED_NAMES,
    series=(bt.LineRoot, bt.lineseries.Lines),
)


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
    return classes[0]


class ArrayData(bt.feed.DataBase):
    """A feed over plain lists, kept in underscore attributes: strategies cannot reach the future bars."""

    def setbars(self, bars: dict[str, list[Any]]) -> None:
        self._bars = {
            "dt": [us / 86_400_000_000.0 + EPOCH_ORDINAL for us in bars["ts_us"]],
            **{key: bars[key] for key in ("open", "high", "low", "close", "volume")},
        }
        self._count, self._index = len(bars["ts_us"]), -1

    def start(self) -> None:
        super().start()
        self._index = -1

    def _load(self) -> bool:
        self._index += 1
        i = self._index
        if i >= self._count:
            return False
        lines, bars = self.lines, self._bars
        lines.datetime[0] = bars["dt"][i]
        lines.open[0], lines.high[0], lines.low[0] = bars["open"][i], bars["high"][i], bars["low"][i]
        lines.close[0], lines.volume[0], lines.openinterest[0] = bars["close"][i], bars["volume"][i], 0.0
        return True


def iso(num: float) -> str:
    seconds = round((num - EPOCH_ORDINAL) * 86400)
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


class TradeLog(bt.Analyzer):
    """Round trips as they close, reconstructed from backtrader's Trade (gross P&L excludes commission)."""

    def start(self) -> None:
        self.trades: list[dict[str, Any]] = []
        self.sizes: dict[int, float] = {}

    def notify_trade(self, trade: bt.Trade) -> None:
        if trade.size and abs(trade.size) > abs(self.sizes.get(trade.ref, 0.0)):
            self.sizes[trade.ref] = trade.size
        if not trade.isclosed:
            return
        size = self.sizes.pop(trade.ref, 0.0)
        entry = trade.price
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

    def get_analysis(self) -> list[dict[str, Any]]:
        return self.trades


class Diagnostics(bt.Analyzer):
    """Per-bar account value and order outcomes."""

    def start(self) -> None:
        self.equity: list[tuple[float, float]] = []
        self.orders = {"submitted": 0, "completed": 0, "canceled": 0, "margin": 0, "rejected": 0, "expired": 0}

    def next(self) -> None:
        self.equity.append((self.strategy.datetime[0], self.strategy.broker.getvalue()))

    def notify_order(self, order: bt.Order) -> None:
        key = {
            bt.Order.Submitted: "submitted", bt.Order.Completed: "completed", bt.Order.Canceled: "canceled",
            bt.Order.Margin: "margin", bt.Order.Rejected: "rejected", bt.Order.Expired: "expired",
        }.get(order.status)  # fmt: skip
        if key:
            self.orders[key] += 1

    def get_analysis(self) -> dict[str, Any]:
        step = max(1, math.ceil(len(self.equity) / MAX_EQUITY_POINTS))
        points = self.equity[::step]
        if self.equity and points[-1] is not self.equity[-1]:
            points.append(self.equity[-1])
        return {"equity": [[iso(t), v] for t, v in points], "orders": self.orders}


def plain(value: Any) -> Any:
    """AutoOrderedDicts, tuples and floats as JSON-safe plain data (nan/inf become null)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def run(
    strategy: type,
    *,
    datas: list[dict[str, Any]],
    simulation: dict[str, Any],
    parameters: dict[str, Any],
) -> dict[str, Any]:
    """Run one backtest; `datas` are {name, ts_us, open, high, low, close, volume} lists, in data order."""
    known = set(strategy.params._getkeys())  # type: ignore[attr-defined]
    unknown = sorted(set(parameters) - known)
    if unknown:
        raise EngineError(
            "unknown_parameter", f"the strategy has no parameter(s) {', '.join(unknown)}; it has {sorted(known)}"
        )
    cerebro = bt.Cerebro(stdstats=False, preload=True, runonce=True, optreturn=False)
    for data in datas:
        feed = ArrayData(name=data["name"])
        feed.setbars(data)
        protect(feed)
        cerebro.adddata(feed, name=data["name"])
    cerebro.addstrategy(strategy, **parameters)
    cerebro.broker.setcash(float(simulation["initial_cash"]))
    cerebro.broker.setcommission(commission=float(simulation["commission"]), leverage=float(simulation["leverage"]))
    cerebro.broker.set_coc(bool(simulation["buy_on_close"]))
    cerebro.addanalyzer(bt.analyzers.TradeAnalyzer, _name="trade_analyzer")
    cerebro.addanalyzer(bt.analyzers.TimeReturn, _name="daily_returns", timeframe=bt.TimeFrame.Days)
    cerebro.addanalyzer(TradeLog, _name="trade_log")
    cerebro.addanalyzer(Diagnostics, _name="diagnostics")
    (result,) = cerebro.run()
    analyzers = result.analyzers
    diagnostics = analyzers.diagnostics.get_analysis()
    return {
        "initial_cash": float(simulation["initial_cash"]),
        "final_value": cerebro.broker.getvalue(),
        "final_cash": cerebro.broker.getcash(),
        "bars": {data["name"]: len(data["ts_us"]) for data in datas},
        "trade_analyzer": plain(analyzers.trade_analyzer.get_analysis()),
        "daily_returns": [[day.date().isoformat(), ret] for day, ret in analyzers.daily_returns.get_analysis().items()],
        "trades": analyzers.trade_log.get_analysis(),
        "equity": diagnostics["equity"],
        "orders": diagnostics["orders"],
        "open_positions": [
            {"symbol": data._name, "size": result.getposition(data).size, "price": result.getposition(data).price}
            for data in result.datas
            if result.getposition(data).size
        ],
    }
