"""Market Memory build: a map over symbols (features -> states -> labels -> per-key session bounds) and a reduce
(bound, prune, count, sort) into one immutable artifact directory whose identity is SHA-256 of its canonical
manifest.

The map writes each symbol's feature-store file (its states and labels included) and, per pooled key, the key's
distinct sessions in that symbol; their sum over symbols bounds the key's distinct sessions, so the reduce prunes
every key that cannot reach the minimum sample, then computes the rest from the symbols' returns, read back off the
feature-store files one (side, horizon) part at a time (every key lies in one): every statistic is an integer sum
over int64 labels (1e-8 units), so rebuilds are byte-identical, and distinct sessions and symbols are counted over
the key's rows across all its symbols (exact: two symbols trading the same day count one session).
"""

import hashlib
import json
import sqlite3
from collections.abc import Callable
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl
from django.conf import settings

from evidence.marketdata import calendar, store
from evidence.memory import features, strategies
from evidence.memory.artifact import (
    BAND_MAX,
    BPS,
    EXCURSION_LEVELS_BPS,
    EXECUTION_BUCKET_MINUTES,
    KEY_COLUMNS,
    KEY_SCHEMA,
    PERIODS,
    REGIME_TABLE,
    RESERVOIR_KEY_SCHEMA,
    RESERVOIR_SIZE,
    SCHEMA_VERSION,
    SENTINEL,
    STAT_COLUMNS,
    SYMBOL_BASELINE,
    TIER_KEYS,
    BuildPlan,
    canonical_json,
    feature_store_path,
    partial_dir,
    plan_sha256,
)
from evidence.models import BarPartition, Corpus, Symbol
from evidence.vocabulary import ASSET_CLASSES, HORIZONS, REGIME_DEFINITION, SIDES, TIER_NAMES
from leroy.clock import now

EXACT_TIER = 5  # the one tier keyed by symbol that is displayed as a match


class BuildError(Exception):
    pass


def build_plan(*, through: date | None = None) -> BuildPlan:
    corpus = Corpus.objects.select_related("benchmark").first()
    if corpus is None:
        raise BuildError(
            "no corpus defined: load demo data, or add one in admin (Evidence > Corpora: benchmark symbol, last "
            "historical session, overlay tickers, source vendor)"
        )
    symbols = list(Symbol.objects.filter(partitions__frequency="1m").distinct().order_by("ticker"))
    if corpus.benchmark not in symbols:
        raise BuildError(f"benchmark {corpus.benchmark.ticker} has no 1m bars")
    last_bar = max(BarPartition.objects.filter(frequency="1m").values_list("last_ts", flat=True), default=None)
    if last_bar is None:
        raise BuildError("no minute bars stored")
    last_complete = _last_completed_session()
    end = min(last_bar.date(), last_complete, corpus.verified_through or last_bar.date())
    if through is not None:
        end = min(end, through)
    end = calendar.xnys().date_to_session(end.isoformat(), direction="previous").date()
    inputs = {
        symbol.ticker: list(
            BarPartition.objects.filter(symbol=symbol, frequency="1m").order_by("year").values_list("sha256", flat=True)
        )
        for symbol in symbols
    }
    sources = set(BarPartition.objects.filter(frequency="1m").values_list("source", flat=True))
    return BuildPlan(
        source="synthetic" if "synthetic" in sources else corpus.source,
        benchmark=corpus.benchmark.ticker,
        through=end.isoformat(),
        historical_through=min(corpus.historical_through, end).isoformat(),
        tickers=[s.ticker for s in symbols],
        overlay_tickers=sorted(set(corpus.overlay_tickers) & {s.ticker for s in symbols}),
        inputs=inputs,
        min_sessions=settings.LEROY_MM_MIN_SESSIONS,
        asset_classes={s.ticker: s.asset_class for s in symbols},
    )


def _last_completed_session() -> date:
    """The latest session that closed before leroy.clock.now() (the open session is never built)."""
    return calendar.xnys_minutes().minute_to_past_session(now().replace(second=0, microsecond=0), count=1).date()


def symbol_evidence_frame(ticker: str, plan: BuildPlan) -> pl.DataFrame:
    """One symbol's point-in-time frame (features, states, regime, labels) through the plan's last session."""
    from evidence.marketdata.selectors import (
        bars_read,  # selectors read artifacts built here, so this edge is imported late
    )

    bars = bars_read(symbol=Symbol.objects.get(ticker=ticker), frequency="1m")
    regimes = _benchmark_regimes(plan.benchmark, tuple(plan.inputs[plan.benchmark]), plan.through)
    return strategies.with_states(features.symbol_frame_in(bars, regimes, through=date.fromisoformat(plan.through)))


@lru_cache(maxsize=2)
def _benchmark_regimes(benchmark: str, inputs: tuple[str, ...], through: str) -> pl.DataFrame:
    """The benchmark's regime per session through `through`, computed once per process, not once per symbol (its
    bars read and densified: 30 ms a symbol at 180 sessions). Keyed by the planned partitions' content hashes
    `inputs`, so new bars are a new key: a build reads the bars that are stored, as it does every symbol's."""
    from evidence.marketdata.selectors import bars_read

    bars = bars_read(symbol=Symbol.objects.get(ticker=benchmark), frequency="1m")
    return features.benchmark_regimes(bars, through=date.fromisoformat(through))


