"""Deterministic synthetic minute bars on the real XNYS grid (`source: synthetic` everywhere it is stored).

Every random draw is seeded by (seed, symbol, session index) or (seed, session index), and state only flows forward,
so the universe for M sessions is an exact prefix of the one for M + k sessions with the same seed and start.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date

import numpy as np
import polars as pl

from evidence.marketdata import calendar
from evidence.marketdata.store import BAR_SCHEMA

BENCHMARK = "SYNX"
# Obviously invented tickers: demo evidence must never pass for a real listing.
TICKERS = [
    "ALFA",
    "BRVO",
    "CHRL",
    "DLTA",
    "ECHO",
    "FXTR",
    "GOLF",
    "HTEL",
    "INDG",
    "JULT",
    "KILO",
    "LIMA",
    "MIKE",
    "NOVB",
    "OSCR",
    "PAPA",
    "QBEC",
    "ROMO",
    "SIER",
    "TANG",
    "UNIF",
    "VICT",
    "WHSK",
    "XRAY",
    "YANK",
    "ZULU",
]
DEFAULT_START = date(2025, 9, 2)
DEFAULT_SESSIONS = 180
DEFAULT_SYMBOLS = 20
DEFAULT_SEED = 7
DEFAULT_OVERLAY_SESSIONS = 10
MARKET_STREAM = 1_000_000  # seed slot of the market factor, apart from every symbol index
DAILY_STREAM = 2  # seed sub-slot of the daily pre-history, apart from the minute history's draws
# The daily pre-history `make demo` loads before the minute history: long enough for the end-of-day layer's
# five-year replay, its held-out tail and several walk-forward years.
DEFAULT_DAILY_HISTORY_FROM = date(2017, 1, 3)


@dataclass(frozen=True)
class DemoSymbol:
    ticker: str
    name: str
    asset_class: str
    index: int  # seed slot


MAX_SYMBOLS = len(TICKERS) * 100


def demo_ticker(index: int) -> str:
    """The index-th invented ticker: the 26 names, then the same names with a round number (ALFA1 ... ZULU99)."""
    name, round_ = TICKERS[index % len(TICKERS)], index // len(TICKERS)
    return f"{name}{round_}" if round_ else name


def universe(symbols: int) -> list[DemoSymbol]:
    if not 1 <= symbols <= MAX_SYMBOLS:
        raise ValueError(f"--symbols must be between 1 and {MAX_SYMBOLS}")
    out = [DemoSymbol(BENCHMARK, "Synthetic Benchmark Index", "index", 0)]
    tickers = [demo_ticker(i) for i in range(symbols)]
    out += [DemoSymbol(t, f"Synthetic {t.title()} Corp", "equity", i + 1) for i, t in enumerate(tickers)]
    return out


def demo_sessions(start: date, sessions: int) -> list[date]:
    cal = calendar.xnys()
    first = cal.sessions.get_loc(cal.date_to_session(start.isoformat(), direction="next"))
    days = [label.date() for label in cal.sessions[first : first + sessions]]
    if len(days) < sessions:
        raise ValueError(f"the XNYS calendar ends before {sessions} sessions from {start}")
    return days


def _rng(seed: int, slot: int, session_index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, slot, session_index]))


def _u_shape(minutes: int) -> np.ndarray:
    t = np.arange(minutes)
    return 1.0 + 1.6 * np.exp(-t / 25.0) + 0.9 * np.exp(-(minutes - 1 - t) / 25.0)


def _market(seed: int, lengths: list[int]) -> Iterator[np.ndarray]:
    """Per session, the market factor's minute log-returns; a 3-state volatility regime moves as a Markov chain."""
    regime = 1
    vols = (0.0004, 0.0007, 0.0013)
    drifts = (0.000002, 0.0, -0.000003)  # per minute: about +0.08 % and -0.12 % a day
    for index, minutes in enumerate(lengths):
        rng = _rng(seed, MARKET_STREAM, index)
        if rng.random() < 0.08:
            regime = int(rng.integers(0, 3))
        shocks = rng.standard_t(4, size=minutes) / np.sqrt(2.0)
        yield drifts[regime] + vols[regime] * _u_shape(minutes) * shocks


def _profile(seed: int, member: DemoSymbol) -> tuple[float, float, float, float]:
    """(beta, idiosyncratic minute vol, first open price, base minute volume) of a demo symbol."""
    profile = np.random.default_rng(np.random.SeedSequence([seed, member.index]))
    beta = 1.0 if member.asset_class == "index" else float(profile.uniform(0.6, 1.6))
    idio = 0.0 if member.asset_class == "index" else float(profile.uniform(0.0004, 0.0012))
    return beta, idio, float(profile.uniform(20.0, 400.0)), float(profile.uniform(2_000.0, 40_000.0))


# Bar rows generated per batch of symbols: bounds memory (about 0.4 KB per row with the draws) at any scale.
BATCH_ROWS = 2_000_000


