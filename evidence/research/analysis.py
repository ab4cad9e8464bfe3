"""The Market Memory research tools: each reads the current verified frame and/or the active artifact, never raw bars.

Setup tools (analogues, failure, benchmark, exit policy) resolve the current frame of a symbol exactly as
`evaluate_current_setup` does, take the strongest tier with the minimum sample for the requested side and horizon
(lower tiers never pooled), and read only that key's stored rows. Every number comes from the artifact named in the
result's provenance; what the artifact cannot say stays null with a reason.
"""

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accounts.models import User
from evidence.live import frames
from evidence.marketdata import calendar
from evidence.marketdata.selectors import symbol_get
from evidence.memory.artifact import BAND_MAX, BPS, EXCURSION_LEVELS_BPS, RESERVOIR_SIZE, SYMBOL_BASELINE, TIER_KEYS
from evidence.memory.reader import PCT, Evidence, MemoryReader
from evidence.memory.selectors import memory_reader
from evidence.memory.strategies import mask_names, names_mask
from evidence.models import Corpus, Frame, MarketMemoryArtifact
from evidence.publication import selectors as publication_selectors
from evidence.research import evaluation
from evidence.schemas import (
    Analogue,
    AnalogueOutcome,
    ArtifactFile,
    ArtifactRef,
    ExecutionArgs,
    ExecutionOut,
    ExitCounts,
    ExitPolicyArgs,
    FrameContext,
    KeyStats,
    Leader,
    LeadersArgs,
    LineageArgs,
    LineageOut,
    MatchedSetup,
    MatchStrength,
    OutcomeGroup,
    OverlayFreshness,
    Regime,
    RegimeArgs,
    RegimeBucket,
    RegimeOut,
    ResearchBoundary,
    SearchArgs,
    SearchHit,
    SessionRegime,
    SetupArgs,
    SetupKey,
    Unavailable,
    VolumeBucket,
)
from evidence.vocabulary import HORIZONS, TIER_NAMES, TIMES_OF_DAY, TRENDS, VOLATILITIES, regime_parts
from leroy.clock import now
from leroy.errors import DomainError
from leroy.schemas import Answer

NO_SAMPLE = "No validated comparable sample with the minimum distinct sessions exists for this setup and horizon."
RESERVOIR_SAMPLE = (
    f"The matched key's stored reservoir: a fixed pseudo-random sample of at most {RESERVOIR_SIZE} of its rows "
    "(chosen at build time by a hash of symbol and minute), not the whole key."
)


class ResearchError(DomainError):
    """The request was refused before anything was read or charged; `code` is machine-readable."""


def unknown_symbol(ticker: str) -> ResearchError:
    return ResearchError("unknown_symbol", f"{ticker} is not in Leroy's verified read model.")


# --- shared pieces ---------------------------------------------------------------------------------------------


def regime_of(regime_id: int) -> Regime:
    """Decode a regime id (trend*9 + volatility*3 + time_of_day, see vocabulary.REGIME_DEFINITION)."""
    trend, volatility, time_of_day = regime_parts(regime_id)
    return Regime(id=regime_id, trend=trend, volatility=volatility, time_of_day=time_of_day)


def _provenance(reader: MemoryReader) -> ArtifactRef:
    return ArtifactRef(artifact_version=reader.version, artifact_sha256=reader.sha256, source=reader.source)


def _stats(evidence: Evidence) -> KeyStats:
    return KeyStats(
        sample_size=evidence.row_count,
        distinct_sessions=evidence.distinct_sessions,
        average_return_pct=evidence.average_return_pct,
        median_return_pct=evidence.median_return_pct,
        win_rate=evidence.win_rate,
        profit_factor=evidence.profit_factor,
    )


def _key(tier: int, symbol: str, mask: int, regime: int, band: int) -> SetupKey:
    fields = TIER_KEYS[tier]
    return SetupKey(
        match_strength=MatchStrength(score=tier, tier=TIER_NAMES[tier]),
        symbol=symbol if "symbol" in fields else None,
        active_signals=mask_names(mask) if "mask" in fields else None,
        regime=regime_of(regime) if "regime" in fields else None,
        signal_count_band=(f"{BAND_MAX}+" if band >= BAND_MAX else str(band)) if "band" in fields else None,
    )


