"""Arguments and results of the backtesting MCP tools (the contract's field names, defaults, limits and shapes).

Each result model builds itself from the rows it shows (`from_report`, `from_optimization`, ...), so a tool only
fetches rows and hands them over.
"""

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from backtests.models import TERMINAL, Optimization, OptimizationRun, Report, Strategy
from backtests.statistics import METRICS
from billing.schemas import CreditUsage
from evidence.models import Symbol
from evidence.vocabulary import FREQUENCIES, Source
from leroy.schemas import Instant, InstantEnd, IsoDate, Name, ToolArgs

if TYPE_CHECKING:
    import polars as pl


Metric = Literal[METRICS]  # type: ignore[valid-type]
SortKey = Literal[("iteration", *METRICS)]  # type: ignore[valid-type]
SampleFrequency = Literal["5m", "15m", "1h", "4h", "1d"]
AssetClass = Literal["crypto", "equity", "etf", "forex", "index"]


class Page(ToolArgs):
    skip: int = Field(default=0, ge=0, description="How many items to skip (non-negative)")


class ListStrategiesArgs(Page):
    limit: int = Field(default=10, ge=1, le=50, description="Page size, 1-50")


class IdArgs(ToolArgs):
    id: str = Field(min_length=1, max_length=64, description="The resource id")


class CreateStrategyArgs(ToolArgs):
    name: Name = Field(min_length=1, max_length=200, description="Strategy name")
    description: str = Field(default="", max_length=5000, description="What the strategy does")
    code: str = Field(min_length=1, max_length=65536, description="Complete Python source defining a bt.Strategy")
    version: str = Field(default="1.0.0", min_length=1, max_length=40, description="Version label")


class UpdateStrategyArgs(ToolArgs):
    id: str = Field(min_length=1, max_length=64, description="The current strategy version's id")
    name: Name | None = Field(default=None, min_length=1, max_length=200, description="New name")
    description: str | None = Field(default=None, max_length=5000, description="New description")
    code: str | None = Field(default=None, min_length=1, max_length=65536, description="New complete source")


class DryRunArgs(ToolArgs):
    code: str = Field(min_length=1, max_length=65536, description="Complete Python source defining a bt.Strategy")


class ListSymbolsArgs(Page):
    limit: int = Field(default=20, ge=1, le=50, description="Page size, 1-50")
    is_global: bool | None = Field(default=None, description="Omitted: both; true: global only; false: own only")
    asset_class: AssetClass | None = Field(default=None, description="Only this asset class")


class SearchSymbolsArgs(ToolArgs):
    symbolName: str = Field(
        min_length=1, max_length=60, description="Ticker, name, prefix or pair (AAPL, XAU/USD, XAUUSD, gold)"
    )


class MarketDataSampleArgs(ToolArgs):
    id: str = Field(min_length=1, max_length=64, description="Symbol id")
    frequency: SampleFrequency = Field(description="A stored frequency of the symbol")
    limit: int = Field(default=50, ge=1, le=10_000, description="Most recent points to return, 1-10,000")
    start_date: Instant | None = Field(default=None, description="Inclusive ISO 8601 lower bound")
    end_date: InstantEnd | None = Field(
        default=None, description="Inclusive ISO 8601 upper bound; a date covers the day"
    )


class DownloadArgs(ToolArgs):
    symbol: str = Field(min_length=1, max_length=20, description="Ticker or pair, e.g. AAPL, EUR/USD, BTC/USD")
    frequency: SampleFrequency = Field(description="5m, 15m, 1h, 4h or 1d")
    asset_class: Literal["equity", "etf", "forex", "crypto"] = Field(default="equity", description="Asset class")

    @field_validator("symbol")
    @classmethod
    def _trimmed(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("symbol must not be empty")
        return value

    @model_validator(mode="after")
    def _frequency_for_class(self) -> "DownloadArgs":
        if self.asset_class in ("equity", "etf") and self.frequency != "1d":
            raise ValueError("equities and ETFs are available at 1d only; intraday needs forex or crypto")
        return self


# Starting cash a report can state exactly: beyond a trillion the account's value carries no cent (a run at 1e308
# reported realized P&L beside a total return of 0, its profit lost to rounding); below 1, no share is affordable.
Cash = Annotated[float, Field(ge=1, le=1e12, description="Starting cash, 1 to 1e12")]


class ParameterValue(ToolArgs):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_]*$", description="Parameter name")
    value: bool | int | float = Field(description="Number or boolean")


