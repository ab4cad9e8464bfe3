"""The backtesting MCP tools (the contract's 23 strategy, symbol, backtest, optimization and report tools, and
the two walk-forward tools).

Thin: parse, call selectors/services in a worker thread, hand the rows to the result model. Every tool needs a
subscriber; anything that creates resources or spends credits needs `mcp:write`.
"""

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.db.models import QuerySet
from pydantic import BaseModel

from accounts.models import User
from backtests import selectors, services
from backtests.models import TERMINAL, DryRun, Optimization, Status
from backtests.schemas import (
    BacktestSubmitted,
    CreateStrategyArgs,
    DocumentationOut,
    DownloadArgs,
    DownloadOut,
    DryRunArgs,
    DryRunOut,
    IdArgs,
    LatestOptimizationArgs,
    LatestOptimizationOut,
    Listing,
    ListOptimizationsArgs,
    ListReportsArgs,
    ListStrategiesArgs,
    ListSymbolsArgs,
    MarketDataSampleArgs,
    MarketDataSampleOut,
    OptimizationCancelled,
    OptimizationOut,
    OptimizationResultsArgs,
    OptimizationResultsOut,
    OptimizationRunOut,
    OptimizationSubmitted,
    OptimizationSummary,
    OptimizationWaited,
    Paged,
    ReportOut,
    ReportSummary,
    ReportsWaited,
    ReportTradesArgs,
    ReportTradesOut,
    RunBacktestArgs,
    RunOptimizationArgs,
    RunWalkForwardArgs,
    SearchSymbolsArgs,
    StrategyCreated,
    StrategyOut,
    StrategySummary,
    StrategyUpdated,
    SymbolOut,
    UpdateStrategyArgs,
    WaitForReportsArgs,
    WalkForwardOut,
)
from billing.schemas import CreditUsage
from billing.selectors import credit_usage
from leroy.clock import now
from leroy.mcp.registry import Handler, Metering, ToolCall, ToolFailure, tool
from leroy.schemas import ToolArgs

DOCUMENTATION = Path(__file__).with_name("documentation.md")
WAIT_SECONDS = 600.0
POLL_SECONDS = 1.0


class NoArgs(ToolArgs):
    pass


def _tool(
    name: str,
    title: str,
    args: type[ToolArgs],
    output: type[BaseModel],
    *,
    write: bool = False,
    metering: Metering = "free",
    idempotent: bool | None = None,
    destructive: bool = False,
    open_world: bool = False,
    rest: bool | None = None,
) -> Callable[[Handler], Handler]:
    """Every contract tool needs a subscriber; a write needs `mcp:write` and is not read-only (nor, by default,
    idempotent). Read tools get a REST twin unless `rest=False`."""
    return tool(
        name=name, title=title, args=args, output=output, access="subscriber",
        scope="mcp:write" if write else "mcp:read", metering=metering,
        read_only=not write, idempotent=not write if idempotent is None else idempotent, destructive=destructive,
        open_world=open_world, rest=rest,
    )  # fmt: skip


async def _run[Built: BaseModel](build: Callable[[], Built]) -> Built:
    """Run a sync ORM/service block in a worker thread (refusals surface in band through the MCP bridge)."""
    return await sync_to_async(build)()


def _found[Found](found: Found | None, kind: str, key: str) -> Found:
    if found is None:
        raise ToolFailure("not_found", f"No {kind} {key} in this account.", id=key)
    return found


def _usage(user: User) -> CreditUsage:
    return CreditUsage(**credit_usage(user=user))


def _page_of[Item](
    model: type[Paged[Item]], rows: QuerySet[Any], shape: Callable[[Any], Item], skip: int, limit: int
) -> Paged[Item]:
    page, total = selectors.page(rows, skip=skip, limit=limit)
    return model.of([shape(row) for row in page], total=total, skip=skip, limit=limit)


# --- strategy authoring ------------------------------------------------------------------------------------------


@_tool("get_strategy_documentation", "Strategy documentation", NoArgs, DocumentationOut)
async def get_strategy_documentation(call: ToolCall, args: NoArgs) -> DocumentationOut:
    """Leroy's strategy-authoring documentation: call it before writing or changing Backtrader code.

    Returns {documentation}: the execution environment, the supported `bt` API, multi-data rules, order
    handling, tuple-form parameters, no imports, and what reports visualize."""
    return DocumentationOut(documentation=DOCUMENTATION.read_text())