def _pct(units: int | None) -> float | None:
    return None if units is None else round(units / PCT, 10)


def _mean(values: list[int]) -> float | None:
    return round(sum(values) / len(values) / PCT, 10) if values else None


@dataclass(frozen=True)
class Setup:
    """The current frame's setup for one side and horizon and its strongest served key (or none)."""

    context: FrameContext
    mask: int | None
    regime: int | None
    match: Evidence | None
    reason: str | None
    asset_class: str = ""  # the pool of the symbol's cross-ticker tiers
    within: tuple[int, ...] = ()  # the horizon, when it ends before today's close (Market Memory was looked up)

    @property
    def usable(self) -> bool:
        return self.mask is not None

    def key_fields(self) -> dict[str, Any]:
        """The reservoir/stat key of the match: the tier's own fields, sentinels elsewhere."""
        assert self.match is not None and self.mask is not None and self.regime is not None
        tier = self.match.tier
        values = {"symbol": self.context.symbol, "mask": self.mask, "regime": self.regime,
                  "band": min(self.mask.bit_count(), BAND_MAX)}  # fmt: skip
        sentinels = {"symbol": "", "mask": -1, "regime": -1, "band": -1}
        fields = {name: values[name] if name in TIER_KEYS[tier] else sentinels[name] for name in values}
        return {**fields, "asset_class": self.asset_class}

    def matched(self) -> MatchedSetup | None:
        if self.match is None:
            return None
        fields = self.key_fields()
        return MatchedSetup(
            side=self.context.side,
            horizon_minutes=self.match.horizon_minutes,  # type: ignore[arg-type]
            key=_key(
                self.match.tier,
                fields["symbol"],
                self.mask or 0,
                self.regime or 0,
                min((self.mask or 0).bit_count(), BAND_MAX),
            ),
            stats=_stats(self.match),
            source="historical",
        )

    @property
    def status(self) -> str:
        return "unavailable" if not self.usable else ("matched" if self.match else "no_comparable_sample")


def setup_resolve(*, symbol: str, side: str, horizon: int, reader: MemoryReader, at: datetime) -> Setup:
    ticker = symbol
    current = frames.current_frame(ticker=ticker, at=at, reader=reader)
    frame = current.frame
    if frame is None:
        context = FrameContext(symbol=ticker, side=side, source_time=None, frame_status=current.status,  # type: ignore[arg-type]
                               active_signals=[], regime=None)  # fmt: skip
        return Setup(context, None, None, None, current.reason)
    mask = (frame.buy_mask if side == "buy" else frame.sell_mask) or 0
    regime = frame.regime
    assert regime is not None
    context = FrameContext(symbol=ticker, side=side, source_time=frame.source_time, frame_status=current.status,  # type: ignore[arg-type]
                           active_signals=mask_names(mask), regime=regime_of(regime))  # fmt: skip
    within = frames.horizons_within(frame, at, (horizon,))
    if not within:  # as evaluate_current_setup: no outcome to compare with
        return Setup(context, mask, regime, None, calendar.HORIZON_CROSSES_CLOSE, reader.pool(ticker))
    match = reader.lookup(symbol=ticker, side=side, mask=mask, regime=regime, horizons=within)[horizon]
    return Setup(context, mask, regime, match, None if match else NO_SAMPLE, reader.pool(ticker), within)


def _matched_rows(setup: Setup, reader: MemoryReader) -> list[dict[str, Any]]:
    assert setup.match is not None
    return reader.examples(tier=setup.match.tier, side=setup.context.side, **setup.key_fields())


def _setup_fields(setup: Setup, reader: MemoryReader) -> dict[str, Any]:
    return {
        "status": setup.status,
        "reason": setup.reason,
        "frame": setup.context,
        "match": setup.matched(),
        "provenance": _provenance(reader),
        "research_boundary": ResearchBoundary(),
    }


def _units(setup: Setup) -> int:
    """One lookup for a fresh frame's setup looked up in Market Memory; none without a usable frame (none, or a
    stale one, whose history is shown as evaluate_current_setup shows it) or past today's close."""
    return 1 if setup.usable and frames.lookups_charged(setup.context.frame_status, setup.within) else 0