def _names_unique(parameters: list[ParameterValue]) -> list[ParameterValue]:
    # Given twice, a name would silently mean its last value (the tools build a dict of them).
    if len({p.name for p in parameters}) != len(parameters):
        raise ValueError("parameter names must be unique")
    return parameters


Parameters = Annotated[list[ParameterValue], AfterValidator(_names_unique)]
"""Parameter overrides, each name once: a backtest's, and an optimization's fixed ones."""


class RunBacktestArgs(ToolArgs):
    strategy_id: str = Field(min_length=1, max_length=64, description="Saved strategy id")
    data_ids: list[str] = Field(min_length=1, max_length=10, description="Symbol ids")
    frequency: str = Field(pattern=r"^[1-9][0-9]*[mhdwM]$", description="Positive integer plus m, h, d, w or M")
    start_date: IsoDate = Field(description="YYYY-MM-DD")
    end_date: IsoDate = Field(description="YYYY-MM-DD")
    parameters: Parameters = Field(default_factory=list, description="Strategy parameter overrides")
    initial_cash: Cash = 100_000
    commission: float = Field(default=0, ge=0, lt=1, description="Commission as a decimal rate")
    leverage: float = Field(default=1, gt=0, le=100, description="Leverage")
    buy_on_close: bool = Field(default=False, description="Fill market orders at the signal bar's close")
    max_credits: int | None = Field(default=None, ge=0, description="Refuse, reserving nothing, if the cost is higher")


class Grid(ToolArgs):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_]*$", description="Parameter")
    min: int | float = Field(description="First value")
    max: int | float = Field(description="Last value (>= min)")
    step: int | float = Field(gt=0, description="Positive step")

    @model_validator(mode="after")
    def _ordered(self) -> "Grid":
        if self.max < self.min:
            raise ValueError("max must be >= min")
        return self


# A fixed parameter as an optimization shows it (a comment, not a docstring: that would be published in every
# output schema). Arguments take ParameterValue, a number or boolean as a backtest's; rows stored before a string
# was refused there may still hold one, and are shown as they are.
class FixedParameter(ToolArgs):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_]*$", description="Parameter")
    value: bool | int | float | str = Field(description="Number or boolean")


class CommissionSchema(ToolArgs):
    commission: float = Field(ge=0, lt=1, description="Commission as a decimal rate")
    leverage: float = Field(gt=0, le=100, description="Leverage")


class SimulationParameters(ToolArgs):
    initial_cash: Cash
    commission_schema: CommissionSchema
    buy_on_close: bool


def _default_simulation() -> SimulationParameters:
    return SimulationParameters(
        initial_cash=100_000, commission_schema=CommissionSchema(commission=0, leverage=1), buy_on_close=False
    )


class RunOptimizationArgs(ToolArgs):
    strategy_id: str = Field(min_length=1, max_length=64, description="Saved strategy id")
    name: Name = Field(min_length=1, max_length=200, description="Optimization name")
    data_ids: list[str] = Field(min_length=1, max_length=10, description="1-10 symbol ids")
    frequency: SampleFrequency = Field(description="5m, 15m, 1h, 4h or 1d")
    start_date: Instant = Field(description="ISO 8601")
    end_date: InstantEnd = Field(description="ISO 8601")
    grids: list[Grid] = Field(min_length=1, max_length=2, description="1-2 grids {name, min, max, step}")
    parameters: Parameters = Field(default_factory=list, description="Fixed parameters (numbers or booleans)")
    simulation_parameters: SimulationParameters = Field(default_factory=_default_simulation)
    target_metric: Metric = Field(description="Metric the grid is ordered by")
    target_direction: Literal["maximize", "minimize"] = Field(description="maximize or minimize")
    additional_metrics: list[Metric] = Field(default_factory=list, description="Other metrics to show")
    use_free_optimization: bool = Field(default=False, description="Use a free optimization (only when asked)")
    max_credits: int | None = Field(default=None, ge=0, description="Refuse, reserving nothing, if the cost is higher")