@_tool("list_strategies", "List strategies", ListStrategiesArgs, Paged[StrategySummary])
async def list_strategies(call: ToolCall, args: ListStrategiesArgs) -> Paged[StrategySummary]:
    """List your saved strategies (current versions, newest first) without source code; paginated by skip/limit."""

    def run() -> Paged[StrategySummary]:
        rows = selectors.strategies_current(user=call.user())
        return _page_of(Paged[StrategySummary], rows, StrategySummary.from_strategy, args.skip, args.limit)

    return await _run(run)


@_tool("get_strategy", "Get strategy", IdArgs, StrategyOut)
async def get_strategy(call: ToolCall, args: IdArgs) -> StrategyOut:
    """One saved strategy version with its complete source code and its version history."""

    def run() -> StrategyOut:
        strategy = _found(selectors.strategy_get(user=call.user(), strategy_id=args.id), "strategy", args.id)
        return StrategyOut.from_versions(strategy, selectors.strategy_versions(strategy=strategy))

    return await _run(run)


@_tool("create_strategy", "Create strategy", CreateStrategyArgs, StrategyCreated, write=True)
async def create_strategy(call: ToolCall, args: CreateStrategyArgs) -> StrategyCreated:
    """Save a strategy from complete Python code. The exact code must first pass run_dry_run_backtest.

    The code defines a bt.Strategy subclass, uses no imports (bt and math are provided), tuple-form params,
    indicators in __init__ and trading logic in next(). Returns the new strategy's id."""

    def run() -> StrategyCreated:
        strategy = services.strategy_create(
            user=call.user(), name=args.name, code=args.code, description=args.description, version=args.version
        )
        return StrategyCreated.from_strategy(strategy)

    return await _run(run)


@_tool("update_strategy", "Update strategy", UpdateStrategyArgs, StrategyUpdated, write=True)
async def update_strategy(call: ToolCall, args: UpdateStrategyArgs) -> StrategyUpdated:
    """Create a new immutable version of a strategy (name, description and/or code); returns the new id.

    `id` must be the current version. Changed code must first pass run_dry_run_backtest. The old version
    leaves normal listings but stays in the version history (and its reports keep pointing at it)."""

    def run() -> StrategyUpdated:
        strategy = services.strategy_update(
            user=call.user(), strategy_id=args.id, name=args.name, description=args.description, code=args.code
        )
        return StrategyUpdated.from_strategy(strategy, previous_id=args.id)

    return await _run(run)


@_tool("run_dry_run_backtest", "Dry-run strategy code", DryRunArgs, DryRunOut, write=True)
async def run_dry_run_backtest(call: ToolCall, args: DryRunArgs) -> DryRunOut:
    """Execute complete strategy source on Leroy's fixed small data set (two daily symbols) without saving it.

    Runs on a dry-run worker, one at a time per account: `busy` (with retry_after_seconds) when one is still
    running or no worker takes it in time. Returns {success, error (code, message, line, column), result (bars,
    final_value, trades, orders, statistics), prints, prints_truncated, sandbox_layers}. A fixed environment
    check, not a historical report."""

    def read() -> DryRun:
        found = services.dry_run_state(run_id=run.pk)
        close_old_connections()
        return found

    run = await sync_to_async(lambda: services.dry_run_submit(user=call.user(), code=args.code))()
    queued_until = time.monotonic() + settings.LEROY_DRY_RUN_QUEUE_SECONDS
    finish_by = queued_until + settings.LEROY_DRY_RUN_WALL_SECONDS + 10
    try:
        while (state := await sync_to_async(read)()).status not in TERMINAL:
            late = time.monotonic() > queued_until and state.status == Status.PENDING
            if late and await sync_to_async(services.dry_run_give_up)(run_id=run.pk):
                raise services.dry_runs_busy("No dry-run worker was free.")
            if time.monotonic() > finish_by:
                raise services.dry_runs_busy("The dry run has not finished yet.")
            await call.idle(services.DRY_RUN_POLL_SECONDS)
    except BaseException:
        # Nobody will read the answer: the caller cancelled or hung up (at 2026-07-28 a disconnect is a
        # cancellation), its credential was revoked meanwhile, or the wait ran out. The dry run stops, queued or
        # running, and the account may start another at once.
        with anyio.CancelScope(shield=True):
            await sync_to_async(services.dry_run_abandon)(run_id=run.pk)
        raise
    if state.busy or state.outcome is None:
        raise services.dry_runs_busy("No dry-run worker was free.")
    return DryRunOut.model_validate(state.outcome)