# --- leaders ---------------------------------------------------------------------------------------------------


def confluence_leaders(*, args: LeadersArgs) -> Answer:
    """Fresh, warmed-up frames of the open session ranked by active signals for one side; one lookup per snapshot
    (whatever `limit` is), nothing when the snapshot is empty."""

    at, reader = now(), memory_reader()
    window = frames.open_session(at)
    opposite = "sell" if args.side == "buy" else "buy"
    candidates = (
        list(
            Frame.objects.filter(session=window.session, symbol__asset_class__in=("equity", "etf"))
            .select_related("symbol")
            .order_by("symbol__ticker")
        )
        if window
        else []
    )
    stale = [f for f in candidates if frames.frame_is_stale(f, at)]
    fresh = [f for f in candidates if f not in stale]
    ready = [f for f in fresh if f.ready and f.regime is not None and getattr(f, f"{args.side}_mask") is not None]

    def count(frame: Frame, side: str) -> int:
        return int(getattr(frame, f"{side}_mask") or 0).bit_count()

    ranked = sorted(ready, key=lambda f: (-count(f, args.side), count(f, opposite), f.symbol.ticker))
    leaders = [
        Leader(
            rank=rank,
            symbol=f.symbol.ticker,
            source_time=f.source_time,
            active_signal_count=count(f, args.side),
            active_signals=mask_names(getattr(f, f"{args.side}_mask")),
            opposing_signal_count=count(f, opposite),
            regime=regime_of(f.regime),  # type: ignore[arg-type]
        )
        for rank, f in enumerate(ranked[: args.limit], start=1)
    ]
    reason = None
    if window is None:
        reason = "The regular session is closed; there is no current snapshot."
    elif not leaders:
        reason = "No fresh, warmed-up frame is available in the current session."
    fields = {
        "side": args.side,
        "snapshot_at": at,
        "market_open": window is not None,
        "frames_considered": len(candidates),
        "frames_excluded_stale": len(stale),
        "frames_excluded_not_ready": len(fresh) - len(ready),
        "ranking": (
            f"Most active {args.side} signals first; ties: fewer opposing signals, then ticker. Descriptive "
            "research, not a recommendation or an order list."
        ),
        "leaders": leaders,
        "reason": reason,
        "provenance": _provenance(reader),
        "research_boundary": ResearchBoundary(),
    }
    return Answer(fields, lookups=1 if leaders else 0)


# --- search ----------------------------------------------------------------------------------------------------


def _freshness(reader: MemoryReader, at: datetime) -> OverlayFreshness:
    fresh = reader.freshness(at=at)
    return OverlayFreshness(
        status=fresh["status"],
        latest_verified_session=fresh["last_verified_session"],
        lag_sessions=fresh["lag_sessions"],
    )


def _refuse_more_sessions_than_covered(args: SearchArgs, reader: MemoryReader) -> None:
    """A key's distinct sessions lie within its source's coverage: a larger minimum could only ever answer "none"."""
    block = reader.coverage()["historical" if args.source == "historical" else "forward_overlay"]
    if block.get("status") != "available" or args.min_sample_sessions is None:
        return  # an unavailable overlay is withheld, free, with its own reason
    covered = block["sessions"]
    if args.min_sample_sessions > covered:
        source = "historical memory" if args.source == "historical" else "forward overlay"
        raise ResearchError(
            "invalid_request",
            f"min_sample_sessions can be at most {covered}: the {source} covers {covered} "
            f"session{'s' if covered != 1 else ''} ({block['first_session']} to {block['last_session']}), "
            f"so no key has {args.min_sample_sessions}.",
        )


