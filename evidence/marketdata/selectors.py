"""Reads of market data: symbols and stored bars. Market data is public reference data, so these take no account."""

import hashlib
from datetime import datetime
from typing import Any

import polars as pl
from django.db.models import Case, CharField, Exists, OuterRef, QuerySet, Value, When

from evidence.marketdata import store
from evidence.marketdata.store import BAR_COLUMNS, BAR_SCHEMA, frame_sha256
from evidence.models import BarPartition, Symbol
from evidence.vocabulary import FREQUENCIES, Source, normalize_ticker


def symbol_get(*, ticker: str) -> Symbol | None:
    return Symbol.objects.filter(ticker=normalize_ticker(ticker)).first()


def _partitions(
    symbol: Symbol | str, frequency: str, start: datetime | None, end: datetime | None
) -> QuerySet[BarPartition]:
    """The partitions of a symbol (or of the symbol with that exact ticker) holding bars with start <= ts <= end, in
    time order."""
    if frequency not in FREQUENCIES:
        raise ValueError(f"unsupported frequency {frequency!r}; supported: {', '.join(FREQUENCIES)}")
    for bound in (start, end):
        if bound is not None and bound.tzinfo is None:
            raise ValueError("start and end must be time-zone-aware")
    owner = {"symbol": symbol} if isinstance(symbol, Symbol) else {"symbol__ticker": symbol}
    partitions = BarPartition.objects.filter(**owner, frequency=frequency).order_by("year")
    if start is not None:
        partitions = partitions.filter(last_ts__gte=start)
    if end is not None:
        partitions = partitions.filter(first_ts__lte=end)
    return partitions


def bars_held(*, symbol: Symbol, frequency: str, start: datetime, end: datetime) -> bool:
    """Whether a stored partition's span meets [start, end]: False means bars_read would return none (one query,
    no file read); True that it may return some."""
    return _partitions(symbol, frequency, start, end).exists()


def bars_read(
    *, symbol: Symbol, frequency: str, start: datetime | None = None, end: datetime | None = None
) -> pl.DataFrame:
    """Stored bars with start <= ts <= end (both optional, aware), sorted by ts; an empty frame if none."""
    paths = list(_partitions(symbol, frequency, start, end).values_list("path", flat=True))
    if not paths:
        return pl.DataFrame(schema=BAR_SCHEMA)
    frame = store.scan_parquet(paths).select(BAR_COLUMNS)
    if start is not None:
        frame = frame.filter(pl.col("ts") >= start)
    if end is not None:
        frame = frame.filter(pl.col("ts") <= end)
    return frame.sort("ts").collect().cast(BAR_SCHEMA)  # type: ignore[arg-type]


def bars_stamp(
    *, symbol: Symbol | str, frequency: str, start: datetime | None = None, end: datetime | None = None
) -> tuple[Any, ...] | None:
    """What bars_read would read for the same arguments, as it is now: each partition's recorded SHA-256 and file
    stamp (store.stamp). Equal stamps, equal bars; None when a file cannot be stamped (a remote store). Given a
    ticker (exact, as stored) it is one query, without reading the symbol: an unknown ticker's stamp is empty."""
    stamps = []
    for path, sha256 in _partitions(symbol, frequency, start, end).values_list("path", "sha256"):
        stamp = store.stamp(path)
        if stamp is None:
            return None
        stamps.append((sha256, *stamp))
    return tuple(stamps)


def bars_data_version(
    *, symbol: Symbol, frequency: str, start: datetime | None = None, end: datetime | None = None
) -> str:
    """SHA-256 hex over exactly the bars bars_read returns for the same arguments."""
    bars = bars_read(symbol=symbol, frequency=frequency, start=start, end=end)
    return bars_frame_version(bars, ticker=symbol.ticker, frequency=frequency)


def bars_frame_version(bars: pl.DataFrame, *, ticker: str, frequency: str) -> str:
    """The data version of bars already read with bars_read, so a caller holding them need not read them again."""
    return frame_sha256(bars, f"leroy.bars.v1|{ticker}|{frequency}")


def bars_files(*, symbol: Symbol, frequency: str, end: datetime) -> list[tuple[str, str, str]]:
    """(path, recorded SHA-256, source) of every stored file bars_read reads for bars through `end`."""
    partitions = BarPartition.objects.filter(symbol=symbol, frequency=frequency, first_ts__lte=end).order_by("year")
    return list(partitions.values_list("path", "sha256", "source"))


def bars_source(*, symbol: Symbol, frequency: str | None = None) -> Source | None:
    """Where a symbol's stored bars (of one frequency, or of all) come from, as their partitions record it:
    "synthetic" when any is generated demo data (a Market Memory build over them is synthetic too), "vendor" when
    all were imported, None when none is stored."""
    partitions = BarPartition.objects.filter(symbol=symbol)
    if frequency is not None:
        partitions = partitions.filter(frequency=frequency)
    sources = set(partitions.values_list("source", flat=True))
    return "synthetic" if "synthetic" in sources else ("vendor" if sources else None)


def with_bars_source(symbols: QuerySet[Symbol]) -> QuerySet[Symbol]:
    """`symbols`, each annotated `bars_source` as `bars_source` says it of all its bars, in the same query."""
    partitions = BarPartition.objects.filter(symbol=OuterRef("pk"))
    return symbols.annotate(
        bars_source=Case(
            When(Exists(partitions.filter(source="synthetic")), then=Value("synthetic")),
            When(Exists(partitions), then=Value("vendor")),
            default=Value(None),
            output_field=CharField(null=True),
        )
    )


def bars_files_changed(files: list[tuple[str, str, str]]) -> list[str]:
    """The paths whose bytes no longer hash to their recorded SHA-256 (or are gone): frozen inputs that moved."""
    changed = []
    for path, recorded, _ in files:
        try:
            actual = hashlib.sha256(store.read_bytes(path)).hexdigest()
        except FileNotFoundError:
            actual = ""
        if actual != recorded:
            changed.append(path)
    return changed
