"""Writes of market data: bar imports (validated, then written atomically) and the synthetic demo universe."""

import hashlib
import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import numpy as np
import polars as pl
from django.db import transaction

from evidence.marketdata import calendar, demo, store
from evidence.marketdata.selectors import bars_read
from evidence.marketdata.store import BAR_COLUMNS, BAR_SCHEMA
from evidence.models import BarPartition, Corpus, Symbol
from evidence.vocabulary import (
    ASSET_CLASSES,
    FREQUENCIES,
    FREQUENCY_MINUTES,
    SOURCES,
    TICKER_RE,
    WARMUP_SESSIONS,
    XNYS_ASSET_CLASSES,
    normalize_ticker,
)
from leroy.clock import now

MAX_LISTED = 20  # examples listed per problem in a rejection or gap report
# A bar may be stamped this far past our clock (a vendor's or another node's clock running ahead), no further.
CLOCK_SKEW = timedelta(minutes=5)
# Common split ratios, each with the factor an unadjusted split divides the price by (the previous close over the
# open): a 2:1 split halves it, a 1:10 reverse split multiplies it by ten.
FORWARD_SPLITS = ((3, 2), (2, 1), (3, 1), (4, 1), (5, 1), (7, 1), (8, 1), (10, 1), (15, 1), (20, 1), (50, 1))
REVERSE_SPLITS = (2, 3, 4, 5, 8, 10, 15, 20, 25, 30, 40, 50, 100)
SPLIT_RATIOS = {
    **{f"{new}:{old} split": new / old for new, old in FORWARD_SPLITS},
    **{f"1:{old} reverse split": 1 / old for old in REVERSE_SPLITS},
}
# How far, relative, an open may sit from where a split would put it (the previous close over the ratio) and still be
# named a possible split. Splits are announced weeks ahead, so the move left once the ratio is taken out is an
# ordinary overnight gap: 2-3% either way at most on a normal day, most of them within 1%. 1.5% keeps most of those
# and leaves out large real moves near a ratio: a -32% open is 2.0% from a 3:2 split's and is not named. The price
# paid: a split session that also gaps more than 1.5% goes unnamed. A real move inside the band (-33%, say) cannot
# be told from a split by its prices, hence "possible" in the warning.
SPLIT_TOLERANCE = 0.015
MAX_WARNINGS = MAX_LISTED  # warnings listed in a report; `warnings_total` counts them all