class Period(ToolArgs):
    months: int = Field(ge=1, le=120, description="Calendar months, 1-120")


class RunWalkForwardArgs(RunOptimizationArgs):
    train_period: Period = Field(description='Train window, e.g. {"months": 12}')
    test_period: Period = Field(description="Test window after each train window")
    anchored: bool = Field(default=False, description="Every train window starts at start_date")


class ListOptimizationsArgs(Page):
    limit: int = Field(default=10, ge=1, le=100, description="Page size, 1-100")


class LatestOptimizationArgs(ToolArgs):
    strategy_id: str = Field(min_length=1, max_length=64, description="Saved strategy id")


class OptimizationResultsArgs(Page):
    id: str = Field(min_length=1, max_length=64, description="Optimization id")
    sort_by: SortKey | None = Field(default=None, description="iteration or a metric; omitted: the target metric")
    descending: bool | None = Field(default=None, description="Omitted: the target direction, or ascending")
    limit: int = Field(default=20, ge=1, le=100, description="Page size, 1-100")


class ListReportsArgs(Page):
    limit: int = Field(default=20, ge=1, le=50, description="Page size, 1-50")
    strategy_id: str | None = Field(default=None, max_length=64, description="Only this saved strategy")


class ReportTradesArgs(Page):
    id: str = Field(min_length=1, max_length=64, description="Report id")
    limit: int = Field(default=50, ge=1, le=200, description="Page size, 1-200")


class WaitForReportsArgs(ToolArgs):
    report_ids: list[str] = Field(min_length=1, max_length=50, description="Report ids (plural, snake_case)")


# --- results -------------------------------------------------------------------------------------------------------
# Closed models (unknown fields refused) so the published outputSchema is the contract and any drift between a
# handler and its model fails loudly. Nullable fields stay null where the value does not exist (yet).


class Out(BaseModel):
    """Base of every tool result and nested result object."""

    model_config = ConfigDict(extra="forbid")


ReportStatus = Literal["PENDING", "EXECUTING", "COMPLETED", "FAILED"]
JobStatus = Literal["PENDING", "EXECUTING", "COMPLETED", "FAILED", "CANCELLED"]
Layer = Literal[
    "ast", "restricted_python", "process", "bubblewrap", "netns", "mountns", "rlimits", "uid_drop", "no_new_privs",
    "seccomp",
]  # fmt: skip
Frequency = Literal[FREQUENCIES]  # type: ignore[valid-type]


class Listing[Item](Out):
    items: list[Item]
    total: int = Field(description="How many items match in all")


class Paged[Item](Listing[Item]):
    skip: int
    limit: int
    has_next: bool = Field(description="Another page follows: continue with skip += limit")

    @classmethod
    def of(cls, items: Sequence[object], *, total: int, skip: int, limit: int, **fields: object) -> Self:
        """The page of `total` matches that starts at `skip`; `fields` are a subclass's own fields."""
        page = {"items": items, "total": total, "skip": skip, "limit": limit, "has_next": skip + len(items) < total}
        return cls.model_validate(page | fields)


class RunError(Out):
    """Why a dry run, backtest or grid point failed; line and column point into the strategy source when known."""

    code: str
    message: str = Field(description="Escaped text, at most 4 KiB")
    line: int | None = None
    column: int | None = None
    truncated: bool = Field(default=False, description="True when the message was cut at 4 KiB")


