"""The backtesting MCP tools (the contract's 23 strategy, symbol, backtest, optimization and report tools).

Thin: parse, call selectors/services in a worker thread, shape the result. Every tool needs a subscriber;
anything that creates resources or spends credits needs `mcp:write`.
"""

import asyncio
import csv
import io
import time
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from accounts.models import User
from backtests import selectors, services
from backtests.models import TERMINAL, Optimization, OptimizationRun, Report, Status, Strategy
from backtests.schemas import (
    CreateStrategyArgs,
    DownloadArgs,
    DryRunArgs,
    IdArgs,
    LatestOptimizationArgs,
    ListOptimizationsArgs,
    ListReportsArgs,
    ListStrategiesArgs,
    ListSymbolsArgs,
    MarketDataSampleArgs,
    OptimizationResultsArgs,
    ReportTradesArgs,
    Result,
    RunBacktestArgs,
    RunOptimizationArgs,
    SearchSymbolsArgs,
    UpdateStrategyArgs,
    WaitForReportsArgs,
    iso,
    strict_date,
    strict_instant,
)
from billing.selectors import credit_usage
from evidence.models import Symbol
from leroy.mcp.registry import ToolArgs, ToolCall, ToolFailure, tool

DOCUMENTATION = Path(__file__).with_name("documentation.md")
WAIT_SECONDS = 600.0
POLL_SECONDS = 1.0
RECENT_TRADES = 20


class NoArgs(ToolArgs):
    pass


def _user(call: ToolCall) -> User:
    assert call.principal is not None  # subscriber tools are refused earlier without one
    return User.objects.get(pk=call.principal.user_id)


def _failure(error: services.BacktestError) -> ToolFailure:
    return ToolFailure(error.code, error.message, **error.details)


def _not_found(kind: str, key: str) -> ToolFailure:
    return ToolFailure("not_found", f"No {kind} {key} in this account.", id=key)


def _usage(user: User) -> dict[str, Any]:
    return credit_usage(user=user)


def _page(items: list[Any], total: int, skip: int, limit: int) -> dict[str, Any]:
    return {"items": items, "total": total, "skip": skip, "limit": limit, "has_next": skip + len(items) < total}


def _strategy_summary(strategy: Strategy) -> dict[str, Any]:
    return {
        "id": str(strategy.pk),
        "name": strategy.name,
        "description": strategy.description,
        "version": strategy.version,
        "revision": strategy.revision,
        "is_current": strategy.is_current,
        "previous_id": str(strategy.previous_id) if strategy.previous_id else None,
        "created_at": iso(strategy.created_at),
    }


def _symbol(symbol: Symbol) -> dict[str, Any]:
    return {
        "id": str(symbol.pk),
        "symbol": symbol.ticker,
        "name": symbol.name,
        "asset_class": symbol.asset_class,
        "exchange": symbol.exchange,
        "currency": symbol.currency,
        "source_type": "global",
        "is_global": True,
        "frequencies": list(symbol.frequencies),
        "data_availability": {frequency: True for frequency in symbol.frequencies},
    }


def _report_summary(report: Report) -> dict[str, Any]:
    return {
        "id": str(report.pk),
        "report_id": str(report.pk),
        "status": report.status,
        "strategy_id": str(report.strategy_id),
        "strategy_name": report.strategy.name,
        "data_ids": report.data_ids,
        "symbols": report.tickers,
        "frequency": report.frequency,
        "start_date": report.start_date.isoformat(),
        "end_date": report.end_date.isoformat(),
        "parameters": [{"name": k, "value": v} for k, v in report.parameters.items()],
        "simulation": report.simulation,
        "statistics": report.statistics,
        "credits_reserved": report.credits_reserved,
        "credits_charged": report.credits_charged,
        "error": report.error,
        "created_at": iso(report.created_at),
        "started_at": iso(report.started_at),
        "finished_at": iso(report.finished_at),
    }


