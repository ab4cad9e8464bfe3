"""`evaluate_current_setup`: the current verified frame, its live strategy states, and Market Memory evidence.

Statuses: `unavailable` (no verified frame: unknown symbol, closed market, feed not yet started), `stale_frame`
(the frame is older than the staleness limit; verified history still shown), `evaluated` (a tier >= 1 has the
minimum sample for some requested side and horizon) and `no_comparable_sample`. Lower tiers are never pooled into
a match and nothing is estimated: a missing comparison stays null.
"""

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db import transaction

from accounts.models import User
from billing import selectors as billing_selectors
from billing import services as billing
from evidence import frames
from evidence.features import HORIZONS
from evidence.geometry import setup_geometry
from evidence.models import Frame, MarketMemoryArtifact
from evidence.presentation import render
from evidence.publication.services import receipt_attach
from evidence.reader import Evidence, MemoryReader
from evidence.schemas import (
    TIER_NAMES,
    ActiveConfluence,
    Assumptions,
    CurrentMarketFrame,
    EchoedRequest,
    EvaluateArgs,
    EvaluationOut,
    HistoricalEvidence,
    Lineage,
    LookupUsage,
    MarketMemory,
    MarketMemoryCoverage,
    MarketMemoryMatch,
    MatchStrength,
    OverlayFreshness,
    Presentation,
    Provenance,
    Quote,
    Regime,
    ResearchBoundary,
    SideConfluence,
    StrategyCoverage,
    StrategyState,
)
from evidence.selectors import memory_reader
from evidence.strategies import STRATEGIES
from leroy.clock import now

TOOL = "evaluate_current_setup"
CACHE_SECONDS = 15 * 60
TRENDS = ("down_or_flat", "up")
VOLATILITIES = ("low", "mid", "high")
TIMES_OF_DAY = ("open", "mid", "close")
ASSUMPTIONS = Assumptions(
    matching="Only exact supported setup matches are returned; no silent broadening.",
    costs="Not included unless explicitly stated in the historical result.",
    execution="No execution result is inferred when spread, latency, fill, or market-impact data is unavailable.",
)


@dataclass(frozen=True)
class Situation:
    """Everything an evaluation reads, gathered once: the current frame, the artifact, and what the clock says."""

    at: datetime
    current: frames.CurrentFrame
    reader: MemoryReader
    published_at: datetime | None


def fingerprint(args: EvaluateArgs) -> str:
    body = args.model_dump(mode="json", exclude={"client_request_id"})
    body["symbol"] = body["symbol"].upper()
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _situation(ticker: str) -> Situation:
    at = now()
    reader = memory_reader()
    published = MarketMemoryArtifact.objects.filter(sha256=reader.sha256).values_list("activated_at", flat=True)
    return Situation(
        at=at,
        current=frames.current_frame(ticker=ticker, at=at, reader=reader),
        reader=reader,
        published_at=published.first(),
    )


def _regime(frame: Frame) -> Regime | None:
    if frame.regime is None or frame.trend is None or frame.volatility is None or frame.tod is None:
        return None
    return Regime(
        id=frame.regime,
        trend=TRENDS[frame.trend],  # type: ignore[arg-type]
        volatility=VOLATILITIES[frame.volatility],  # type: ignore[arg-type]
        time_of_day=TIMES_OF_DAY[frame.tod],  # type: ignore[arg-type]
    )


def _mask(frame: Frame, side: str) -> int | None:
    return frame.buy_mask if side == "buy" else frame.sell_mask


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _evidence_row(side: str, horizon: int, match: Evidence | None, reason: str) -> HistoricalEvidence:
    if match is None:
        return HistoricalEvidence(
            side=side,  # type: ignore[arg-type]
            horizon_minutes=horizon,  # type: ignore[arg-type]
            availability="not_available",
            reason=reason,
            sample_size=None,
            average_return_pct=None,
            win_rate=None,
            profit_factor=None,
            lift_vs_baseline_bps=None,
        )
    return HistoricalEvidence(
        side=side,  # type: ignore[arg-type]
        horizon_minutes=horizon,  # type: ignore[arg-type]
        availability="available",
        reason=None,
        sample_size=match.row_count,
        average_return_pct=_round(match.average_return_pct, 4),
        win_rate=_round(match.win_rate, 4),
        profit_factor=_round(match.profit_factor, 4),
        lift_vs_baseline_bps=_round(match.lift_vs_baseline_bps, 2),
    )