# --- symbols and market data -------------------------------------------------------------------------------------


@_tool("list_symbols", "List symbols", ListSymbolsArgs, Paged[SymbolOut])
async def list_symbols(call: ToolCall, args: ListSymbolsArgs) -> Paged[SymbolOut]:
    """List available symbols with asset class and frequency availability (paginated; all stored data is global)."""

    rows = selectors.symbols(is_global=args.is_global, asset_class=args.asset_class)
    return await _run(lambda: _page_of(Paged[SymbolOut], rows, SymbolOut.from_symbol, args.skip, args.limit))


@_tool("search_symbols_by_name", "Search symbols", SearchSymbolsArgs, Listing[SymbolOut])
async def search_symbols_by_name(call: ToolCall, args: SearchSymbolsArgs) -> Listing[SymbolOut]:
    """Search symbols by ticker, name, prefix or pair form (AAPL, BTC/USD, XAU/USD, XAUUSD, gold).

    The argument is camelCase: {"symbolName": "XAU/USD"}."""

    def run() -> Listing[SymbolOut]:
        found = selectors.symbols_search(text=args.symbolName)
        return Listing[SymbolOut](items=[SymbolOut.from_symbol(s) for s in found], total=len(found))

    return await _run(run)


@_tool("get_symbol", "Get symbol", IdArgs, SymbolOut)
async def get_symbol(call: ToolCall, args: IdArgs) -> SymbolOut:
    """One symbol's metadata: source type, asset class, exchange, quote currency and data_availability."""
    return await _run(lambda: SymbolOut.from_symbol(_found(selectors.symbol_get(symbol_id=args.id), "symbol", args.id)))


@_tool("get_market_data_sample", "Market data sample", MarketDataSampleArgs, MarketDataSampleOut)
async def get_market_data_sample(call: ToolCall, args: MarketDataSampleArgs) -> MarketDataSampleOut:
    """The most recent completed OHLCV candles (up to `limit`, at most 10,000) of a stored frequency, with a CSV
    resource.

    start_date/end_date are inclusive ISO 8601 dates or date-times with an offset; a date-only end covers the day."""
    from evidence.marketdata.selectors import bars_read, bars_source

    def run() -> MarketDataSampleOut:
        symbol = _found(selectors.symbol_get(symbol_id=args.id), "symbol", args.id)
        services.require_frequency(symbol, args.frequency)
        if args.start_date and args.end_date:
            services.require_period(args.start_date, args.end_date)
        completed = services.completed_by(args.frequency, now())  # a bar stored before it ended is not served
        end = completed if args.end_date is None else min(args.end_date, completed)
        bars = bars_read(symbol=symbol, frequency=args.frequency, start=args.start_date, end=end)
        source = bars_source(symbol=symbol, frequency=args.frequency)
        return MarketDataSampleOut.from_bars(symbol, args.frequency, bars.tail(args.limit), source)

    return await _run(run)


@_tool("download_market_data", "Download market data", DownloadArgs, DownloadOut, write=True, idempotent=True,
       open_world=True)  # fmt: skip
async def download_market_data(call: ToolCall, args: DownloadArgs) -> DownloadOut:
    """Download full-history OHLCV for a stock, ETF, forex or metal pair, or crypto symbol through the
    configured provider and store it as a global symbol; existing global data is reused. Equities and ETFs
    are 1d only, split- and dividend-adjusted; intraday (5m, 15m, 1h, 4h) needs forex or crypto. Returns the symbol
    name and id."""
    from evidence.marketdata import providers

    def run() -> DownloadOut:
        outcome = providers.market_data_download(
            symbol=args.symbol, frequency=args.frequency, asset_class=args.asset_class
        )
        return DownloadOut.model_validate(outcome)

    return await _run(run)


# --- backtests and reports ---------------------------------------------------------------------------------------


