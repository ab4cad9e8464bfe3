"""Writes for backtests: strategy versions, dry runs, backtests, optimizations, cancellation and reaping.

Credits: a backtest reserves its price at submission, settles it on completion and voids it on failure. An
optimization reserves the whole grid up front (or uses a free optimization when asked), and settles only the
completed points when it ends or is cancelled; the rest of the hold returns to the balance.
"""

import calendar
import contextlib
import hashlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, get_args

from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.db.models import F, FloatField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from accounts.models import User
from backtests import probing, sandbox, selectors, series, statistics, verdicts
from backtests.dryrun import dry_run_datas
from backtests.models import (
    DryRun,
    DryRunPass,
    Optimization,
    OptimizationMode,
    OptimizationRun,
    ProbeCut,
    Report,
    Status,
    Strategy,
    Trial,
    TrialKind,
)
from backtests.policy import declared_parameters
from backtests.probing import PROBE_CUTS
from backtests.schemas import SampleFrequency
from billing import services as billing
from evidence.marketdata.selectors import bars_frame_version, bars_held, bars_read, bars_stamp
from evidence.models import Symbol
from evidence.vocabulary import FREQUENCY_MINUTES
from leroy import broker
from leroy.clock import now
from leroy.errors import DomainError, queue_unavailable

MAX_GRID_POINTS = 400
DRY_RUN_SIMULATION = {"initial_cash": 100_000.0, "commission": 0.0, "leverage": 1.0, "buy_on_close": False}


class BacktestError(DomainError):
    """A request the backtests app refuses; nothing was created or charged. `code` is machine-readable."""