@dataclass(frozen=True)
class _Grid:
    """The sessions of a demo universe: minute counts, the market factor, and timestamps as epoch microseconds."""

    lengths: list[int]
    market: list[np.ndarray]
    minutes_us: np.ndarray  # every session's minutes, concatenated (the same for every symbol)
    sessions_us: np.ndarray  # each session's date at 00:00 UTC (where daily bars are stamped)


def _batch(members: list[DemoSymbol], seed: int, grid: _Grid) -> dict[str, tuple[pl.DataFrame, pl.DataFrame]]:
    """Minute bars of a batch of symbols, all of them at once per session.

    Each (symbol, session) stream draws exactly what it always drew, in the same order; only the arithmetic is
    done for the whole batch as (symbols x minutes) arrays, elementwise and along rows in the same order, so every
    value is bit-identical to computing one symbol-session at a time (tests/evidence/test_demo_pipeline.py holds
    the one-at-a-time reference). Returns (minute bars, daily bars) per ticker; the daily bars are
    `daily_from_minutes` of the minute bars, aggregated here from the arrays (max, min and integer sums are exact
    in any order; a session's first and last minute are never dropped)."""
    lengths, market = grid.lengths, grid.market
    n, total = len(members), sum(lengths)
    profiles = np.array([_profile(seed, member) for member in members])
    beta, idio, base_volume = profiles[:, 0:1], profiles[:, 1:2], profiles[:, 3:4]
    price = profiles[:, 2].copy()
    gap_vols = [0.004 + float(i) * 4 for i in profiles[:, 1]]
    dropping = [member.asset_class != "index" for member in members]
    out = {name: np.empty((n, total)) for name in ("open", "high", "low", "close", "volume")}
    keep = np.ones((n, total), dtype=bool)
    daily = {name: np.empty((n, len(lengths))) for name in ("open", "high", "low", "close", "volume")}
    offset = 0
    for index, minutes in enumerate(lengths):
        shape = _u_shape(minutes)
        t, z = np.empty((n, minutes)), np.empty((n, 2, minutes))
        u, spike, lognormal = np.empty((n, minutes)), np.empty((n, minutes)), np.empty((n, minutes))
        gap = np.empty((n, 1))
        for j, member in enumerate(members):
            rng = _rng(seed, member.index, index)
            t[j] = rng.standard_t(4, size=minutes)
            gap_vol = gap_vols[j]
            gap[j] = rng.normal(0.0, gap_vol) + (rng.normal(0.0, 4 * gap_vol) if rng.random() < 0.03 else 0.0)
            rng.standard_normal(out=z[j])  # the wiggle's normal(0, scale): scaled below, once scale is known
            rng.random(out=u[j])
            spike[j] = rng.uniform(3.0, 8.0, minutes)
            lognormal[j] = rng.lognormal(0.0, 0.5, minutes)
            if dropping[j] and rng.random() < 0.15:
                dropped = rng.choice(np.arange(1, minutes - 1), size=int(rng.integers(1, 4)), replace=False)
                keep[j, offset + dropped] = False
        log_returns = beta * market[index] + idio * shape * t / np.sqrt(2.0)
        path = price[:, None] * np.exp(gap + np.cumsum(log_returns, axis=1))
        close = np.round(path, 2)
        first = price[:, None] * np.exp(gap)
        open_ = np.round(np.concatenate([first, path[:, :-1]], axis=1), 2)
        scale = np.abs(log_returns).mean(axis=1) + 1e-5
        wiggle = np.abs(scale[:, None, None] * z) * path[:, None, :]
        top, bottom = np.maximum(open_, close), np.minimum(open_, close)
        high = np.round(np.maximum(top, top + wiggle[:, 0]), 2)
        low = np.maximum(np.round(np.minimum(bottom, bottom - wiggle[:, 1]), 2), 0.01)
        spikes = np.where(u < 0.004, spike, 1.0)
        volume = np.round(base_volume * shape * lognormal * spikes)
        window = slice(offset, offset + minutes)
        for name, values in (("open", open_), ("high", high), ("low", low), ("close", close), ("volume", volume)):
            out[name][:, window] = values
        kept = keep[:, window]
        daily["open"][:, index], daily["close"][:, index] = open_[:, 0], close[:, -1]
        daily["high"][:, index] = np.where(kept, high, -np.inf).max(axis=1)
        daily["low"][:, index] = np.where(kept, low, np.inf).min(axis=1)
        daily["volume"][:, index] = np.where(kept, volume, 0.0).sum(axis=1)
        price = close[:, -1]
        offset += minutes
    frames: dict[str, tuple[pl.DataFrame, pl.DataFrame]] = {}
    for j, member in enumerate(members):
        rows = keep[j]
        bars = pl.DataFrame({"ts": grid.minutes_us[rows], **{name: values[j][rows] for name, values in out.items()}})
        days = pl.DataFrame({"ts": grid.sessions_us, **{name: values[j] for name, values in daily.items()}})
        frames[member.ticker] = (
            bars.with_columns(pl.col("ts").cast(pl.Datetime("us", "UTC"))).cast(BAR_SCHEMA),  # type: ignore[arg-type]
            days.with_columns(pl.col("ts").cast(pl.Datetime("us", "UTC"))).cast(BAR_SCHEMA),  # type: ignore[arg-type]
        )
    return frames