class Statistics(Out):
    """The contract's 14 metrics; a metric undefined for the run (no losing trade, no returns) is null."""

    realized_pnl: float | None
    total_return: float | None
    cagr: float | None
    calmar_ratio: float | None
    recovery_factor: float | None
    annualized_sharpe_ratio: float | None
    maximum_drawdown_percentage: float | None
    std_dev_returns: float | None
    profit_factor: float | None
    payoff_ratio: float | None
    expectancy: float | None
    average_trade: float | None
    percentage_of_winning_trades: float | None
    avg_bars_held: float | None


class OrderCounts(Out):
    submitted: int
    completed: int
    canceled: int
    margin: int
    rejected: int
    expired: int


class DocumentationOut(Out):
    documentation: str


class StrategySummary(Out):
    id: str
    name: str
    description: str
    version: str
    revision: int
    is_current: bool
    previous_id: str | None = Field(description="The version this one replaced; null for the first")
    created_at: datetime

    @classmethod
    def from_strategy(cls, strategy: Strategy, **fields: object) -> Self:
        return cls.model_validate(
            {
                "id": str(strategy.pk),
                "name": strategy.name,
                "description": strategy.description,
                "version": strategy.version,
                "revision": strategy.revision,
                "is_current": strategy.is_current,
                "previous_id": str(strategy.previous_id) if strategy.previous_id else None,
                "created_at": strategy.created_at,
                **fields,
            }
        )


class StrategyOut(StrategySummary):
    code: str
    versions: list[StrategySummary] = Field(description="Every version of this strategy, oldest first")

    @classmethod
    def from_versions(cls, strategy: Strategy, versions: Iterable[Strategy]) -> Self:
        history = [StrategySummary.from_strategy(version) for version in versions]
        return cls.from_strategy(strategy, code=strategy.code, versions=history)


class StrategyCreated(Out):
    success: bool
    id: str
    strategy: StrategySummary

    @classmethod
    def from_strategy(cls, strategy: Strategy, **fields: object) -> Self:
        summary = StrategySummary.from_strategy(strategy)
        return cls.model_validate({"success": True, "id": str(strategy.pk), "strategy": summary, **fields})


class StrategyUpdated(StrategyCreated):
    previous_id: str


class DryRunSummary(Out):
    bars: dict[str, int] = Field(description="Bars per data name")
    final_value: float
    trades: int
    orders: OrderCounts
    statistics: Statistics


class DryRunOut(Out):
    success: bool
    error: RunError | None
    result: DryRunSummary | None
    prints: str = Field(description="What the strategy printed: the first 64 KiB, control characters escaped")
    prints_truncated: bool = Field(description="True when the strategy printed more than 64 KiB")
    sandbox_layers: list[Layer]


class SymbolOut(Out):
    id: str
    symbol: str
    name: str
    asset_class: AssetClass
    exchange: str
    currency: str
    source_type: Literal["global"]
    source: Source | None  # synthetic: generated demo data; vendor: imported; null: no bars stored
    is_global: bool
    frequencies: list[Frequency]
    data_availability: dict[Frequency, bool]

    @classmethod
    def from_symbol(cls, symbol: Symbol) -> Self:
        """All stored market data is global reference data: no account uploads its own. `symbol` is annotated with
        its bars' source (`with_bars_source`)."""
        return cls.model_validate(
            {
                "id": str(symbol.pk),
                "symbol": symbol.ticker,
                "name": symbol.name,
                "asset_class": symbol.asset_class,
                "exchange": symbol.exchange,
                "currency": symbol.currency,
                "source_type": "global",
                "source": symbol.bars_source,  # type: ignore[attr-defined]
                "is_global": True,
                "frequencies": list(symbol.frequencies),
                "data_availability": {frequency: True for frequency in symbol.frequencies},
            }
        )


class Candle(Out):
    timestamp: datetime
    open: float
    high: float
    low: float
    close: float
    volume: float


class CsvResource(Out):
    uri: str
    mime_type: Literal["text/csv"]
    text: str


