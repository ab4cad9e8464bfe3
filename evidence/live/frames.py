"""The frame feed: provisional open-session minute bars in, one current verified frame per symbol out.

Bars of the open session arrive as `LiveBar` rows, from a provider through `live_bars_ingest` or, in the demo,
from the replay driver, which feeds the stored provisional session minute by minute on the replay clock. After
each tick `frames_refresh` recomputes every fed symbol's frame with the build's own feature and registry code
(verified history from the bar store plus today's live bars) and stores it as a `Frame` row: requests read that
row and never scan bars.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import polars as pl
from django.conf import settings
from django.db import transaction

from evidence.marketdata import calendar
from evidence.marketdata.importers import ImportRejected, bars_import
from evidence.marketdata.providers import DownloadError, default_provider
from evidence.marketdata.selectors import bars_read
from evidence.marketdata.store import BAR_COLUMNS, BAR_SCHEMA
from evidence.memory.features import FEATURES, symbol_frame
from evidence.memory.reader import MemoryReader
from evidence.memory.strategies import with_states
from evidence.models import Corpus, Frame, LiveBar, Symbol
from evidence.schemas import FrameStatus
from evidence.vocabulary import WARMUP_SESSIONS, normalize_ticker
from leroy.clock import now

MINUTE = timedelta(minutes=1)
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionWindow:
    session: date
    open: datetime
    close: datetime


def open_session(at: datetime) -> SessionWindow | None:
    """The XNYS regular session open at `at`, or None when the market is closed (early closes included)."""
    cal = calendar.xnys_minutes()
    minute = at.replace(second=0, microsecond=0)
    if not cal.is_open_on_minute(minute):
        return None
    session = cal.minute_to_session(minute).date()
    opens, closes = calendar.session_bounds(session)
    return SessionWindow(session=session, open=opens, close=closes)


# A session's last minute closes with the session: its bars are still taken this long after the close, so the tick
# after the close collects that minute, and a session is compacted into the verified store only once this is over.
LATE_BARS = timedelta(minutes=15)


def feed_session(at: datetime) -> SessionWindow | None:
    """The session whose closed minutes the feed takes at `at`: the open one, else one that closed less than
    LATE_BARS ago (None: the market has been closed longer)."""
    return open_session(at) or open_session(at - LATE_BARS)


def feed_universe() -> list[Symbol]:
    """The symbols the feed follows: the corpus's fixed overlay universe and its benchmark."""
    corpus = Corpus.objects.select_related("benchmark").first()
    if corpus is None:
        return []
    tickers = {*corpus.overlay_tickers, corpus.benchmark.ticker}
    return list(Symbol.objects.filter(ticker__in=tickers).order_by("ticker"))


def _live_frame(symbol: Symbol, window: SessionWindow, through: datetime) -> pl.DataFrame:
    rows = LiveBar.objects.filter(symbol=symbol, ts__gte=window.open, ts__lte=through).order_by("ts")
    values = list(rows.values_list(*BAR_COLUMNS))
    return pl.DataFrame(values, schema=BAR_SCHEMA, orient="row")


def live_bars_ingest(*, ticker: str, bars: pl.DataFrame, feed: str, at: datetime | None = None) -> int:
    """Append verified minute bars of the fed session (`feed_session`); all or nothing. Returns how many were
    appended.

    Refused: a closed market, a bar outside the fed session's minute grid, a bar not yet closed at `at`, bars out
    of order, duplicates or bars at or before the last one received, and inconsistent OHLC or negative volume.
    """
    at = at or now()
    symbol = Symbol.objects.filter(ticker=normalize_ticker(ticker)).first()
    if symbol is None:
        raise ImportRejected(f"unknown symbol {ticker!r}")
    window = feed_session(at)
    if window is None:
        raise ImportRejected("the regular session is closed; live bars are accepted only while it is open")
    if bars.is_empty():
        return 0
    bars = bars.select(BAR_COLUMNS).cast(BAR_SCHEMA)  # type: ignore[arg-type]
    ts = bars.get_column("ts")
    if ts.is_duplicated().any() or not ts.is_sorted():
        raise ImportRejected("live bars must be strictly increasing in time")
    first, last = ts.min(), ts.max()
    assert isinstance(first, datetime) and isinstance(last, datetime)
    if first < window.open or last + MINUTE > min(window.close, at.replace(second=0, microsecond=0)):
        raise ImportRejected("live bars must be closed minutes of the open session")
    if ((ts.dt.second() != 0) | (ts.dt.microsecond() != 0)).any():
        raise ImportRejected("live bars must start on whole minutes")
    inconsistent = bars.filter(
        (pl.col("high") < pl.max_horizontal("open", "close"))
        | (pl.col("low") > pl.min_horizontal("open", "close"))
        | (pl.col("low") <= 0)
        | (pl.col("volume") < 0)
    )
    if len(inconsistent):
        raise ImportRejected(f"{len(inconsistent)} live bars have inconsistent OHLC or negative volume")
    with transaction.atomic():
        Symbol.objects.select_for_update().get(pk=symbol.pk)  # one feeder per symbol at a time
        latest = LiveBar.objects.filter(symbol=symbol).order_by("-ts").values_list("ts", flat=True).first()
        if latest is not None and first <= latest:
            raise ImportRejected(f"live bars must start after the last one received ({latest.isoformat()})")
        LiveBar.objects.bulk_create(
            LiveBar(symbol=symbol, feed=feed, received_at=at, **dict(zip(BAR_COLUMNS, row, strict=True)))
            for row in bars.iter_rows()
        )
    return len(bars)