class ImportRejected(Exception):
    """The bars were not written. `details` is a JSON-able dict saying exactly what was wrong."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


@dataclass(frozen=True)
class GapReport:
    """Regular-session slots with no bar (XNYS-aligned data only; `checked` is False otherwise). After an import it
    describes the stored bars from first_session through last_session: the import's sessions and the stored ones
    next to them, so gaps it closed are gone and gaps between it and stored bars are listed."""

    checked: bool
    first_session: str = ""
    last_session: str = ""
    sessions_expected: int = 0
    sessions_missing: list[str] = field(default_factory=list)
    sessions_with_gaps: list[dict[str, Any]] = field(default_factory=list)  # {"session", "missing_bars"}
    missing_bars: int = 0


@dataclass(frozen=True)
class ImportReport:
    ticker: str
    frequency: str
    rows_written: int
    first_ts: datetime
    last_ts: datetime
    partitions: list[str]
    symbol_created: bool
    gaps: GapReport
    warnings: list[str]  # about bars stored all the same (a possible unadjusted split), for the user to check
    warnings_total: int  # how many there were: `warnings` lists the first MAX_WARNINGS of them

    def findings(self) -> dict[str, Any]:
        """What the import found in the stored bars around it (gaps, possible splits), for every caller to report."""
        return {"gaps": asdict(self.gaps), "warnings": list(self.warnings), "warnings_total": self.warnings_total}

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["first_ts"] = self.first_ts.isoformat()
        out["last_ts"] = self.last_ts.isoformat()
        return out


def _reject(message: str, **details: Any) -> ImportRejected:
    return ImportRejected(message, details)


def _examples(frame: pl.DataFrame) -> list[str]:
    return [ts.isoformat() for ts in frame.get_column("ts").head(MAX_LISTED).to_list()]


def _normalized(frame: pl.DataFrame) -> pl.DataFrame:
    missing = [name for name in BAR_COLUMNS if name not in frame.columns]
    if missing:
        raise _reject(f"missing columns: {', '.join(missing)}", missing_columns=missing, columns=frame.columns)
    ts_type = frame.schema["ts"]
    # A strict cast still reads true as 1.0: a column of booleans would import as prices of 1 and 0.
    booleans = [name for name in BAR_COLUMNS[1:] if frame.schema[name] == pl.Boolean]
    if booleans:
        raise _reject("price and volume columns must be numeric, not true/false", boolean_columns=booleans)
    if not isinstance(ts_type, pl.Datetime) or ts_type.time_zone is None:
        raise _reject("column ts must hold time-zone-aware datetimes", ts_dtype=str(ts_type))
    try:
        out = frame.select(
            pl.col("ts").dt.convert_time_zone("UTC").dt.cast_time_unit("us"),
            *[pl.col(name).cast(pl.Float64, strict=True) for name in BAR_COLUMNS[1:]],
        )
    except pl.exceptions.PolarsError as exc:
        raise _reject("price and volume columns must be numeric", error=str(exc)) from exc
    nulls = {name: count for name, count in zip(out.columns, out.null_count().row(0), strict=True) if count}
    if nulls:
        raise _reject("bars contain empty values", null_counts=nulls)
    if out.is_empty():
        raise _reject("no bars to import")
    return out


def _check_order(bars: pl.DataFrame) -> None:
    ts = bars.get_column("ts")
    duplicated = bars.filter(ts.is_duplicated()).unique("ts", maintain_order=True)
    if len(duplicated):
        raise _reject(
            f"{len(duplicated)} duplicate timestamps", duplicate_count=len(duplicated), examples=_examples(duplicated)
        )
    backwards = bars.filter(ts.diff() < pl.duration(microseconds=0))
    if len(backwards):
        raise _reject(
            f"timestamps are not increasing at {len(backwards)} rows",
            non_monotonic_count=len(backwards),
            examples=_examples(backwards),
        )


def _check_prices(bars: pl.DataFrame) -> None:
    problems = {
        "non_finite_or_non_positive_price": ~pl.all_horizontal(
            [(pl.col(c).is_finite() & (pl.col(c) > 0)) for c in ("open", "high", "low", "close")]
        ),
        "high_below_open_or_close": pl.col("high") < pl.max_horizontal("open", "close"),
        "low_above_open_or_close": pl.col("low") > pl.min_horizontal("open", "close"),
        "negative_or_non_finite_volume": ~(pl.col("volume").is_finite() & (pl.col("volume") >= 0)),
    }
    found = {}
    for name, condition in problems.items():
        bad = bars.filter(condition)
        if len(bad):
            found[name] = {"count": len(bad), "examples": _examples(bad)}
    if found:
        summary = ", ".join(f"{name} ({info['count']} rows)" for name, info in found.items())
        raise _reject(f"inconsistent OHLCV bars: {summary}", **found)


def _check_dates(bars: pl.DataFrame, *, asset_class: str) -> None:
    """Refuse bars dated before the store's first day or in the future, whatever the calendar. XNYS bars must also
    lie within the calendar's last day: its schedule cannot place them (and pandas cannot slice it past 2262)."""
    first_day, last_day = calendar.covered_days()
    latest = now() + CLOCK_SKEW
    bound = f"now plus {CLOCK_SKEW.total_seconds() / 60:g} minutes of clock skew"
    calendar_end = datetime.combine(last_day + timedelta(days=1), time(), tzinfo=UTC) - timedelta(microseconds=1)
    if asset_class in XNYS_ASSET_CLASSES and calendar_end < latest:
        latest, bound = calendar_end, "the XNYS calendar's last day"
    ts = pl.col("ts")
    outside = bars.filter((ts < datetime.combine(first_day, time(), tzinfo=UTC)) | (ts > latest))
    if len(outside):
        raise _reject(
            f"{len(outside)} bars lie outside the dates the store accepts, {first_day} (its earliest day, the first "
            f"of the XNYS calendar) to {latest.isoformat()} ({bound})",
            earliest=first_day.isoformat(),
            latest=latest.isoformat(),
            outside_count=len(outside),
            examples=_examples(outside),
        )