@_tool("run_backtest", "Run backtest", RunBacktestArgs, BacktestSubmitted, write=True, metering="credits")
async def run_backtest(call: ToolCall, args: RunBacktestArgs) -> BacktestSubmitted:
    """Submit one asynchronous backtest of a saved strategy. Cost: a flat LEROY_BACKTEST_CREDITS (default 10)
    credits per backtest, whatever its symbols and bars, plus LEROY_LOOKAHEAD_PROBE_CREDITS (default 5) for its
    look-ahead probe (refunded when the probe cannot run), reserved now (returned as credits_reserved), charged
    when it completes and refunded if it fails; above the optional max_credits it is refused, nothing reserved.

    Use symbol ids from search_symbols_by_name or list_symbols; the frequency must be stored for each. The
    report moves PENDING -> EXECUTING -> COMPLETED | FAILED. Returns {report_id, status, credits_reserved, usage}."""

    def run() -> BacktestSubmitted:
        user = call.user()
        report = services.backtest_submit(
            user=user,
            strategy_id=args.strategy_id,
            data_ids=args.data_ids,
            frequency=args.frequency,
            start_date=args.start_date,
            end_date=args.end_date,
            parameters={p.name: p.value for p in args.parameters},
            simulation={
                "initial_cash": args.initial_cash,
                "commission": args.commission,
                "leverage": args.leverage,
                "buy_on_close": args.buy_on_close,
            },
            max_credits=args.max_credits,
        )
        report.refresh_from_db()  # as committed: a worker may already have picked it up
        return BacktestSubmitted.from_report(report, _usage(user))

    return await _run(run)


@_tool("list_reports", "List reports", ListReportsArgs, Paged[ReportSummary])
async def list_reports(call: ToolCall, args: ListReportsArgs) -> Paged[ReportSummary]:
    """Backtest reports, newest first, optionally for one saved strategy id; with status and statistics."""

    def run() -> Paged[ReportSummary]:
        rows = selectors.reports_of(user=call.user(), strategy_id=args.strategy_id)
        return _page_of(Paged[ReportSummary], rows, ReportSummary.from_report, args.skip, args.limit)

    return await _run(run)


@_tool("get_report", "Get report", IdArgs, ReportOut)
async def get_report(call: ToolCall, args: IdArgs) -> ReportOut:
    """One report. PENDING/EXECUTING give status only; COMPLETED/FAILED add summary statistics, recent
    reconstructed trades, per-symbol performance, diagnostics (sandbox layers, data version, report hash) and
    equity-curve chart data, and the verdict. Stored statistics are authoritative: reconstructed trades exclude
    commission."""

    def run() -> ReportOut:
        report = _found(selectors.report_get(user=call.user(), report_id=args.id), "report", args.id)
        return ReportOut.from_report(report)

    return await _run(run)


@_tool("list_report_trades", "List report trades", ReportTradesArgs, ReportTradesOut)
async def list_report_trades(call: ToolCall, args: ReportTradesArgs) -> ReportTradesOut:
    """A page of a report's reconstructed round-trip trades (entry/exit time and price, quantity, gross P&L,
    P&L %, total); continue with skip += limit while has_next is true."""

    def run() -> ReportTradesOut:
        report = _found(selectors.report_get(user=call.user(), report_id=args.id), "report", args.id)
        return ReportTradesOut.from_report(report, skip=args.skip, limit=args.limit)

    return await _run(run)


@_tool("wait_for_reports", "Wait for reports", WaitForReportsArgs, ReportsWaited)
async def wait_for_reports(call: ToolCall, args: WaitForReportsArgs) -> ReportsWaited:
    """Wait until every report in `report_ids` is COMPLETED or FAILED (up to 10 minutes), reporting progress.

    Returns {results: [{report_id, status}]}; reports still running at the time limit are listed with their status."""

    def statuses() -> dict[str, str]:
        user = call.user()
        found = {
            report_id: _found(selectors.report_get(user=user, report_id=report_id), "report", report_id).status
            for report_id in args.report_ids
        }
        close_old_connections()
        return found

    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        current = await sync_to_async(statuses)()
        done = sum(status in TERMINAL for status in current.values())
        await call.report_progress(done, len(current), f"{done} of {len(current)} reports finished")
        if done == len(current) or time.monotonic() >= deadline:
            return ReportsWaited.from_statuses(current)
        await call.idle(POLL_SECONDS)


# --- optimizations -----------------------------------------------------------------------------------------------


