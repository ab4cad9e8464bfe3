"""The evidence contract (the seeds' agent contract): one set of models for the MCP tools and the REST mirror.

Every optional number is `float | None` and stays null when the artifact has no validated value for it: a missing
comparison is a valid answer, never an estimate.
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from evidence.memory.strategies import MAX_ACTIVE_SIGNALS
from evidence.publication.schemas import CheckpointOut, Receipt
from evidence.vocabulary import (
    AssetClass,
    Horizon,
    RequestSide,
    Side,
    Source,
    Ticker,
    TierName,
    TimeOfDay,
    Trend,
    Volatility,
)
from leroy.schemas import Note, RequestId, ToolArgs

Status = Literal["evaluated", "no_comparable_sample", "unavailable", "stale_frame"]
FrameStatus = Literal["available", "stale", "market_closed", "unavailable"]
Freshness = Literal["current", "behind", "unavailable", "unknown"]


class EvaluateArgs(ToolArgs):
    symbol: Ticker = Field(description="US equity ticker; normalised to uppercase")
    side: RequestSide = Field(description="Direction to evaluate: buy, sell, or both (costs two lookups)")
    entry_price: float | None = Field(default=None, gt=0, description="Proposed entry price; context only")
    holding_horizons: list[Horizon] | None = Field(
        default=None, min_length=1, max_length=4, description="Forward horizons in minutes (5, 15, 30, 60)"
    )
    stop_price: float | None = Field(default=None, gt=0, description="Stop level; context only, places no order")
    target_price: float | None = Field(default=None, gt=0, description="Target level; context only, places no order")
    client_request_id: RequestId | None = Field(default=None, description="Caller idempotency key for safe retries")

    @field_validator("holding_horizons")
    @classmethod
    def _distinct(cls, value: list[Horizon] | None) -> list[Horizon] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("holding_horizons must not repeat a horizon")
        return sorted(value) if value is not None else None


class EchoedRequest(BaseModel):
    symbol: str
    side: RequestSide
    entry_price: float | None
    holding_horizons: list[Horizon]
    stop_price: float | None
    target_price: float | None


class Quote(BaseModel):
    bid: float | None
    ask: float | None
    last: float | None
    spread_bps: float | None


class CurrentMarketFrame(BaseModel):
    symbol: str
    source_time: datetime | None
    frame_status: FrameStatus
    quote: Quote


class StrategyState(BaseModel):
    strategy: str
    version: str
    family: str
    side: Side
    state: Literal["active", "inactive"]


class StrategyCoverage(BaseModel):
    realtime_registered_count: int
    realtime_evaluated_count: int
    realtime_research_sensor_count: int
    realtime_execution_adapter_count: int
    historical_strategy_count: int
    forward_overlay_strategy_count: int
    forward_overlay_freshness: Freshness | None = None
    forward_overlay_lag_sessions: int | None = None


class Regime(BaseModel):
    id: int
    trend: Trend
    volatility: Volatility
    time_of_day: TimeOfDay


class SideConfluence(BaseModel):
    side: Side
    active_signals: list[str]
    active_signal_count: int


class ActiveConfluence(BaseModel):
    sides: list[SideConfluence]
    regime: Regime


class SetupGeometry(BaseModel):
    entry_price: float | None
    stop_price: float | None
    target_price: float | None
    risk_per_share: float | None
    reward_per_share: float | None
    reward_to_risk: float | None


class MatchStrength(BaseModel):
    score: int = Field(ge=0, le=5)
    tier: TierName


class HistoricalEvidence(BaseModel):
    side: Side
    horizon_minutes: Horizon
    availability: Literal["available", "not_available"]
    reason: str | None
    match_strength: MatchStrength | None = None  # the tier (>= 2) every number of this row comes from
    sample_size: int | None
    distinct_sessions: int | None = None  # distinct market dates of that tier's key
    distinct_symbols: int | None = None
    average_return_pct: float | None
    win_rate: float | None
    profit_factor: float | None
    lift_vs_baseline_bps: float | None


class MarketMemoryMatch(BaseModel):
    side: Side
    horizon_minutes: Horizon
    match_strength: MatchStrength
    row_count: int  # rows of this match only; lower tiers are never added in
    sample_size: int  # = row_count
    distinct_sessions: int
    distinct_symbols: int
    source: Literal["historical", "forward_overlay"]


class Baseline(BaseModel):
    """The direction-only baseline (tier 1): every row of a side and horizon, the lift reference; never a match."""

    side: Side
    horizon_minutes: Horizon
    match_strength: MatchStrength
    sample_size: int
    distinct_sessions: int
    distinct_symbols: int
    average_return_pct: float
    win_rate: float


class OverlayFreshness(BaseModel):
    status: Freshness
    latest_verified_session: str | None
    lag_sessions: int | None


class MarketMemoryCoverage(BaseModel):
    indexed_rows: int  # ready (point-in-time complete) rows of the historical contract
    label_rows: dict[str, int]  # horizon minutes -> indexed rows with a mature label
    label_coverage_bps: dict[str, int]  # horizon minutes -> label_rows per 10,000 indexed rows
    historical_first_session: str | None
    historical_last_session: str | None
    historical_session_count: int
    historical_symbol_count: int
    forward_overlay_first_session: str | None
    forward_overlay_last_session: str | None
    forward_overlay_session_count: int
    forward_overlay_symbol_count: int
    forward_overlay_freshness: OverlayFreshness


class Lineage(BaseModel):
    artifact_version: str
    artifact_sha256: str
    source: Source
    feature_set_version: str
    registry_version: str
    strategy_count: int
    calendar: dict[str, str]
    min_sample_sessions: int


class MarketMemory(BaseModel):
    matches: list[MarketMemoryMatch]
    baseline: list[Baseline] = []
    coverage: MarketMemoryCoverage
    lineage: Lineage


class Assumptions(BaseModel):
    matching: str
    costs: str
    execution: str


class Provenance(BaseModel):
    evidence_status: Literal["matched", "not_matched", "unavailable"]
    published_at: datetime | None
    artifact_version: str | None = None
    artifact_sha256: str | None = None
    source: Source | None = None  # of the artifact's bars: "synthetic" is generated demo data, not market history


class ResearchBoundary(BaseModel):
    broker_write_authority: Literal["none"] = "none"
    paper_trading: Literal[False] = False
    investment_advice: Literal[False] = False
    live_order: Literal[False] = False


class LookupUsage(BaseModel):
    lookup_cost: int
    cache: Literal["hit", "miss"] = "miss"
    included_lookups: int
    used_lookups: int
    lookups_remaining: int
    overage_lookups: int
    overage_amount_usd: float


class Presentation(BaseModel):
    format: Literal["markdown", "plain_text"]
    state: Literal["evaluated", "no_comparable_sample", "unavailable", "stale_frame", "market_closed"]
    text: str


class EvaluationOut(BaseModel):
    evaluation_id: str
    status: Status
    request: EchoedRequest
    current_market_frame: CurrentMarketFrame | None
    strategy_states: list[StrategyState]
    strategy_coverage: StrategyCoverage
    active_confluence: ActiveConfluence | None
    setup_geometry: SetupGeometry | None
    market_memory: MarketMemory | None
    historical_evidence: list[HistoricalEvidence]
    assumptions: Assumptions
    provenance: Provenance
    research_boundary: ResearchBoundary
    usage: LookupUsage
    receipt: Receipt | None = None  # set on every metered answer (evidence.publication)
    presentation: Presentation


# --- the Market Memory research tools (evidence.research) ------------------------------------------------------


def _request_id() -> Any:
    return Field(default=None, description="Caller idempotency key for safe retries")


class ArtifactRef(BaseModel):
    """The artifact every number of a result was read from."""

    artifact_version: str
    artifact_sha256: str
    source: Source  # of the artifact's bars: "synthetic" is generated demo data, not market history


class KeyStats(BaseModel):
    """Displayed statistics of one served key (returns side-oriented; win = return > 0 strictly)."""

    sample_size: int
    distinct_sessions: int
    average_return_pct: float
    median_return_pct: float | None
    win_rate: float
    profit_factor: float | None


class SetupKey(BaseModel):
    """A Market Memory key: the fields its tier matches on; the others are null (not part of the key)."""

    match_strength: MatchStrength
    symbol: str | None
    active_signals: list[str] | None
    regime: Regime | None
    signal_count_band: str | None  # "0".."3" or "4+" active signals (contextual analogue tier)


class MatchedSetup(BaseModel):
    side: Side
    horizon_minutes: Horizon
    key: SetupKey
    stats: KeyStats
    source: Literal["historical", "forward_overlay"]


class FrameContext(BaseModel):
    symbol: str
    side: Side
    source_time: datetime | None
    frame_status: FrameStatus
    active_signals: list[str]
    regime: Regime | None


SetupStatus = Literal["matched", "no_comparable_sample", "unavailable"]


class SetupArgs(ToolArgs):
    symbol: Ticker = Field(description="US equity ticker (any case)")
    side: Side = Field(description="Direction: buy or sell")
    horizon_minutes: Horizon = Field(default=15, description="Forward horizon in minutes (5, 15, 30, 60)")
    client_request_id: RequestId | None = _request_id()


class LeadersArgs(ToolArgs):
    side: Side = Field(description="Direction whose active signals are counted: buy or sell")
    limit: int = Field(default=5, ge=1, le=5, description="How many leaders to return (1-5); one lookup either way")
    client_request_id: RequestId | None = _request_id()


class Leader(BaseModel):
    rank: int
    symbol: str
    source_time: datetime
    active_signal_count: int
    active_signals: list[str]
    opposing_signal_count: int
    regime: Regime


class LeadersOut(BaseModel):
    side: Side
    snapshot_at: datetime
    market_open: bool
    frames_considered: int
    frames_excluded_stale: int
    frames_excluded_not_ready: int
    ranking: str
    leaders: list[Leader]
    reason: str | None
    provenance: ArtifactRef
    research_boundary: ResearchBoundary
    usage: LookupUsage
    receipt: Receipt | None = None  # set on every metered answer (evidence.publication)


class SearchArgs(ToolArgs):
    side: Side = Field(description="Direction: buy or sell")
    horizon_minutes: Horizon = Field(description="Forward horizon in minutes (5, 15, 30, 60)")
    tier: int | None = Field(default=None, ge=1, le=5, description="Only keys of this evidence tier (1-5)")
    min_sample_sessions: int | None = Field(
        default=None, ge=1, description="Minimum distinct sessions; never below the artifact's own minimum"
    )
    signals: list[str] = Field(
        default_factory=list,
        max_length=MAX_ACTIVE_SIGNALS,
        description="Strategy names that must all be active in the key",
    )
    # The Ticker every evidence tool takes: a plain string once let "   " through as a blank unknown symbol and
    # upper-cased "ß" to "SS".
    symbol: Ticker | None = Field(default=None, description="Only exact-setup keys of this ticker (any case)")
    source: Literal["historical", "forward_overlay"] = Field(
        default="historical", description="Historical contract, or the forward overlay (served only when current)"
    )
    asset_class: AssetClass = Field(default="equity", description="Pool searched (a symbol implies its own)")
    limit: int = Field(default=20, ge=1, le=50, description="Most keys returned, most distinct sessions first")
    client_request_id: RequestId | None = _request_id()


class SearchHit(BaseModel):
    key: SetupKey
    stats: KeyStats


class SearchOut(BaseModel):
    side: Side
    horizon_minutes: Horizon
    source: Literal["historical", "forward_overlay"]
    effective_min_sample_sessions: int
    results: list[SearchHit]
    withheld_reason: str | None
    forward_overlay_freshness: OverlayFreshness
    provenance: ArtifactRef
    research_boundary: ResearchBoundary
    usage: LookupUsage
    receipt: Receipt | None = None  # set on every metered answer (evidence.publication)


class AnalogueOutcome(BaseModel):
    horizon_minutes: Horizon
    return_pct: float | None  # null: the label window crossed the close (never inferred)
    max_favourable_excursion_pct: float | None
    max_adverse_excursion_pct: float | None


class Analogue(BaseModel):
    rank: int
    symbol: str
    source_time: datetime
    session: str
    active_signals: list[str]
    regime: Regime
    signal_distance: int  # strategies active in exactly one of the analogue and the current frame
    same_regime: bool
    outcomes: list[AnalogueOutcome]


class AnaloguesOut(BaseModel):
    status: SetupStatus
    reason: str | None
    frame: FrameContext
    match: MatchedSetup | None
    ordering: str
    sample: str
    analogues: list[Analogue]
    provenance: ArtifactRef
    research_boundary: ResearchBoundary
    usage: LookupUsage
    receipt: Receipt | None = None  # set on every metered answer (evidence.publication)


class OutcomeGroup(BaseModel):
    rows: int
    mean_return_pct: float | None
    mean_favourable_excursion_pct: float | None
    mean_adverse_excursion_pct: float | None
    time_of_day: dict[str, int]  # open / mid / close -> rows
    regimes: dict[str, int]  # regime id -> rows


class FailureOut(BaseModel):
    status: SetupStatus
    reason: str | None
    frame: FrameContext
    match: MatchedSetup | None
    sample: str
    rows_without_label: int
    winners: OutcomeGroup | None
    losers: OutcomeGroup | None
    favourable_excursion_gap_pct: float | None  # losers minus winners
    adverse_excursion_gap_pct: float | None
    provenance: ArtifactRef
    research_boundary: ResearchBoundary
    usage: LookupUsage
    receipt: Receipt | None = None  # set on every metered answer (evidence.publication)


class BenchmarkOut(BaseModel):
    status: SetupStatus
    reason: str | None
    frame: FrameContext
    match: MatchedSetup | None
    benchmark_symbol: str
    benchmark: KeyStats | None
    benchmark_reason: str | None
    window_basis: str
    return_difference_bps: float | None  # setup minus benchmark average return
    win_rate_difference: float | None
    provenance: ArtifactRef
    research_boundary: ResearchBoundary
    usage: LookupUsage
    receipt: Receipt | None = None  # set on every metered answer (evidence.publication)


class ExitPolicyArgs(SetupArgs):
    stop_bps: int = Field(ge=1, le=5000, description="Stop distance from the entry close, in basis points")
    target_bps: int = Field(ge=1, le=5000, description="Target distance from the entry close, in basis points")


class ExitCounts(BaseModel):
    target_first: int
    stop_first: int
    time_exit: int
    unresolved: int  # both levels touched inside the window: which came first is not stored


class ExitPolicyOut(BaseModel):
    status: SetupStatus
    reason: str | None
    frame: FrameContext
    match: MatchedSetup | None
    stop_bps: int
    target_bps: int
    time_exit_minutes: Horizon
    sample: str
    rows_used: int
    rows_without_label: int
    outcomes: ExitCounts | None
    mean_resolved_return_pct: float | None  # over target, stop and time exits only; unresolved rows excluded
    key_target_reached_share: float | None  # whole-key share that touched the target level (stored levels only)
    key_stop_reached_share: float | None
    cannot_resolve: str
    assumptions: list[str]
    provenance: ArtifactRef
    research_boundary: ResearchBoundary
    usage: LookupUsage
    receipt: Receipt | None = None  # set on every metered answer (evidence.publication)


class RegimeArgs(ToolArgs):
    side: Side = Field(default="buy", description="Direction of the per-regime statistics")
    horizon_minutes: Horizon = Field(default=15, description="Forward horizon of the per-regime statistics")


class RegimeBucket(BaseModel):
    regime: Regime
    stats: KeyStats


class SessionRegime(BaseModel):
    session: str
    trend: Trend
    volatility: Volatility


class RegimeOut(BaseModel):
    current: Regime | None
    current_source_time: datetime | None
    frame_status: FrameStatus
    reason: str | None
    last_verified_session: SessionRegime | None
    side: Side
    horizon_minutes: Horizon
    buckets: list[RegimeBucket]
    buckets_below_minimum: int
    definition: dict[str, str]
    provenance: ArtifactRef
    research_boundary: ResearchBoundary


class ExecutionArgs(ToolArgs):
    symbol: Ticker = Field(description="US equity ticker (any case)")


class VolumeBucket(BaseModel):
    minutes_from_open: int
    bars: int
    sessions: int
    mean_volume_per_bar: float | None
    zero_volume_bars: int


class Unavailable(BaseModel):
    status: Literal["not_available"] = "not_available"
    reason: str


class ExecutionOut(BaseModel):
    symbol: str
    availability: Literal["available", "not_available"]
    reason: str | None
    volume_by_time_of_day: list[VolumeBucket]
    basis: str  # which minutes the buckets count
    spread: Unavailable
    fill: Unavailable
    market_impact: Unavailable
    provenance: ArtifactRef
    research_boundary: ResearchBoundary


class LineageArgs(ToolArgs):
    evaluation_id: str | None = Field(
        default=None, min_length=1, max_length=64, description="Your evaluation to explain"
    )


class ArtifactFile(BaseModel):
    name: str
    sha256: str
    bytes: int
    rows: int


class LineageOut(BaseModel):
    artifact_version: str
    artifact_sha256: str
    published_at: datetime | None
    source: Source
    data_as_of: str
    benchmark: str
    historical_through: str
    symbols: list[str]
    forward_overlay_symbols: list[str]
    inputs_sha256: str
    code_sha256: str
    feature_set_version: str
    feature_count: int
    registry_version: str
    registry_sha256: str
    strategy_count: int
    calendar: dict[str, str]
    min_sample_sessions: int
    coverage: MarketMemoryCoverage
    files: list[ArtifactFile]
    research_boundary: ResearchBoundary
    publication_log: CheckpointOut | None = None  # the latest signed checkpoint and what it does (not) guarantee
    evaluation_rows: list["ExplainedRow"] | None = None  # with evaluation_id: where each served row comes from


class ServedFrom(BaseModel):
    artifact_sha256: str
    file: str  # in the artifact directory, listed with its SHA-256 in manifest.json
    file_sha256: str
    row: int  # 0-based row of that Parquet file holding the key's integer sums


class RecomputeQuery(BaseModel):
    feature_store_files: list[str]  # relative to the data directory, one per pooled symbol
    sql: str  # DuckDB-flavoured SQL over those files that gives the served figures


class ExplainedRow(BaseModel):
    side: Side
    horizon_minutes: Horizon
    served: dict[str, float | int | None]
    tier: int  # its historical key: `key` holds the tier's own fields (mask bit i = registry strategy i)
    key: dict[str, int | str]
    served_from: ServedFrom
    recompute: RecomputeQuery


LineageOut.model_rebuild()


class RecordHypothesisArgs(ToolArgs):
    symbol: Ticker = Field(description="US equity ticker (any case)")
    side: Side = Field(description="Direction of the hypothesis: buy or sell")
    horizon_minutes: Horizon = Field(description="Horizon after which the outcome is reviewed (5, 15, 30, 60)")
    note: Note = Field(min_length=1, max_length=2000, description="The research note; never an order")
    client_request_id: RequestId | None = _request_id()


class HypothesisOut(BaseModel):
    hypothesis_id: int = Field(description="The note's number in this account's journal: 1 for its first note")
    symbol: str
    side: Side
    horizon_minutes: Horizon
    note: str
    recorded_at: datetime
    decision_time: datetime | None  # the last regular-session minute closed when it was recorded
    research_boundary: ResearchBoundary


class ReviewHypothesisArgs(ToolArgs):
    hypothesis_id: int = Field(ge=1, description="An id from record_research_hypothesis in this account's journal")


class ReviewOut(BaseModel):
    hypothesis: HypothesisOut
    outcome_status: Literal["realized", "not_mature", "not_available"]
    reason: str | None
    verified_through: str | None
    entry_price: float | None
    exit_time: datetime | None
    exit_price: float | None
    realized_return_pct: float | None
    max_favourable_excursion_pct: float | None
    max_adverse_excursion_pct: float | None
    reviewed_at: datetime
    research_boundary: ResearchBoundary
