"""The human scorecard of an evaluation, rendered only from its structured fields.

Every number in the text is printed exactly as it stands in the structured result (no rounding, no percent
conversion), so the text can never say more than the evidence does.
"""

from evidence.schemas import EvaluationOut, HistoricalEvidence, Presentation

DISCLAIMER = "Historical observations are descriptive, not investment advice."
# Said in every answer read from an artifact whose provenance.source is synthetic, whatever its state, so a reader
# of the text alone never takes the demo's numbers for market history.
SYNTHETIC = "Data source: synthetic. Every figure here comes from generated demo data, not market history."
NO_MATCH = (
    "No exact historical setup is available for the requested timeframes. Leroy did not substitute a broader baseline."
)
SIDE_TITLES = {"buy": "Buy", "sell": "Sell", "both": "Buy & Sell"}


def _value(number: float | int | None) -> str:
    return "—" if number is None else str(number)


def _tier(row: HistoricalEvidence) -> str:
    strength = row.match_strength
    return "—" if strength is None else f"{strength.tier} (score {strength.score})"


def _evidence_rows(rows: list[HistoricalEvidence]) -> list[str]:
    """One line per available row; its tier stands beside its numbers, which all come from that tier's key."""
    lines = [
        "| Side | Horizon (min) | Tier | Sample | Sessions | Symbols | Avg return % | Win rate | Profit factor "
        "| Lift (bps) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if row.availability != "available":
            continue
        lines.append(
            f"| {SIDE_TITLES[row.side]} | {row.horizon_minutes} | {_tier(row)} | {_value(row.sample_size)} "
            f"| {_value(row.distinct_sessions)} | {_value(row.distinct_symbols)} | {_value(row.average_return_pct)} "
            f"| {_value(row.win_rate)} | {_value(row.profit_factor)} | {_value(row.lift_vs_baseline_bps)} |"
        )
    return lines


# Which of the frame's conditions each tier's key holds (evidence.memory.artifact.TIER_KEYS), in words: a row of a
# broader tier is never read as a match of the whole setup.
POOLED = (
    "Only exact_setup rows are the symbol's own; the other tiers pool the symbols counted under Symbols. "
    "signal_pattern rows match the active signals but not the regime; contextual_analogue rows match the regime "
    "and the number of active signals, not which."
)


def _closing(result: EvaluationOut) -> list[str]:
    """What every text ends with: the synthetic-data notice when the artifact's source says so, the disclaimer."""
    return [SYNTHETIC, DISCLAIMER] if result.provenance.source == "synthetic" else [DISCLAIMER]


def render(result: EvaluationOut) -> Presentation:
    """The presentation object for `result` (whose own `presentation` is ignored)."""
    symbol = result.request.symbol
    frame = result.current_market_frame
    if frame is not None and frame.frame_status == "market_closed":
        text = (
            f"{symbol}: regular-session trading is closed. Leroy evaluates current setups only while the regular "
            f"session is open; this is not a setup evaluation. {' '.join(_closing(result))}"
        )
        return Presentation(format="plain_text", state="market_closed", text=text)

    parts = [f"## **{symbol}** · {SIDE_TITLES[result.request.side]}"]
    if result.status == "no_comparable_sample":
        # The seed's no-match scorecard: nothing broader is shown in place of the missing comparison.
        parts += ["🟢 **Market Open**", NO_MATCH, *_closing(result)]
        return Presentation(format="markdown", state=result.status, text="\n\n".join(parts))
    if result.status == "unavailable":
        parts.append("⚪ **No verified frame**")
        # Say what is actually missing (unknown ticker, no frame yet this session, frame not warmed up).
        reasons = {row.reason for row in result.historical_evidence if row.reason}
        explanation = " ".join(sorted(reasons)) or f"There is no usable verified frame for {symbol}."
        parts.append(f"{explanation} There is no market frame and no historical result. Nothing was substituted.")
    else:
        if result.status == "stale_frame":
            source_time = frame.source_time.isoformat() if frame and frame.source_time else "unknown"
            parts.append(f"🟠 **Market Open · stale frame** (last verified bar {source_time})")
        else:
            parts.append("🟢 **Market Open**")
        if result.active_confluence is not None:
            regime = result.active_confluence.regime
            for side in result.active_confluence.sides:
                signals = ", ".join(side.active_signals) or "none"
                parts.append(f"{SIDE_TITLES[side.side]} signals active ({side.active_signal_count}): {signals}")
            parts.append(
                f"Regime: trend {regime.trend} · volatility {regime.volatility} · {regime.time_of_day} of session"
            )
        if result.setup_geometry is not None:
            geometry = result.setup_geometry
            parts.append(
                f"Setup: entry {_value(geometry.entry_price)} · stop {_value(geometry.stop_price)} · target "
                f"{_value(geometry.target_price)} · reward-to-risk {_value(geometry.reward_to_risk)}"
            )
        available = [row for row in result.historical_evidence if row.availability == "available"]
        if available:
            parts.append("\n".join(_evidence_rows(result.historical_evidence)))
            if any(row.match_strength is not None and row.match_strength.score < 5 for row in available):
                parts.append(POOLED)
            missing = [row for row in result.historical_evidence if row.availability != "available"]
            if missing:
                horizons = ", ".join(f"{SIDE_TITLES[r.side]} {r.horizon_minutes}" for r in missing)
                parts.append(f"No validated comparison for: {horizons} (min). Nothing was substituted.")
        else:
            parts.append(NO_MATCH)
    provenance = result.provenance
    if provenance.artifact_sha256:
        parts.append(
            f"Evidence: Market Memory {provenance.artifact_version} · sha256 {provenance.artifact_sha256} · source "
            f"{provenance.source}"
        )
    parts += _closing(result)
    return Presentation(format="markdown", state=result.status, text="\n\n".join(parts))