@_tool(
    "run_optimization", "Run optimization", RunOptimizationArgs, OptimizationSubmitted, write=True, metering="credits"
)
async def run_optimization(call: ToolCall, args: RunOptimizationArgs) -> OptimizationSubmitted:
    """Submit a 1-2 parameter grid optimization of a saved strategy; each grid point runs as its own job.

    Cost: LEROY_OPTIMIZATION_POINT_CREDITS (default 5) credits per grid point, LEROY_LOOKAHEAD_PROBE_CREDITS
    (default 5) for the best run's look-ahead probe and LEROY_PBO_CREDITS (default 1) for the verdict's PBO,
    reserved up front (returned as credits_reserved), or 0 when use_free_optimization is true (uses one of the
    month's free optimizations, given back if no point runs); cancelled or failed points, and a PBO the grid is too
    small for, are refunded. Above the optional max_credits it is refused and nothing is reserved. Returns
    {success, optimization_id, total_iterations, credits_reserved, usage}."""

    return await _run(lambda: _submit_optimization(call.user(), args))


def _submit_optimization(
    user: User, args: RunOptimizationArgs, walk_forward: dict[str, Any] | None = None
) -> OptimizationSubmitted:
    optimization = services.optimization_submit(
        user=user,
        strategy_id=args.strategy_id,
        name=args.name,
        data_ids=args.data_ids,
        frequency=args.frequency,
        start=args.start_date,
        end=args.end_date,
        grids=[g.model_dump() for g in args.grids],
        parameters={p.name: p.value for p in args.parameters},
        simulation_parameters=args.simulation_parameters.model_dump(),
        target_metric=args.target_metric,
        target_direction=args.target_direction,
        additional_metrics=list(args.additional_metrics),
        use_free_optimization=args.use_free_optimization,
        max_credits=args.max_credits,
        walk_forward=walk_forward,
    )
    optimization.refresh_from_db()  # as committed: workers may already have picked it up
    return OptimizationSubmitted.from_optimization(optimization, _usage(user))


@_tool(
    "run_walk_forward_optimization", "Run walk-forward optimization", RunWalkForwardArgs, OptimizationSubmitted,
    write=True, metering="credits",
)  # fmt: skip
async def run_walk_forward_optimization(call: ToolCall, args: RunWalkForwardArgs) -> OptimizationSubmitted:
    """Walk-forward optimization: run_optimization's grid fit on each fold's train window by the target metric,
    the chosen point then run on the next test_period window (train windows roll, or with anchored all start at
    start_date); at least 2 whole folds must fit, else period_too_short and nothing is charged. Cost:
    LEROY_OPTIMIZATION_POINT_CREDITS (default 5) per grid point per fold and per fold's test run, plus
    LEROY_LOOKAHEAD_PROBE_CREDITS (default 5) for the probe of the last fold's choice, reserved up front (no PBO);
    refunds, max_credits and use_free_optimization as in run_optimization. Read with
    get_walk_forward_optimization; wait, list results and cancel with the optimization tools."""

    walk_forward = {"train_months": args.train_period.months, "test_months": args.test_period.months,
                    "anchored": args.anchored}  # fmt: skip
    return await _run(lambda: _submit_optimization(call.user(), args, walk_forward))


@_tool("list_optimizations", "List optimizations", ListOptimizationsArgs, Paged[OptimizationSummary])
async def list_optimizations(call: ToolCall, args: ListOptimizationsArgs) -> Paged[OptimizationSummary]:
    """Your optimizations, newest first: status, strategy, grids, metrics, period, iteration counts, credits."""

    def run() -> Paged[OptimizationSummary]:
        rows = selectors.optimizations_of(user=call.user())
        return _page_of(Paged[OptimizationSummary], rows, OptimizationSummary.from_optimization, args.skip, args.limit)

    return await _run(run)


@_tool("get_optimization", "Get optimization", IdArgs, OptimizationOut)
async def get_optimization(call: ToolCall, args: IdArgs) -> OptimizationOut:
    """One optimization: status, progress, grids, metrics, dates, simulation settings, credits, errors, chart
    data and the verdict. It names no "best" run: use list_optimization_results to inspect runs."""

    def run() -> OptimizationOut:
        found = selectors.optimization_get(user=call.user(), optimization_id=args.id)
        optimization = _found(found, "optimization", args.id)
        return OptimizationOut.from_runs(optimization, selectors.optimization_completed_runs(optimization=optimization))

    return await _run(run)