def market_memory_search(*, args: SearchArgs) -> Answer:
    """Served keys filtered by side, horizon, tier, minimum sample, required signals and symbol; one lookup."""
    try:
        required = names_mask(args.signals)
    except ValueError as error:
        raise ResearchError("invalid_request", str(error)) from None

    if args.symbol is not None and symbol_get(ticker=args.symbol) is None:
        raise unknown_symbol(args.symbol)
    tiers: tuple[int, ...] = (args.tier,) if args.tier else (5, 4, 3, 2, 1)
    if required:
        tiers = tuple(t for t in tiers if "mask" in TIER_KEYS[t])  # other tiers do not key on signals
    if args.symbol is not None:
        tiers = tuple(t for t in tiers if "symbol" in TIER_KEYS[t])  # only exact setups key on a symbol
    if not tiers:  # no key of the asked tier can have what the other filters ask: an empty list would read as "none"
        keyed = ", ".join(t for t, asked in (("active signals", required), ("a symbol", args.symbol)) if asked)
        raise ResearchError(
            "invalid_request",
            f"Tier {args.tier} keys are not keyed on {keyed}: signals need tier 3, 4 or 5, a symbol tier 5.",
        )
    at, reader = now(), memory_reader()
    _refuse_more_sessions_than_covered(args, reader)
    freshness = _freshness(reader, at)
    withheld = None
    if args.source == "forward_overlay" and freshness.status != "current":
        lag = f" ({freshness.lag_sessions} completed sessions behind)" if freshness.lag_sessions else ""
        withheld = f"The forward overlay is {freshness.status}{lag}; its keys are withheld, not shown as current."
    hits = []
    if withheld is None and tiers:
        found = reader.search(
            side=args.side, horizon=args.horizon_minutes, tiers=tiers,
            min_sessions=args.min_sample_sessions or 0, required_mask=required,
            symbol=args.symbol, limit=args.limit,
            period=int(args.source == "forward_overlay"), asset_class=args.asset_class,
        )  # fmt: skip
        hits = [
            SearchHit(key=_key(k["tier"], k["symbol"], k["mask"], k["regime"], k["band"]), stats=_stats(e))
            for k, e in found
        ]
    fields = {
        "side": args.side,
        "horizon_minutes": args.horizon_minutes,
        "source": args.source,
        "effective_min_sample_sessions": max(args.min_sample_sessions or 0, reader.min_sessions),
        "results": hits,
        "withheld_reason": withheld,
        "forward_overlay_freshness": freshness,
        "provenance": _provenance(reader),
        "research_boundary": ResearchBoundary(),
    }
    return Answer(fields, lookups=0 if withheld else 1)  # a withheld answer shows nothing, so it costs nothing


# --- analogues, failure, benchmark, exit policy -----------------------------------------------------------------


def _outcomes(row: dict[str, Any]) -> list[AnalogueOutcome]:
    return [
        AnalogueOutcome(
            horizon_minutes=h,  # type: ignore[arg-type]
            return_pct=_pct(row[f"r_{h}"]),
            max_favourable_excursion_pct=_pct(row[f"fav_{h}"]),
            max_adverse_excursion_pct=_pct(row[f"adv_{h}"]),
        )
        for h in HORIZONS
    ]