def _optimization(optimization: Optimization, *, detail: bool = False) -> dict[str, Any]:
    done = optimization.completed_iterations + optimization.failed_iterations
    body = {
        "id": str(optimization.pk),
        "optimization_id": str(optimization.pk),
        "name": optimization.name,
        "status": optimization.status,
        "strategy_id": str(optimization.strategy_id),
        "strategy_name": optimization.strategy.name,
        "data_ids": optimization.data_ids,
        "symbols": optimization.tickers,
        "frequency": optimization.frequency,
        "start_date": iso(optimization.start_date),
        "end_date": iso(optimization.end_date),
        "grids": optimization.grids,
        "parameters": [{"name": k, "value": v} for k, v in optimization.parameters.items()],
        "target_metric": optimization.target_metric,
        "target_direction": optimization.target_direction,
        "additional_metrics": optimization.additional_metrics,
        "total_iterations": optimization.total_iterations,
        "completed_iterations": optimization.completed_iterations,
        "failed_iterations": optimization.failed_iterations,
        "progress": done / optimization.total_iterations if optimization.total_iterations else 0.0,
        "use_free_optimization": optimization.use_free_optimization,
        "credits_reserved": optimization.credits_reserved,
        "credits_charged": optimization.credits_charged,
        "error": optimization.error,
        "created_at": iso(optimization.created_at),
        "started_at": iso(optimization.started_at),
        "finished_at": iso(optimization.finished_at),
    }
    if detail:
        body["simulation_parameters"] = optimization.simulation_parameters
        metric = optimization.target_metric
        body["chart_data"] = [
            {"iteration": run.iteration, "parameters": run.parameters, metric: (run.statistics or {}).get(metric)}
            for run in OptimizationRun.objects.filter(optimization=optimization, status=Status.COMPLETED)
        ]
    return body


# --- strategy authoring ------------------------------------------------------------------------------------------