def _match(match: Evidence, source: str) -> MarketMemoryMatch:
    return MarketMemoryMatch(
        side=match.side,  # type: ignore[arg-type]
        horizon_minutes=match.horizon_minutes,  # type: ignore[arg-type]
        match_strength=MatchStrength(score=match.tier, tier=TIER_NAMES[match.tier]),
        row_count=match.row_count,
        distinct_sessions=match.distinct_sessions,
        source=source,  # type: ignore[arg-type]
    )


def memory_blocks(reader: MemoryReader, at: datetime) -> tuple[MarketMemoryCoverage, Lineage, dict[str, Any]]:
    coverage = reader.coverage()
    historical, overlay = coverage["historical"], coverage["forward_overlay"]
    fresh = reader.freshness(at=at)
    lineage = reader.lineage()
    return (
        MarketMemoryCoverage(
            indexed_rows=historical["ready_rows"],
            label_rows=historical.get("label_rows", {}),
            label_coverage_bps=historical.get("label_coverage_bps", {}),
            historical_first_session=historical.get("first_session"),
            historical_last_session=historical.get("last_session"),
            historical_session_count=historical.get("sessions", 0),
            historical_symbol_count=historical["symbols"],
            forward_overlay_first_session=overlay.get("first_session"),
            forward_overlay_last_session=overlay.get("last_session"),
            forward_overlay_session_count=overlay.get("sessions", 0),
            forward_overlay_symbol_count=overlay.get("symbols", 0),
            forward_overlay_freshness=OverlayFreshness(
                status=fresh["status"],
                latest_verified_session=fresh["last_verified_session"],
                lag_sessions=fresh["lag_sessions"],
            ),
        ),
        Lineage(
            artifact_version=reader.version,
            artifact_sha256=reader.sha256,
            source=lineage["source"],
            feature_set_version=lineage["features"]["version"],
            registry_version=lineage["registry"]["version"],
            strategy_count=lineage["registry"]["count"],
            calendar={key: str(value) for key, value in lineage["calendar"].items()},
            min_sample_sessions=reader.min_sessions,
        ),
        fresh,
    )


def build_evaluation(args: EvaluateArgs, situation: Situation) -> EvaluationOut:
    """The evaluation of `args` against `situation` (no charge: see `evaluate_current_setup`)."""
    ticker = args.symbol.upper()
    horizons = list(args.holding_horizons or HORIZONS)
    sides = ["buy", "sell"] if args.side == "both" else [args.side]
    geometry = setup_geometry(side=args.side, entry=args.entry_price, stop=args.stop_price, target=args.target_price)
    reader, at, current = situation.reader, situation.at, situation.current
    frame = current.frame
    coverage, lineage, fresh = memory_blocks(reader, at)
    registry_count = len(STRATEGIES)
    overlay_available = coverage.forward_overlay_freshness.status != "unavailable"

    # One rule for which frame may be used, shared with the research tools (frames.current_frame).
    reason = current.reason
    if current.status in ("unavailable", "market_closed"):
        status = "unavailable"
    elif current.status == "stale":
        status = "stale_frame"
    else:
        status = "no_comparable_sample"  # becomes "evaluated" below when a tier has the minimum sample
    market_frame = CurrentMarketFrame(
        symbol=ticker,
        source_time=frame.source_time if frame else None,
        frame_status=current.status,
        quote=Quote(bid=None, ask=None, last=None, spread_bps=None),  # the feed carries no quotes
    )

    states: list[StrategyState] = []
    confluence = None
    rows: list[HistoricalEvidence] = []
    matches: list[MarketMemoryMatch] = []
    regime = _regime(frame) if frame is not None else None
    if frame is not None and regime is not None:
        side_confluence = []
        for side in sides:
            mask = _mask(frame, side) or 0
            active = [s.name for bit, s in enumerate(STRATEGIES) if mask >> bit & 1]
            states += [
                StrategyState(strategy=s.name, version=f"v{s.version}", family=s.family, side=side,  # type: ignore[arg-type]
                              state="active" if mask >> bit & 1 else "inactive")
                for bit, s in enumerate(STRATEGIES)
            ]  # fmt: skip
            side_confluence.append(SideConfluence(side=side, active_signals=active, active_signal_count=len(active)))  # type: ignore[arg-type]
            found = reader.lookup(symbol=ticker, side=side, mask=mask, regime=regime.id, horizons=tuple(horizons))
            for horizon in horizons:
                match = found.get(horizon)
                rows.append(
                    _evidence_row(side, horizon, match, "No validated comparable sample was available for this setup.")
                )
                if match is not None:
                    matches.append(_match(match, "historical"))
            if fresh["status"] == "current":  # a stale overlay is withheld, never shown as current evidence
                overlay = reader.lookup(
                    symbol=ticker, side=side, mask=mask, regime=regime.id, horizons=tuple(horizons), period=1
                )
                matches += [_match(m, "forward_overlay") for m in overlay.values() if m is not None]
        confluence = ActiveConfluence(sides=side_confluence, regime=regime)
        if status == "no_comparable_sample" and any(row.availability == "available" for row in rows):
            status = "evaluated"
    else:
        rows = [_evidence_row(side, h, None, reason or "") for side in sides for h in horizons]

    matched = any(row.availability == "available" for row in rows)
    result = EvaluationOut(
        evaluation_id=f"eval_{uuid.uuid4().hex}",
        status=status,  # type: ignore[arg-type]
        request=EchoedRequest(
            symbol=ticker,
            side=args.side,
            entry_price=args.entry_price,
            holding_horizons=horizons,  # type: ignore[arg-type]
            stop_price=args.stop_price,
            target_price=args.target_price,
        ),
        current_market_frame=market_frame,
        strategy_states=states,
        strategy_coverage=StrategyCoverage(
            realtime_registered_count=registry_count,
            realtime_evaluated_count=registry_count * len(sides) if states else 0,
            realtime_research_sensor_count=registry_count,
            realtime_execution_adapter_count=0,  # Leroy has no execution adapters: it never places orders
            historical_strategy_count=lineage.strategy_count,
            forward_overlay_strategy_count=lineage.strategy_count if overlay_available else 0,
            forward_overlay_freshness=fresh["status"],
            forward_overlay_lag_sessions=fresh["lag_sessions"],
        ),
        active_confluence=confluence,
        setup_geometry=geometry,
        market_memory=(
            MarketMemory(matches=matches, coverage=coverage, lineage=lineage) if frame is not None else None
        ),
        historical_evidence=rows,
        assumptions=ASSUMPTIONS,
        provenance=Provenance(
            evidence_status="matched" if matched else ("unavailable" if frame is None else "not_matched"),
            published_at=situation.published_at,
            artifact_version=reader.version,
            artifact_sha256=reader.sha256,
        ),
        research_boundary=ResearchBoundary(),
        usage=LookupUsage(
            lookup_cost=0,
            included_lookups=0,
            used_lookups=0,
            lookups_remaining=0,
            overage_lookups=0,
            overage_amount_usd=0,
        ),  # replaced by the charge below
        presentation=Presentation(format="markdown", state=status, text=""),  # type: ignore[arg-type]
    )
    return result