# Inside one symbol's partial the asset class and symbol are constant, so tier 5 groups exactly as tier 4 and the
# symbol baseline exactly as tier 1: a partial carries the five pooled tiers only, and the reduce names the symbol of
# its tier-4 and tier-1 rows to get tiers 5 and 6.
NAMED_TIERS = {
    named: next(t for t, k in TIER_KEYS.items() if "symbol" not in k and k == tuple(c for c in keys if c != "symbol"))
    for named, keys in TIER_KEYS.items()
    if "symbol" in keys
}  # tier naming the symbol -> the pooled tier a partial groups it as: {5: 4, 6: 1}
POOLED_TIERS = tuple(t for t in TIER_KEYS if t not in NAMED_TIERS)

# Packed keys. The partials and the reduce group on one int64 per key, not on up to nine columns (polars groups one
# integer column several times faster: a tier-2 median over 7 M returns took 0.43 s CPU on its columns, 0.07 s on a
# packed key). Each field owns a fixed bit range; a field a tier does not key is 0 there (mask, regime and band are
# stored + 1, so their sentinel -1 is 0), so a tier's key is a row's key with every other field cleared and the tier
# in the top bits, and the symbol (tiers 5 and 6) travels beside it as its index.
KEY_FIELDS: dict[str, tuple[int, int]] = {  # field -> (offset, bits)
    "period": (0, 1),
    "side": (1, 1),
    "horizon": (2, 2),  # the horizon's index in HORIZONS
    "regime": (4, 5),  # regime + 1 (regimes are 0..17)
    "band": (9, 3),  # band + 1 (0..BAND_MAX)
    "class_index": (12, 4),  # the asset class's index in the plan's sorted classes
    "mask": (16, len(strategies.STRATEGIES) + 1),  # mask + 1
}
TIER_OFFSET = 16 + len(strategies.STRATEGIES) + 1
# A wider registry or vocabulary needs a wider key: refuse to import rather than collide keys.
if TIER_OFFSET + 3 > 63 or len(ASSET_CLASSES) > 1 << KEY_FIELDS["class_index"][1]:
    raise RuntimeError("the strategy masks or the asset classes no longer fit a packed int64 key")
_ALWAYS_KEYED = ("period", "side", "horizon", "class_index")


def _bits(*fields: str) -> int:
    return sum(((1 << KEY_FIELDS[f][1]) - 1) << KEY_FIELDS[f][0] for f in fields)


# The fields each tier keeps; UNMASKED keeps every field but the mask (the finest key of the tiers not keyed by it).
TIER_KEEP = {
    tier: _bits(*_ALWAYS_KEYED, *[f for f in ("mask", "regime", "band") if f in keys])
    for tier, keys in TIER_KEYS.items()
}
UNMASKED = _bits(*_ALWAYS_KEYED, "regime", "band")


def tier_key(tier: int, key: pl.Expr | None = None) -> pl.Expr:
    """The tier's packed key of rows whose packed key is `key` (the column "key" by default)."""
    key = pl.col("key") if key is None else key
    return (key & TIER_KEEP[tier]) | (tier << TIER_OFFSET)


def tier_of(key: pl.Expr | None = None) -> pl.Expr:
    return (pl.col("key") if key is None else key) // (1 << TIER_OFFSET)


def _band(side: str) -> pl.Expr:
    """A ready row's active-signal band for `side`: its active strategies, BAND_MAX and more in one band."""
    return pl.min_horizontal(pl.col(f"n_{side}"), pl.lit(BAND_MAX))


def _row_key(side_index: int, horizon: int | None, class_index: int) -> pl.Expr:
    """A ready row's packed key for a side and a horizon (None: without one, as the reservoirs are kept): the period,
    regime, band and mask from its columns, the rest constant."""
    at = {name: 1 << offset for name, (offset, _) in KEY_FIELDS.items()}
    horizon_index = 0 if horizon is None else HORIZONS.index(horizon)  # type: ignore[arg-type]
    side = SIDES[side_index]
    constant = side_index * at["side"] + horizon_index * at["horizon"] + class_index * at["class_index"]
    return (
        pl.lit(constant, pl.Int64)
        + pl.col("period").cast(pl.Int64) * at["period"]
        + (pl.col("regime").cast(pl.Int64) + 1) * at["regime"]
        + (_band(side).cast(pl.Int64) + 1) * at["band"]
        + (pl.col(f"{side}_mask").cast(pl.Int64) + 1) * at["mask"]
    )