class MarketDataSampleOut(Out):
    id: str
    symbol: str
    name: str
    frequency: SampleFrequency
    source: Source | None  # synthetic: generated demo data; vendor: imported; null: no bars stored
    count: int
    points: list[Candle]
    csv_resource: CsvResource

    @classmethod
    def from_bars(cls, symbol: Symbol, frequency: str, bars: "pl.DataFrame", source: Source | None) -> Self:
        """The bars as points and as the same points in a CSV resource."""
        points = [
            Candle(timestamp=row["ts"], **{k: row[k] for k in ("open", "high", "low", "close", "volume")})
            for row in bars.iter_rows(named=True)
        ]
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(Candle.model_fields))
        writer.writeheader()
        writer.writerows(point.model_dump(mode="json") for point in points)
        uri = f"leroy://market-data/{symbol.pk}/{frequency}.csv"
        return cls.model_validate(
            {
                "id": str(symbol.pk),
                "symbol": symbol.ticker,
                "name": symbol.name,
                "frequency": frequency,
                "source": source,
                "count": len(points),
                "points": points,
                "csv_resource": CsvResource(uri=uri, mime_type="text/csv", text=text.getvalue()),
            }
        )


class SessionGapOut(Out):
    session: str
    missing_bars: int


class ImportGapsOut(Out):
    checked: bool
    first_session: str
    last_session: str
    sessions_expected: int
    sessions_missing: list[str]
    sessions_with_gaps: list[SessionGapOut]
    missing_bars: int


class DownloadOut(Out):
    """The stored global symbol; the download details are null when existing data was reused. warnings: possible
    unadjusted splits, the first 20 of warnings_total."""

    symbol_id: str
    symbol: str
    name: str
    reused: bool
    frequency: SampleFrequency | None = None
    rows: int | None = None
    first_timestamp: datetime | None = None
    last_timestamp: datetime | None = None
    gaps: ImportGapsOut | None = None
    warnings: list[str] | None = None
    warnings_total: int | None = None


class BacktestSubmitted(Out):
    report_id: str
    status: ReportStatus
    credits_reserved: int
    usage: CreditUsage

    @classmethod
    def from_report(cls, report: Report, usage: CreditUsage) -> Self:
        return cls.model_validate(
            {
                "report_id": str(report.pk),
                "status": report.status,
                "credits_reserved": report.credits_reserved,
                "usage": usage,
            }
        )


class Simulation(Out):
    initial_cash: float
    commission: float
    leverage: float
    buy_on_close: bool


Decision = dict[str, str | int | float | None]


class LookaheadDifference(Out):
    cut: datetime | None = Field(description="The cut whose run decided differently (null when streamed)")
    bar: datetime | None = Field(description="The first bar where the decisions differ")
    full_run: Decision | None = Field(description="What the run on all the data decided there (null: nothing)")
    cut_run: Decision | None = Field(description="What the rerun decided there (null: nothing)")
    reason: str | None = Field(description="Why the rerun failed, when it did")


class LookaheadCheck(Out):
    """The look-ahead probe: the strategy rerun without the bars after each decision (streamed one at a time, or
    cut at k points), its order decisions compared with the full run's."""

    status: Literal["passed", "failed", "not_run"]
    method: Literal["streamed", "cuts"] | None = Field(
        default=None, description="streamed: every decision compared; cuts: datas with different bar times"
    )
    decisions_checked: int | None = Field(default=None, description="Streamed: the decisions compared")
    k: int = Field(description="How many cuts")
    cuts: list[datetime] = Field(description="The cuts checked, in order")
    reason: str | None = Field(default=None, description="Why the probe did not run")
    first_difference: LookaheadDifference | None = None
    iteration: int | None = Field(default=None, description="For an optimization: the run probed (best by target)")
    parameters: dict[str, int | float] | None = None