def replay_tick(*, at: datetime | None = None) -> int:
    """The demo's replay driver: feed every closed minute of the stored provisional session up to `at`."""
    at = at or now()
    window = feed_session(at)
    corpus = Corpus.objects.first()
    if window is None or corpus is None or (corpus.verified_through and window.session <= corpus.verified_through):
        return 0  # only provisional (unverified) sessions are replayed
    fed = 0
    for symbol in feed_universe():
        latest = LiveBar.objects.filter(symbol=symbol, ts__gte=window.open).order_by("-ts").values_list("ts", flat=True)
        start = (latest.first() or window.open - MINUTE) + MINUTE
        tape = bars_read(symbol=symbol, frequency="1m", start=start, end=at.replace(second=0, microsecond=0) - MINUTE)
        if not tape.is_empty():
            fed += live_bars_ingest(ticker=symbol.ticker, bars=tape, feed="replay", at=at)
    return fed


def provider_tick(*, at: datetime | None = None) -> int:
    """The production feed: pull each followed symbol's new closed minutes of the open session from the configured
    market-data provider and ingest them (after the close, the session's last minutes). One symbol's failure is
    logged and does not stop the others."""
    at = at or now()
    window = feed_session(at)
    if window is None:
        return 0
    provider = default_provider()
    fed = 0
    for symbol in feed_universe():
        latest = LiveBar.objects.filter(symbol=symbol, ts__gte=window.open).order_by("-ts").values_list("ts", flat=True)
        after = latest.first() or window.open - MINUTE
        try:
            bars = provider.session_minutes(ticker=symbol.ticker, session=window.session)
            fresh = bars.filter((pl.col("ts") > after) & (pl.col("ts") + MINUTE <= at.replace(second=0, microsecond=0)))
            if not fresh.is_empty():
                fed += live_bars_ingest(ticker=symbol.ticker, bars=fresh, feed="provider", at=at)
        except (DownloadError, ImportRejected) as error:
            logger.warning("frame feed: %s skipped this tick: %s", symbol.ticker, error)
    return fed


def live_bars_compact(*, at: datetime | None = None) -> list[date]:
    """Close compaction: move provider live bars of sessions that closed (LATE_BARS ago) into the verified store.

    Each symbol's session goes through the store's own validation (`bars_import`); when every symbol of a session is
    stored, its live bars are deleted and the corpus's verified boundary advances. Replayed sessions are never
    compacted: their tape already lies in the store as provisional data.
    """
    at = at or now()
    window = feed_session(at)
    current = window.session if window else None
    sessions = sorted(
        {ts.date() for ts in LiveBar.objects.filter(feed="provider").values_list("ts", flat=True)}
        - ({current} if current else set())
    )
    compacted = []
    for day in sessions:
        start = calendar.schedule(day, day).row(0, named=True)
        if start["session_close"] + LATE_BARS > at:
            continue  # its last minutes may still come
        rows = LiveBar.objects.filter(feed="provider", ts__gte=start["session_open"], ts__lt=start["session_close"])
        with transaction.atomic():
            for symbol in Symbol.objects.filter(pk__in=rows.values("symbol")).order_by("ticker"):
                mine = rows.filter(symbol=symbol).order_by("ts").values_list(*BAR_COLUMNS)
                bars_import(
                    ticker=symbol.ticker,
                    frequency="1m",
                    frame=pl.DataFrame(list(mine), schema=BAR_SCHEMA, orient="row"),
                    asset_class=symbol.asset_class,
                )
            rows.delete()
            Corpus.objects.filter(verified_through__lt=day).update(verified_through=day)
        compacted.append(day)
    return compacted