def code_sha256(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


# --- strategies ------------------------------------------------------------------------------------------------


DRY_RUN_POLL_SECONDS = 0.1


def _dry_run_outcome(
    user: User, code: str, on_start: Callable[[sandbox.Running], None] | None = None
) -> dict[str, Any]:
    """Execute complete source on the fixed dry-run data set; saves no strategy, only that this source passed."""
    limits = sandbox.Limits(
        cpu_seconds=settings.LEROY_DRY_RUN_CPU_SECONDS, wall_seconds=settings.LEROY_DRY_RUN_WALL_SECONDS
    )
    outcome = sandbox.run_job(
        source=code,
        datas=dry_run_datas(),
        simulation=DRY_RUN_SIMULATION,
        parameters={},
        limits=limits,
        on_start=on_start,
    )
    summary = None
    if outcome.ok and outcome.result is not None:
        result = outcome.result
        summary = {
            "bars": result["bars"],
            "final_value": result["final_value"],
            "trades": len(result["trades"]),
            "orders": result["orders"],
            "statistics": statistics.compute(result),
        }
        DryRunPass.objects.get_or_create(user=user, code_sha256=code_sha256(code), defaults={"created_at": now()})
    return {
        "success": outcome.ok,
        "error": outcome.error,
        "result": summary,
        "prints": outcome.prints,
        "prints_truncated": outcome.prints_truncated,
        "sandbox_layers": outcome.layers,
    }


def _dry_run_failed(error: dict[str, Any]) -> dict[str, Any]:
    """The outcome of a dry run that never finished in a sandbox: the shape `_dry_run_outcome` answers."""
    return {"success": False, "error": error, "result": None, "prints": "", "prints_truncated": False,
            "sandbox_layers": []}  # fmt: skip


def dry_runs_busy(reason: str) -> BacktestError:
    return BacktestError(
        "busy",
        f"{reason} Retry in {DRY_RUN_RETRY_SECONDS} seconds.",
        retry_after_seconds=DRY_RUN_RETRY_SECONDS,
    )


DRY_RUN_RETRY_SECONDS = 5


def dry_run_submit(*, user: User, code: str) -> DryRun:
    """Queue a dry run for the `dryruns` workers; an account with one still in flight is `busy`."""

    _dry_runs_expire(user=user)
    try:
        with transaction.atomic():
            run = DryRun.objects.create(user=user, code=code, created_at=now())
    except IntegrityError:
        raise dry_runs_busy("A dry run of this account is still running: one at a time.") from None
    transaction.on_commit(lambda: _dry_run_queue(run.pk))
    return run


def _dry_run_queue(run_id: Any) -> None:
    from backtests import tasks

    if not broker.sent(lambda: tasks.dry_run.delay(str(run_id)), "dry run"):
        DryRun.objects.filter(pk=run_id, status=Status.PENDING).update(
            status=Status.FAILED, outcome=_dry_run_failed(NOT_QUEUED), finished_at=now()
        )
        raise queue_unavailable("dry run")


def _dry_runs_expire(*, user: User | None = None) -> int:
    """Close dry runs no worker took in time (busy) and those whose worker vanished (worker_lost)."""
    rows = DryRun.objects.all() if user is None else DryRun.objects.filter(user=user)
    queued = now() - timedelta(seconds=settings.LEROY_DRY_RUN_QUEUE_SECONDS + 5)
    running = now() - timedelta(seconds=settings.LEROY_DRY_RUN_WALL_SECONDS + 60)
    expired = rows.filter(status=Status.PENDING, created_at__lt=queued).update(
        status=Status.CANCELLED, busy=True, finished_at=now()
    )
    return expired + rows.filter(status=Status.EXECUTING, started_at__lt=running).update(
        status=Status.FAILED, outcome=_dry_run_failed(WORKER_LOST), finished_at=now()
    )


def dry_run_execute(*, run_id: str) -> None:
    """A worker's side: claim the dry run, take one of this worker's dry-run slots (or answer busy), run it."""
    claimed = DryRun.objects.filter(pk=run_id, status=Status.PENDING).update(status=Status.EXECUTING, started_at=now())
    if not claimed:
        return  # cancelled while queued, or a redelivery: the reaper closes a lost one
    with sandbox.worker_slot(settings.LEROY_DRY_RUNS_PER_WORKER) as slot:
        if slot is None:
            DryRun.objects.filter(pk=run_id).update(status=Status.CANCELLED, busy=True, finished_at=now())
            return
        run = DryRun.objects.select_related("user").get(pk=run_id)
        if not run.user.is_active:  # suspended or closed while it waited: it never runs
            DryRun.objects.filter(pk=run_id).update(status=Status.CANCELLED, finished_at=now())
            return
        on_start, finished = _killed_when_abandoned(run.pk)
        try:
            outcome = _dry_run_outcome(run.user, run.code, on_start=on_start)
        finally:
            finished.set()
    # A dry run abandoned meanwhile stays CANCELLED (its job was killed, or finished first: either way unanswered).
    DryRun.objects.filter(pk=run_id, status=Status.EXECUTING).update(
        status=Status.COMPLETED, outcome=outcome, finished_at=now()
    )


DRY_RUN_WATCH_SECONDS = 0.2


def _killed_when_abandoned(run_id: Any) -> tuple[Callable[[sandbox.Running], None], threading.Event]:
    """An `on_start` for a dry run's job that kills it once the dry run is abandoned (its caller hung up or
    cancelled), watching its row from a thread of its own; set the event to stop watching."""
    finished = threading.Event()

    def watch(running: sandbox.Running) -> None:
        try:
            while not finished.wait(DRY_RUN_WATCH_SECONDS):
                if DryRun.objects.filter(pk=run_id, status=Status.CANCELLED).exists():
                    running.kill("abandoned")
                    return
        finally:
            connections.close_all()  # this thread's own

    def on_start(running: sandbox.Running) -> None:
        threading.Thread(target=watch, args=(running,), daemon=True, name="dry-run-watch").start()

    return on_start, finished


def dry_run_abandon(*, run_id: Any) -> bool:
    """The caller stopped waiting (it hung up or cancelled the call): the dry run is cancelled, queued or running (a
    running one's job is killed by its worker's watch), and the account may start another."""
    return bool(
        DryRun.objects.filter(pk=run_id, status__in=[Status.PENDING, Status.EXECUTING]).update(
            status=Status.CANCELLED, finished_at=now()
        )
    )


def dry_run_give_up(*, run_id: Any) -> bool:
    """The caller stops waiting for a queued dry run: it is cancelled (and never runs) unless a worker took it."""
    return bool(
        DryRun.objects.filter(pk=run_id, status=Status.PENDING).update(
            status=Status.CANCELLED, busy=True, finished_at=now()
        )
    )


def dry_run_state(*, run_id: Any) -> DryRun:
    return DryRun.objects.get(pk=run_id)


def _require_dry_run(user: User, code: str) -> None:
    if not DryRunPass.objects.filter(user=user, code_sha256=code_sha256(code)).exists():
        raise BacktestError(
            "dry_run_required",
            "Run run_dry_run_backtest successfully with this exact code before saving it.",
            code_sha256=code_sha256(code),
        )


@transaction.atomic
def strategy_create(*, user: User, name: str, code: str, description: str = "", version: str = "1.0.0") -> Strategy:
    _require_dry_run(user, code)
    return Strategy.objects.create(
        user=user,
        name=name,
        description=description,
        version=version,
        code=code,
        code_sha256=code_sha256(code),
        created_at=now(),
    )


def strategy_seed(*, user: User, name: str, code: str, description: str = "") -> Strategy:
    """The account's strategy called `name`, saved once after a real dry run in this process (the demo's strategy:
    it exists before any worker runs). A failed dry run saves nothing and is refused as create_strategy would be."""
    existing = Strategy.objects.filter(user=user, name=name).order_by("-pk").first()
    if existing is not None:
        return existing
    outcome = _dry_run_outcome(user, code)
    if not outcome["success"]:
        raise BacktestError(
            "dry_run_failed", "The strategy's dry run failed; nothing was saved.", error=outcome["error"]
        )
    return strategy_create(user=user, name=name, code=code, description=description)


@transaction.atomic
def strategy_update(
    *, user: User, strategy_id: str, name: str | None = None, description: str | None = None, code: str | None = None
) -> Strategy:
    """A new immutable version that replaces `strategy_id` (which must be the current version) in listings."""
    key = selectors.parse_id(strategy_id)
    current = Strategy.objects.select_for_update().filter(pk=key, user=user).first() if key else None
    if current is None:
        raise BacktestError("not_found", f"No strategy {strategy_id}.")
    if not current.is_current:
        latest = Strategy.objects.get(lineage=current.lineage, is_current=True)
        raise BacktestError(
            "strategy_superseded",
            f"Strategy {strategy_id} was replaced by a newer version; update the current one.",
            current_id=str(latest.pk),
        )
    if name is None and description is None and code is None:
        raise BacktestError("invalid_request", "Give at least one of name, description or code.")
    if code is not None and code != current.code:
        _require_dry_run(user, code)
    code = current.code if code is None else code
    Strategy.objects.filter(pk=current.pk).update(is_current=False)
    return Strategy.objects.create(
        user=user,
        lineage=current.lineage,
        previous=current,
        revision=current.revision + 1,
        name=current.name if name is None else name,
        description=current.description if description is None else description,
        version=current.version,
        code=code,
        code_sha256=code_sha256(code),
        created_at=now(),
    )


# --- shared run plumbing ---------------------------------------------------------------------------------------


def check_parameters(strategy: Strategy, names: set[str]) -> None:
    """Refuse parameter names the strategy does not declare, before anything is reserved."""
    declared = declared_parameters(strategy.code)
    unknown = sorted(names - declared) if declared is not None else []
    if unknown:
        raise BacktestError(
            "unknown_parameter",
            f"The strategy has no parameter(s) {', '.join(unknown)}; it declares {sorted(declared or ())}.",
            unknown=unknown,
        )


def require_frequency(symbol: Symbol, frequency: str, **details: object) -> None:
    """Refuse a frequency the symbol holds no bars at; the ones offered are those it holds that a request may name
    (minute bars are stored, but no tool takes 1m)."""
    if frequency not in symbol.frequencies:
        offered = [held for held in symbol.frequencies if held in get_args(SampleFrequency)]
        raise BacktestError(
            "frequency_unavailable",
            f"{symbol.ticker} has no {frequency} data; available: {', '.join(offered) or 'none'}.",
            **details,
            available=offered,
        )


def require_period(start: date, end: date) -> None:
    """Refuse a period that ends before it starts (dates or instants)."""
    if end < start:
        raise BacktestError("invalid_request", "end_date must not be before start_date.")


def symbols_for(*, data_ids: list[str], frequency: str) -> list[Symbol]:
    """The symbols behind `data_ids`, each checked to exist and to hold bars at `frequency`."""
    found = []
    for data_id in data_ids:
        symbol = selectors.symbol_get(symbol_id=data_id)
        if symbol is None:
            raise BacktestError("symbol_not_found", f"No symbol with id {data_id!r}.", data_id=data_id)
        require_frequency(symbol, frequency, data_id=data_id)
        found.append(symbol)
    if len({s.pk for s in found}) != len(found):
        raise BacktestError("invalid_request", "data_ids must not repeat a symbol.")
    return found


def _no_data(symbol: Symbol, frequency: str, start: datetime, end: datetime) -> BacktestError:
    return BacktestError(
        "no_data", f"{symbol.ticker} has no {frequency} bars between {start:%Y-%m-%d} and {end:%Y-%m-%d}."
    )


def require_bars(symbols: list[Symbol], frequency: str, start: datetime, end: datetime) -> None:
    """Refuse, before anything is created or reserved, a period no stored bars of a symbol fall in (the worker's
    read still refuses one whose partitions meet it but hold no bar inside it)."""
    for symbol in symbols:
        if not bars_held(symbol=symbol, frequency=frequency, start=start, end=end):
            raise _no_data(symbol, frequency, start, end)


# The bars a worker process read last, by window and by what they were read from: every point of a grid, its probe
# and each of the probe's cuts read the same window, in one task or in the next ones on the same worker. Shared,
# never mutated (the sandbox packs copies); a partition rewritten or re-recorded meanwhile misses (`bars_stamp`).
# Bounded by bar rows (about 190 bytes a row as lists of floats): a window larger than that is not kept.
_BARS_KEPT: OrderedDict[tuple[Any, ...], tuple[list[dict], str]] = OrderedDict()
_BARS_LOCK = threading.Lock()  # a worker may run tasks on threads (Celery's threads pool)
BARS_KEPT_ROWS = 1_000_000


def _rows(loaded: tuple[list[dict], str]) -> int:
    return sum(len(data["ts_us"]) for data in loaded[0])


def completed_by(frequency: str, at: datetime) -> datetime:
    """The last bar start whose bar had ended at `at` (a bar at ts covers [ts, ts + its frequency)): a later bar,
    stored early (a provider's session still open, a replayed one), is not history yet."""
    return at - timedelta(minutes=FREQUENCY_MINUTES[frequency])


def load_bars(
    *, tickers: list[str], frequency: str, start: datetime, end: datetime, as_of: datetime
) -> tuple[list[dict], str]:
    """Plain-list bars for the sandbox and the data version (SHA-256 over every symbol's bars): those in [start,
    end] that had completed at `as_of` (the job's submission, so every run of a job reads the same bars)."""
    until = min(end, completed_by(frequency, as_of))
    # Stamped by ticker: kept bars cost one query a symbol (a grid reads the same window once a point).
    stamps = [bars_stamp(symbol=ticker, frequency=frequency, start=start, end=until) for ticker in tickers]
    key = (tuple(tickers), frequency, start, until, tuple(stamps))
    if None not in stamps:
        with _BARS_LOCK:
            if (kept := _BARS_KEPT.get(key)) is not None:
                _BARS_KEPT.move_to_end(key)
                return kept
    datas, versions = [], []
    for symbol in [Symbol.objects.get(ticker=ticker) for ticker in tickers]:
        frame = bars_read(symbol=symbol, frequency=frequency, start=start, end=until)
        if frame.is_empty():
            raise _no_data(symbol, frequency, start, end)
        datas.append(
            {
                "name": symbol.ticker,
                "ts_us": frame.get_column("ts").dt.epoch("us").to_list(),
                **{
                    c: [float(v) for v in frame.get_column(c).to_list()]
                    for c in ("open", "high", "low", "close", "volume")
                },
            }
        )
        versions.append(bars_frame_version(frame, ticker=symbol.ticker, frequency=frequency))
    loaded = datas, hashlib.sha256("|".join(versions).encode()).hexdigest()
    if None not in stamps and _rows(loaded) <= BARS_KEPT_ROWS:
        with _BARS_LOCK:
            _BARS_KEPT[key] = loaded
            while sum(map(_rows, _BARS_KEPT.values())) > BARS_KEPT_ROWS:
                _BARS_KEPT.popitem(last=False)
    return loaded


def day_bounds(start: date, end: date) -> tuple[datetime, datetime]:
    """Inclusive UTC bounds: a date-only end covers that whole day."""
    return datetime.combine(start, time(0), UTC), datetime.combine(end, time(0), UTC) + timedelta(
        days=1, microseconds=-1
    )


def _within_budget(amount: int, max_credits: int | None) -> None:
    """The caller's ceiling: above it nothing is created and nothing reserved."""
    if max_credits is not None and amount > max_credits:
        raise BacktestError(
            "over_max_credits",
            f"This run would reserve {amount} credits, above max_credits {max_credits}; nothing was reserved.",
            credits_required=amount,
            max_credits=max_credits,
        )


def _reserve(user: User, amount: int, reference: str) -> int:
    try:
        return billing.credits_reserve(user=user, amount=amount, reference=reference).pk
    except billing.BillingError as error:
        raise BacktestError(error.code, error.message, **(error.details or {})) from None


def _optimization_settle(optimization: Optimization) -> None:
    """Resolve an optimization's hold at its end: its credits charged; a free optimization's one use when it ran a
    point, none when it ran nothing."""
    if optimization.use_free_optimization:
        _settle(optimization.hold_id, 1 if optimization.completed_iterations else 0)
    else:
        _settle(optimization.hold_id, optimization.credits_charged)


def _settle(hold_id: int | None, amount: int) -> None:
    if hold_id is None:
        return
    if amount:
        billing.credits_settle(hold_id=hold_id, amount=amount)
    else:
        billing.credits_void(hold_id=hold_id)


def _diagnostics(outcome: sandbox.Outcome, data_version: str) -> dict[str, Any]:
    result = outcome.result or {}
    return {
        "sandbox_layers": outcome.layers,
        "sandbox_seconds": round(outcome.seconds, 3),
        "data_version": data_version,
        "bars": result.get("bars"),
        "orders": result.get("orders"),
        "initial_cash": result.get("initial_cash"),
        "final_value": result.get("final_value"),
        "final_cash": result.get("final_cash"),
        "open_positions": result.get("open_positions"),
        "prints": outcome.prints,  # escaped and capped at 64 KiB by the sandbox
        "prints_truncated": outcome.prints_truncated,
    }


# --- trials and verdicts ---------------------------------------------------------------------------------------


def _returns(daily_returns: list[list[Any]]) -> list[float]:
    return [float(r) for _, r in daily_returns]


def trial_record(
    *,
    strategy: Strategy,
    kind: str,
    parameters: dict[str, Any],
    data_ids: list[str],
    frequency: str,
    start: datetime,
    end: datetime,
    data_version: str,
    daily_returns: list[list[Any]],
    report: Report | None = None,
    run: OptimizationRun | None = None,
) -> Trial:
    """Count one completed run toward the strategy's trials (its Sharpe per day, null when undefined)."""
    observed = verdicts.moments(_returns(daily_returns))
    return Trial.objects.create(
        user_id=strategy.user_id, strategy=strategy, lineage=strategy.lineage, code_sha256=strategy.code_sha256,
        kind=kind, report=report, run=run, parameters=parameters, data_ids=data_ids, frequency=frequency,
        start=start, end=end, data_version=data_version, sharpe=observed.sharpe if observed else None,
        observations=len(daily_returns), created_at=now(),
    )  # fmt: skip


def thresholds() -> verdicts.Thresholds:
    return verdicts.Thresholds(
        min_deflated_sharpe=settings.LEROY_VERDICT_MIN_DEFLATED_SHARPE,
        max_pbo=settings.LEROY_VERDICT_MAX_PBO,
        min_trades=settings.LEROY_VERDICT_MIN_TRADES,
    )


def verdict_of(
    *,
    strategy: Strategy,
    daily_returns: list[list[Any]],
    trades: int,
    lookahead: str,
    pbo: dict[str, Any] | None = None,
    pbo_refusal: str | None = None,
    max_drawdown_pct: float | None = None,
) -> dict[str, Any]:
    """The verdict of one run, deflated by every trial counted so far on the strategy (this one included)."""
    count, variance = selectors.trial_tally(user=strategy.user, strategy=strategy)
    deflated = verdicts.deflated_sharpe(_returns(daily_returns), trials=count, trial_sharpe_variance=variance)
    return verdicts.verdict(
        deflated=deflated, pbo=pbo, pbo_refusal=pbo_refusal, lookahead=lookahead, trades=trades,
        thresholds=thresholds(), max_drawdown_pct=max_drawdown_pct,
    )  # fmt: skip


# --- backtests -------------------------------------------------------------------------------------------------


@transaction.atomic
def backtest_submit(
    *,
    user: User,
    strategy_id: str,
    data_ids: list[str],
    frequency: str,
    start_date: date,
    end_date: date,
    parameters: dict[str, Any],
    simulation: dict[str, Any],
    max_credits: int | None = None,
) -> Report:

    strategy = selectors.strategy_get(user=user, strategy_id=strategy_id)
    if strategy is None:
        raise BacktestError("strategy_not_found", f"No saved strategy {strategy_id}.")
    require_period(start_date, end_date)
    check_parameters(strategy, set(parameters))
    symbols = symbols_for(data_ids=data_ids, frequency=frequency)
    require_bars(symbols, frequency, *day_bounds(start_date, end_date))
    price = settings.LEROY_BACKTEST_CREDITS + settings.LEROY_LOOKAHEAD_PROBE_CREDITS  # the probe, shown up front
    _within_budget(price, max_credits)
    report = Report.objects.create(
        user=user,
        strategy=strategy,
        data_ids=[str(s.pk) for s in symbols],
        tickers=[s.ticker for s in symbols],
        frequency=frequency,
        start_date=start_date,
        end_date=end_date,
        parameters=parameters,
        simulation=simulation,
        credits_reserved=price,
        created_at=now(),
    )
    report.hold_id = _reserve(user, price, f"backtest:{report.pk}")
    report.save(update_fields=["hold_id"])
    transaction.on_commit(lambda: _backtest_queue(report.pk))
    return report


def _backtest_queue(report_id: Any) -> None:
    from backtests import tasks

    if not broker.sent(lambda: tasks.backtest_run.delay(str(report_id)), "backtest"):
        _report_fail(report_id, NOT_QUEUED)
        raise queue_unavailable("backtest", report_id=str(report_id))


def _report_fail(report_id: Any, error: dict[str, Any], diagnostics: dict[str, Any] | None = None) -> None:
    with transaction.atomic():
        report = Report.objects.select_for_update().get(pk=report_id)
        if report.status not in (Status.PENDING, Status.EXECUTING):
            return
        report.status, report.error, report.finished_at = Status.FAILED, error, now()
        report.diagnostics = diagnostics
        report.save(update_fields=["status", "error", "finished_at", "diagnostics"])
        _settle(report.hold_id, 0)


WORKER_LOST = {"code": "worker_lost", "message": "the worker running this job stopped before it finished", "line": None}
NOT_QUEUED = {"code": "queue_unavailable", "message": "the job queue did not take this job: it never ran", "line": None}
ACCOUNT_INACTIVE = {
    "code": "account_inactive",
    "message": "the account was suspended or closed before this job ran",
    "line": None,
}


def backtest_execute(*, report_id: str) -> None:
    """Claim a PENDING report, run it in the sandbox, store the report and settle or void its credits.

    A report found EXECUTING here was claimed by a worker that died (the broker redelivered the task):
    it fails and its credits are voided rather than running twice.
    """
    claimed = Report.objects.filter(pk=report_id, status=Status.PENDING).update(
        status=Status.EXECUTING, started_at=now()
    )
    if not claimed:
        if Report.objects.filter(pk=report_id, status=Status.EXECUTING).exists():
            _report_fail(report_id, WORKER_LOST)
        return
    report = Report.objects.select_related("strategy__user").get(pk=report_id)
    if not report.strategy.user.is_active:  # suspended or closed while this waited: it never runs
        _report_fail(report_id, ACCOUNT_INACTIVE)
        return
    start, end = day_bounds(report.start_date, report.end_date)
    try:
        datas, data_version = load_bars(
            tickers=report.tickers, frequency=report.frequency, start=start, end=end, as_of=report.created_at
        )
    except BacktestError as error:
        _report_fail(report_id, {"code": error.code, "message": error.message, "line": None})
        return
    outcome = sandbox.run_job(
        source=report.strategy.code,
        datas=datas,
        simulation=report.simulation,
        parameters=report.parameters,
        probe=PROBE_CUTS,
    )
    diagnostics = _diagnostics(outcome, data_version)
    if not outcome.ok or outcome.result is None:
        _report_fail(report_id, outcome.error or WORKER_LOST, diagnostics)
        return
    result = outcome.result
    check = result.pop("lookahead_check")
    stats = statistics.compute(result)
    with transaction.atomic():
        locked = Report.objects.select_for_update().get(pk=report_id)
        if locked.status != Status.EXECUTING:
            return
        locked.status, locked.finished_at = Status.COMPLETED, now()
        locked.statistics, locked.per_symbol = stats, statistics.per_symbol(result)
        locked.trades, locked.equity, locked.diagnostics = result["trades"], result["equity"], diagnostics
        locked.data_version, locked.lookahead_check = data_version, check
        trial_record(
            strategy=report.strategy, kind=TrialKind.BACKTEST, parameters=report.parameters, data_ids=report.data_ids,
            frequency=report.frequency, start=start, end=end, data_version=data_version,
            daily_returns=result["daily_returns"], report=locked,
        )  # fmt: skip
        locked.verdict = verdict_of(
            strategy=report.strategy, daily_returns=result["daily_returns"], trades=len(result["trades"]),
            lookahead=check["status"], max_drawdown_pct=stats["maximum_drawdown_percentage"],
        )  # fmt: skip
        locked.report_hash = statistics.report_hash(
            statistics=stats, result=result, lookahead_check=check, verdict=locked.verdict
        )
        # A probe the data were too short for did not run: its credits go back.
        unused = settings.LEROY_LOOKAHEAD_PROBE_CREDITS if check["status"] == "not_run" else 0
        locked.credits_charged = max(0, locked.credits_reserved - unused)
        locked.save()
        _settle(locked.hold_id, locked.credits_charged)


# --- optimizations ---------------------------------------------------------------------------------------------


def grid_points(grids: list[dict[str, Any]]) -> list[dict[str, int | float]]:
    """The cartesian product of each grid's min..max by step (exact decimal steps; ints stay ints)."""
    axes = []
    for grid in grids:
        low, high, step = (Decimal(str(grid[k])) for k in ("min", "max", "step"))
        count = int((high - low) / step) + 1
        if count > MAX_GRID_POINTS:
            raise BacktestError("grid_too_large", f"The grid has more than {MAX_GRID_POINTS} points.")
        integral = all(isinstance(grid[k], int) and not isinstance(grid[k], bool) for k in ("min", "max", "step"))
        axes.append([(grid["name"], int(low + i * step) if integral else float(low + i * step)) for i in range(count)])
    points = [dict(combo) for combo in itertools.product(*axes)]
    if len(points) > MAX_GRID_POINTS:
        raise BacktestError("grid_too_large", f"The grid has {len(points)} points; at most {MAX_GRID_POINTS}.")
    return points


@transaction.atomic
def optimization_submit(
    *,
    user: User,
    strategy_id: str,
    name: str,
    data_ids: list[str],
    frequency: str,
    start: datetime,
    end: datetime,
    grids: list[dict[str, Any]],
    parameters: dict[str, Any],
    simulation_parameters: dict[str, Any],
    target_metric: str,
    target_direction: str,
    additional_metrics: list[str],
    use_free_optimization: bool,
    max_credits: int | None = None,
    walk_forward: dict[str, Any] | None = None,
) -> Optimization:
    """A grid optimization, or with `walk_forward` ({train_months, test_months, anchored}) a walk-forward one:
    every point on every fold's train window, then each fold's chosen point on its test window."""

    strategy = selectors.strategy_get(user=user, strategy_id=strategy_id)
    if strategy is None:
        raise BacktestError("strategy_not_found", f"No saved strategy {strategy_id}.")
    require_period(start, end)
    clash = sorted({g["name"] for g in grids} & set(parameters))
    if clash or len({g["name"] for g in grids}) != len(grids):
        raise BacktestError("invalid_request", "Grid names must be distinct and not repeat fixed parameters.")
    check_parameters(strategy, {g["name"] for g in grids} | set(parameters))
    symbols = symbols_for(data_ids=data_ids, frequency=frequency)
    require_bars(symbols, frequency, start, end)
    points = grid_points(grids)
    folds = None if walk_forward is None else walk_forward_folds(start=start, end=end, **walk_forward)
    runs = [(None, point) for point in points] if folds is None else [
        (fold["fold"], point) for fold in folds for point in points
    ]  # fmt: skip
    if len(runs) > MAX_GRID_POINTS:
        raise BacktestError(
            "grid_too_large", f"{len(folds or [])} folds x {len(points)} points is {len(runs)} runs; at most "
            f"{MAX_GRID_POINTS}.",
        )  # fmt: skip
    tests = len(folds or [])  # one out-of-sample run per fold
    price = 0 if use_free_optimization else settings.LEROY_OPTIMIZATION_POINT_CREDITS
    probe = 0 if use_free_optimization else settings.LEROY_LOOKAHEAD_PROBE_CREDITS
    pbo = 0 if use_free_optimization or folds is not None else settings.LEROY_PBO_CREDITS
    reserved = price * (len(runs) + tests) + probe + pbo
    _within_budget(reserved, max_credits)
    optimization = Optimization.objects.create(
        user=user,
        strategy=strategy,
        name=name,
        mode=OptimizationMode.GRID if folds is None else OptimizationMode.WALK_FORWARD,
        walk_forward=None if walk_forward is None else {**walk_forward, "folds": folds},
        data_ids=[str(s.pk) for s in symbols],
        tickers=[s.ticker for s in symbols],
        frequency=frequency,
        start_date=start,
        end_date=end,
        grids=grids,
        parameters=parameters,
        simulation_parameters=simulation_parameters,
        target_metric=target_metric,
        target_direction=target_direction,
        additional_metrics=additional_metrics,
        use_free_optimization=use_free_optimization,
        total_iterations=len(runs),
        point_tasks=len(point_chunks(list(range(len(runs))), settings.LEROY_OPTIMIZATION_POINTS_PER_TASK)),
        credits_per_iteration=price,
        credits_probe=probe,
        credits_pbo=pbo,
        pbo_blocks=settings.LEROY_PBO_BLOCKS,
        credits_reserved=reserved,
        created_at=now(),
    )
    reference = f"optimization:{optimization.pk}"
    if use_free_optimization:
        try:
            optimization.hold_id = billing.free_optimization_reserve(user=user, reference=reference).pk
        except billing.BillingError as error:
            raise BacktestError(error.code, error.message, **(error.details or {})) from None
    else:
        optimization.hold_id = _reserve(user, optimization.credits_reserved, reference)
    optimization.save(update_fields=["hold_id"])
    created = OptimizationRun.objects.bulk_create(
        OptimizationRun(optimization=optimization, iteration=i + 1, parameters=point, fold=fold)
        for i, (fold, point) in enumerate(runs)
    )
    run_ids = [run.pk for run in created]
    chunks = point_chunks(run_ids, settings.LEROY_OPTIMIZATION_POINTS_PER_TASK)
    transaction.on_commit(lambda: _optimization_queue(optimization.pk, chunks))
    return optimization


def _optimization_queue(optimization_id: Any, chunks: list[list[int]]) -> None:
    """Send the grid's chunk tasks; when the broker takes none or only some, the optimization fails and every
    credit is returned (a chunk already queued finds it no longer live and runs nothing)."""
    from backtests import tasks

    if broker.sent(lambda: [tasks.optimization_points.delay(chunk) for chunk in chunks], "optimization"):
        return
    with transaction.atomic():
        optimization = Optimization.objects.select_for_update().get(pk=optimization_id)
        if optimization.status in _LIVE:
            failed = OptimizationRun.objects.filter(optimization=optimization, status=Status.PENDING).update(
                status=Status.FAILED, error=NOT_QUEUED, finished_at=now()
            )
            optimization.failed_iterations += failed
            optimization.status, optimization.finished_at = Status.FAILED, now()
            optimization.credits_charged = _points_charged(optimization)
            optimization.save(update_fields=["failed_iterations", "status", "finished_at", "credits_charged"])
            _optimization_settle(optimization)
    raise queue_unavailable("optimization", optimization_id=str(optimization_id))


def point_chunks(run_ids: list[int], size: int) -> list[list[int]]:
    """Consecutive runs, `size` to a task: a task's start-up (broker, bars, sandbox) is paid once per chunk, and
    chunks stay small enough to spread evenly over the workers."""
    size = max(1, size)
    return [run_ids[i : i + size] for i in range(0, len(run_ids), size)]


WALK_FORWARD_MIN_FOLDS = 2  # one fold gives one out-of-sample window: nothing to walk forward over


MICROSECOND = timedelta(microseconds=1)


def add_months(moment: datetime, months: int) -> datetime:
    """The same day `months` later (the month's last day when it is shorter)."""
    index = moment.month - 1 + months
    year, month = moment.year + index // 12, index % 12 + 1
    return moment.replace(year=year, month=month, day=min(moment.day, calendar.monthrange(year, month)[1]))


def walk_forward_folds(
    *, start: datetime, end: datetime, train_months: int, test_months: int, anchored: bool
) -> list[dict[str, Any]]:
    """Whole folds inside [start, end]: train [a, b) then test [b, b + test); each next test window starts where
    the last ended, its train window ending there too (rolling: the same length; anchored: from `start`). A test
    window that would pass `end` is not made. Too few folds is refused before anything is created or charged."""
    folds: list[dict[str, Any]] = []
    while True:
        k = len(folds)
        try:
            test_start = add_months(start, train_months + k * test_months)
            test_end = add_months(start, train_months + (k + 1) * test_months)
        except ValueError:  # past the year 9999: past any end
            break
        if test_end - MICROSECOND > end:  # `end` is inclusive, a window's end exclusive
            break
        train_start = start if anchored else add_months(start, k * test_months)
        folds.append({
            "fold": k + 1, "train_start": train_start.isoformat(), "train_end": test_start.isoformat(),
            "test_start": test_start.isoformat(), "test_end": test_end.isoformat(),
        })  # fmt: skip
    if len(folds) < WALK_FORWARD_MIN_FOLDS:
        try:
            last = add_months(start, train_months + WALK_FORWARD_MIN_FOLDS * test_months) - MICROSECOND
            need = f"reach {last:%Y-%m-%d}"
        except ValueError:
            need = "end after the year 9999"
        raise BacktestError(
            "period_too_short",
            f"{train_months} train and {test_months} test months from {start:%Y-%m-%d} give {len(folds)} whole "
            f"fold(s) by {end:%Y-%m-%d}; walk-forward needs at least {WALK_FORWARD_MIN_FOLDS} (the period must "
            f"{need}).",
            folds=len(folds), min_folds=WALK_FORWARD_MIN_FOLDS,
        )  # fmt: skip
    return folds


def walk_forward_plan(optimization: Optimization) -> dict[str, Any]:
    """A walk-forward optimization's periods, folds and (once closed) result; a grid optimization has none."""
    if optimization.walk_forward is None:
        raise ValueError(f"optimization {optimization.pk} is not a walk-forward optimization")
    return optimization.walk_forward


def run_window(optimization: Optimization, run: OptimizationRun) -> tuple[datetime, datetime]:
    """The inclusive bounds a run reads bars in: the whole period, or its fold's train or test window."""
    if run.fold is None:
        return optimization.start_date, optimization.end_date
    fold = walk_forward_plan(optimization)["folds"][run.fold - 1]
    side = "test" if run.out_of_sample else "train"
    return (
        datetime.fromisoformat(fold[f"{side}_start"]),
        datetime.fromisoformat(fold[f"{side}_end"]) - timedelta(microseconds=1),
    )


def simulation_of(simulation_parameters: dict[str, Any]) -> dict[str, Any]:
    schema = simulation_parameters["commission_schema"]
    return {
        "initial_cash": simulation_parameters["initial_cash"],
        "commission": schema["commission"],
        "leverage": schema["leverage"],
        "buy_on_close": simulation_parameters["buy_on_close"],
    }


def optimization_points_execute(*, run_ids: list[int], claim: str) -> None:
    """Run a chunk of grid points in order, each claimed for this task (`claim`: its task id, the same when the
    broker redelivers it) and recorded on its own (the window's bars read once per worker process: `load_bars`);
    then, once every chunk task of the grid has started, take the points no task has started yet (those later in
    other chunks) one at a time from the end of the grid. So a worker that finished its chunk runs what would
    otherwise wait behind a busy one, and the grid spreads over any number of workers to within one point; before
    every task has started, a free worker takes the next task from the queue instead (a task whose points were all
    taken would still be queued, to run for nothing ahead of the probe's cuts).

    A redelivered task (its worker stopped mid-run) first fails the points it had claimed and not finished; a point
    another task claimed is that task's, even while it runs. A cancel stops the rest."""
    optimization_id = _lost_points_failed(run_ids, claim)
    if optimization_id is None or _inactive_account_cancels(optimization_id):
        return
    optimizations = Optimization.objects.filter(pk=optimization_id)
    optimizations.update(point_tasks_started=F("point_tasks_started") + 1)
    for run_id in run_ids:
        if _point_claim(OptimizationRun.objects.filter(pk=run_id), claim):
            _point_execute(run_id)
    if not optimizations.filter(point_tasks_started__gte=F("point_tasks")).exists():
        return  # a task is still queued: a free worker takes it
    while (stolen := _point_steal(optimization_id, claim)) is not None:
        _point_execute(stolen)


def optimization_point_execute(*, run_id: int, claim: str) -> None:
    """One grid point, claimed for task `claim` (a message queued before points were chunked, which takes no
    other)."""
    optimization_id = _lost_points_failed([run_id], claim)
    if optimization_id is None or _inactive_account_cancels(optimization_id):
        return
    if _point_claim(OptimizationRun.objects.filter(pk=run_id), claim):
        _point_execute(run_id)


def _inactive_account_cancels(optimization_id: Any) -> bool:
    """Whether the optimization's account is suspended (an operator unticked "active") or closed; if so it is
    cancelled as its owner's cancel would: the points not started are refunded, those done stay charged."""
    optimization = Optimization.objects.select_related("user").get(pk=optimization_id)
    if optimization.user.is_active:
        return False
    with transaction.atomic(), contextlib.suppress(BacktestError):  # not_cancellable: it closed meanwhile
        optimization_cancel(user=optimization.user, optimization_id=str(optimization.pk))
    return True


def _lost_points_failed(run_ids: list[int], claim: str) -> Any:
    """The optimization of a task's points (None when none exists), once the points the task had claimed in an
    earlier delivery have failed."""
    optimization_id = OptimizationRun.objects.filter(pk__in=run_ids).values_list("optimization_id", flat=True).first()
    if optimization_id is None:
        return None
    lost = OptimizationRun.objects.filter(optimization_id=optimization_id, status=Status.EXECUTING, claimed_by=claim)
    for run_id in lost.values_list("pk", flat=True):
        _point_done(run_id, error=WORKER_LOST)
    return optimization_id


_LIVE = (Status.PENDING, Status.EXECUTING)


def _point_claim(runs: Any, claim: str) -> bool:
    """Claim the one PENDING run of `runs` (a queryset) for task `claim`, if its optimization is still live."""
    return bool(
        runs.filter(status=Status.PENDING, optimization__status__in=_LIVE).update(
            status=Status.EXECUTING, claimed_by=claim, started_at=now()
        )
    )


def _point_steal(optimization_id: Any, claim: str) -> int | None:
    """Claim the last grid point no task has started (the chunks' own tasks claim theirs from the front), or None."""
    pending = OptimizationRun.objects.filter(
        optimization_id=optimization_id, status=Status.PENDING, out_of_sample=False, optimization__status__in=_LIVE
    )
    while (run_id := pending.order_by("-iteration").values_list("pk", flat=True).first()) is not None:
        if _point_claim(OptimizationRun.objects.filter(pk=run_id), claim):
            return run_id
    return None  # every point is taken (or the optimization was cancelled)


def _point_execute(run_id: int) -> None:
    """Run one claimed grid point; the last point to finish closes the optimization and settles its credits."""
    run = OptimizationRun.objects.select_related("optimization__strategy").get(pk=run_id)
    optimization = run.optimization
    if optimization.status == Status.PENDING:  # once executing it never goes back: no update to try
        Optimization.objects.filter(pk=optimization.pk, status=Status.PENDING).update(
            status=Status.EXECUTING, started_at=now()
        )
    _point_done(run_id, run=run, **_run_point(optimization, run))


def _run_point(optimization: Optimization, run: OptimizationRun) -> dict[str, Any]:
    """Run one point on its window's bars (and only those): {result and its packed returns | error, data_version}."""
    start, end = run_window(optimization, run)
    try:
        datas, data_version = load_bars(
            tickers=optimization.tickers,
            frequency=optimization.frequency,
            start=start,
            end=end,
            as_of=optimization.created_at,
        )
    except BacktestError as error:
        return {"error": {"code": error.code, "message": error.message, "line": None}}
    outcome = sandbox.run_job(
        source=optimization.strategy.code,
        datas=datas,
        simulation=simulation_of(optimization.simulation_parameters),
        parameters={**optimization.parameters, **run.parameters},
        decisions=run.fold is None,  # a grid point over the whole period: the probe may reuse its decisions
        summary=True,  # a point keeps its statistics, returns and decisions, not its trades or equity curve
    )
    if not outcome.ok or outcome.result is None:
        return {"error": outcome.error or WORKER_LOST, "data_version": data_version}
    if outcome.returns is None:  # every run's result has them: a child that sent none is not believed
        return {"error": MISSING_RETURNS, "data_version": data_version}
    return {"result": outcome.result, "returns": outcome.returns, "data_version": data_version}


MISSING_RETURNS = {"code": "sandbox_error", "message": "the run returned no daily returns", "line": None}


MAX_KEPT_DECISIONS = 20_000  # a point deciding more often is rerun in full by the probe rather than stored


def kept_decisions(strategy: Strategy, result: dict[str, Any]) -> dict[str, Any] | None:
    """What a point keeps of its order decisions for the probe: with the code they came from, or null."""
    decisions = result.get("decisions")
    if decisions is None or len(decisions) > MAX_KEPT_DECISIONS:
        return None
    return {"code_sha256": code_sha256(strategy.code), "decisions": decisions}


def _point_done(run_id: int, run: OptimizationRun | None = None, **finish: Any) -> None:
    if _point_finish(run_id, run=run, **finish):
        optimization_id = (
            run.optimization_id if run is not None else OptimizationRun.objects.get(pk=run_id).optimization_id
        )
        if Optimization.objects.filter(pk=optimization_id, mode=OptimizationMode.WALK_FORWARD).exists():
            _walk_forward_test(optimization_id)
        else:
            _optimization_probe(optimization_id)


def _best_run(optimization: Optimization, fold: int | None = None) -> OptimizationRun | None:
    """The completed in-sample run best by the target metric (the lowest iteration on ties), of one fold when
    walking forward: one query ordering by that one statistic, so no other run's row is read or decoded."""
    score = Cast(KeyTextTransform(optimization.target_metric, "statistics"), FloatField())
    best = "-score" if optimization.target_direction == "maximize" else "score"
    return (
        OptimizationRun.objects.filter(
            optimization=optimization, status=Status.COMPLETED, fold=fold, out_of_sample=False
        )
        # A run without the metric (JSON null: no trades) is no candidate. On SQLite the cast below reads that null
        # as 0.0, so it is excluded by the JSON value itself, as both databases read it.
        .exclude(**{f"statistics__{optimization.target_metric}": None})
        .annotate(score=score)
        .filter(score__isnull=False)
        .defer("returns", "decisions")  # the bulk of a row; the best one's returns are read when needed
        .order_by(best, "iteration")
        .first()
    )


def _optimization_probe(optimization_id: Any) -> None:
    """The last point is done: probe the best run by the target metric for look-ahead, then close and settle.
    When that point kept its decisions the probe is its streamed run alone, or, for datas with different bar times,
    its cut runs alone, one task each (`_probe_cuts_start`), so that free workers run them side by side. Otherwise
    one job reruns the point and its probe, the grid's PBO computed while it runs (`_job_beside_pbo`)."""
    optimization = Optimization.objects.select_related("strategy").get(pk=optimization_id)
    best = _best_run(optimization)
    job = _probe_job(optimization, best)
    if job is None or best is None:
        _optimization_close(optimization_id, _probe_check(optimization, best, None), best=best)
        return
    if job["expected"] is not None and not sandbox.streamable(job["datas"]):
        cuts = probing.probe_cuts(job["datas"], job["expected"], PROBE_CUTS, key=sandbox.probe_key())
        if isinstance(cuts, str):
            _optimization_close(optimization_id, probing.not_run(cuts) | _probed(best), best=best)
        else:
            _probe_cuts_start(optimization, cuts, job)
        return
    outcome, pbo = _job_beside_pbo(optimization, job)
    _optimization_close(optimization_id, _probe_check(optimization, best, outcome), best=best, pbo=pbo)


def _job_beside_pbo(
    optimization: Optimization, job: dict[str, Any]
) -> tuple[sandbox.Outcome, tuple[dict[str, Any] | None, str | None]]:
    """Run a probe job and compute the grid's PBO while it runs (it does not depend on the probe): a thread that
    only waits on the child, so every query stays on this thread and its connection."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe") as pool:
        running = pool.submit(sandbox.run_job, **job)
        pbo = optimization_pbo(optimization)
        return running.result(), pbo  # what the probe raised, raised here


def _probe_cuts_start(optimization: Optimization, cuts: list[int], job: dict[str, Any]) -> None:
    """One row per cut; the last cut (the most bars, the longest run) runs here at once, the others are queued,
    longest first, for whichever workers are free. The last cut to finish closes the optimization."""

    with transaction.atomic():
        rows = ProbeCut.objects.bulk_create(
            ProbeCut(optimization=optimization, index=index, until_us=until) for index, until in enumerate(cuts)
        )
        here, *queued = reversed(rows)
        ProbeCut.objects.filter(pk=here.pk).update(status=Status.EXECUTING, started_at=now())
        transaction.on_commit(lambda: _probe_cuts_queue(optimization.pk, queued))
    outcome, (pbo, refusal) = _job_beside_pbo(optimization, job | {"cuts": [here.until_us]})
    # Kept for whichever cut finishes last and closes.
    Optimization.objects.filter(pk=optimization.pk).update(grid_pbo={"pbo": pbo, "refusal": refusal})
    _probe_cut_finish(here.pk, outcome)


def _probe_cuts_queue(optimization_id: Any, queued: list[ProbeCut]) -> None:
    """Send the probe's other cuts; those the broker did not take fail (never run), and the cut that finishes
    last, or this when they all have, closes the optimization, its probe not run: it is not left open on cuts no
    worker will get."""
    from backtests import tasks

    if broker.sent(lambda: [tasks.optimization_probe_cut.delay(row.pk) for row in queued], "probe cuts"):
        return
    with transaction.atomic():
        optimization = Optimization.objects.select_for_update().get(pk=optimization_id)
        ProbeCut.objects.filter(pk__in=[row.pk for row in queued], status=Status.PENDING).update(
            status=Status.FAILED, error=NOT_QUEUED, finished_at=now()
        )
        live = ProbeCut.objects.filter(optimization=optimization, status__in=(Status.PENDING, Status.EXECUTING))
        if optimization.status != Status.EXECUTING or live.exists():
            return
    _probe_cuts_close(optimization_id)


def optimization_probe_cut_execute(*, cut_id: int) -> None:
    """Run one queued cut of a best run's probe (a redelivered one, whose worker stopped mid-run, fails)."""
    optimization_id = ProbeCut.objects.filter(pk=cut_id).values_list("optimization_id", flat=True).first()
    if optimization_id is None or _inactive_account_cancels(optimization_id):
        return
    claimed = ProbeCut.objects.filter(pk=cut_id, status=Status.PENDING, optimization__status=Status.EXECUTING).update(
        status=Status.EXECUTING, started_at=now()
    )
    if not claimed:
        _probe_cut_finish(cut_id, None)  # changes nothing unless it was left EXECUTING
        return
    cut = ProbeCut.objects.select_related("optimization__strategy").get(pk=cut_id)
    # Every point is done, so the best run and its kept decisions are those the cuts were chosen from.
    job = _probe_job(cut.optimization, _best_run(cut.optimization))
    _probe_cut_finish(cut_id, None if job is None else sandbox.run_job(**job, cuts=[cut.until_us]))


def _probe_cut_finish(cut_id: int, outcome: sandbox.Outcome | None) -> None:
    """Record an EXECUTING cut's check, or its failure (`outcome` None: its worker stopped); the last of its
    optimization's cuts closes it. A cut no longer EXECUTING (reaped, or cancelled) is left as it is."""
    ok = outcome is not None and outcome.ok and outcome.result is not None
    with transaction.atomic():
        cut = ProbeCut.objects.filter(pk=cut_id).only("optimization_id").first()
        if cut is None:
            return
        optimization = Optimization.objects.select_for_update().get(pk=cut.optimization_id)
        executing = ProbeCut.objects.filter(pk=cut_id, status=Status.EXECUTING)
        if optimization.status != Status.EXECUTING:
            executing.update(status=Status.CANCELLED, finished_at=now())
            return
        recorded = executing.update(
            status=Status.COMPLETED if ok else Status.FAILED,
            outcome=outcome.result["lookahead_check"] if ok and outcome and outcome.result else None,
            error=None if ok else ((outcome.error if outcome else None) or WORKER_LOST),
            finished_at=now(),
        )
        live = ProbeCut.objects.filter(optimization=optimization, status__in=(Status.PENDING, Status.EXECUTING))
        if not recorded or live.exists():
            return
    _probe_cuts_close(optimization.pk)


def _probe_cuts_close(optimization_id: Any) -> None:
    optimization = Optimization.objects.select_related("strategy").get(pk=optimization_id)
    best = _best_run(optimization)
    cuts = list(ProbeCut.objects.filter(optimization=optimization))
    check = _probe_of_cuts(cuts, best) if best is not None else None
    kept = optimization.grid_pbo  # null when this cut finished before the last point's task computed it
    pbo = (kept["pbo"], kept["refusal"]) if kept else optimization_pbo(optimization)
    _optimization_close(optimization_id, check, best=best, pbo=pbo)


def _probe_of_cuts(cuts: list[ProbeCut], best: OptimizationRun) -> dict[str, Any]:
    """The probe's check from its cuts' checks, read in cut order as one run over every cut reads them: the first
    cut that failed to run, or decided differently, ends it; so it is the check one job would have given."""
    checked: list[str] = []
    for cut in sorted(cuts, key=lambda row: row.index):
        if cut.status != Status.COMPLETED or cut.outcome is None:
            return _run_failed(cut.error) | _probed(best)
        if cut.outcome["status"] != "passed":
            return {**cut.outcome, "cuts": checked + cut.outcome["cuts"]} | _probed(best)
        checked += cut.outcome["cuts"]
    return probing.cuts_check(checked) | _probed(best)


def _probe_job(optimization: Optimization, best: OptimizationRun | None) -> dict[str, Any] | None:
    """The sandbox job of `best`'s truncation probe over the whole period (None: no best run). A grid point's own
    run is that full run when it kept its decisions from the same code on the same bars (same data version):
    then only the cut runs are run, compared with those decisions; otherwise the probe reruns it."""
    if best is None:
        return None
    datas, data_version = load_bars(
        tickers=optimization.tickers,
        frequency=optimization.frequency,
        start=optimization.start_date,
        end=optimization.end_date,
        as_of=optimization.created_at,
    )
    kept = OptimizationRun.objects.filter(pk=best.pk).values_list("decisions", flat=True).first()
    same = (
        kept is not None
        and best.fold is None
        and best.data_version == data_version
        and kept["code_sha256"] == code_sha256(optimization.strategy.code)
    )
    return {
        "source": optimization.strategy.code,
        "datas": datas,
        "simulation": simulation_of(optimization.simulation_parameters),
        "parameters": {**optimization.parameters, **best.parameters},
        "probe": PROBE_CUTS,
        "expected": kept["decisions"] if same and kept is not None else None,
    }


def _run_failed(error: dict[str, Any] | None) -> dict[str, Any]:
    return probing.not_run(f"the probe run failed: {(error or WORKER_LOST)['message']}")


def _probed(best: OptimizationRun) -> dict[str, Any]:
    """What a probe's check says of the run it probed."""
    return {"iteration": best.iteration, "parameters": best.parameters}


def _probe_check(
    optimization: Optimization, best: OptimizationRun | None, outcome: sandbox.Outcome | None
) -> dict[str, Any]:
    """The probe's `lookahead_check` from its job's outcome (None: there was no best run to probe)."""
    if best is None or outcome is None:
        return probing.not_run(f"no run has a {optimization.target_metric}")
    ok = outcome.ok and outcome.result is not None
    check = outcome.result["lookahead_check"] if ok and outcome.result else _run_failed(outcome.error)
    return check | _probed(best)


def _probe(optimization: Optimization, best: OptimizationRun | None) -> dict[str, Any]:
    """The truncation probe of `best`'s parameters over the whole period, run here (see `_probe_job`)."""
    job = _probe_job(optimization, best)
    return _probe_check(optimization, best, None if job is None else sandbox.run_job(**job))


def _walk_forward_test(optimization_id: Any) -> None:
    """Every train run is done: score each fold's chosen point on its test window (chosen from that fold's train
    runs only), probe the last fold's choice over the whole period, then close and settle."""
    optimization = Optimization.objects.select_related("strategy").get(pk=optimization_id)
    last = None
    for fold in walk_forward_plan(optimization)["folds"]:
        if _inactive_account_cancels(optimization.pk):
            return
        if not Optimization.objects.filter(pk=optimization.pk, status=Status.EXECUTING).exists():
            return  # cancelled meanwhile: settled by the cancel
        chosen = _best_run(optimization, fold=fold["fold"])
        if chosen is None:
            continue
        run = OptimizationRun.objects.create(
            optimization=optimization, iteration=optimization.total_iterations + fold["fold"],
            parameters=chosen.parameters, fold=fold["fold"], out_of_sample=True, status=Status.EXECUTING,
            started_at=now(),
        )  # fmt: skip
        finish = _run_point(optimization, run)
        result = finish.get("result")
        start, end = run_window(optimization, run)
        with transaction.atomic():
            live = Optimization.objects.select_for_update().filter(pk=optimization.pk, status=Status.EXECUTING)
            if not live.exists():
                # Cancelled while it ran: not counted, not charged and no trial, as a grid point in flight.
                OptimizationRun.objects.filter(pk=run.pk).update(status=Status.CANCELLED, finished_at=now())
                return
            OptimizationRun.objects.filter(pk=run.pk).update(
                status=Status.COMPLETED if result is not None else Status.FAILED,
                statistics=statistics.compute(result) if result is not None else None,
                returns=finish.get("returns", b""),
                trade_count=result["trade_count"] if result is not None else 0,
                error=finish.get("error"), data_version=finish.get("data_version", ""), finished_at=now(),
            )  # fmt: skip
            if result is not None:
                trial_record(
                    strategy=optimization.strategy, kind=TrialKind.GRID_POINT,
                    parameters={**optimization.parameters, **run.parameters}, data_ids=optimization.data_ids,
                    frequency=optimization.frequency, start=start, end=end, data_version=finish["data_version"],
                    daily_returns=result["daily_returns"], run=run,
                )  # fmt: skip
        last = chosen
    _optimization_close(optimization_id, _probe(optimization, last))


MAX_OOS_EQUITY_POINTS = 2000  # as the engine's equity curves


def walk_forward_result(optimization: Optimization) -> dict[str, Any]:
    """Per-fold choices with their in- and out-of-sample statistics, the stitched out-of-sample returns and equity
    curve (test windows compounded in order from the initial cash) and the walk-forward efficiency: the
    out-of-sample annualised return over the mean in-sample one of the chosen points (null unless that is > 0)."""
    tests = {run.fold: run for run in OptimizationRun.objects.filter(optimization=optimization, out_of_sample=True)}
    folds, stitched, in_sample = [], [], []
    for fold in walk_forward_plan(optimization)["folds"]:
        chosen, test = _best_run(optimization, fold=fold["fold"]), tests.get(fold["fold"])
        scored = test if test is not None and test.status == Status.COMPLETED else None
        chosen_statistics = chosen.statistics if chosen is not None else None
        folds.append({
            **fold, "parameters": chosen.parameters if chosen else None,
            "in_sample": chosen_statistics, "out_of_sample": scored.statistics if scored else None,
            "test_status": test.status if test else None, "test_error": test.error if test else None,
        })  # fmt: skip
        if scored is not None:
            stitched += series.unpack(scored.returns)
        if chosen_statistics is not None and chosen_statistics.get("cagr") is not None:
            in_sample.append(chosen_statistics["cagr"])
    equity, value = [], float(optimization.simulation_parameters["initial_cash"])
    for day, ret in stitched:
        value *= 1.0 + ret
        equity.append([day, value])
    step = max(1, -(-len(equity) // MAX_OOS_EQUITY_POINTS))
    curve = equity[::step] + ([equity[-1]] if equity and (len(equity) - 1) % step else [])
    oos = statistics.return_metrics(stitched)["cagr"] if stitched else None
    is_mean = sum(in_sample) / len(in_sample) if in_sample else None
    efficiency = oos / is_mean if oos is not None and is_mean is not None and is_mean > 0 else None
    return {
        "folds": folds, "oos_equity_curve": curve, "oos_annualized_return": oos,
        "is_annualized_return": is_mean, "efficiency": efficiency, "oos_returns": stitched,
    }  # fmt: skip


def optimization_pbo(optimization: Optimization) -> tuple[dict[str, Any] | None, str | None]:
    """CSCV over the completed points' daily returns (in iteration order), or why it was refused (too few points or
    observations). When every point kept its block sums over the same days (one grid on one data set), CSCV reads
    those, S numbers a point, instead of decoding every point's whole series after the last point: the same sums,
    so the same PBO (a 100-point grid's series took 0.3-0.4 s to read back, the grid's serial tail)."""
    completed = OptimizationRun.objects.filter(optimization=optimization, status=Status.COMPLETED).order_by("iteration")
    minimum = settings.LEROY_PBO_MIN_BLOCK_OBSERVATIONS
    try:
        kept = list(completed.values_list("return_blocks", flat=True))
        if verdicts.blocks_align(kept, optimization.pbo_blocks):
            return verdicts.cscv_of_blocks(kept, min_block_observations=minimum), None
        matrix = verdicts.returns_matrix([series.unpack(row) for row in completed.values_list("returns", flat=True)])
        return verdicts.cscv(matrix, blocks=optimization.pbo_blocks, min_block_observations=minimum), None
    except verdicts.CscvRefused as refused:
        return None, str(refused)


def optimization_verdict(
    optimization: Optimization,
    check: dict[str, Any],
    best: OptimizationRun | None = None,
    pbo: tuple[dict[str, Any] | None, str | None] | None = None,
) -> dict[str, Any] | None:
    """The best run's deflated Sharpe over every trial of the strategy, the grid's PBO and the probe; walking
    forward, the stitched out-of-sample returns' deflated Sharpe and trades (no PBO: the folds are the test)."""
    if optimization.mode == OptimizationMode.WALK_FORWARD:
        result = walk_forward_plan(optimization)
        tests = OptimizationRun.objects.filter(optimization=optimization, out_of_sample=True, status=Status.COMPLETED)
        if not result.get("oos_returns"):
            return None
        drawdowns = [d for run in tests if (d := (run.statistics or {}).get("maximum_drawdown_percentage")) is not None]
        return verdict_of(
            strategy=optimization.strategy, daily_returns=result["oos_returns"],
            trades=sum(run.trade_count for run in tests), lookahead=check["status"],
            max_drawdown_pct=max(drawdowns, default=None),
        )  # fmt: skip
    best = best or _best_run(optimization)
    if best is None:
        return None
    computed, refusal = pbo or optimization_pbo(optimization)
    return verdict_of(
        strategy=optimization.strategy, daily_returns=series.unpack(best.returns), trades=best.trade_count,
        lookahead=check["status"], pbo=computed, pbo_refusal=refusal,
        max_drawdown_pct=(best.statistics or {}).get("maximum_drawdown_percentage"),
    )  # fmt: skip


def _optimization_close(
    optimization_id: Any,
    check: dict[str, Any] | None,
    best: OptimizationRun | None = None,
    pbo: tuple[dict[str, Any] | None, str | None] | None = None,
) -> None:
    """Close and settle; `pbo` is the grid's PBO (or its refusal) when already computed after the last point (the
    completed runs cannot change once every point is done)."""
    with transaction.atomic():
        optimization = (
            Optimization.objects.select_for_update(of=("self",)).select_related("strategy").get(pk=optimization_id)
        )
        if optimization.status != Status.EXECUTING:
            return  # cancelled meanwhile: already settled
        optimization.status = Status.COMPLETED if optimization.completed_iterations else Status.FAILED
        optimization.lookahead_check = check
        if optimization.mode == OptimizationMode.WALK_FORWARD:
            config = {k: v for k, v in walk_forward_plan(optimization).items() if k in WALK_FORWARD_CONFIG}
            optimization.walk_forward = config | walk_forward_result(optimization)
        optimization.verdict = optimization_verdict(optimization, check, best, pbo) if check is not None else None
        probed = check is not None and check["status"] != "not_run"
        computed = optimization.verdict is not None and optimization.verdict["pbo"] is not None
        optimization.credits_charged = (
            _points_charged(optimization)
            + (optimization.credits_probe if probed else 0)
            + (optimization.credits_pbo if computed else 0)
        )
        if optimization.verdict is not None and check is not None:
            points = selectors.optimization_completed_runs(optimization=optimization)
            optimization.report_hash = statistics.optimization_hash(
                points=[{"iteration": r.iteration, "parameters": r.parameters, "statistics": r.statistics}
                        for r in points],
                lookahead_check=check, verdict=optimization.verdict, walk_forward=optimization.walk_forward,
            )  # fmt: skip
        optimization.finished_at = now()
        optimization.save(
            update_fields=[
                "status", "lookahead_check", "verdict", "report_hash", "finished_at", "credits_charged", "walk_forward",
            ]
        )  # fmt: skip
        _optimization_settle(optimization)


WALK_FORWARD_CONFIG = ("train_months", "test_months", "anchored", "folds")


def _points_charged(optimization: Optimization) -> int:
    """Completed grid points, and walking forward completed test runs, at the per-point price."""
    tests = OptimizationRun.objects.filter(optimization=optimization, out_of_sample=True, status=Status.COMPLETED)
    return (optimization.completed_iterations + tests.count()) * optimization.credits_per_iteration


def _point_finish(
    run_id: int,
    *,
    result: dict[str, Any] | None = None,
    returns: bytes = b"",
    error: dict[str, Any] | None = None,
    data_version: str = "",
    run: OptimizationRun | None = None,
) -> bool:
    """Record one point (`run` its row as read when it was claimed, with the strategy version that ran: versions
    never change, so the locked optimization's is not read again; else read here); True when it was the last
    and some point completed (the best run's probe is due; the optimization closes after it). When every point
    failed, the optimization closes here, charging nothing."""
    stats = statistics.compute(result) if result is not None else None  # pure: computed outside the lock
    # Pure too (an optimization's blocks and mode never change): a point read with its optimization has them.
    blocks = (
        verdicts.return_blocks(result["daily_returns"], run.optimization.pbo_blocks)
        if result is not None and run is not None and run.optimization.mode == OptimizationMode.GRID
        else None
    )
    with transaction.atomic():
        run = run or OptimizationRun.objects.get(pk=run_id)
        optimization = Optimization.objects.select_for_update().get(pk=run.optimization_id)
        if optimization.status not in (Status.PENDING, Status.EXECUTING):
            # Cancelled (or closed) meanwhile: the point is not counted and not charged.
            OptimizationRun.objects.filter(pk=run_id, status=Status.EXECUTING).update(
                status=Status.CANCELLED, finished_at=now()
            )
            return False
        ok = error is None and result is not None
        OptimizationRun.objects.filter(pk=run_id).update(
            status=Status.COMPLETED if ok else Status.FAILED,
            statistics=stats,
            returns=returns,
            return_blocks=blocks,
            trade_count=result["trade_count"] if result is not None else 0,
            decisions=kept_decisions(run.optimization.strategy, result) if result is not None else None,
            error=error,
            data_version=data_version,
            finished_at=now(),
        )
        if result is not None:
            start, end = run_window(optimization, run)
            trial_record(
                strategy=run.optimization.strategy, kind=TrialKind.GRID_POINT,
                parameters={**optimization.parameters, **run.parameters}, data_ids=optimization.data_ids,
                frequency=optimization.frequency, start=start, end=end,
                data_version=data_version, daily_returns=result["daily_returns"], run=run,
            )  # fmt: skip
        counter = "completed_iterations" if ok else "failed_iterations"
        Optimization.objects.filter(pk=optimization.pk).update(**{counter: F(counter) + 1})
        # Its row is locked since it was read above: its counters are those it had and this point.
        setattr(optimization, counter, getattr(optimization, counter) + 1)
        if optimization.completed_iterations + optimization.failed_iterations < optimization.total_iterations:
            return False
        if optimization.completed_iterations:
            return True
        optimization.status = Status.FAILED
        optimization.error = {
            "code": "all_iterations_failed",
            "message": "every grid point failed",
            **(error or {}),
        }
        optimization.finished_at = now()
        optimization.credits_charged = 0
        optimization.save(update_fields=["status", "error", "finished_at", "credits_charged"])
        _optimization_settle(optimization)
        return False


@transaction.atomic
def optimization_cancel(*, user: User, optimization_id: str) -> Optimization:
    """Stop the points not yet started and refund their credits; points already done stay charged."""
    key = selectors.parse_id(optimization_id)
    optimization = Optimization.objects.select_for_update().filter(pk=key, user=user).first() if key else None
    if optimization is None:
        raise BacktestError("not_found", f"No optimization {optimization_id}.")
    if optimization.status not in (Status.PENDING, Status.EXECUTING):
        raise BacktestError(
            "not_cancellable", f"The optimization is {optimization.status}; only PENDING or EXECUTING can be cancelled."
        )
    for rows in (OptimizationRun.objects, ProbeCut.objects):
        rows.filter(optimization=optimization, status=Status.PENDING).update(status=Status.CANCELLED, finished_at=now())
    optimization.status, optimization.finished_at = Status.CANCELLED, now()
    optimization.credits_charged = _points_charged(optimization)
    optimization.save(update_fields=["status", "finished_at", "credits_charged"])
    _optimization_settle(optimization)
    return optimization


def stale_jobs_reap(*, older_than: timedelta | None = None) -> int:
    """Fail jobs whose worker vanished without a redelivery (EXECUTING past the sandbox's wall clock)."""
    cutoff = now() - (older_than or timedelta(seconds=settings.LEROY_SANDBOX_WALL_SECONDS + 60))
    reaped = _dry_runs_expire()
    for report_id in Report.objects.filter(status=Status.EXECUTING, started_at__lt=cutoff).values_list("pk", flat=True):
        _report_fail(report_id, WORKER_LOST)
        reaped += 1
    stale = OptimizationRun.objects.filter(status=Status.EXECUTING, started_at__lt=cutoff)
    # A walk-forward test run is not a grid point: its worker closing the optimization is reaped below.
    for run_id in stale.filter(out_of_sample=False).values_list("pk", flat=True):
        if _point_finish(run_id, error=WORKER_LOST):
            check = probing.not_run("the point's worker stopped; no probe was run")
            _optimization_close(OptimizationRun.objects.get(pk=run_id).optimization_id, check)
        reaped += 1
    # A probe's cut whose worker stopped fails (the last cut to finish closes its optimization, the probe not run).
    for cut_id in ProbeCut.objects.filter(status=Status.EXECUTING, started_at__lt=cutoff).values_list("pk", flat=True):
        _probe_cut_finish(cut_id, None)
        reaped += 1
    # Every point done but the optimization still open: the worker running the best run's probe vanished (or the
    # one closing it after its last cut). Cuts still queued or running are not lost.
    for optimization in Optimization.objects.filter(status=Status.EXECUTING, started_at__lt=cutoff):
        done = optimization.completed_iterations + optimization.failed_iterations == optimization.total_iterations
        last = OptimizationRun.objects.filter(optimization=optimization).order_by("-finished_at").first()
        cuts = ProbeCut.objects.filter(optimization=optimization)
        if cuts.filter(status__in=(Status.PENDING, Status.EXECUTING)).exists():
            continue
        if done and last is not None and (last.finished_at or last.started_at or cutoff) < cutoff:
            if cuts.exists():
                _probe_cuts_close(optimization.pk)
            else:
                stale.filter(optimization=optimization, out_of_sample=True).update(
                    status=Status.FAILED, error=WORKER_LOST, finished_at=now()
                )
                reason = "the worker running the look-ahead probe stopped before it finished"
                _optimization_close(optimization.pk, probing.not_run(reason))
            reaped += 1
    return reaped
