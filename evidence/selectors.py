"""Reads for evidence. Market data is public reference data, so these reads take no account."""

from datetime import datetime

import polars as pl

from evidence.models import FREQUENCIES, BarPartition, Symbol
from evidence.store import BAR_COLUMNS, BAR_SCHEMA, absolute, frame_sha256


def symbol_get(*, ticker: str) -> Symbol | None:
    return Symbol.objects.filter(ticker=ticker.strip().upper()).first()


def bars_read(
    *, symbol: Symbol, frequency: str, start: datetime | None = None, end: datetime | None = None
) -> pl.DataFrame:
    """Stored bars with start <= ts <= end (both optional, aware), sorted by ts; an empty frame if none."""
    if frequency not in FREQUENCIES:
        raise ValueError(f"unsupported frequency {frequency!r}; supported: {', '.join(FREQUENCIES)}")
    for bound in (start, end):
        if bound is not None and bound.tzinfo is None:
            raise ValueError("start and end must be time-zone-aware")
    partitions = BarPartition.objects.filter(symbol=symbol, frequency=frequency).order_by("year")
    if start is not None:
        partitions = partitions.filter(last_ts__gte=start)
    if end is not None:
        partitions = partitions.filter(first_ts__lte=end)
    paths = [absolute(p.path) for p in partitions]
    if not paths:
        return pl.DataFrame(schema=BAR_SCHEMA)
    frame = pl.scan_parquet(paths).select(BAR_COLUMNS)
    if start is not None:
        frame = frame.filter(pl.col("ts") >= start)
    if end is not None:
        frame = frame.filter(pl.col("ts") <= end)
    return frame.sort("ts").collect().cast(BAR_SCHEMA)  # type: ignore[arg-type]


def bars_data_version(
    *, symbol: Symbol, frequency: str, start: datetime | None = None, end: datetime | None = None
) -> str:
    """SHA-256 hex over exactly the bars bars_read returns for the same arguments."""
    bars = bars_read(symbol=symbol, frequency=frequency, start=start, end=end)
    return frame_sha256(bars, f"leroy.bars.v1|{symbol.ticker}|{frequency}")
