"""The Market Memory artifact format: what the build writes and every reader reads, defined once for both.

Keys, tiers, statistic columns and the build plan live here so the build and the reader depend on the format, not on
each other.
"""

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from evidence.memory import features

# 2: exact distinct sessions across symbols, n_symbols; 3: features.v2 (floors, tolerances), pools by asset class
SCHEMA_VERSION = 3
SYMBOL_BASELINE = 6  # per-symbol direction baseline: the lift reference for tier 5, never displayed as a match
REGIME_TABLE = 7  # per regime bucket, for regime tools
# Every tier keys on the asset class: pooled tiers pool only one class, per-symbol tiers hold their symbol's.
TIER_KEYS: dict[int, tuple[str, ...]] = {
    5: ("asset_class", "symbol", "mask", "regime"),
    4: ("asset_class", "mask", "regime"),
    3: ("asset_class", "mask"),
    2: ("asset_class", "regime", "band"),
    1: ("asset_class",),
    SYMBOL_BASELINE: ("asset_class", "symbol"),
    REGIME_TABLE: ("asset_class", "regime"),
}
KEY_COLUMNS = ("period", "tier", "side", "horizon", "asset_class", "symbol", "mask", "regime", "band")
SENTINEL: dict[str, Any] = {"symbol": "", "mask": -1, "regime": -1, "band": -1}
KEY_SCHEMA: dict[str, Any] = {
    "period": pl.Int8, "tier": pl.Int8, "side": pl.Int8, "horizon": pl.Int16, "asset_class": pl.String,
    "symbol": pl.String, "mask": pl.Int64, "regime": pl.Int8, "band": pl.Int8,
}  # fmt: skip
RESERVOIR_KEY_SCHEMA = {name: dtype for name, dtype in KEY_SCHEMA.items() if name != "horizon"}
PERIODS = {0: "historical", 1: "forward_overlay"}
BAND_MAX = 4  # active-signal count band: 0, 1, 2, 3, 4+
EXCURSION_LEVELS_BPS = (10, 25, 50, 100, 200)
BPS = 10_000  # one basis point in label units (1e-8)
RESERVOIR_SIZE = 5
EXECUTION_BUCKET_MINUTES = 30
# Sums across symbol partials. Distinct sessions are not additive once a tier pools symbols (two symbols on the same
# day are one session), so the reduce counts them from the returns' session ordinals (days since 1970-01-01):
# `n_sessions` is exactly the number of distinct market dates. Symbols are disjoint across partials, so `n_symbols`
# (1 per partial) sums exactly.
ADDITIVE_COLUMNS = (
    "n", "n_symbols", "sum_r", "n_win", "sum_pos", "sum_neg", "sum_fav", "sum_adv",
    *[f"n_fav_{level}" for level in EXCURSION_LEVELS_BPS], *[f"n_adv_{level}" for level in EXCURSION_LEVELS_BPS],
)  # fmt: skip
STAT_COLUMNS = ("n_sessions", *ADDITIVE_COLUMNS)


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build depends on; two builds with equal plans and equal code produce the same artifact."""

    source: str
    benchmark: str
    through: str  # last session included (ISO date)
    historical_through: str  # later sessions are the forward overlay
    tickers: list[str]
    overlay_tickers: list[str]
    inputs: dict[str, list[str]]  # ticker -> SHA-256 of its 1m partitions, in year order
    min_sessions: int
    asset_classes: dict[str, str] = field(default_factory=dict)  # ticker -> asset class (its pool)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, ASCII only, integers and strings only: equal to its RFC 8785 form."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def plan_sha256(plan: BuildPlan) -> str:
    return hashlib.sha256(canonical_json(plan.as_dict())).hexdigest()


def partial_dir(build_dir: str, ticker: str) -> str:
    return f"{build_dir}/partials/{ticker}"


def feature_store_path(ticker: str, plan: BuildPlan) -> str:
    """The stored feature file for a symbol's exact inputs (its bars, the benchmark's, the last session)."""
    inputs = canonical_json([plan.inputs[ticker], plan.inputs[plan.benchmark], plan.through])
    return f"features/{features.FEATURE_VERSION}/{ticker}/{hashlib.sha256(inputs).hexdigest()[:16]}.parquet"