@_tool("get_walk_forward_optimization", "Get walk-forward optimization", IdArgs, WalkForwardOut)
async def get_walk_forward_optimization(call: ToolCall, args: IdArgs) -> WalkForwardOut:
    """A walk-forward optimization's folds (windows, choices, in- and out-of-sample statistics), stitched
    out-of-sample equity curve, efficiency (OOS / IS annualized return), verdict and hash."""

    def run() -> WalkForwardOut:
        found = selectors.walk_forward_get(user=call.user(), optimization_id=args.id)
        return WalkForwardOut.from_optimization(_found(found, "walk-forward optimization", args.id))

    return await _run(run)


@_tool(
    "get_latest_optimization_by_strategy", "Latest optimization of a strategy", LatestOptimizationArgs,
    LatestOptimizationOut,
)  # fmt: skip
async def get_latest_optimization_by_strategy(call: ToolCall, args: LatestOptimizationArgs) -> LatestOptimizationOut:
    """The most recent optimization of a saved strategy id, or {optimization: null} when there is none."""

    def run() -> LatestOptimizationOut:
        optimization = selectors.optimization_latest(user=call.user(), strategy_id=args.strategy_id)
        if optimization is None:
            return LatestOptimizationOut(optimization=None)
        completed = selectors.optimization_completed_runs(optimization=optimization)
        return LatestOptimizationOut(optimization=OptimizationOut.from_runs(optimization, completed))

    return await _run(run)


@_tool("wait_for_optimization", "Wait for optimization", IdArgs, OptimizationWaited)
async def wait_for_optimization(call: ToolCall, args: IdArgs) -> OptimizationWaited:
    """Wait (streaming progress) until the optimization completes, fails or is cancelled, up to 10 minutes.

    Returns {status, completed_iterations, failed_iterations, total_iterations, error, timed_out}."""

    def read() -> Optimization:
        optimization = selectors.optimization_get(user=call.user(), optimization_id=args.id)
        close_old_connections()
        return _found(optimization, "optimization", args.id)

    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        optimization = await sync_to_async(read)()
        done = optimization.completed_iterations + optimization.failed_iterations
        await call.report_progress(done, optimization.total_iterations, f"{done} of {optimization.total_iterations}")
        if optimization.status in TERMINAL or time.monotonic() >= deadline:
            return OptimizationWaited.from_optimization(optimization)
        await call.idle(POLL_SECONDS)


@_tool("list_optimization_results", "List optimization results", OptimizationResultsArgs, OptimizationResultsOut)
async def list_optimization_results(call: ToolCall, args: OptimizationResultsArgs) -> OptimizationResultsOut:
    """A bounded page of an optimization's runs: iteration, swept parameters, status, statistics and errors.

    Sorted by the target metric in the target direction when sort_by is omitted; an explicit sort_by is
    ascending unless descending is true. Continue with skip += limit while has_next is true."""

    def run() -> OptimizationResultsOut:
        found = selectors.optimization_get(user=call.user(), optimization_id=args.id)
        optimization = _found(found, "optimization", args.id)
        sort_by, descending = selectors.optimization_results_order(
            optimization=optimization, sort_by=args.sort_by, descending=args.descending
        )
        runs, total = selectors.optimization_runs(
            optimization=optimization, sort_by=sort_by, descending=descending, skip=args.skip, limit=args.limit
        )
        items = [OptimizationRunOut.model_validate(run, from_attributes=True) for run in runs]
        return OptimizationResultsOut.of(items, total=total, skip=args.skip, limit=args.limit,
                                         optimization_id=str(optimization.pk), sort_by=sort_by,
                                         descending=descending)  # fmt: skip

    return await _run(run)


@_tool("cancel_optimization", "Cancel optimization", IdArgs, OptimizationCancelled, write=True, metering="credits",
       idempotent=True, destructive=True)  # fmt: skip
async def cancel_optimization(call: ToolCall, args: IdArgs) -> OptimizationCancelled:
    """Cancel a PENDING or EXECUTING optimization: points not yet started never run and their reserved
    credits are refunded; completed points stay charged. Returns the optimization and usage."""

    def run() -> OptimizationCancelled:
        user = call.user()
        optimization = services.optimization_cancel(user=user, optimization_id=args.id)
        return OptimizationCancelled.from_cancelled(optimization, _usage(user))

    return await _run(run)