def _check_alignment(bars: pl.DataFrame, *, frequency: str, asset_class: str) -> GapReport:
    """Reject bars off the expected grid; report (but accept) missing XNYS slots."""
    step = FREQUENCY_MINUTES[frequency]
    ts = pl.col("ts")
    if frequency == "1d":
        off_midnight = bars.filter(ts != ts.dt.truncate("1d"))
        if len(off_midnight):
            raise _reject(
                "daily bars must be stamped at 00:00 UTC of their session date",
                misaligned_count=len(off_midnight),
                examples=_examples(off_midnight),
            )
    else:
        off_minute = bars.filter(ts != ts.dt.truncate("1m"))
        if len(off_minute):
            raise _reject(
                "intraday bars must start on a whole minute",
                misaligned_count=len(off_minute),
                examples=_examples(off_minute),
            )
    if asset_class not in XNYS_ASSET_CLASSES:
        if frequency != "1d" and step <= 60:
            off_grid = bars.filter((ts.dt.epoch("s") // 60) % step != 0)
            if len(off_grid):
                raise _reject(
                    f"{frequency} bars must start on multiples of {step} minutes (UTC)",
                    misaligned_count=len(off_grid),
                    examples=_examples(off_grid),
                )
        return GapReport(checked=False)

    first_day = bars.get_column("ts").min().date()  # type: ignore[union-attr]
    last_day = bars.get_column("ts").max().date()  # type: ignore[union-attr]
    sched = calendar.schedule(first_day, last_day)
    if sched.is_empty():
        raise _reject("no XNYS session in the range of the bars", first=str(first_day), last=str(last_day))
    if frequency == "1d":
        placed = bars.with_columns(session=ts.dt.date()).join(sched, on="session", how="left")
        outside = placed.filter(pl.col("session_open").is_null())
        if len(outside):
            raise _reject(
                f"{len(outside)} daily bars fall on days that are not XNYS sessions",
                misaligned_count=len(outside),
                examples=_examples(outside),
            )
        present = set(placed.get_column("session").to_list())
        expected = sched.get_column("session").to_list()
        missing = [day.isoformat() for day in expected if day not in present]
        return GapReport(
            checked=True,
            first_session=first_day.isoformat(),
            last_session=last_day.isoformat(),
            sessions_expected=len(expected),
            sessions_missing=missing[:MAX_LISTED],
            missing_bars=len(missing),
        )

    placed = bars.join_asof(sched.sort("session_open"), left_on="ts", right_on="session_open", strategy="backward")
    outside = placed.filter(pl.col("session_open").is_null() | (pl.col("ts") >= pl.col("session_close")))
    if len(outside):
        raise _reject(
            f"{len(outside)} bars fall outside XNYS regular sessions",
            misaligned_count=len(outside),
            examples=_examples(outside),
        )
    offset = (pl.col("ts") - pl.col("session_open")).dt.total_minutes()
    if step <= 30:
        off_grid = placed.filter(offset % step != 0)
        if len(off_grid):
            raise _reject(
                f"{frequency} bars must start on multiples of {step} minutes from the session open",
                misaligned_count=len(off_grid),
                examples=_examples(off_grid),
            )
    slots = sched.with_columns(
        expected=((pl.col("session_close") - pl.col("session_open")).dt.total_minutes() + step - 1) // step
    )
    counts = placed.group_by("session").agg(present=pl.len())
    per_session = (
        slots.join(counts, on="session", how="left").with_columns(pl.col("present").fill_null(0)).sort("session")
    )
    crowded = per_session.filter(pl.col("present") > pl.col("expected"))
    if len(crowded):  # above 30 minutes vendors stamp bars differently, but none fits more bars than slots
        raise _reject(
            f"{len(crowded)} sessions hold more bars than {frequency} bars can fill",
            crowded_count=len(crowded),
            examples=[
                f"{row['session'].isoformat()}: {row['present']} bars, at most {row['expected']}"
                for row in crowded.head(MAX_LISTED).iter_rows(named=True)
            ],
        )
    short = per_session.filter((pl.col("present") > 0) & (pl.col("present") < pl.col("expected")))
    absent = per_session.filter(pl.col("present") == 0)
    return GapReport(
        checked=True,
        first_session=first_day.isoformat(),
        last_session=last_day.isoformat(),
        sessions_expected=len(per_session),
        sessions_missing=[day.isoformat() for day in absent.get_column("session").head(MAX_LISTED).to_list()],
        sessions_with_gaps=[
            {"session": row["session"].isoformat(), "missing_bars": int(row["expected"] - row["present"])}
            for row in short.head(MAX_LISTED).iter_rows(named=True)
        ],
        missing_bars=int((per_session.get_column("expected") - per_session.get_column("present")).sum()),
    )


def _split_warnings(bars: pl.DataFrame, *, ticker: str) -> tuple[list[str], int]:
    """Sessions whose open sits within SPLIT_TOLERANCE of where a common split of the previous session's close would
    put it: the first MAX_WARNINGS of them, and how many there were. An unadjusted split looks like this, and so may a
    real move: the bars are stored and the user is asked to check the adjustment."""
    ratio = pl.lit(None, dtype=pl.String)
    for name, factor in SPLIT_RATIOS.items():  # at most one matches: the ratios lie further apart than the tolerance
        adjusted_move = pl.col("open") * factor / pl.col("previous_close") - 1
        ratio = pl.when(adjusted_move.abs() <= SPLIT_TOLERANCE).then(pl.lit(name)).otherwise(ratio)
    sessions = (
        bars.group_by(session=pl.col("ts").dt.date(), maintain_order=True)  # a UTC day holds a whole XNYS session
        .agg(pl.col("open").first(), pl.col("close").last())
        .with_columns(previous_close=pl.col("close").shift(), previous_session=pl.col("session").shift())
        .with_columns(ratio=ratio)
        .filter(pl.col("ratio").is_not_null())
    )
    listed = [
        f"{ticker} {row['session']}: opened at {row['open']:g}, {row['open'] / row['previous_close'] - 1:+.1%} from "
        f"the close of {row['previous_close']:g} on {row['previous_session']}, within {SPLIT_TOLERANCE:.1%} of a "
        f"{row['ratio']}'s open: possibly an unadjusted split, possibly a real move; check that the bars are "
        "split-adjusted"
        for row in sessions.head(MAX_WARNINGS).iter_rows(named=True)
    ]
    return listed, len(sessions)


def _stored_around(symbol: Symbol, frequency: str, first: datetime, last: datetime) -> pl.DataFrame:
    """The stored bars of the whole days (UTC; an XNYS session lies within one) from the last stored bar before
    `first` through the first stored bar after `last`, each side `first`/`last` itself when there is none."""
    partitions = BarPartition.objects.filter(symbol=symbol, frequency=frequency)
    ts = pl.col("ts")
    # Partitions are calendar years: the nearest earlier bar lies in the latest partition starting before `first`.
    earlier = partitions.filter(first_ts__lt=first).order_by("-year").first()
    later = partitions.filter(last_ts__gt=last).order_by("year").first()
    lo = store.scan_parquet([earlier.path]).filter(ts < first).select(ts.max()).collect().item() if earlier else first
    hi = store.scan_parquet([later.path]).filter(ts > last).select(ts.min()).collect().item() if later else last
    start = datetime.combine(lo.date(), time(), tzinfo=UTC)
    end = datetime.combine(hi.date() + timedelta(days=1), time(), tzinfo=UTC) - timedelta(microseconds=1)
    return bars_read(symbol=symbol, frequency=frequency, start=start, end=end)


def _partition_path(ticker: str, frequency: str, year: int, sha: str) -> str:
    # Content-addressed names: a rewrite never overwrites a file a reader may have open.
    return f"bars/{frequency}/{ticker}/{year}-{sha[:16]}.parquet"


def bars_import(
    *,
    ticker: str,
    frequency: str,
    frame: pl.DataFrame,
    name: str = "",
    asset_class: str = "equity",
    exchange: str = "",
    currency: str = "USD",
    source: str = "vendor",
) -> ImportReport:
    """Validate bars and add them to the store, or raise ImportRejected having written nothing.

    New bars may extend a symbol's history but never overwrite stored ones: overlapping timestamps are rejected.
    """
    ticker = normalize_ticker(ticker)
    if not TICKER_RE.match(ticker):
        raise _reject(f"invalid ticker {ticker!r}", ticker=ticker)
    if frequency not in FREQUENCIES:
        raise _reject(f"unsupported frequency {frequency!r}", supported=list(FREQUENCIES))
    if asset_class not in ASSET_CLASSES:
        raise _reject(f"unsupported asset class {asset_class!r}", supported=list(ASSET_CLASSES))
    if source not in SOURCES:
        raise _reject(f"unknown source {source!r}", supported=list(SOURCES))
    bars = _normalized(frame)
    _check_order(bars)
    _check_prices(bars)
    _check_dates(bars, asset_class=asset_class)
    existing_symbol = Symbol.objects.filter(ticker=ticker).first()
    if existing_symbol is not None and existing_symbol.asset_class != asset_class:
        raise _reject(
            f"{ticker} is stored as {existing_symbol.asset_class}, not {asset_class}",
            stored_asset_class=existing_symbol.asset_class,
        )
    _check_alignment(bars, frequency=frequency, asset_class=asset_class)

    first_ts: datetime = bars.get_column("ts").min()  # type: ignore[assignment]
    last_ts: datetime = bars.get_column("ts").max()  # type: ignore[assignment]
    bars = bars.with_columns(year=pl.col("ts").dt.year())
    written: list[str] = []
    replaced: list[str] = []
    try:
        with transaction.atomic():
            symbol, created = Symbol.objects.select_for_update().get_or_create(
                ticker=ticker,
                defaults={"name": name, "asset_class": asset_class, "exchange": exchange, "currency": currency},
            )
            stored = {p.year: p for p in BarPartition.objects.filter(symbol=symbol, frequency=frequency)}
            partitions: list[str] = []
            for (year,), chunk in sorted(bars.partition_by("year", as_dict=True).items()):
                chunk = chunk.drop("year")
                old = stored.get(int(year))
                if old is not None:
                    before = store.scan_parquet([old.path]).collect()
                    overlap = chunk.join(before.select("ts"), on="ts", how="semi")
                    if len(overlap):
                        raise _reject(
                            f"{len(overlap)} bars overlap bars already stored for {ticker} {frequency}",
                            overlap_count=len(overlap),
                            examples=_examples(overlap),
                        )
                    chunk = pl.concat([before, chunk]).sort("ts")
                chunk = chunk.select(BAR_COLUMNS).cast(BAR_SCHEMA)  # type: ignore[arg-type]
                data = store.parquet_bytes(chunk)
                sha = hashlib.sha256(data).hexdigest()
                relative = _partition_path(ticker, frequency, int(year), sha)
                store.write_bytes(relative, data)
                written.append(relative)
                values = {
                    "first_ts": chunk.get_column("ts").min(),
                    "last_ts": chunk.get_column("ts").max(),
                    "row_count": len(chunk),
                    "sha256": sha,
                    "path": relative,
                    "source": source,
                    "created_at": now(),
                }
                if old is None:
                    BarPartition.objects.create(symbol=symbol, frequency=frequency, year=int(year), **values)
                else:
                    if old.path != relative:
                        replaced.append(old.path)
                    BarPartition.objects.filter(pk=old.pk).update(**values)
                partitions.append(relative)
            changed = False
            if frequency not in symbol.frequencies:
                symbol.frequencies = sorted([*symbol.frequencies, frequency], key=FREQUENCIES.index)
                changed = True
            for attr, value in (("name", name), ("exchange", exchange)):
                if value and getattr(symbol, attr) != value:
                    setattr(symbol, attr, value)
                    changed = True
            if changed:
                symbol.save()
            # Checked again over what is now stored around the new bars: the report describes the store, not the file.
            around = _stored_around(symbol, frequency, first_ts, last_ts)
            gaps = _check_alignment(around, frequency=frequency, asset_class=asset_class)
            warnings, warnings_total = _split_warnings(around, ticker=ticker)
            transaction.on_commit(lambda: store.remove(replaced))
    except BaseException:
        stored_paths = BarPartition.objects.filter(symbol__ticker=ticker, frequency=frequency).values_list("path")
        keep = {path for (path,) in stored_paths}
        store.remove([relative for relative in written if relative not in keep])
        raise
    return ImportReport(
        ticker=ticker,
        frequency=frequency,
        rows_written=len(bars),
        first_ts=first_ts,
        last_ts=last_ts,
        partitions=partitions,
        symbol_created=created,
        gaps=gaps,
        warnings=warnings,
        warnings_total=warnings_total,
    )


def _generated_checked(bars: pl.DataFrame) -> None:
    """bars_import's order and price checks over generated bars, as one vectorised pass (the detailed checks only
    run to name the rows when that pass finds any). The generator builds BAR_SCHEMA frames from numpy arrays (no
    nulls), and alignment needs no check: every timestamp is a minute or session of the XNYS schedule it read."""
    if bars.schema != pl.Schema(BAR_SCHEMA) or bars.is_empty():
        raise _reject("generated bars do not have the bar schema", schema=str(bars.schema))
    ts = pl.col("ts")
    prices = [(pl.col(c).is_finite() & (pl.col(c) > 0)) for c in ("open", "high", "low", "close")]
    sound = bars.select(
        (ts.diff().fill_null(pl.duration(microseconds=1)) > pl.duration(microseconds=0)).all().alias("order"),
        pl.all_horizontal(prices).all().alias("prices"),
        (pl.col("high") >= pl.max_horizontal("open", "close")).all().alias("high"),
        (pl.col("low") <= pl.min_horizontal("open", "close")).all().alias("low"),
        (pl.col("volume").is_finite() & (pl.col("volume") >= 0)).all().alias("volume"),
    ).row(0)
    if not all(sound):
        _check_order(bars)
        _check_prices(bars)


def _year_slices(bars: pl.DataFrame) -> list[tuple[int, pl.DataFrame]]:
    """Sorted bars cut into calendar years (UTC) as zero-copy slices."""
    ts = bars.get_column("ts")
    first, last = ts[0].year, ts[-1].year
    new_years = [int(datetime(y, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000 for y in range(first + 1, last + 1)]
    edges = [0, *np.searchsorted(ts.dt.epoch("us").to_numpy(), new_years).tolist(), len(bars)]
    return [(first + i, bars.slice(lo, hi - lo)) for i, (lo, hi) in enumerate(itertools.pairwise(edges)) if hi > lo]


def _synthetic_store(
    members: list[demo.DemoSymbol], frames: dict[str, dict[str, pl.DataFrame]], symbols: dict[str, Symbol]
) -> None:
    """Store generated bars: the same partition files bars_import writes for these frames (same bytes, paths and
    rows; tests/evidence/test_demo_pipeline.py compares the two), without its per-symbol queries and transactions.
    `symbols` holds the Symbol rows already stored; the ones created here are added to it."""
    written: list[str] = []
    partitions: list[dict[str, Any]] = []
    try:
        for frequency, by_ticker in frames.items():
            for ticker, frame in by_ticker.items():
                _generated_checked(frame)
                for year, chunk in _year_slices(frame):
                    data = store.parquet_bytes(chunk)
                    sha = hashlib.sha256(data).hexdigest()
                    relative = _partition_path(ticker, frequency, int(year), sha)
                    store.write_bytes(relative, data)
                    written.append(relative)
                    partitions.append(
                        {
                            "ticker": ticker,
                            "frequency": frequency,
                            "year": int(year),
                            "path": relative,
                            "sha256": sha,
                            "first_ts": chunk.get_column("ts").min(),
                            "last_ts": chunk.get_column("ts").max(),
                            "row_count": len(chunk),
                        }
                    )
        stored = sorted(frames, key=FREQUENCIES.index)
        with transaction.atomic():
            new = [
                Symbol(ticker=m.ticker, name=m.name, asset_class=m.asset_class, exchange="SYNTH", frequencies=stored)
                for m in members
                if m.ticker not in symbols
            ]
            for symbol in Symbol.objects.bulk_create(new):
                symbols[symbol.ticker] = symbol
            old = [symbols[m.ticker] for m in members if m.ticker not in {s.ticker for s in new}]
            for member, symbol in ((m, symbols[m.ticker]) for m in members):
                symbol.name, symbol.exchange, symbol.frequencies = member.name, "SYNTH", stored
            Symbol.objects.bulk_update(old, ["name", "exchange", "frequencies"])
            created_at = now()
            BarPartition.objects.bulk_create(
                [
                    BarPartition(symbol=symbols[p.pop("ticker")], source="synthetic", created_at=created_at, **p)
                    for p in partitions
                ]
            )
    except BaseException:
        keep = set(BarPartition.objects.filter(path__in=written).values_list("path", flat=True))
        store.remove([relative for relative in written if relative not in keep])
        raise


def _prefetched[T](items: Iterator[T]) -> Iterator[T]:
    """Produce the next item on a thread while the caller consumes this one: numpy's draws and polars' Parquet
    writes release the GIL, so generating batch k + 1 overlaps writing batch k."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(next, items, None)
        while (item := pending.result()) is not None:
            pending = pool.submit(next, items, None)
            yield item


@dataclass(frozen=True)
class DemoReport:
    tickers: list[str]
    sessions: int
    first_session: date
    last_session: date
    historical_through: date
    minute_rows: int
    replay_minute: datetime  # an open minute of the last (forward-overlay) session


def demo_data_load(
    *,
    symbols: int,
    sessions: int,
    seed: int,
    start: date,
    overlay_sessions: int,
    daily_history_from: date | None = None,
) -> DemoReport:
    """Replace the synthetic demo universe and its corpus row. Refuses to touch tickers holding vendor bars.

    `daily_history_from` adds synthetic daily bars from that date up to the minute history (for the end-of-day
    layer's long windows); Market Memory reads minutes only, so it is unaffected."""
    if sessions < WARMUP_SESSIONS + overlay_sessions + 1:
        raise ImportRejected(
            f"--sessions must exceed the {WARMUP_SESSIONS}-session warm-up plus the overlay sessions",
            {"sessions": sessions, "warmup": WARMUP_SESSIONS, "overlay_sessions": overlay_sessions},
        )
    members = demo.universe(symbols)
    tickers = [member.ticker for member in members]
    vendor = sorted(
        set(
            BarPartition.objects.filter(symbol__ticker__in=tickers, source="vendor").values_list(
                "symbol__ticker", flat=True
            )
        )
    )
    if vendor:
        raise ImportRejected("demo tickers already hold vendor bars; refusing to replace them", {"tickers": vendor})
    symbols_by_ticker = {symbol.ticker: symbol for symbol in Symbol.objects.filter(ticker__in=tickers)}
    expected = {member.ticker: member.asset_class for member in members}
    clash = {t: s.asset_class for t, s in symbols_by_ticker.items() if s.asset_class != expected[t]}
    if clash:
        raise ImportRejected("demo tickers are stored with another asset class", {"stored_asset_class": clash})
    history = (
        demo.daily_history(symbols=symbols, seed=seed, first=daily_history_from, start=start)
        if daily_history_from is not None
        else {}
    )
    with transaction.atomic():
        stale = list(BarPartition.objects.filter(source="synthetic").values_list("path", flat=True))
        Corpus.objects.filter(source="synthetic").delete()
        BarPartition.objects.filter(source="synthetic").delete()
        # Symbol rows stay (other apps may refer to them); only their bars are replaced.
        Symbol.objects.filter(ticker__in=tickers).update(frequencies=[])
    by_ticker = {member.ticker: member for member in members}
    minute_rows = 0
    for batch in _prefetched(demo.generate_batches(symbols=symbols, sessions=sessions, seed=seed, start=start)):
        minutes = {ticker: pair[0] for ticker, pair in batch.items()}
        daily = {ticker: pl.concat([history[ticker], pair[1]]) if ticker in history else pair[1]
                 for ticker, pair in batch.items()}  # fmt: skip
        minute_rows += sum(len(frame) for frame in minutes.values())
        _synthetic_store([by_ticker[t] for t in batch], {"1m": minutes, "1d": daily}, symbols_by_ticker)
    # The old files go once the new rows name theirs; content-addressed, an identical reload rewrote the same names.
    named = set(BarPartition.objects.filter(path__in=stale).values_list("path", flat=True))
    store.remove([path for path in stale if path not in named])
    days = demo.demo_sessions(start, sessions)
    last = calendar.schedule(days[-1], days[-1]).row(0, named=True)
    historical_through = days[-overlay_sessions - 1]
    Corpus.objects.create(
        source="synthetic",
        benchmark=Symbol.objects.get(ticker=demo.BENCHMARK),
        historical_through=historical_through,
        verified_through=days[-2],  # the last session is the replay's open session: provisional until it closes
        overlay_tickers=[m.ticker for m in members if m.asset_class != "index"],
        created_at=now(),
    )
    return DemoReport(
        tickers=tickers,
        sessions=len(days),
        first_session=days[0],
        last_session=days[-1],
        historical_through=historical_through,
        minute_rows=minute_rows,
        replay_minute=last["session_open"] + timedelta(minutes=60),
    )