def generate_batches(
    *, symbols: int, sessions: int, seed: int, start: date
) -> Iterator[dict[str, tuple[pl.DataFrame, pl.DataFrame]]]:
    """(minute bars, daily bars) per ticker, a batch of symbols at a time (in universe order). Equities occasionally
    miss a few minutes (no trade printed); the index never does."""
    days = demo_sessions(start, sessions)
    sched = calendar.schedule(days[0], days[-1])
    opens_us = sched.get_column("session_open").dt.epoch("us").to_numpy()
    lengths = ((sched.get_column("session_close") - sched.get_column("session_open")).dt.total_minutes()).to_list()
    grid = _Grid(
        lengths=lengths,
        market=list(_market(seed, lengths)),
        minutes_us=np.concatenate(
            [opens_us[i] + np.arange(minutes, dtype=np.int64) * 60_000_000 for i, minutes in enumerate(lengths)]
        ),
        sessions_us=sched.get_column("session").cast(pl.Datetime("us")).dt.epoch("us").to_numpy(),
    )
    members = universe(symbols)
    size = max(1, BATCH_ROWS // max(1, len(grid.minutes_us)))
    for first in range(0, len(members), size):
        yield _batch(members[first : first + size], seed, grid)


def generate(*, symbols: int, sessions: int, seed: int, start: date) -> dict[str, pl.DataFrame]:
    """Minute bars per ticker, the whole universe in memory (see generate_batches)."""
    out: dict[str, pl.DataFrame] = {}
    for batch in generate_batches(symbols=symbols, sessions=sessions, seed=seed, start=start):
        out.update({ticker: minutes for ticker, (minutes, _) in batch.items()})
    return out


def daily_from_minutes(minutes: pl.DataFrame) -> pl.DataFrame:
    """Session bars stamped 00:00 UTC of the session date, aggregated from the session's minute bars."""
    return (
        minutes.group_by(pl.col("ts").dt.convert_time_zone("America/New_York").dt.date().alias("session"))
        .agg(
            pl.col("open").first(),
            pl.col("high").max(),
            pl.col("low").min(),
            pl.col("close").last(),
            pl.col("volume").sum(),
        )
        .sort("session")
        .select(
            pl.col("session").cast(pl.Datetime("us")).dt.replace_time_zone("UTC").alias("ts"), pl.exclude("session")
        )
    )


def daily_history(*, symbols: int, seed: int, first: date, start: date) -> dict[str, pl.DataFrame]:
    """Daily bars (00:00 UTC of each session) for the XNYS sessions from `first` up to the session before the minute
    history's `start`, ending at the price where the minute history begins, so the store holds one continuous
    daily series. Trending market regimes (a Markov chain of drifts) give a trend engine something to find."""
    days = calendar.sessions_between(first, calendar.xnys().date_to_session(start.isoformat(), direction="next").date())
    days = days[:-1]
    if not days:
        return {}
    rng = np.random.default_rng(np.random.SeedSequence([seed, MARKET_STREAM, DAILY_STREAM]))
    drifts, regime, market = (0.0009, 0.0001, -0.0008), 1, np.zeros(len(days))
    for i in range(len(days)):
        if rng.random() < 0.02:
            regime = int(rng.integers(0, 3))
        market[i] = drifts[regime] + 0.009 * rng.standard_t(4) / np.sqrt(2.0)
    ts = pl.Series([d for d in days]).cast(pl.Datetime("us")).dt.replace_time_zone("UTC")
    out: dict[str, pl.DataFrame] = {}
    for member in universe(symbols):
        beta, idio, price, base_volume = _profile(seed, member)
        own = np.random.default_rng(np.random.SeedSequence([seed, member.index, DAILY_STREAM]))
        returns = beta * market + idio * 20 * own.standard_t(4, size=len(days)) / np.sqrt(2.0)
        # Built backwards from the minute history's first open, so the two series join without a jump.
        close = price / np.exp(np.concatenate([np.cumsum(returns[::-1])[::-1][1:], [0.0]]))
        gaps = own.normal(0.0, 0.003, size=len(days))
        open_ = np.concatenate([[close[0]], close[:-1]]) * np.exp(gaps)
        spread = np.abs(own.normal(0.0, 0.006, size=(2, len(days))))
        high = np.maximum(open_, close) * (1 + spread[0])
        low = np.maximum(np.minimum(open_, close) * (1 - spread[1]), 0.01)
        volume = np.round(base_volume * 390 * own.lognormal(0.0, 0.4, size=len(days)))
        columns = {"open": open_, "high": high, "low": low, "close": close}
        frame = pl.DataFrame({"ts": ts, **{k: np.round(v, 2) for k, v in columns.items()}, "volume": volume})
        out[member.ticker] = frame.cast(BAR_SCHEMA)  # type: ignore[arg-type]
    return out