class ReportSummary(Out):
    id: str
    report_id: str
    status: ReportStatus
    strategy_id: str
    strategy_name: str
    data_ids: list[str]
    symbols: list[str]
    frequency: str
    start_date: date
    end_date: date
    parameters: list[ParameterValue]
    simulation: Simulation
    statistics: Statistics | None = Field(description="Null until the report is COMPLETED")
    lookahead_check: LookaheadCheck | None = Field(description="The look-ahead verdict; null until COMPLETED")
    credits_reserved: int = Field(description="The backtest and its look-ahead probe")
    credits_charged: int
    error: RunError | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_report(cls, report: Report) -> Self:
        return cls.model_validate(_report_fields(report))


def _report_fields(report: Report) -> dict[str, Any]:
    return {
        "id": str(report.pk),
        "report_id": str(report.pk),
        "status": report.status,
        "strategy_id": str(report.strategy_id),
        "strategy_name": report.strategy.name,
        "data_ids": report.data_ids,
        "symbols": report.tickers,
        "frequency": report.frequency,
        "start_date": report.start_date,
        "end_date": report.end_date,
        "parameters": [{"name": k, "value": v} for k, v in report.parameters.items()],
        "simulation": report.simulation,
        "statistics": report.statistics,
        "lookahead_check": report.lookahead_check,
        "credits_reserved": report.credits_reserved,
        "credits_charged": report.credits_charged,
        "error": report.error,
        "created_at": report.created_at,
        "started_at": report.started_at,
        "finished_at": report.finished_at,
    }


class Trade(Out):
    """A reconstructed round trip; gross P&L excludes commission, `total` includes it."""

    symbol: str
    side: Literal["long", "short"]
    entry_time: datetime
    exit_time: datetime
    entry_price: float
    exit_price: float | None
    quantity: float
    gross_pnl: float
    pnl_percentage: float | None
    total: float
    bars_held: int


class SymbolPerformance(Out):
    symbol: str
    bars: int
    trades: int
    gross_pnl: float
    net_pnl: float
    percentage_of_winning_trades: float | None


class OpenPosition(Out):
    symbol: str
    size: float
    price: float


class Diagnostics(Out):
    """What the sandbox run reported; the run's figures are null when it failed before producing them."""

    sandbox_layers: list[Layer]
    sandbox_seconds: float
    data_version: str
    bars: dict[str, int] | None
    orders: OrderCounts | None
    initial_cash: float | None
    final_value: float | None
    final_cash: float | None
    open_positions: list[OpenPosition] | None
    prints: str = Field(description="What the strategy printed: the first 64 KiB, control characters escaped")
    prints_truncated: bool = Field(default=False, description="True when the strategy printed more than 64 KiB")


class ChartData(Out):
    equity_curve: list[tuple[datetime, float]] = Field(description="[time, account value] points")


class Determinism(Out):
    strategy_version_id: str
    data_version: str = Field(description="SHA-256 of the bars used; empty when the run never read them")
    parameters: dict[str, bool | int | float]
    report_hash: str = Field(description="Equal for equal (strategy version, data version, parameters, trials)")


RECENT_TRADES = 20  # trades a report shows inline; list_report_trades pages through all of them


class ReportOut(ReportSummary):
    """PENDING/EXECUTING reports carry the summary only: the fields below are null until COMPLETED or FAILED."""

    recent_trades: list[Trade] | None = None
    trade_count: int | None = None
    per_symbol: list[SymbolPerformance] | None = None
    diagnostics: Diagnostics | None = None
    chart_data: ChartData | None = None
    determinism: Determinism | None = None
    verdict: dict[str, Any] | None = None  # verdicts.verdict: its shape is in documentation.md, "Verdicts"

    @classmethod
    def from_report(cls, report: Report) -> Self:
        body = _report_fields(report)
        if report.status in TERMINAL:
            body.update(
                verdict=report.verdict,
                recent_trades=report.trades[-RECENT_TRADES:],
                trade_count=len(report.trades),
                per_symbol=report.per_symbol,
                diagnostics=report.diagnostics,
                chart_data=ChartData(equity_curve=report.equity),
                determinism=Determinism(
                    strategy_version_id=str(report.strategy_id),
                    data_version=report.data_version,
                    parameters=report.parameters,
                    report_hash=report.report_hash,
                ),
            )
        return cls.model_validate(body)


