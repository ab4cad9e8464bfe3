"""The evidence contract (seeds/leroy-mcp.md): one set of models for the MCP tools and the REST mirror.

Every optional number is `float | None` and stays null when the artifact has no validated value for it: a missing
comparison is a valid answer, never an estimate.
"""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from leroy.mcp.registry import ToolArgs

Side = Literal["buy", "sell"]
RequestSide = Literal["buy", "sell", "both"]
Horizon = Literal[5, 15, 30, 60]
HORIZONS: tuple[Horizon, ...] = (5, 15, 30, 60)
Status = Literal["evaluated", "no_comparable_sample", "unavailable", "stale_frame"]
FrameStatus = Literal["available", "stale", "market_closed", "unavailable"]
TierName = Literal[
    "exact_setup",
    "cross_ticker_setup",
    "signal_pattern",
    "contextual_analogue",
    "direction_only_baseline",
    "no_comparable_evidence",
]
TIER_NAMES: dict[int, TierName] = {
    5: "exact_setup",
    4: "cross_ticker_setup",
    3: "signal_pattern",
    2: "contextual_analogue",
    1: "direction_only_baseline",
    0: "no_comparable_evidence",
}
Freshness = Literal["current", "behind", "unavailable", "unknown"]


class EvaluateArgs(ToolArgs):
    symbol: str = Field(
        min_length=1,
        max_length=10,
        pattern=r"^[A-Za-z][A-Za-z0-9.\-]{0,9}$",
        description="US equity ticker; normalised to uppercase",
    )
    side: RequestSide = Field(description="Direction to evaluate: buy, sell, or both (costs two lookups)")
    entry_price: float | None = Field(default=None, gt=0, description="Proposed entry price; context only")
    holding_horizons: list[Horizon] | None = Field(
        default=None, min_length=1, max_length=4, description="Forward horizons in minutes (5, 15, 30, 60)"
    )
    stop_price: float | None = Field(default=None, gt=0, description="Stop level; context only, places no order")
    target_price: float | None = Field(default=None, gt=0, description="Target level; context only, places no order")
    client_request_id: str | None = Field(
        default=None, min_length=1, max_length=100, description="Caller idempotency key for safe retries"
    )

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
    trend: Literal["down_or_flat", "up"]
    volatility: Literal["low", "mid", "high"]
    time_of_day: Literal["open", "mid", "close"]


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


class HistoricalEvidence(BaseModel):
    side: Side
    horizon_minutes: Horizon
    availability: Literal["available", "not_available"]
    reason: str | None
    sample_size: int | None
    average_return_pct: float | None
    win_rate: float | None
    profit_factor: float | None
    lift_vs_baseline_bps: float | None


class MatchStrength(BaseModel):
    score: int = Field(ge=0, le=5)
    tier: TierName


class MarketMemoryMatch(BaseModel):
    side: Side
    horizon_minutes: Horizon
    match_strength: MatchStrength
    row_count: int  # rows of this match only; lower tiers are never added in
    distinct_sessions: int
    source: Literal["historical", "forward_overlay"]


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
    source: Literal["vendor", "synthetic"]
    feature_set_version: str
    registry_version: str
    strategy_count: int
    calendar: dict[str, str]
    min_sample_sessions: int


class MarketMemory(BaseModel):
    matches: list[MarketMemoryMatch]
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
    presentation: Presentation
