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
    first = calendar.xnys().date_to_session(start.isoformat(), direction="next").date()
    return [calendar.session_offset(first, i) for i in range(sessions)] if sessions else []


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


def _bars(
    rng: np.random.Generator,
    log_returns: np.ndarray,
    previous_close: float,
    gap_vol: float,
    base_volume: float,
    shapes: dict[int, np.ndarray],
) -> tuple[dict[str, np.ndarray], float]:
    minutes = len(log_returns)
    gap = rng.normal(0.0, gap_vol) + (rng.normal(0.0, 4 * gap_vol) if rng.random() < 0.03 else 0.0)
    path = previous_close * np.exp(gap + np.cumsum(log_returns))
    close = np.round(path, 2)
    open_ = np.round(np.concatenate([[previous_close * np.exp(gap)], path[:-1]]), 2)
    wiggle = np.abs(rng.normal(0.0, np.abs(log_returns).mean() + 1e-5, size=(2, minutes))) * path
    high = np.round(np.maximum(np.maximum(open_, close), np.maximum(open_, close) + wiggle[0]), 2)
    low = np.round(np.minimum(np.minimum(open_, close), np.minimum(open_, close) - wiggle[1]), 2)
    low = np.maximum(low, 0.01)
    spikes = np.where(rng.random(minutes) < 0.004, rng.uniform(3.0, 8.0, minutes), 1.0)
    volume = np.round(base_volume * shapes[minutes] * rng.lognormal(0.0, 0.5, minutes) * spikes)
    return {"open": open_, "high": high, "low": low, "close": close, "volume": volume}, float(close[-1])


def _profile(seed: int, member: DemoSymbol) -> tuple[float, float, float, float]:
    """(beta, idiosyncratic minute vol, first open price, base minute volume) of a demo symbol."""
    profile = np.random.default_rng(np.random.SeedSequence([seed, member.index]))
    beta = 1.0 if member.asset_class == "index" else float(profile.uniform(0.6, 1.6))
    idio = 0.0 if member.asset_class == "index" else float(profile.uniform(0.0004, 0.0012))
    return beta, idio, float(profile.uniform(20.0, 400.0)), float(profile.uniform(2_000.0, 40_000.0))


def generate(*, symbols: int, sessions: int, seed: int, start: date) -> dict[str, pl.DataFrame]:
    """Minute bars per ticker. Equities occasionally miss a few minutes (no trade printed); the index never does."""
    days = demo_sessions(start, sessions)
    sched = calendar.schedule(days[0], days[-1])
    opens_us = sched.get_column("session_open").dt.epoch("us").to_numpy()
    lengths = ((sched.get_column("session_close") - sched.get_column("session_open")).dt.total_minutes()).to_list()
    market = list(_market(seed, lengths))
    shapes = {minutes: _u_shape(minutes) for minutes in set(lengths)}
    # Every session's minute timestamps once, as epoch microseconds (the same for every symbol).
    minute_ts = [opens_us[i] + np.arange(minutes, dtype=np.int64) * 60_000_000 for i, minutes in enumerate(lengths)]
    out: dict[str, pl.DataFrame] = {}
    for member in universe(symbols):
        beta, idio, price, base_volume = _profile(seed, member)
        chunks: dict[str, list[np.ndarray]] = {name: [] for name in ("ts", "open", "high", "low", "close", "volume")}
        for index, minutes in enumerate(lengths):
            rng = _rng(seed, member.index, index)
            noise = idio * shapes[minutes] * rng.standard_t(4, size=minutes) / np.sqrt(2.0)
            columns, price = _bars(rng, beta * market[index] + noise, price, 0.004 + idio * 4, base_volume, shapes)
            columns["ts"] = minute_ts[index]
            if member.asset_class != "index" and rng.random() < 0.15:
                dropped = rng.choice(np.arange(1, minutes - 1), size=int(rng.integers(1, 4)), replace=False)
                keep = np.ones(minutes, dtype=bool)
                keep[dropped] = False
                columns = {name: values[keep] for name, values in columns.items()}
            for name, values in columns.items():
                chunks[name].append(values)
        frame = pl.DataFrame({name: np.concatenate(parts) for name, parts in chunks.items()})
        out[member.ticker] = frame.with_columns(pl.col("ts").cast(pl.Datetime("us", "UTC"))).cast(BAR_SCHEMA)  # type: ignore[arg-type]
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