class ReportTradesOut(Paged[Trade]):
    report_id: str

    @classmethod
    def from_report(cls, report: Report, *, skip: int, limit: int) -> Self:
        trades = report.trades[skip : skip + limit]
        return cls.of(trades, total=len(report.trades), skip=skip, limit=limit, report_id=str(report.pk))


class ReportState(Out):
    report_id: str
    status: ReportStatus


class ReportsWaited(Out):
    results: list[ReportState]
    timed_out: bool

    @classmethod
    def from_statuses(cls, statuses: Mapping[str, str]) -> Self:
        """Each report's status; timed out when any is still running."""
        return cls.model_validate(
            {
                "results": [{"report_id": k, "status": v} for k, v in statuses.items()],
                "timed_out": any(status not in TERMINAL for status in statuses.values()),
            }
        )


class OptimizationSubmitted(Out):
    success: bool
    optimization_id: str
    status: JobStatus
    total_iterations: int
    credits_reserved: int
    usage: CreditUsage

    @classmethod
    def from_optimization(cls, optimization: Optimization, usage: CreditUsage) -> Self:
        return cls.model_validate(
            {
                "success": True,
                "optimization_id": str(optimization.pk),
                "status": optimization.status,
                "total_iterations": optimization.total_iterations,
                "credits_reserved": optimization.credits_reserved,
                "usage": usage,
            }
        )


class OptimizationSummary(Out):
    id: str
    optimization_id: str
    name: str
    mode: Literal["grid", "walk_forward"]
    status: JobStatus
    strategy_id: str
    strategy_name: str
    data_ids: list[str]
    symbols: list[str]
    frequency: SampleFrequency
    start_date: datetime
    end_date: datetime
    grids: list[Grid]
    parameters: list[FixedParameter]
    target_metric: Metric
    target_direction: Literal["maximize", "minimize"]
    additional_metrics: list[Metric]
    total_iterations: int
    completed_iterations: int
    failed_iterations: int
    progress: float = Field(description="Finished (completed or failed) share of the grid, 0-1")
    use_free_optimization: bool
    credits_reserved: int = Field(description="Every grid point and the best run's look-ahead probe")
    lookahead_check: LookaheadCheck | None = Field(description="The best run's look-ahead verdict, once closed")
    credits_charged: int
    error: RunError | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_optimization(cls, optimization: Optimization, **fields: object) -> Self:
        done = optimization.completed_iterations + optimization.failed_iterations
        return cls.model_validate(
            {
                "id": str(optimization.pk),
                "optimization_id": str(optimization.pk),
                "name": optimization.name,
                "mode": optimization.mode,
                "status": optimization.status,
                "strategy_id": str(optimization.strategy_id),
                "strategy_name": optimization.strategy.name,
                "data_ids": optimization.data_ids,
                "symbols": optimization.tickers,
                "frequency": optimization.frequency,
                "start_date": optimization.start_date,
                "end_date": optimization.end_date,
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
                "lookahead_check": optimization.lookahead_check,
                "credits_charged": optimization.credits_charged,
                "error": optimization.error,
                "created_at": optimization.created_at,
                "started_at": optimization.started_at,
                "finished_at": optimization.finished_at,
                **fields,
            }
        )