@tool(
    name="get_strategy_documentation", title="Strategy documentation", args=NoArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def get_strategy_documentation(call: ToolCall, args: NoArgs) -> Result:
    """Leroy's strategy-authoring documentation: call it before writing or changing Backtrader code.

    Returns {documentation}: the execution environment, the supported `bt` API, multi-data rules, order
    handling, tuple-form parameters, no imports, and what reports visualize."""
    return Result(documentation=DOCUMENTATION.read_text())


@tool(
    name="list_strategies", title="List strategies", args=ListStrategiesArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def list_strategies(call: ToolCall, args: ListStrategiesArgs) -> Result:
    """List your saved strategies (current versions, newest first) without source code; paginated by skip/limit."""

    def run() -> dict[str, Any]:
        rows, total = selectors.page(selectors.strategies_current(user=_user(call)), skip=args.skip, limit=args.limit)
        return _page([_strategy_summary(s) for s in rows], total, args.skip, args.limit)

    return Result(**await sync_to_async(run)())


@tool(
    name="get_strategy", title="Get strategy", args=IdArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def get_strategy(call: ToolCall, args: IdArgs) -> Result:
    """One saved strategy version with its complete source code and its version history."""

    def run() -> dict[str, Any]:
        strategy = selectors.strategy_get(user=_user(call), strategy_id=args.id)
        if strategy is None:
            raise _not_found("strategy", args.id)
        history = [_strategy_summary(v) for v in selectors.strategy_versions(strategy=strategy)]
        return {**_strategy_summary(strategy), "code": strategy.code, "versions": history}

    return Result(**await sync_to_async(run)())


@tool(
    name="create_strategy", title="Create strategy", args=CreateStrategyArgs, output=Result,
    access="subscriber", scope="mcp:write", metering="free", read_only=False, idempotent=False,
)  # fmt: skip
async def create_strategy(call: ToolCall, args: CreateStrategyArgs) -> Result:
    """Save a strategy from complete Python code. The exact code must first pass run_dry_run_backtest.

    The code defines a bt.Strategy subclass, uses no imports (bt and math are provided), tuple-form params,
    indicators in __init__ and trading logic in next(). Returns the new strategy's id."""

    def run() -> dict[str, Any]:
        try:
            strategy = services.strategy_create(
                user=_user(call), name=args.name, code=args.code, description=args.description, version=args.version
            )
        except services.BacktestError as error:
            raise _failure(error) from None
        return {"success": True, "id": str(strategy.pk), "strategy": _strategy_summary(strategy)}

    return Result(**await sync_to_async(run)())


@tool(
    name="update_strategy", title="Update strategy", args=UpdateStrategyArgs, output=Result,
    access="subscriber", scope="mcp:write", metering="free", read_only=False, idempotent=False,
)  # fmt: skip
async def update_strategy(call: ToolCall, args: UpdateStrategyArgs) -> Result:
    """Create a new immutable version of a strategy (name, description and/or code); returns the new id.

    `id` must be the current version. Changed code must first pass run_dry_run_backtest. The old version
    leaves normal listings but stays in the version history (and its reports keep pointing at it)."""

    def run() -> dict[str, Any]:
        try:
            strategy = services.strategy_update(
                user=_user(call), strategy_id=args.id, name=args.name, description=args.description, code=args.code
            )
        except services.BacktestError as error:
            raise _failure(error) from None
        return {
            "success": True,
            "id": str(strategy.pk),
            "previous_id": args.id,
            "strategy": _strategy_summary(strategy),
        }

    if selectors.parse_id(args.id) is None:
        raise _not_found("strategy", args.id)
    return Result(**await sync_to_async(run)())


@tool(
    name="run_dry_run_backtest", title="Dry-run strategy code", args=DryRunArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free", read_only=True, idempotent=True,
)  # fmt: skip
async def run_dry_run_backtest(call: ToolCall, args: DryRunArgs) -> Result:
    """Execute complete strategy source on Leroy's fixed small data set (two daily symbols) without saving it.

    Returns {success, error (code, message, line, column), result (bars, final_value, trades, orders,
    statistics), prints, sandbox_layers}. A fixed environment check, not a historical report."""

    def run() -> dict[str, Any]:
        outcome = services.dry_run(user=_user(call), code=args.code)
        return {
            "success": outcome.success,
            "error": outcome.error,
            "result": outcome.result,
            "prints": outcome.prints,
            "sandbox_layers": outcome.layers,
        }

    return Result(**await sync_to_async(run)())


# --- symbols and market data -------------------------------------------------------------------------------------


@tool(
    name="list_symbols", title="List symbols", args=ListSymbolsArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def list_symbols(call: ToolCall, args: ListSymbolsArgs) -> Result:
    """List available symbols with asset class and frequency availability (paginated; all stored data is global)."""

    def run() -> dict[str, Any]:
        found = selectors.symbols(is_global=args.is_global, asset_class=args.asset_class)
        rows, total = selectors.page(found, skip=args.skip, limit=args.limit)
        return _page([_symbol(s) for s in rows], total, args.skip, args.limit)

    return Result(**await sync_to_async(run)())


@tool(
    name="search_symbols_by_name", title="Search symbols", args=SearchSymbolsArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def search_symbols_by_name(call: ToolCall, args: SearchSymbolsArgs) -> Result:
    """Search symbols by ticker, name, prefix or pair form (AAPL, BTC/USD, XAU/USD, XAUUSD, gold).

    The argument is camelCase: {"symbolName": "XAU/USD"}."""

    def run() -> dict[str, Any]:
        found = selectors.symbols_search(text=args.symbolName)
        return {"items": [_symbol(s) for s in found], "total": len(found)}

    return Result(**await sync_to_async(run)())


@tool(
    name="get_symbol", title="Get symbol", args=IdArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def get_symbol(call: ToolCall, args: IdArgs) -> Result:
    """One symbol's metadata: source type, asset class, exchange, quote currency and data_availability."""

    def run() -> dict[str, Any]:
        symbol = selectors.symbol_get(symbol_id=args.id)
        if symbol is None:
            raise _not_found("symbol", args.id)
        return _symbol(symbol)

    return Result(**await sync_to_async(run)())


@tool(
    name="get_market_data_sample", title="Market data sample", args=MarketDataSampleArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def get_market_data_sample(call: ToolCall, args: MarketDataSampleArgs) -> Result:
    """The most recent OHLCV candles (up to `limit`, at most 10,000) of a stored frequency, with a CSV resource.

    start_date/end_date are inclusive ISO 8601 dates or date-times with an offset; a date-only end covers the day."""
    from evidence.selectors import bars_read

    def run() -> dict[str, Any]:
        symbol = selectors.symbol_get(symbol_id=args.id)
        if symbol is None:
            raise _not_found("symbol", args.id)
        if args.frequency not in symbol.frequencies:
            raise ToolFailure(
                "frequency_unavailable",
                f"{symbol.ticker} has no {args.frequency} data.",
                available=list(symbol.frequencies),
            )
        start = strict_instant(args.start_date) if args.start_date else None
        end = strict_instant(args.end_date, end=True) if args.end_date else None
        if start and end and end < start:
            raise ToolFailure("invalid_request", "end_date must not be before start_date.")
        frame = bars_read(symbol=symbol, frequency=args.frequency, start=start, end=end).tail(args.limit)
        points = [
            {"timestamp": iso(row["ts"]), **{k: row[k] for k in ("open", "high", "low", "close", "volume")}}
            for row in frame.iter_rows(named=True)
        ]
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=["timestamp", "open", "high", "low", "close", "volume"])
        writer.writeheader()
        writer.writerows(points)
        return {
            "id": str(symbol.pk),
            "symbol": symbol.ticker,
            "name": symbol.name,
            "frequency": args.frequency,
            "count": len(points),
            "points": points,
            "csv_resource": {
                "uri": f"leroy://market-data/{symbol.pk}/{args.frequency}.csv",
                "mime_type": "text/csv",
                "text": text.getvalue(),
            },
        }

    return Result(**await sync_to_async(run)())


@tool(
    name="download_market_data", title="Download market data", args=DownloadArgs, output=Result,
    access="subscriber", scope="mcp:write", metering="free", read_only=False, idempotent=True,
)  # fmt: skip
async def download_market_data(call: ToolCall, args: DownloadArgs) -> Result:
    """Download full-history OHLCV for a stock, ETF, forex or metal pair, or crypto symbol through the
    configured provider and store it as a global symbol; existing global data is reused. Equities and ETFs
    are 1d only; intraday (5m, 15m, 1h, 4h) needs forex or crypto. Returns the symbol name and id."""
    from backtests import providers

    def run() -> dict[str, Any]:
        try:
            outcome = providers.market_data_download(
                symbol=args.symbol, frequency=args.frequency, asset_class=args.asset_class
            )
        except providers.DownloadError as error:
            raise ToolFailure(error.code, error.message, **error.details) from None
        return outcome

    return Result(**await sync_to_async(run)())


# --- backtests and reports ---------------------------------------------------------------------------------------


@tool(
    name="run_backtest", title="Run backtest", args=RunBacktestArgs, output=Result,
    access="subscriber", scope="mcp:write", metering="credits", read_only=False, idempotent=False,
)  # fmt: skip
async def run_backtest(call: ToolCall, args: RunBacktestArgs) -> Result:
    """Submit one asynchronous backtest of a saved strategy; credits are reserved now and settled when it ends.

    Use symbol ids from search_symbols_by_name or list_symbols; the frequency must be stored for each. The
    report moves PENDING -> EXECUTING -> COMPLETED | FAILED. Returns {report_id, status, usage}."""

    def run() -> dict[str, Any]:
        user = _user(call)
        try:
            report = services.backtest_submit(
                user=user,
                strategy_id=str(selectors.parse_id(args.strategy_id) or args.strategy_id),
                data_ids=args.data_ids,
                frequency=args.frequency,
                start_date=strict_date(args.start_date),
                end_date=strict_date(args.end_date),
                parameters={p.name: p.value for p in args.parameters},
                simulation={
                    "initial_cash": args.initial_cash,
                    "commission": args.commission,
                    "leverage": args.leverage,
                    "buy_on_close": args.buy_on_close,
                },
            )
        except services.BacktestError as error:
            raise _failure(error) from None
        report.refresh_from_db()
        return {
            "report_id": str(report.pk),
            "status": report.status,
            "credits_reserved": report.credits_reserved,
            "usage": _usage(user),
        }

    if selectors.parse_id(args.strategy_id) is None:
        raise _not_found("strategy", args.strategy_id)
    return Result(**await sync_to_async(run)())


@tool(
    name="list_reports", title="List reports", args=ListReportsArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def list_reports(call: ToolCall, args: ListReportsArgs) -> Result:
    """Backtest reports, newest first, optionally for one saved strategy id; with status and statistics."""

    def run() -> dict[str, Any]:
        found = selectors.reports_of(user=_user(call), strategy_id=args.strategy_id)
        rows, total = selectors.page(found, skip=args.skip, limit=args.limit)
        return _page([_report_summary(r) for r in rows], total, args.skip, args.limit)

    return Result(**await sync_to_async(run)())


@tool(
    name="get_report", title="Get report", args=IdArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def get_report(call: ToolCall, args: IdArgs) -> Result:
    """One report. PENDING/EXECUTING give status only; COMPLETED/FAILED add summary statistics, recent
    reconstructed trades, per-symbol performance, diagnostics (sandbox layers, data version, report hash) and
    equity-curve chart data. Stored statistics are authoritative: reconstructed trades exclude commission."""

    def run() -> dict[str, Any]:
        report = selectors.report_get(user=_user(call), report_id=args.id)
        if report is None:
            raise _not_found("report", args.id)
        body = _report_summary(report)
        if report.status in TERMINAL:
            body.update(
                recent_trades=report.trades[-RECENT_TRADES:],
                trade_count=len(report.trades),
                per_symbol=report.per_symbol,
                diagnostics=report.diagnostics,
                chart_data={"equity_curve": report.equity},
                determinism={
                    "strategy_version_id": str(report.strategy_id),
                    "data_version": report.data_version,
                    "parameters": report.parameters,
                    "report_hash": report.report_hash,
                },
            )
        return body

    return Result(**await sync_to_async(run)())


@tool(
    name="list_report_trades", title="List report trades", args=ReportTradesArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def list_report_trades(call: ToolCall, args: ReportTradesArgs) -> Result:
    """A page of a report's reconstructed round-trip trades (entry/exit time and price, quantity, gross P&L,
    P&L %, total); continue with skip += limit while has_next is true."""

    def run() -> dict[str, Any]:
        report = selectors.report_get(user=_user(call), report_id=args.id)
        if report is None:
            raise _not_found("report", args.id)
        trades = report.trades[args.skip : args.skip + args.limit]
        return {"report_id": str(report.pk), **_page(trades, len(report.trades), args.skip, args.limit)}

    return Result(**await sync_to_async(run)())


@tool(
    name="wait_for_reports", title="Wait for reports", args=WaitForReportsArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def wait_for_reports(call: ToolCall, args: WaitForReportsArgs) -> Result:
    """Wait until every report in `report_ids` is COMPLETED or FAILED (up to 10 minutes), reporting progress.

    Returns {results: [{report_id, status}]}; reports still running at the time limit are listed with their status."""

    def statuses() -> dict[str, str]:
        user = _user(call)
        found = {}
        for report_id in args.report_ids:
            report = selectors.report_get(user=user, report_id=report_id)
            if report is None:
                raise _not_found("report", report_id)
            found[report_id] = report.status
        close_old_connections()
        return found

    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        current = await sync_to_async(statuses)()
        done = sum(status in TERMINAL for status in current.values())
        await call.report_progress(done, len(current), f"{done} of {len(current)} reports finished")
        if done == len(current) or time.monotonic() >= deadline:
            return Result(
                results=[{"report_id": k, "status": v} for k, v in current.items()],
                timed_out=done != len(current),
            )
        await asyncio.sleep(POLL_SECONDS)


# --- optimizations -----------------------------------------------------------------------------------------------


@tool(
    name="run_optimization", title="Run optimization", args=RunOptimizationArgs, output=Result,
    access="subscriber", scope="mcp:write", metering="credits", read_only=False, idempotent=False,
)  # fmt: skip
async def run_optimization(call: ToolCall, args: RunOptimizationArgs) -> Result:
    """Submit a 1-2 parameter grid optimization of a saved strategy; each grid point runs as its own job.

    Credits for the whole grid are reserved up front (or one free optimization is used when
    use_free_optimization is true); cancelled or failed points are refunded. Returns {success, optimization_id}."""

    def run() -> dict[str, Any]:
        user = _user(call)
        try:
            optimization = services.optimization_submit(
                user=user,
                strategy_id=args.strategy_id,
                name=args.name,
                data_ids=args.data_ids,
                frequency=args.frequency,
                start=strict_instant(args.start_date),
                end=strict_instant(args.end_date, end=True),
                grids=[g.model_dump() for g in args.grids],
                parameters={p.name: p.value for p in args.parameters},
                simulation_parameters=args.simulation_parameters.model_dump(),
                target_metric=args.target_metric,
                target_direction=args.target_direction,
                additional_metrics=list(args.additional_metrics),
                use_free_optimization=args.use_free_optimization,
            )
        except services.BacktestError as error:
            raise _failure(error) from None
        optimization.refresh_from_db()
        return {
            "success": True,
            "optimization_id": str(optimization.pk),
            "status": optimization.status,
            "total_iterations": optimization.total_iterations,
            "credits_reserved": optimization.credits_reserved,
            "usage": _usage(user),
        }

    if selectors.parse_id(args.strategy_id) is None:
        raise _not_found("strategy", args.strategy_id)
    return Result(**await sync_to_async(run)())


@tool(
    name="list_optimizations", title="List optimizations", args=ListOptimizationsArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def list_optimizations(call: ToolCall, args: ListOptimizationsArgs) -> Result:
    """Your optimizations, newest first: status, strategy, grids, metrics, period, iteration counts, credits."""

    def run() -> dict[str, Any]:
        rows, total = selectors.page(selectors.optimizations_of(user=_user(call)), skip=args.skip, limit=args.limit)
        return _page([_optimization(o) for o in rows], total, args.skip, args.limit)

    return Result(**await sync_to_async(run)())


@tool(
    name="get_optimization", title="Get optimization", args=IdArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def get_optimization(call: ToolCall, args: IdArgs) -> Result:
    """One optimization: status, progress, grids, metrics, dates, simulation settings, credits, errors and
    chart data. It names no "best" run: use list_optimization_results to inspect runs."""

    def run() -> dict[str, Any]:
        optimization = selectors.optimization_get(user=_user(call), optimization_id=args.id)
        if optimization is None:
            raise _not_found("optimization", args.id)
        return _optimization(optimization, detail=True)

    return Result(**await sync_to_async(run)())


@tool(
    name="get_latest_optimization_by_strategy", title="Latest optimization of a strategy",
    args=LatestOptimizationArgs, output=Result, access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def get_latest_optimization_by_strategy(call: ToolCall, args: LatestOptimizationArgs) -> Result:
    """The most recent optimization of a saved strategy id, or {optimization: null} when there is none."""

    def run() -> dict[str, Any]:
        optimization = selectors.optimization_latest(user=_user(call), strategy_id=args.strategy_id)
        return {"optimization": _optimization(optimization, detail=True) if optimization else None}

    return Result(**await sync_to_async(run)())


@tool(
    name="wait_for_optimization", title="Wait for optimization", args=IdArgs, output=Result,
    access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def wait_for_optimization(call: ToolCall, args: IdArgs) -> Result:
    """Wait (streaming progress) until the optimization completes, fails or is cancelled, up to 10 minutes.

    Returns {status, completed_iterations, failed_iterations, total_iterations, error, timed_out}."""

    def read() -> Optimization:
        optimization = selectors.optimization_get(user=_user(call), optimization_id=args.id)
        close_old_connections()
        if optimization is None:
            raise _not_found("optimization", args.id)
        return optimization

    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        optimization = await sync_to_async(read)()
        done = optimization.completed_iterations + optimization.failed_iterations
        await call.report_progress(done, optimization.total_iterations, f"{done} of {optimization.total_iterations}")
        if optimization.status in TERMINAL or time.monotonic() >= deadline:
            return Result(
                id=str(optimization.pk),
                status=optimization.status,
                completed_iterations=optimization.completed_iterations,
                failed_iterations=optimization.failed_iterations,
                total_iterations=optimization.total_iterations,
                error=optimization.error,
                timed_out=optimization.status not in TERMINAL,
            )
        await asyncio.sleep(POLL_SECONDS)


@tool(
    name="list_optimization_results", title="List optimization results", args=OptimizationResultsArgs,
    output=Result, access="subscriber", scope="mcp:read", metering="free",
)  # fmt: skip
async def list_optimization_results(call: ToolCall, args: OptimizationResultsArgs) -> Result:
    """A bounded page of an optimization's runs: iteration, swept parameters, status, statistics and errors.

    Sorted by the target metric in the target direction when sort_by is omitted; an explicit sort_by is
    ascending unless descending is true. Continue with skip += limit while has_next is true."""

    def run() -> dict[str, Any]:
        optimization = selectors.optimization_get(user=_user(call), optimization_id=args.id)
        if optimization is None:
            raise _not_found("optimization", args.id)
        if args.sort_by is None:
            sort_by = optimization.target_metric
            descending = args.descending if args.descending is not None else optimization.target_direction == "maximize"
        else:
            sort_by, descending = args.sort_by, bool(args.descending)
        runs, total = selectors.optimization_runs(
            optimization=optimization, sort_by=sort_by, descending=descending, skip=args.skip, limit=args.limit
        )
        items = [
            {
                "iteration": r.iteration,
                "parameters": r.parameters,
                "status": r.status,
                "statistics": r.statistics,
                "error": r.error,
            }
            for r in runs
        ]
        return {"optimization_id": str(optimization.pk), "sort_by": sort_by, "descending": descending,
                **_page(items, total, args.skip, args.limit)}  # fmt: skip

    return Result(**await sync_to_async(run)())


@tool(
    name="cancel_optimization", title="Cancel optimization", args=IdArgs, output=Result,
    access="subscriber", scope="mcp:write", metering="credits", read_only=False, idempotent=False,
)  # fmt: skip
async def cancel_optimization(call: ToolCall, args: IdArgs) -> Result:
    """Cancel a PENDING or EXECUTING optimization: points not yet started never run and their reserved
    credits are refunded; completed points stay charged. Returns the optimization and usage."""

    def run() -> dict[str, Any]:
        user = _user(call)
        try:
            optimization = services.optimization_cancel(user=user, optimization_id=args.id)
        except services.BacktestError as error:
            raise _failure(error) from None
        refunded = optimization.credits_reserved - optimization.credits_charged
        return {**_optimization(optimization), "credits_refunded": refunded, "usage": _usage(user)}

    if selectors.parse_id(args.id) is None:
        raise _not_found("optimization", args.id)
    return Result(**await sync_to_async(run)())