def frame_compute(*, symbol: Symbol, benchmark: Symbol, at: datetime) -> dict[str, Any] | None:
    """The frame of `symbol` at `at`: its latest live bar with point-in-time features, states and regime.

    History comes from verified stored sessions, the open session from live bars only, so provisional stored data
    is never read as if verified. None when the session is closed or no live bar has arrived yet.
    """
    window = open_session(at)
    if window is None:
        return None
    through = at.replace(second=0, microsecond=0) - MINUTE
    live = _live_frame(symbol, window, through)
    if live.is_empty():
        return None
    start = calendar.xnys().session_offset(window.session.isoformat(), -(WARMUP_SESSIONS + 1)).date()
    history_start = datetime.combine(start, datetime.min.time(), tzinfo=UTC)
    before_open = window.open - timedelta(microseconds=1)

    def bars(of: Symbol) -> pl.DataFrame:
        today = live if of.pk == symbol.pk else _live_frame(of, window, through)
        return pl.concat([bars_read(symbol=of, frequency="1m", start=history_start, end=before_open), today])

    own = bars(symbol)
    frame = with_states(symbol_frame(own, own if benchmark.pk == symbol.pk else bars(benchmark)))
    row = frame.filter(pl.col("ts") <= live.get_column("ts").max()).row(-1, named=True)
    return {
        "source_time": row["ts"],
        "session": row["session"],
        "open": row["open"],
        "high": row["high"],
        "low": row["low"],
        "close": row["close"],
        "volume": row["volume"],
        "is_fill": row["is_fill"],
        "ready": row["ready"],
        "buy_mask": row["buy_mask"],
        "sell_mask": row["sell_mask"],
        "regime": row["regime"],
        "trend": row["trend"],
        "volatility": row["volatility"],
        "tod": row["tod"],
        "features": {name: row[name] for name in FEATURES},
    }


def frames_refresh(*, at: datetime | None = None) -> int:
    """Recompute and store the current frame of every fed symbol; returns how many frames changed."""
    at = at or now()
    corpus = Corpus.objects.select_related("benchmark").first()
    if corpus is None:
        return 0
    changed = 0
    for symbol in feed_universe():
        values = frame_compute(symbol=symbol, benchmark=corpus.benchmark, at=at)
        if values is None:
            continue
        current = Frame.objects.filter(symbol=symbol).values_list("source_time", flat=True).first()
        if current == values["source_time"]:
            continue
        Frame.objects.update_or_create(symbol=symbol, defaults={**values, "computed_at": at})
        changed += 1
    return changed


def frame_is_stale(frame: Frame, at: datetime) -> bool:
    """A frame is stale when its bar closed longer ago than LEROY_FRAME_STALE_SECONDS."""
    age = at - (frame.source_time + MINUTE)
    return age.total_seconds() > settings.LEROY_FRAME_STALE_SECONDS


def horizons_within(frame: Frame, at: datetime, horizons: tuple[int, ...]) -> tuple[int, ...]:
    """The horizons a decision on `frame` at `at` can hold before the session's close (an outcome never crosses it,
    so Market Memory has none to show past it). They count from the frame's bar, or from the last complete minute
    when the frame is older (a stale frame's time is not now: a 60-minute holding entered now ends an hour from
    now, whatever bar the frame shows)."""
    start = max(frame.source_time, at.replace(second=0, microsecond=0) - MINUTE)
    close = calendar.session_bounds(frame.session)[1]
    return tuple(h for h in horizons if not calendar.horizon_crosses_close(start, h, close))


def lookups_charged(status: FrameStatus, within: tuple[int, ...]) -> bool:
    """Whether a decision's Market Memory lookup is charged: only on a fresh frame ("available") with a horizon
    before the close. A stale frame's history is shown free (it is not usable), and past the close there is none."""
    return status == "available" and bool(within)


@dataclass(frozen=True)
class CurrentFrame:
    """The frame of a symbol as evaluate_current_setup would use it, or why there is none."""

    ticker: str
    frame: Frame | None
    status: FrameStatus
    reason: str | None


def current_frame(*, ticker: str, at: datetime, reader: MemoryReader) -> CurrentFrame:
    """The frame requests may use, or why there is none: unknown symbol, closed market, no frame yet in this
    session, or not warmed up. A stale frame is kept and flagged."""
    # One query: the symbol and its frame (the reverse one-to-one, joined).
    symbol = Symbol.objects.select_related("frame").filter(ticker=ticker).first()
    frame: Frame | None = getattr(symbol, "frame", None) if symbol else None
    window = open_session(at)
    if symbol is None or (frame is None and ticker not in reader.manifest["plan"]["tickers"]):
        return CurrentFrame(ticker, None, "unavailable", f"{ticker} is not in Leroy's current verified read model.")
    if window is None:
        return CurrentFrame(ticker, None, "market_closed", "The regular session is closed; there is no current frame.")
    if frame is None or frame.session != window.session:
        return CurrentFrame(ticker, None, "unavailable", f"No verified frame for {ticker} in the current session yet.")
    if not frame.ready or frame.regime is None:  # not usable yet: nothing of it is shown or matched
        reason = f"The current frame of {ticker} has not completed its warm-up."
        return CurrentFrame(ticker, None, "unavailable", reason)
    return CurrentFrame(ticker, frame, "stale" if frame_is_stale(frame, at) else "available", None)