class ChartPoint(Out):
    """One completed grid point, with the target metric's value under the metric's own name."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, float | None] = Field(init=False)

    iteration: int
    parameters: dict[str, int | float]

    @classmethod
    def from_run(cls, run: OptimizationRun, metric: str) -> Self:
        return cls.model_validate(
            {"iteration": run.iteration, "parameters": run.parameters, metric: (run.statistics or {}).get(metric)}
        )


class OptimizationOut(OptimizationSummary):
    simulation_parameters: SimulationParameters
    chart_data: list[ChartPoint]
    verdict: dict[str, Any] | None  # verdicts.verdict (documentation.md, "Verdicts")
    report_hash: str

    @classmethod
    def from_runs(cls, optimization: Optimization, completed: Iterable[OptimizationRun]) -> Self:
        """The optimization with its `completed` grid points charted by the target metric."""
        chart = [ChartPoint.from_run(run, optimization.target_metric) for run in completed]
        return cls.from_optimization(
            optimization, simulation_parameters=optimization.simulation_parameters, chart_data=chart,
            verdict=optimization.verdict, report_hash=optimization.report_hash,
        )  # fmt: skip


class LatestOptimizationOut(Out):
    optimization: OptimizationOut | None = Field(description="Null when the strategy has no optimization")


class OptimizationWaited(Out):
    id: str
    status: JobStatus
    completed_iterations: int
    failed_iterations: int
    total_iterations: int
    error: RunError | None
    timed_out: bool

    @classmethod
    def from_optimization(cls, optimization: Optimization) -> Self:
        return cls.model_validate(
            {
                "id": str(optimization.pk),
                "status": optimization.status,
                "completed_iterations": optimization.completed_iterations,
                "failed_iterations": optimization.failed_iterations,
                "total_iterations": optimization.total_iterations,
                "error": optimization.error,
                "timed_out": optimization.status not in TERMINAL,
            }
        )


class OptimizationRunOut(Out):
    iteration: int
    parameters: dict[str, int | float] = Field(description="The swept values at this grid point")
    fold: int | None = Field(description="Walk-forward fold; null in a grid optimization")
    out_of_sample: bool = Field(description="A walk-forward fold's test run")
    status: JobStatus
    statistics: Statistics | None
    error: RunError | None


class OptimizationResultsOut(Paged[OptimizationRunOut]):
    optimization_id: str
    sort_by: SortKey
    descending: bool


class OptimizationCancelled(OptimizationSummary):
    credits_refunded: int
    usage: CreditUsage

    @classmethod
    def from_cancelled(cls, optimization: Optimization, usage: CreditUsage) -> Self:
        """Points never run are refunded: what was reserved and not charged."""
        refunded = optimization.credits_reserved - optimization.credits_charged
        return cls.from_optimization(optimization, credits_refunded=refunded, usage=usage)


class WalkForwardFold(Out):
    """One fold: windows are [start, end); the choice is made on the train window's runs only."""

    fold: int
    train_start: datetime
    train_end: datetime
    test_start: datetime
    test_end: datetime
    parameters: dict[str, int | float] | None = Field(default=None, description="Chosen by the target metric")
    in_sample: Statistics | None = None
    out_of_sample: Statistics | None = None
    test_status: JobStatus | None = None
    test_error: RunError | None = None


class WalkForward(Out):
    train_months: int
    test_months: int
    anchored: bool
    folds: list[WalkForwardFold]
    oos_equity_curve: list[tuple[date, float]] = Field(default_factory=list, description="Test windows compounded")
    oos_annualized_return: float | None = None
    is_annualized_return: float | None = Field(default=None, description="Mean over the folds' choices")
    efficiency: float | None = Field(default=None, description="OOS / IS annualized return; null unless IS > 0")


class WalkForwardOut(Out):
    """The walk-forward part; progress, credits and the probe are get_optimization's."""

    id: str
    status: JobStatus
    walk_forward: WalkForward
    verdict: dict[str, Any] | None  # verdicts.verdict of the stitched out-of-sample returns
    report_hash: str

    @classmethod
    def from_optimization(cls, optimization: Optimization) -> Self:
        shown = {k: v for k, v in (optimization.walk_forward or {}).items() if k != "oos_returns"}
        return cls.model_validate(
            {
                "id": str(optimization.pk),
                "status": optimization.status,
                "walk_forward": shown,
                "verdict": optimization.verdict,
                "report_hash": optimization.report_hash,
            }
        )
