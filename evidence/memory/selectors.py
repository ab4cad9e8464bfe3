"""Reads for evidence. Market data is public reference data, so these reads take no account."""

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl
from django.conf import settings

from evidence.marketdata import store
from evidence.memory.artifact import BuildPlan, feature_store_path
from evidence.memory.features import FEATURES
from evidence.memory.reader import Evidence, MemoryReader, artifact_dir
from evidence.memory.strategies import STRATEGIES, names_mask
from evidence.models import MarketMemoryArtifact
from evidence.vocabulary import HORIZONS, SIDES, normalize_ticker
from leroy.clock import now
from leroy.errors import DomainError


class MemoryUnavailable(DomainError):
    """No active, verified Market Memory artifact in this process."""

    def __init__(
        self, message: str = "No verified Market Memory artifact is active; nothing was charged.", **details: Any
    ) -> None:
        super().__init__("evidence_unavailable", message, **details)


@dataclass(frozen=True)
class MemoryAnswer:
    artifact_version: str
    artifact_sha256: str
    period: str  # "historical" or "forward_overlay"
    matches: dict[int, Evidence | None]  # horizon -> strongest tier with enough sessions, or None
    withheld_reason: str | None = None


_reader_lock = threading.Lock()
_reader_state: dict[str, Any] = {"reader": None, "checked": float("-inf")}


def memory_reader(*, refresh: bool = False) -> MemoryReader:
    """The process's reader of the active artifact. Checks for a newly activated artifact at most every
    LEROY_MM_RELOAD_SECONDS; the swap replaces one reference, so readers already handed out stay consistent."""
    state = _reader_state
    if refresh or time.monotonic() - state["checked"] >= settings.LEROY_MM_RELOAD_SECONDS:
        with _reader_lock:
            active = (
                MarketMemoryArtifact.objects.filter(is_active=True).values("sha256", "path", "activated_at").first()
            )
            current = state["reader"]
            if active is None:
                state["reader"] = None
            elif current is None or current.sha256 != active["sha256"]:
                state["reader"] = MemoryReader(artifact_dir(active["path"], active["sha256"]), active["sha256"])
            state["activated"] = (active["sha256"], active["activated_at"]) if active is not None else None
            state["checked"] = time.monotonic()
    reader = state["reader"]
    if reader is None:
        from evidence.memory.services import market_memory_refusal  # services import this module's neighbours

        refusal = market_memory_refusal()
        if refusal is not None:
            raise MemoryUnavailable(
                f"Market Memory {refusal['artifact_version']} failed verification and was withdrawn; no evidence is "
                "served and nothing was charged.",
                reason=refusal["reason"],
                artifact_version=refusal["artifact_version"],
                artifact_sha256=refusal["artifact_sha256"],
            )
        raise MemoryUnavailable("no Market Memory artifact is active", reason="no artifact is active")
    return reader


def memory_published_at(reader: MemoryReader) -> datetime | None:
    """When `reader`'s artifact was activated: what the last activation check read, else the database."""
    activated = _reader_state.get("activated")
    if activated is not None and activated[0] == reader.sha256:
        return activated[1]
    published = MarketMemoryArtifact.objects.filter(sha256=reader.sha256).values_list("activated_at", flat=True)
    return published.first()


def memory_lookup(
    *,
    symbol: str,
    side: str,
    active: int | list[str],
    regime: int,
    horizons: tuple[int, ...] = HORIZONS,
    overlay: bool = False,
    at: datetime | None = None,
) -> MemoryAnswer:
    """Tier lookup for a setup: symbol, side ("buy"/"sell"), its active strategy set (mask or names) and regime id.

    Per horizon the strongest tier (5 exact .. 1 baseline) with at least the minimum distinct sessions is returned;
    lower tiers are never pooled in. Forward-overlay evidence is withheld unless the overlay is current.
    """
    if side not in SIDES:
        raise ValueError(f"side must be one of {', '.join(SIDES)}")
    unknown = sorted(set(horizons) - set(HORIZONS))
    if unknown:
        raise ValueError(f"unsupported horizons {unknown}; supported: {list(HORIZONS)}")
    mask = active if isinstance(active, int) else names_mask(active)
    reader = memory_reader()
    period = "forward_overlay" if overlay else "historical"
    if overlay:
        fresh = reader.freshness(at=at or now())
        if fresh["status"] != "current":
            return MemoryAnswer(
                reader.version, reader.sha256, period, dict.fromkeys(horizons), f"forward overlay is {fresh['status']}"
            )
    matches = reader.lookup(
        symbol=normalize_ticker(symbol), side=side, mask=mask, regime=regime, horizons=horizons, period=int(overlay)
    )
    return MemoryAnswer(reader.version, reader.sha256, period, matches)


def frame_inspect(*, ticker: str, ts: datetime) -> dict[str, Any]:
    """One minute of the feature store behind the active artifact: readiness, features, states, regime, labels."""
    reader = memory_reader()
    plan = BuildPlan(**reader.manifest["plan"])
    if ticker not in plan.tickers:
        raise LookupError(f"{ticker} is not in the active artifact's universe")
    path = feature_store_path(ticker, plan)
    if not store.exists(path):
        raise LookupError(f"no feature store file for {ticker} at the active artifact's inputs; rebuild Market Memory")
    rows = store.scan_parquet([path]).filter(pl.col("ts") == ts).collect()
    if rows.is_empty():
        raise LookupError(f"{ts.isoformat()} is not a regular-session minute of {ticker} in the feature store")
    row = rows.row(0, named=True)
    buy, sell = row["buy_mask"], row["sell_mask"]
    return {
        "symbol": ticker,
        "ts": row["ts"].isoformat(),
        "session": row["session"].isoformat(),
        "ready": row["ready"],
        "is_fill": row["is_fill"],
        "features": {name: row[name] for name in FEATURES},
        "strategy_states": {
            s.name: {
                "buy": None if buy is None else bool(buy >> bit & 1),
                "sell": None if sell is None else bool(sell >> bit & 1),
            }
            for bit, s in enumerate(STRATEGIES)
        },
        "regime": {
            "id": row["regime"],
            "trend": row["trend"],
            "volatility": row["volatility"],
            "time_of_day": row["tod"],
        },
        "labels": {str(h): row[f"lbl_{h}"] for h in HORIZONS},
        "excursions": {str(h): {"high": row[f"hi_{h}"], "low": row[f"lo_{h}"]} for h in HORIZONS},
        "label_unit": "1e-8",
        "source": plan.source,
        "artifact_sha256": reader.sha256,
    }