def _unpacked(frame: pl.DataFrame) -> pl.DataFrame:
    """INT_KEYS columns from the packed "key" (and "symbol_index"), then the frame's other columns."""

    def field(name: str) -> pl.Expr:
        offset, bits = KEY_FIELDS[name]
        return (pl.col("key") // (1 << offset)) % (1 << bits)

    keys = {
        "period": field("period"),
        "tier": tier_of(),
        "side": field("side"),
        "horizon": field("horizon").replace_strict(dict(enumerate(HORIZONS)), return_dtype=pl.Int64),
        "class_index": field("class_index"),
        "symbol_index": pl.col("symbol_index"),
        "mask": field("mask") - 1,
        "regime": field("regime") - 1,
        "band": field("band") - 1,
    }
    return frame.select(**keys, **{c: pl.col(c) for c in frame.columns if c not in ("key", "symbol_index")})


def _session_bounds(long: pl.DataFrame) -> pl.DataFrame:
    """The pooled tiers' packed keys for one symbol, each with `n_session_rows`, its (full key, session) pairs in this
    symbol: exactly the key's distinct sessions for tier 4 (a mask decides its band, so each of a tier-4 key's
    sessions has one full key), more for the coarser tiers, and summed across symbols an upper bound of a pooled
    key's distinct sessions. That is all the reduce needs of a symbol before it knows which keys can be served; it
    counts those keys' sessions and sums their returns itself."""
    fine = long.select("key", "session").unique()  # every tier's distinct sessions are counted from these rows
    return pl.concat(
        [
            fine.group_by(key=tier_key(tier)).agg(pl.len().cast(pl.Int64).alias("n_session_rows"))
            for tier in POOLED_TIERS
        ]
    )


def _sums() -> list[pl.Expr]:
    """A key's additive statistics over its returns' rows: integer sums, exact in int64, so a sum of sums over any
    split of the rows is the same sum."""
    r, fav, adv = pl.col("r"), pl.col("fav"), pl.col("adv")
    return [
        pl.len().cast(pl.Int64).alias("n"),
        r.sum().alias("sum_r"),
        (r > 0).sum().cast(pl.Int64).alias("n_win"),
        r.clip(lower_bound=0).sum().alias("sum_pos"),
        (-r).clip(lower_bound=0).sum().alias("sum_neg"),
        fav.sum().alias("sum_fav"),
        adv.sum().alias("sum_adv"),
        *[(fav >= level * BPS).sum().cast(pl.Int64).alias(f"n_fav_{level}") for level in EXCURSION_LEVELS_BPS],
        *[(adv >= level * BPS).sum().cast(pl.Int64).alias(f"n_adv_{level}") for level in EXCURSION_LEVELS_BPS],
    ]


SUMMED = tuple(e.meta.output_name() for e in _sums())
# Distinct sessions and symbols, counted over a key's rows (or over rows that keep the session and symbol as keys):
# none is taken from a partial, so each means exactly what its name says over exactly the key's rows.
COUNTED = (
    pl.col("session").n_unique().cast(pl.Int64).alias("n_sessions"),
    pl.col("symbol_index").n_unique().cast(pl.Int64).alias("n_symbols"),
)


def _with_key(frame: pl.DataFrame, tier: int, schema: dict[str, Any] = KEY_SCHEMA) -> pl.DataFrame:
    """Fill the key columns a tier does not use with sentinels and put the key columns first, in canonical order."""
    fills = {name: pl.lit(value) for name, value in SENTINEL.items() if name not in TIER_KEYS[tier]}
    return frame.with_columns(tier=pl.lit(tier), **fills).select(
        *[pl.col(name).cast(dtype) for name, dtype in schema.items()],
        *[c for c in frame.columns if c not in schema],
    )


def _rows(frame: pl.DataFrame, ticker: str, plan: BuildPlan) -> pl.DataFrame:
    """Ready rows tagged with their period (historical, or overlay for the overlay universe); others dropped."""
    boundary = date.fromisoformat(plan.historical_through)
    in_overlay = ticker in plan.overlay_tickers
    period = pl.when(pl.col("session") <= boundary).then(0).when(pl.lit(in_overlay)).then(1).otherwise(None)
    return (
        frame.filter(pl.col("ready"))
        .with_columns(
            period=period.cast(pl.Int8), symbol=pl.lit(ticker), asset_class=pl.lit(plan.asset_classes[ticker])
        )
        .filter(pl.col("period").is_not_null())
    )


# Every packed key carries its side and horizon, so the rows of any key of any tier lie in one (side, horizon) part:
# the reduce takes its statistics one part at a time, holding an eighth of the returns.
PARTS = tuple((side_index, horizon) for side_index in range(len(SIDES)) for horizon in HORIZONS)


def _long(rows: pl.DataFrame, class_index: int, parts: tuple[tuple[int, int], ...] = PARTS) -> pl.DataFrame:
    """One row per (ready row, side, horizon) with a mature label, for the (side index, horizon) `parts`: its packed
    key, its session as a day ordinal and its side-oriented returns (sell = negated)."""
    frames = []
    for side_index, h in parts:
        side = SIDES[side_index]
        sign = 1 if side == "buy" else -1
        fav = pl.col(f"hi_{h}") if side == "buy" else -pl.col(f"lo_{h}")
        adv = -pl.col(f"lo_{h}") if side == "buy" else pl.col(f"hi_{h}")
        frames.append(
            rows.filter(pl.col(f"lbl_{h}").is_not_null()).select(
                key=_row_key(side_index, h, class_index),
                session=pl.col("session").cast(pl.Int32),
                r=pl.col(f"lbl_{h}") * sign,
                fav=fav,
                adv=adv,
            )
        )
    return pl.concat(frames)


def _part_of(side_index: int, horizon: int, key: pl.Expr | None = None) -> pl.Expr:
    """Whether packed keys (the column "key" by default) are of the (side index, horizon) part."""
    key = pl.col("key") if key is None else key
    at = {name: 1 << offset for name, (offset, _) in KEY_FIELDS.items()}
    part = side_index * at["side"] + HORIZONS.index(horizon) * at["horizon"]  # type: ignore[arg-type]
    return (key & _bits("side", "horizon")) == part


def _reservoir_candidates(rows: pl.DataFrame, class_index: int) -> pl.DataFrame:
    """Every ready row once per side, with its side-oriented labels for all horizons (nulls stay null) and its packed
    key without a horizon (a reservoir is kept per key and side, for all horizons at once)."""
    parts = []
    for side_index, side in enumerate(SIDES):
        sign = 1 if side == "buy" else -1
        labels = {}
        for h in HORIZONS:
            labels[f"r_{h}"] = pl.col(f"lbl_{h}") * sign
            labels[f"fav_{h}"] = pl.col(f"hi_{h}") if side == "buy" else -pl.col(f"lo_{h}")
            labels[f"adv_{h}"] = -pl.col(f"lo_{h}") if side == "buy" else pl.col(f"hi_{h}")
        parts.append(
            rows.select(
                "period", "asset_class", "symbol", "session", "ts", "regime",
                side=pl.lit(side_index, pl.Int8),
                mask=pl.col(f"{side}_mask"),
                band=_band(side).cast(pl.Int8),
                **labels,
                row_key=_row_key(side_index, None, class_index),
            )
        )  # fmt: skip
    # A fixed pseudo-random order (hash of symbol and minute) keeps the reservoir deterministic and not biased in time.
    return pl.concat(parts).with_columns(
        pick=pl.struct("symbol", "ts").hash(seed=20260701),
        row_symbol=pl.col("symbol"),
        row_mask=pl.col("mask"),
        row_regime=pl.col("regime"),
    )


# What the partials read of a symbol's frame: keys, states and labels (the features themselves are only stored).
ROW_COLUMNS = (
    "ready", "session", "ts", "regime", *[f"{side}_mask" for side in SIDES], *[f"n_{side}" for side in SIDES],
    *[f"{label}_{h}" for h in HORIZONS for label in ("lbl", "hi", "lo")],
)  # fmt: skip


def build_symbol_partial(plan: BuildPlan, ticker: str, build_dir: str) -> dict[str, int]:
    """Map step for one symbol: the feature store file (the reduce picks the reservoirs from it), then stats,
    returns (for distinct sessions and medians), coverage and execution partials. Each large frame is dropped once
    its partials are written, which bounds the step's peak memory by the feature frame plus one stage's frames."""
    frame = symbol_evidence_frame(ticker, plan)
    bar_rows = len(frame)
    store.write_parquet(
        frame.with_columns(pl.col(features.FEATURES).cast(pl.Float32), symbol=pl.lit(ticker)),
        feature_store_path(ticker, plan),
    )
    historical = frame.filter(~pl.col("is_fill") & (pl.col("session") <= date.fromisoformat(plan.historical_through)))
    execution = historical.group_by(
        bucket=(pl.col("minute_of_session") // EXECUTION_BUCKET_MINUTES).cast(pl.Int16)
    ).agg(
        symbol=pl.lit(ticker),
        n_bars=pl.len().cast(pl.Int64),
        n_sessions=pl.col("session").n_unique().cast(pl.Int64),
        sum_volume=pl.col("volume").round(0).cast(pl.Int64).sum(),
        zero_volume_bars=(pl.col("volume") == 0).sum().cast(pl.Int64),
    )
    rows = _rows(frame.select(ROW_COLUMNS), ticker, plan)
    del frame, historical
    coverage = rows.group_by("period").agg(
        symbol=pl.lit(ticker),
        ready_rows=pl.len().cast(pl.Int64),
        first_session=pl.col("session").min(),
        last_session=pl.col("session").max(),
        **{f"label_rows_{h}": pl.col(f"lbl_{h}").is_not_null().sum().cast(pl.Int64) for h in HORIZONS},
    )
    out = partial_dir(build_dir, ticker)
    # Partials are scratch (the reduce sorts and sums them, then deletes them): Arrow IPC, no pre-sorting. The
    # symbol (and so its asset class) is the directory: the reduce puts them back. The returns themselves are not
    # a partial: the reduce reads them off the feature-store file, as it does the reservoirs' rows.
    store.write_scratch(_session_bounds(_long(rows, class_indexes(plan)[ticker])), f"{out}/bounds.arrow")
    store.write_scratch(coverage.sort("period"), f"{out}/coverage.arrow")
    store.write_scratch(execution.sort("bucket"), f"{out}/execution.arrow")
    marker = {"ticker": ticker, "inputs": plan.inputs[ticker], "plan": plan_sha256(plan)}
    store.write_bytes(f"{out}/done.json", canonical_json(marker))
    return {"rows": bar_rows, "ready_rows": len(rows)}


EVIDENCE_DIR = Path(__file__).resolve().parent.parent
CODE_MODULES = (
    "vocabulary.py", "marketdata/calendar.py", "marketdata/store.py", "memory/features.py", "memory/strategies.py",
    "memory/artifact.py", "memory/build.py",
)  # fmt: skip


def code_sha256() -> str:
    """SHA-256 of the modules that shape an artifact: unrelated commits do not change a rebuild's identity."""
    digest = hashlib.sha256()
    for name in CODE_MODULES:
        digest.update(name.encode() + b"\0" + (EVIDENCE_DIR / name).read_bytes())
    return digest.hexdigest()


# The reduce groups on integers: the asset class and symbol become their indexes in the plan (-1: not keyed).
INT_KEYS = ("period", "tier", "side", "horizon", "class_index", "symbol_index", "mask", "regime", "band")


def class_indexes(plan: BuildPlan) -> dict[str, int]:
    """Each ticker's asset class as its index in the plan's sorted classes (the packed keys' class field)."""
    classes = sorted(set(plan.asset_classes.values()))
    return {ticker: classes.index(plan.asset_classes[ticker]) for ticker in plan.tickers}


def _tagged(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One frame per symbol, in the plan's order, concatenated with each tagged by its symbol's index."""
    return pl.concat(
        [frame.with_columns(symbol_index=pl.lit(index, pl.Int32)) for index, frame in enumerate(frames)],
        how="vertical_relaxed",
    )


def _read_partials(build_dir: str, plan: BuildPlan, name: str) -> pl.DataFrame:
    """Every symbol's partial `name`, tagged with its index."""
    return _tagged([store.read_scratch(f"{partial_dir(build_dir, ticker)}/{name}") for ticker in plan.tickers])


def _symbol_rows(plan: BuildPlan) -> list[pl.DataFrame]:
    """Every symbol's ready rows, in the plan's order, read back off its feature-store file (the map wrote them with
    their states and labels): the reduce counts sessions and medians from their returns and picks reservoirs from
    them, so the map writes no copy of either."""
    return [
        _rows(store.scan_parquet([feature_store_path(ticker, plan)]).select(ROW_COLUMNS).collect(), ticker, plan)
        for ticker in plan.tickers
    ]


def _returns(plan: BuildPlan, symbol_rows: list[pl.DataFrame], part: tuple[int, int]) -> pl.DataFrame:
    """Every symbol's mature side-oriented returns of one (side index, horizon) part, on packed keys, tagged with its
    index."""
    classes = class_indexes(plan)
    return _tagged([_long(rows, classes[t], (part,)) for t, rows in zip(plan.tickers, symbol_rows, strict=True)])


ALWAYS_SERVED = tier_of().is_in([SYMBOL_BASELINE, REGIME_TABLE])


def _candidates(build_dir: str, plan: BuildPlan) -> tuple[pl.DataFrame, dict[int, int]]:
    """The keys that may reach the minimum sample (packed, with their symbol indexes: -1 for the tiers that pool
    symbols), and how many keys each tier built.

    A pooled key's partials sum their per-symbol distinct sessions: an upper bound of the key's distinct sessions
    (two symbols trading the same day count that day once). A key whose bound is below the minimum sample can never
    be served, so only the others (and every key of the always-served tiers) are counted from the returns (their
    count is what the manifest reports). The partials are read here and dropped on return."""
    partials = _read_partials(build_dir, plan, "bounds.arrow").lazy()
    # Lazy: the plans share one scan of the partials.
    bounds = partials.group_by("key").agg(pl.col("n_session_rows").sum())
    named = [
        partials.filter(tier_of() == grouped_as).with_columns(key=tier_key(tier))
        for tier, grouped_as in NAMED_TIERS.items()
    ]
    candidate = ALWAYS_SERVED | (pl.col("n_session_rows") >= plan.min_sessions)
    # Of every key only its tier's count is kept; a named tier's per-symbol bound is its key's own count.
    frames = [bounds, *named]
    results = pl.collect_all(
        [
            *[frame.group_by(tier=tier_of()).agg(pl.len()) for frame in frames],
            bounds.filter(candidate).select("key", symbol_index=pl.lit(-1, pl.Int32)),
            *[frame.filter(candidate).select("key", "symbol_index") for frame in named],
        ]
    )
    built: dict[int, int] = {}
    for counts in results[: len(frames)]:
        for tier, count in counts.iter_rows():
            built[tier] = built.get(tier, 0) + count
    return pl.concat(results[len(frames) :]), built


def _summed(
    candidates: pl.DataFrame, plan: BuildPlan, symbol_rows: list[pl.DataFrame], progress: Callable[[str], None]
) -> pl.DataFrame:
    """The served keys' statistics (sums, exact distinct sessions and symbols, medians) on INT_KEYS and their packed
    "key": the `candidates` that reach the minimum sample, counted from their returns one (side, horizon) part at a
    time (see PARTS)."""
    # Keys below the minimum sample can never be shown, so the artifact keeps only their count (in the manifest).
    shown = ALWAYS_SERVED | (pl.col("n_sessions") >= plan.min_sessions)
    parts = []
    for done, part in enumerate(PARTS, start=1):
        part_candidates = candidates.filter(_part_of(*part))
        stats = _candidate_stats(_returns(plan, symbol_rows, part), part_candidates)
        parts.append(
            part_candidates.join(stats, on=["key", "symbol_index"], how="left")
            .filter(shown)
            .select("key", "symbol_index", *STAT_COLUMNS, "median_r")
        )
        side, horizon = part
        progress(f"part {done}/{len(PARTS)} ({SIDES[side]}, {horizon} min): {parts[-1].height:,} keys served")
    served = pl.concat(parts)
    return _unpacked(served).with_columns(key=served.get_column("key"))


def _reservoir_candidates_of(
    rows: pl.DataFrame, wanted: pl.DataFrame, class_index: int, symbol_index: int, bars: pl.DataFrame | None = None
) -> pl.DataFrame:
    """One symbol's reservoir candidates for the served keys `wanted` (packed keys without a horizon, with their
    symbol indexes), from its feature-store rows: a key's reservoir is chosen in the reduce, over every symbol's rows
    at once, so the map keeps no candidates for the keys never served (nearly all of the mask-keyed ones). `bars`
    holds, for keys whose reservoir is already full with earlier symbols' rows, the pick of its last row: a row
    picked after it cannot enter, so it is not a candidate. Each candidate carries its packed key and symbol index
    (`bar_key`, `bar_symbol`: -1 for the tiers that pool symbols)."""
    candidates = _reservoir_candidates(rows, class_index)
    # The reservoir's order, sorted once (not once a tier) on the columns it needs, not on every label: the symbol is
    # this frame's own, so (pick, ts) orders as (pick, symbol, ts).
    order = candidates.select("row_key", "pick", "ts").with_row_index("row").sort("pick", "ts")
    parts = []
    for tier, keys in TIER_KEYS.items():
        if tier > EXACT_TIER:
            continue
        # Narrowed to the tier's served keys, then to each key's first RESERVOIR_SIZE in the reservoir's order:
        # a key's reservoir across symbols is among its symbols' own first ones.
        named = symbol_index if "symbol" in keys else -1
        keyed = wanted.filter((tier_of() == tier) & (pl.col("symbol_index") == named)).select("key")
        narrowed = order.with_columns(key=tier_key(tier, pl.col("row_key"))).join(
            keyed, on="key", how="semi", maintain_order="left"
        )
        if bars is not None:  # ties with the bar stay: the symbol and minute decide them
            mine = bars.filter(pl.col("bar_symbol") == named).select(key="bar_key", bar="bar")
            narrowed = narrowed.join(mine, on="key", how="left", maintain_order="left").filter(
                pl.col("bar").is_null() | (pl.col("pick") <= pl.col("bar"))
            )
        chosen = narrowed.group_by("key", maintain_order=True).head(RESERVOIR_SIZE)
        part = candidates[chosen.get_column("row")].drop("row_key")
        parts.append(
            _with_key(part, tier, RESERVOIR_KEY_SCHEMA).with_columns(
                bar_key=chosen.get_column("key"), bar_symbol=pl.lit(named, pl.Int32)
            )
        )
    return pl.concat(parts)


RESERVOIR_CUT_GROWTH = 1.0  # the candidates gathered since the last cut, as a multiple of the rows it kept, that cut


def _reservoir(plan: BuildPlan, symbol_rows: list[pl.DataFrame], wanted: pl.DataFrame) -> pl.DataFrame:
    """Each served key's reservoir: its first RESERVOIR_SIZE rows across its symbols in the reservoir's order (a total
    order: the pick, then the row's symbol and minute), ranked.

    The symbols' candidates are gathered in turn and cut to each key's first rows whenever those gathered since the
    last cut reach RESERVOIR_CUT_GROWTH times the rows it kept; a key's first rows of a union are its first rows of
    each part's first rows, so a cut changes no row. After a cut, a full reservoir's last pick bars the later
    symbols' rows picked after it, so most of their rows are never gathered, and what is held stays within about
    twice the served keys' reservoirs."""
    keys = [*RESERVOIR_KEY_SCHEMA]
    classes = class_indexes(plan)

    def first(frames: list[pl.DataFrame], by: list[str]) -> pl.DataFrame:
        ordered = pl.concat(frames).sort([*by, "pick", "row_symbol", "ts"])
        return ordered.group_by(keys, maintain_order=True).head(RESERVOIR_SIZE)

    kept: list[pl.DataFrame] = []
    gathered: list[pl.DataFrame] = []
    bars: pl.DataFrame | None = None
    for index, (ticker, rows) in enumerate(zip(plan.tickers, symbol_rows, strict=True)):
        gathered.append(_reservoir_candidates_of(rows, wanted, classes[ticker], index, bars))
        if sum(frame.height for frame in gathered) >= RESERVOIR_CUT_GROWTH * sum(frame.height for frame in kept):
            kept, gathered = [first([*kept, *gathered], by=[])], []  # a cut needs each key's order, not the keys'
            bars = (
                kept[0]
                .group_by("bar_key", "bar_symbol")
                .agg(bar=pl.col("pick").max(), full=pl.len() == RESERVOIR_SIZE)
                .filter(pl.col("full"))
            )
    return (
        first([*kept, *gathered], by=keys)
        .with_columns(rank=pl.int_range(pl.len()).over(keys).cast(pl.Int8))
        .drop("pick", "bar_key", "bar_symbol")
    )


def _keyed(frame: pl.DataFrame, plan: BuildPlan) -> pl.DataFrame:
    """The canonical key columns (asset class and symbol by name) first, from the integer keys."""
    classes = dict(enumerate(sorted(set(plan.asset_classes.values()))))
    symbols = {-1: SENTINEL["symbol"], **dict(enumerate(plan.tickers))}
    rest = [c for c in frame.columns if c not in INT_KEYS]
    return frame.with_columns(
        asset_class=pl.col("class_index").replace_strict(classes, return_dtype=pl.String),
        symbol=pl.col("symbol_index").replace_strict(symbols, return_dtype=pl.String),
        **{name: pl.col(name).cast(dtype) for name, dtype in KEY_SCHEMA.items() if name in INT_KEYS},
    ).select(*KEY_SCHEMA, *rest)


def _medians(returns: pl.LazyFrame, tier: int, *, by_symbol: bool) -> pl.LazyFrame:
    """The median return of each of a tier's keys (and symbol), for a tier not keyed by the mask. By symbol, the
    symbol index is grouped inside the key's cleared mask bits: one int64 column groups several times faster than
    two (the symbol baseline's medians 0.27 against 0.05 CPU-s a part at 41 symbols x 500 sessions)."""
    median = pl.col("r").median().alias("median_r")
    if not by_symbol:
        return returns.group_by(key=tier_key(tier)).agg(median)
    mask, at = _bits("mask"), 1 << KEY_FIELDS["mask"][0]
    grouped = returns.group_by(key=tier_key(tier) | (pl.col("symbol_index").cast(pl.Int64) * at)).agg(median)
    return grouped.select(key=pl.col("key") & ~mask, symbol_index=((pl.col("key") & mask) // at).cast(pl.Int32),
                          median_r="median_r")  # fmt: skip


def _candidate_stats(all_returns: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
    """Each candidate key's statistics over its returns across all its symbols, on packed keys and symbol indexes
    (-1 for the tiers that pool symbols); the tiers not keyed by the mask come with every key of theirs."""
    returns = all_returns.lazy()
    fine = returns.group_by(pl.col("key") & UNMASKED, "symbol_index", "session").agg(_sums()).collect().lazy()
    parts = []
    for tier, keys in TIER_KEYS.items():
        group = ["key", "symbol_index"] if "symbol" in keys else ["key"]
        # A tier keyed by the strategy mask has a key for nearly every signal set seen, few of them candidates:
        # its returns are narrowed to the candidates first. The others have few keys (regime, band, symbol), and
        # the semi-join cost more than aggregating them whole (0.3-0.45 s against 0.15-0.3 s a tier at 11 x 240
        # sessions); the caller's join on the candidates drops their other keys.
        if "mask" in keys:
            wanted = candidates.lazy().filter(tier_of() == tier).select(group)
            narrowed = returns.with_columns(key=tier_key(tier)).join(wanted, on=group, how="semi")
            grouped = narrowed.group_by(group).agg(*COUNTED, *_sums(), pl.col("r").median().alias("median_r"))
        else:
            # These four tiers share one pass of the sums over every return, by session and symbol (7.0 M rows to
            # 0.13 M at 21 x 180 sessions), and each sums those and counts their sessions and symbols; only the
            # median reads every return again. Each tier summed every return itself: 0.6-0.9 s of CPU apiece.
            medians = _medians(returns, tier, by_symbol="symbol" in keys)
            grouped = (
                fine.with_columns(key=tier_key(tier))
                .group_by(group)
                .agg(*COUNTED, *[pl.col(c).sum() for c in SUMMED])
                .join(medians, on=group, how="left")
            )
        if "symbol" not in keys:
            grouped = grouped.with_columns(symbol_index=pl.lit(-1, pl.Int32))
        parts.append(grouped.select("key", "symbol_index", *STAT_COLUMNS, "median_r"))
    return pl.concat(parts).collect()  # one plan: the engine shares the scan and runs the tiers in parallel


def _coverage_block(coverage: pl.DataFrame, period: int) -> dict[str, Any]:
    rows = coverage.filter(pl.col("period") == period)
    if rows.is_empty():
        return {"status": "empty", "symbols": 0, "ready_rows": 0}
    first, last = rows.get_column("first_session").min(), rows.get_column("last_session").max()
    ready = int(rows.get_column("ready_rows").sum())
    block: dict[str, Any] = {
        "status": "available",
        "symbols": len(rows),
        "ready_rows": ready,
        "first_session": first.isoformat(),  # type: ignore[union-attr]
        "last_session": last.isoformat(),  # type: ignore[union-attr]
        "sessions": len(calendar.sessions_between(first, last)),  # type: ignore[arg-type]
        "label_rows": {str(h): int(rows.get_column(f"label_rows_{h}").sum()) for h in HORIZONS},
        "label_coverage_bps": {
            str(h): int(rows.get_column(f"label_rows_{h}").sum()) * 10_000 // ready for h in HORIZONS
        },
    }
    return block


def _write_serving_file(path: Path, stats: pl.DataFrame, reservoir: pl.DataFrame, regimes: pl.DataFrame,
                        execution: pl.DataFrame) -> None:  # fmt: skip
    """A read-only SQLite file with WITHOUT ROWID primary keys; rows are inserted in key order for identical bytes."""
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA journal_mode=OFF")
        tables = {
            "stats": (stats, KEY_COLUMNS),
            "reservoir": (reservoir, (*RESERVOIR_KEY_SCHEMA, "rank")),
            "regime_sessions": (regimes, ("session",)),
            "execution": (execution, ("symbol", "bucket")),
        }
        for name, (frame, key) in tables.items():
            columns = ", ".join(f'"{c}"' for c in frame.columns)
            db.execute(f"CREATE TABLE {name} ({columns}, PRIMARY KEY ({', '.join(key)})) WITHOUT ROWID")
            values = ", ".join("?" * len(frame.columns))
            ordered = frame.sort(list(key))
            rows = zip(*[ordered.get_column(c).to_list() for c in ordered.columns], strict=True)
            db.executemany(f"INSERT INTO {name} VALUES ({values})", rows)  # noqa: S608
        db.commit()
    finally:
        db.close()


def reduce_partials(
    plan: BuildPlan, build_dir: str, progress: Callable[[str], None] | None = None
) -> tuple[str, str, dict[str, Any]]:
    """Sum the partials, prune keys below the minimum sample from the serving file, write and hash the artifact;
    returns the artifact directory (relative to the data directory), its SHA-256 and its manifest. `progress` is
    told each step done, in a few words."""
    progress = progress or (lambda _step: None)
    tickers = plan.tickers
    for ticker in tickers:
        marker = f"{partial_dir(build_dir, ticker)}/done.json"
        expected = {"ticker": ticker, "inputs": plan.inputs[ticker], "plan": plan_sha256(plan)}
        if not store.exists(marker) or json.loads(store.read_bytes(marker)) != expected:
            raise BuildError(f"partial for {ticker} is missing or was built from other inputs")
        if not store.exists(feature_store_path(ticker, plan)):  # the reservoirs are picked from it
            raise BuildError(f"feature store file for {ticker} is missing")
    candidates, built = _candidates(build_dir, plan)
    always = candidates.filter(ALWAYS_SERVED).height
    progress(
        f"candidates: {candidates.height - always:,} of {sum(built.values()):,} keys may reach the minimum sample,"
        f" {always:,} more in the always-served tables"
    )
    symbol_rows = _symbol_rows(plan)
    served = _summed(candidates, plan, symbol_rows, progress)
    # A reservoir is kept per key without its horizon: the served keys' packed keys with the horizon cleared.
    wanted = served.select(key=pl.col("key") & ~_bits("horizon"), symbol_index=pl.col("symbol_index")).unique()
    served = _keyed(served.drop("key"), plan).sort(KEY_COLUMNS)
    shown_counts = dict(served.group_by("tier").agg(pl.len()).iter_rows())
    key_counts = {
        str(tier): {"keys_built": int(built.get(tier, 0)), "keys_served": int(shown_counts.get(tier, 0))}
        for tier in TIER_KEYS
    }
    stats = served
    reservoir = _reservoir(plan, symbol_rows, wanted)
    progress(f"reservoirs: {reservoir.height:,} rows")
    reservoir = reservoir.with_columns(
        pl.col("ts").dt.to_string("%Y-%m-%dT%H:%M:%SZ"), pl.col("session").cast(pl.String)
    )
    read = lambda name: pl.concat(  # noqa: E731
        [store.read_scratch(f"{partial_dir(build_dir, t)}/{name}") for t in tickers], how="vertical_relaxed"
    )
    coverage = read("coverage.arrow").sort("period", "symbol")
    execution = read("execution.arrow").sort("symbol", "bucket")
    through = date.fromisoformat(plan.through)
    regimes = (
        _benchmark_regimes(plan.benchmark, tuple(plan.inputs[plan.benchmark]), plan.through)
        .filter(pl.col("trend").is_not_null() & pl.col("volatility").is_not_null())
        .with_columns(pl.col("session").cast(pl.String))
    )

    staging = store.staging_dir(f"{build_dir}/artifact")
    files: dict[str, pl.DataFrame] = {
        **{f"tier{tier}.parquet": stats.filter(pl.col("tier") == tier) for tier in (5, 4, 3, 2, 1)},
        "symbol_baseline.parquet": stats.filter(pl.col("tier") == SYMBOL_BASELINE),
        "regimes.parquet": stats.filter(pl.col("tier") == REGIME_TABLE),
        "regime_sessions.parquet": regimes,
        "reservoir.parquet": reservoir,
        "coverage.parquet": coverage,
        "execution.parquet": execution,
    }
    listing: dict[str, dict[str, Any]] = {}
    for name, frame in files.items():
        data = store.parquet_bytes(frame)
        store.write_file(staging / name, data)
        listing[name] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
            "rows": len(frame),
        }
    _write_serving_file(staging / "serve.sqlite3", served, reservoir, regimes, execution)
    listing["serve.sqlite3"] = {
        "sha256": store.file_sha256(staging / "serve.sqlite3"),
        "bytes": (staging / "serve.sqlite3").stat().st_size,
        "rows": len(served),
    }
    identity = {"plan": plan.as_dict(), "features": features.FEATURE_VERSION,
                "registry": strategies.registry_lineage()["registry_sha256"], "schema": SCHEMA_VERSION,
                "code": code_sha256()}  # fmt: skip
    identity_sha = hashlib.sha256(canonical_json(identity)).hexdigest()
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "version": f"mm-{through:%Y%m%d}-{identity_sha[:12]}",
        "data_as_of": plan.through,
        "source": plan.source,
        "corpus": {
            "benchmark": plan.benchmark,
            "historical_through": plan.historical_through,
            "tickers": plan.tickers,
            "overlay_tickers": plan.overlay_tickers,
        },
        "inputs": {"bars_1m": plan.inputs, "plan_sha256": plan_sha256(plan)},
        "plan": plan.as_dict(),
        "code_sha256": identity["code"],
        "features": features.describe(),
        "registry": strategies.registry_lineage(),
        "regime": REGIME_DEFINITION,
        "calendar": calendar.calendar_lineage(),
        "tiers": {str(tier): name for tier, name in TIER_NAMES.items()},
        "min_sessions": plan.min_sessions,
        "keys": key_counts,
        "label_unit": "1e-8 of price (int64)",
        "excursion_levels_bps": list(EXCURSION_LEVELS_BPS),
        "reservoir_size": RESERVOIR_SIZE,
        "coverage": {PERIODS[p]: _coverage_block(coverage, p) for p in PERIODS},
        "execution": {"volume": "available", "spread": "absent: the bar data carries no quotes"},
        "files": listing,
    }
    body = canonical_json(manifest)
    (staging / "manifest.json").write_bytes(body)
    sha = hashlib.sha256(body).hexdigest()
    final = f"market_memory/{sha}"
    store.publish_dir(staging, final, marker="manifest.json")
    return final, sha, manifest