def _with_usage(result: EvaluationOut, usage: dict[str, Any]) -> EvaluationOut:
    result = result.model_copy(update={"usage": LookupUsage.model_validate(usage)})
    return result.model_copy(update={"presentation": render(result)})


def evaluate_current_setup(*, user: User, args: EvaluateArgs) -> EvaluationOut:
    """Evaluate and meter: 1 lookup per side consulted (`both` = 2), 0 for a cached answer to the same request on
    the same frame, 0 when no frame was usable. A retried `client_request_id` returns the original answer."""
    ticker = args.symbol.upper()
    situation = _situation(ticker)
    request_fingerprint = fingerprint(args)
    frame = situation.current.frame
    frame_key = frame.source_time.isoformat() if frame else "none"
    cache_key = f"leroy:eval:{user.pk}:{request_fingerprint}:{frame_key}:{situation.reader.sha256}"
    cached = cache.get(cache_key) if frame is not None else None
    result = EvaluationOut.model_validate(cached) if cached else build_evaluation(args, situation)
    units = 0 if result.market_memory is None else (2 if args.side == "both" else 1)  # no usable frame: free
    with transaction.atomic():
        if units == 0:
            usage = {**billing_selectors.lookup_usage(user=user), "lookup_cost": 0, "cache": "miss"}
            return receipt_attach(user=user, tool=TOOL, answer=_with_usage(result, usage))
        charge = billing.lookup_charge(
            user=user,
            tool=TOOL,
            units=units,
            request_fingerprint=request_fingerprint,
            client_request_id=args.client_request_id,
            cache_hit=cached is not None,
        )
        if charge.replayed and charge.stored_response is not None:
            return EvaluationOut.model_validate(charge.stored_response)
        if cached is not None:
            result = result.model_copy(update={"evaluation_id": f"eval_{uuid.uuid4().hex}"})
        result = receipt_attach(user=user, tool=TOOL, answer=_with_usage(result, charge.usage))
        billing.lookup_store_response(charge=charge, response=result.model_dump(mode="json"))
    if cached is None:
        cache.set(cache_key, result.model_dump(mode="json"), CACHE_SECONDS)
    return result
