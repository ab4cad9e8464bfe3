"""`evaluate_current_setup`: the current verified frame, its live strategy states, and Market Memory evidence.

Statuses: `unavailable` (no verified frame: unknown symbol, closed market, feed not yet started), `stale_frame`
(the frame is older than the staleness limit; verified history still shown), `evaluated` (a tier >= 2 has the
minimum sample for some requested side and horizon) and `no_comparable_sample` (none has: the direction-only baseline
is shown only as the separate `baseline` block, never as the evidence). Lower tiers are never pooled into
a match and nothing is estimated: a missing comparison stays null.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from evidence.live import frames
from evidence.marketdata import calendar
from evidence.memory.reader import Evidence, MemoryReader, Resolution
from evidence.memory.selectors import memory_published_at, memory_reader
from evidence.memory.strategies import STRATEGIES
from evidence.models import Frame
from evidence.research.geometry import setup_geometry
from evidence.research.presentation import render
from evidence.schemas import (
    ActiveConfluence,
    Assumptions,
    Baseline,
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
from evidence.vocabulary import ASSET_CLASS_NOUNS, HORIZONS, TIER_NAMES, TIMES_OF_DAY, TRENDS, VOLATILITIES
from leroy.clock import now
from leroy.schemas import Answer

COSTS = "Not included unless explicitly stated in the historical result."
EXECUTION = "No execution result is inferred when spread, latency, fill, or market-impact data is unavailable."
SIDE_WORDS = {"buy": "Buy", "sell": "Sell"}


def _tier_words(tier: int) -> str:
    return f"{TIER_NAMES[tier]} (tier {tier})"


def pooled_words(evidence: Evidence, asset_class: str, symbol: str) -> str:
    """Whose rows a tier's evidence holds: the symbol's alone, or the symbols of the one asset class it pooled."""
    if evidence.tier == 5:
        return f"of {symbol} alone"
    one, many = ASSET_CLASS_NOUNS.get(asset_class, ("symbol", "symbols"))
    count = evidence.distinct_symbols
    return f"pooled across {count} {one if count == 1 else many} (asset class: {asset_class})"


def matching_assumption(side: str, horizon: int, resolved: Resolution, min_sessions: int, symbol: str) -> str:
    """What was done for one side and horizon, in words generated from the resolution itself."""
    passed = []
    for tier, stats in resolved.unusable:
        if stats is None:
            passed.append(f"{_tier_words(tier)} had fewer than {min_sessions} distinct sessions (not stored)")
        else:
            passed.append(
                f"{_tier_words(tier)} had {stats.distinct_sessions} distinct sessions, below the minimum of "
                f"{min_sessions}"
            )
    head = f"{SIDE_WORDS[side]} {horizon} min: "
    if resolved.match is None:
        head += "no tier of 2 or more had the minimum sample, so no evidence is shown"
    else:
        m = resolved.match
        head += (
            f"evidence from {_tier_words(m.tier)}: {m.row_count} rows on {m.distinct_sessions} distinct sessions "
            f"{pooled_words(m, resolved.asset_class, symbol)}"
        )
    return head + ("; " + "; ".join(passed) if passed else "") + "."


def assumptions_for(lines: list[str], min_sessions: int) -> Assumptions:
    rule = (
        f"The strongest tier (5 exact setup .. 2 contextual analogue) with at least {min_sessions} distinct sessions "
        "is shown, never pooled with another tier; the direction-only baseline (tier 1) is only the lift reference."
    )
    return Assumptions(matching=" ".join([rule, *lines]), costs=COSTS, execution=EXECUTION)


@dataclass(frozen=True)
class Situation:
    """Everything an evaluation reads, gathered once: the current frame, the artifact, and what the clock says."""

    at: datetime
    current: frames.CurrentFrame
    reader: MemoryReader
    published_at: datetime | None


def situation(ticker: str) -> Situation:
    at = now()
    reader = memory_reader()
    return Situation(
        at=at,
        current=frames.current_frame(ticker=ticker, at=at, reader=reader),
        reader=reader,
        published_at=memory_published_at(reader),
    )


def _regime(frame: Frame) -> Regime | None:
    if frame.regime is None or frame.trend is None or frame.volatility is None or frame.tod is None:
        return None
    return Regime(
        id=frame.regime,
        trend=TRENDS[frame.trend],
        volatility=VOLATILITIES[frame.volatility],
        time_of_day=TIMES_OF_DAY[frame.tod],
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
        match_strength=MatchStrength(score=match.tier, tier=TIER_NAMES[match.tier]),
        sample_size=match.row_count,
        distinct_sessions=match.distinct_sessions,
        distinct_symbols=match.distinct_symbols,
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
        sample_size=match.row_count,
        distinct_sessions=match.distinct_sessions,
        distinct_symbols=match.distinct_symbols,
        source=source,  # type: ignore[arg-type]
    )


def _baseline(b: Evidence) -> Baseline:
    return Baseline(
        side=b.side,  # type: ignore[arg-type]
        horizon_minutes=b.horizon_minutes,  # type: ignore[arg-type]
        match_strength=MatchStrength(score=b.tier, tier=TIER_NAMES[b.tier]),
        sample_size=b.row_count,
        distinct_sessions=b.distinct_sessions,
        distinct_symbols=b.distinct_symbols,
        average_return_pct=round(b.average_return_pct, 4),
        win_rate=round(b.win_rate, 4),
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
    """The evaluation of `args` against `situation`; its usage and presentation are filled in by the metering edge."""
    return _evaluated(args, situation)[0]


def _evaluated(args: EvaluateArgs, situation: Situation) -> tuple[EvaluationOut, int]:
    """The evaluation and the number of sides whose history was looked up in Market Memory."""
    ticker = args.symbol
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
        # The last trade is the verified frame's close; bid and ask stay null: the feed carries no quotes.
        quote=Quote(bid=None, ask=None, last=frame.close if frame else None, spread_bps=None),
    )

    states: list[StrategyState] = []
    confluence = None
    rows: list[HistoricalEvidence] = []
    matches: list[MarketMemoryMatch] = []
    baselines: list[Baseline] = []
    lines: list[str] = []
    regime = _regime(frame) if frame is not None else None
    consulted = 0
    if frame is not None and regime is not None:
        # A horizon that would end past today's close has no outcome to compare with: history is looked up for none.
        # A stale frame is not usable: its history is shown, as the contract says, and charged for none.
        within = frames.horizons_within(frame, at, tuple(horizons))
        consulted = len(sides) if frames.lookups_charged(current.status, within) else 0
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
            found = (
                reader.resolve(symbol=ticker, side=side, mask=mask, regime=regime.id, horizons=within) if within else {}
            )
            for horizon in horizons:
                if horizon not in within:
                    rows.append(_evidence_row(side, horizon, None, calendar.HORIZON_CROSSES_CLOSE))
                    continue
                resolved = found[horizon]
                match = resolved.match
                rows.append(
                    _evidence_row(side, horizon, match, "No validated comparable sample was available for this setup.")
                )
                lines.append(matching_assumption(side, horizon, resolved, reader.min_sessions, ticker))
                if match is not None:
                    matches.append(_match(match, "historical"))
                if resolved.baseline is not None:
                    baselines.append(_baseline(resolved.baseline))
            if fresh["status"] == "current" and within:  # a stale overlay is withheld, never shown as current
                overlay = reader.lookup(
                    symbol=ticker, side=side, mask=mask, regime=regime.id, horizons=within, period=1
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
            MarketMemory(matches=matches, baseline=baselines, coverage=coverage, lineage=lineage)
            if frame is not None
            else None
        ),
        historical_evidence=rows,
        assumptions=assumptions_for(lines, reader.min_sessions),
        provenance=Provenance(
            evidence_status="matched" if matched else ("unavailable" if frame is None else "not_matched"),
            published_at=situation.published_at,
            artifact_version=reader.version,
            artifact_sha256=reader.sha256,
            source=reader.source,
        ),
        research_boundary=ResearchBoundary(),
        usage=LookupUsage(
            lookup_cost=0,
            included_lookups=0,
            used_lookups=0,
            lookups_remaining=0,
            overage_lookups=0,
            overage_amount_usd=0,
        ),  # metering replaces it with the charge
        presentation=Presentation(format="markdown", state=status, text=""),  # type: ignore[arg-type]  # see finish()
    )
    return result, consulted


def cache_scope(situation: Situation) -> str | None:
    """Identical requests on the same frame of the same artifact get the same answer (a cache hit costs 0), while
    the frame is as fresh (a frame that went stale since, in a halt or a feed outage, is answered anew as stale)
    and the forward overlay as current as they were."""
    current = situation.current
    if current.frame is None:
        return None
    overlay = situation.reader.freshness(at=situation.at)["status"]
    return f"{current.frame.source_time.isoformat()}:{current.status}:{overlay}:{situation.reader.sha256}"


def evaluation_answer(args: EvaluateArgs, situation: Situation) -> Answer:
    """The evaluation and its lookups: 1 per side whose history was looked up (`both` = 2); 0 when no frame was
    usable or every horizon crosses today's close."""
    result, lookups = _evaluated(args, situation)
    return Answer(result.model_dump(mode="json", exclude={"usage"}), lookups=lookups)


def finish(result: EvaluationOut) -> EvaluationOut:
    """Every answer served, fresh or from cache, gets its own id, and its presentation states its usage."""
    result = result.model_copy(update={"evaluation_id": f"eval_{uuid.uuid4().hex}"})
    return result.model_copy(update={"presentation": render(result)})