def _row_time(row: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(row["ts"].replace("Z", "+00:00"))


def historical_analogues(*, args: SetupArgs) -> Answer:
    """The matched key's stored rows, nearest to the current frame first, with their outcomes; one lookup."""

    at, reader = now(), memory_reader()
    setup = setup_resolve(symbol=args.symbol, side=args.side, horizon=args.horizon_minutes, reader=reader, at=at)
    analogues: list[Analogue] = []
    if setup.match is not None:
        rows = _matched_rows(setup, reader)
        mask, regime = setup.mask or 0, setup.regime

        def distance(row: dict[str, Any]) -> tuple[int, int, int]:
            return ((row["row_mask"] ^ mask).bit_count(), int(row["row_regime"] != regime), row["rank"])

        analogues = [
            Analogue(
                rank=rank,
                symbol=row["row_symbol"],
                source_time=_row_time(row),
                session=row["session"],
                active_signals=mask_names(row["row_mask"]),
                regime=regime_of(row["row_regime"]),
                signal_distance=(row["row_mask"] ^ mask).bit_count(),
                same_regime=row["row_regime"] == regime,
                outcomes=_outcomes(row),
            )
            for rank, row in enumerate(sorted(rows, key=distance), start=1)
        ]
    fields = {
        **_setup_fields(setup, reader),
        "ordering": "Fewest differing active signals first, then same regime, then the stored reservoir order.",
        "sample": RESERVOIR_SAMPLE,
        "analogues": analogues,
    }
    return Answer(fields, lookups=_units(setup))


def _group(rows: list[dict[str, Any]], horizon: int) -> OutcomeGroup | None:
    if not rows:
        return None
    return OutcomeGroup(
        rows=len(rows),
        mean_return_pct=_mean([r[f"r_{horizon}"] for r in rows]),
        mean_favourable_excursion_pct=_mean([r[f"fav_{horizon}"] for r in rows if r[f"fav_{horizon}"] is not None]),
        mean_adverse_excursion_pct=_mean([r[f"adv_{horizon}"] for r in rows if r[f"adv_{horizon}"] is not None]),
        time_of_day=dict(sorted(Counter(TIMES_OF_DAY[r["row_regime"] % 3] for r in rows).items())),
        regimes={str(k): v for k, v in sorted(Counter(r["row_regime"] for r in rows).items())},
    )


def _gap(losers: OutcomeGroup | None, winners: OutcomeGroup | None, field: str) -> float | None:
    low = getattr(losers, field) if losers is not None else None
    high = getattr(winners, field) if winners is not None else None
    return None if low is None or high is None else round(low - high, 10)


def setup_failure(*, args: SetupArgs) -> Answer:
    """How the matched key's losing rows (return <= 0) differed from its winners; one lookup."""

    at, reader = now(), memory_reader()
    setup = setup_resolve(symbol=args.symbol, side=args.side, horizon=args.horizon_minutes, reader=reader, at=at)
    h = args.horizon_minutes
    winners = losers = None
    unlabelled = 0
    if setup.match is not None:
        rows = _matched_rows(setup, reader)
        labelled = [r for r in rows if r[f"r_{h}"] is not None]
        unlabelled = len(rows) - len(labelled)
        winners = _group([r for r in labelled if r[f"r_{h}"] > 0], h)
        losers = _group([r for r in labelled if r[f"r_{h}"] <= 0], h)
    fields = {
        **_setup_fields(setup, reader),
        "sample": RESERVOIR_SAMPLE + " Losers are rows whose return is zero or negative. The groups and their gaps "
        "describe these few rows only, not the key: its own statistics are the match's.",
        "rows_without_label": unlabelled,
        "winners": winners,
        "losers": losers,
        "favourable_excursion_gap_pct": _gap(losers, winners, "mean_favourable_excursion_pct"),
        "adverse_excursion_gap_pct": _gap(losers, winners, "mean_adverse_excursion_pct"),
    }
    return Answer(fields, lookups=_units(setup))


def benchmark_comparison(*, args: SetupArgs) -> Answer:
    """The matched key's statistics next to the benchmark's own direction baseline for the same side and horizon
    over the artifact's historical period (its own sessions, not the setup's: `window_basis`); one lookup. A
    benchmark baseline below the minimum sample is not shown."""

    at, reader = now(), memory_reader()
    setup = setup_resolve(symbol=args.symbol, side=args.side, horizon=args.horizon_minutes, reader=reader, at=at)
    benchmark_symbol = reader.manifest["corpus"]["benchmark"]
    benchmark = benchmark_reason = None
    if setup.usable and setup.within:
        found = reader.key_evidence(tier=SYMBOL_BASELINE, side=args.side, horizon=args.horizon_minutes,
                                    symbol=benchmark_symbol)  # fmt: skip
        if found is not None and found.distinct_sessions >= reader.min_sessions:
            benchmark = _stats(found)
        else:
            benchmark_reason = "The benchmark has no baseline with the minimum distinct sessions at this horizon."
    difference = win_difference = None
    if setup.match is not None and benchmark is not None:
        difference = round((setup.match.average_return_pct - benchmark.average_return_pct) * 100, 4)
        win_difference = round(setup.match.win_rate - benchmark.win_rate, 6)
    fields = {
        **_setup_fields(setup, reader),
        "benchmark_symbol": benchmark_symbol,
        "benchmark": benchmark,
        "benchmark_reason": benchmark_reason,
        "window_basis": (
            "Both figures use the same forward horizon and side orientation over the artifact's historical "
            "period; the benchmark figure is its own direction baseline over all its ready minutes (sample "
            "stated), not paired minute by minute with the setup's rows: the artifact stores no such pairing."
        ),
        "return_difference_bps": difference,
        "win_rate_difference": win_difference,
    }
    return Answer(fields, lookups=_units(setup))


def _exit_outcome(row: dict[str, Any], h: int, stop: int, target: int) -> tuple[str, int | None]:
    """Classify one stored row: its window's extremes say which levels were touched, never in which order."""
    fav, adv = row[f"fav_{h}"], row[f"adv_{h}"]
    hit_target, hit_stop = fav >= target * BPS, adv >= stop * BPS
    if hit_target and hit_stop:
        return "unresolved", None
    if hit_target:
        return "target_first", target * BPS
    if hit_stop:
        return "stop_first", -stop * BPS
    return "time_exit", row[f"r_{h}"]


def exit_policy_simulation(*, args: ExitPolicyArgs) -> Answer:
    """Stop, target and time exits replayed over the matched key's stored excursions; one lookup."""

    at, reader = now(), memory_reader()
    setup = setup_resolve(symbol=args.symbol, side=args.side, horizon=args.horizon_minutes, reader=reader, at=at)
    h = args.horizon_minutes
    counts = mean = target_share = stop_share = None
    used = unlabelled = 0
    if setup.match is not None:
        rows = _matched_rows(setup, reader)
        labelled = [r for r in rows if r[f"r_{h}"] is not None and r[f"fav_{h}"] is not None]
        used, unlabelled = len(labelled), len(rows) - len(labelled)
        outcomes = [_exit_outcome(r, h, args.stop_bps, args.target_bps) for r in labelled]
        tally = Counter(kind for kind, _ in outcomes)
        counts = ExitCounts(target_first=tally["target_first"], stop_first=tally["stop_first"],
                            time_exit=tally["time_exit"], unresolved=tally["unresolved"])  # fmt: skip
        mean = _mean([value for _, value in outcomes if value is not None])
        target_share = setup.match.favourable_reached.get(str(args.target_bps))
        stop_share = setup.match.adverse_reached.get(str(args.stop_bps))
    fields = {
        **_setup_fields(setup, reader),
        "stop_bps": args.stop_bps,
        "target_bps": args.target_bps,
        "time_exit_minutes": h,
        "sample": RESERVOIR_SAMPLE,
        "rows_used": used,
        "rows_without_label": unlabelled,
        "outcomes": counts,
        "mean_resolved_return_pct": mean,
        "key_target_reached_share": target_share,
        "key_stop_reached_share": stop_share,
        "cannot_resolve": (
            "Rows whose window touched both the stop and the target are unresolved: the artifact stores each "
            "window's highest high and lowest low, not their order, so Leroy does not guess which came first. "
            f"Whole-key touch shares exist only for the stored levels {list(EXCURSION_LEVELS_BPS)} bps."
        ),
        "assumptions": [
            "Entry at the close of the decision minute; exits at the stop or target level exactly, or at the "
            "close after the horizon.",
            "No costs, slippage, gaps through a level, spread or fills are modelled.",
        ],
    }
    return Answer(fields, lookups=_units(setup))


# --- free tools: regime, execution conditions, lineage ----------------------------------------------------------


def market_regime(*, args: RegimeArgs) -> RegimeOut:
    """The current regime (from the benchmark's frame), the last verified session's buckets, and per-regime
    statistics for a side and horizon; buckets below the minimum sample are counted, not shown. Free."""
    at, reader = now(), memory_reader()
    corpus = Corpus.objects.select_related("benchmark").first()
    benchmark = corpus.benchmark.ticker if corpus else reader.manifest["corpus"]["benchmark"]
    current = frames.current_frame(ticker=benchmark, at=at, reader=reader)
    last_session = None
    verified = reader.manifest["coverage"]["historical"].get("last_session")
    overlay = reader.manifest["coverage"]["forward_overlay"].get("last_session")
    latest = max(filter(None, (verified, overlay)), default=None)
    row = reader.regime_of_session(datetime.fromisoformat(latest).date()) if latest else None
    if row is not None:
        last_session = SessionRegime(session=row["session"], trend=TRENDS[row["trend"]],
                                     volatility=VOLATILITIES[row["volatility"]])  # fmt: skip
    table = reader.regime_table(side=args.side, horizon=args.horizon_minutes)
    shown = [r for r in table if r["distinct_sessions"] >= reader.min_sessions]
    buckets = [
        RegimeBucket(
            regime=regime_of(r["regime"]), stats=_stats(Evidence(**{k: r[k] for k in Evidence.__annotations__}))
        )
        for r in shown
    ]
    frame = current.frame
    return RegimeOut(
        current=regime_of(frame.regime) if frame is not None and frame.regime is not None else None,
        current_source_time=frame.source_time if frame is not None else None,
        frame_status=current.status,
        reason=current.reason,
        last_verified_session=last_session,
        side=args.side,
        horizon_minutes=args.horizon_minutes,
        buckets=buckets,
        buckets_below_minimum=len(table) - len(shown),
        definition={k: str(v) for k, v in reader.manifest["regime"].items()},
        provenance=_provenance(reader),
        research_boundary=ResearchBoundary(),
    )


NO_QUOTES = "The bar data carries no quotes, so no spread can be reported."


def execution_conditions(*, args: ExecutionArgs) -> ExecutionOut:
    """Historical volume by half hour of the session for a symbol; spread, fill and impact are never inferred."""
    reader = memory_reader()
    ticker = args.symbol
    table = reader.execution_conditions(symbol=ticker)["volume_by_half_hour"]
    return ExecutionOut(
        symbol=ticker,
        availability="available" if table else "not_available",
        reason=None if table else f"{ticker} has no historical bars in the active artifact.",
        volume_by_time_of_day=[VolumeBucket(**row) for row in table],
        basis=(
            f"Every traded regular-session minute of {ticker} stored for the artifact's historical period, its "
            "feature warm-up sessions included: a bucket's sessions counts those dates, so it can exceed the ready "
            "sessions of the coverage in get_data_lineage."
        ),
        spread=Unavailable(reason=NO_QUOTES),
        fill=Unavailable(reason="Leroy places no orders and has no fill data; no fill is inferred."),
        market_impact=Unavailable(reason="No order-book data is stored; no market impact is inferred."),
        provenance=_provenance(reader),
        research_boundary=ResearchBoundary(),
    )


def data_lineage(*, args: LineageArgs, user: User | None) -> LineageOut:
    """The active artifact's identity, inputs, code, registry, calendar, coverage and file hashes. Free, public.
    With an evaluation id (the caller's own), also where each of its served rows comes from."""
    from evidence.research.explain import evaluation_explain  # it builds on this module's errors

    rows = None
    if args.evaluation_id is not None:
        if user is None:
            raise ResearchError("unknown_evaluation", "evaluations are explained to their own account: authenticate")
        rows = evaluation_explain(evaluation_id=args.evaluation_id, user=user)
    reader = memory_reader()
    coverage, _, _ = evaluation.memory_blocks(reader, now())
    lineage = reader.lineage()
    published = MarketMemoryArtifact.objects.filter(sha256=reader.sha256).values_list("activated_at", flat=True)
    return LineageOut(
        artifact_version=reader.version,
        artifact_sha256=reader.sha256,
        published_at=published.first(),
        source=lineage["source"],
        data_as_of=lineage["data_as_of"],
        benchmark=lineage["corpus"]["benchmark"],
        historical_through=lineage["corpus"]["historical_through"],
        symbols=lineage["corpus"]["tickers"],
        forward_overlay_symbols=lineage["corpus"]["overlay_tickers"],
        inputs_sha256=lineage["inputs_sha256"],
        code_sha256=lineage["code_sha256"],
        feature_set_version=lineage["features"]["version"],
        feature_count=lineage["features"]["count"],
        registry_version=lineage["registry"]["version"],
        registry_sha256=lineage["registry"]["registry_sha256"],
        strategy_count=lineage["registry"]["count"],
        calendar={key: str(value) for key, value in lineage["calendar"].items()},
        min_sample_sessions=reader.min_sessions,
        coverage=coverage,
        files=[ArtifactFile(name=name, **entry) for name, entry in sorted(reader.manifest["files"].items())],
        research_boundary=ResearchBoundary(),
        publication_log=publication_selectors.checkpoint(),
        evaluation_rows=rows,
    )
