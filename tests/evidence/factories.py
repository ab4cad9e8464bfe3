"""Tiny hand-checkable bar frames on the real XNYS minute grid."""

from datetime import UTC, date, datetime, timedelta

import polars as pl

from evidence.marketdata import calendar
from evidence.marketdata.store import BAR_SCHEMA


def session_minutes(session: date) -> list[datetime]:
    row = calendar.schedule(session, session).row(0, named=True)
    minutes = int((row["session_close"] - row["session_open"]).total_seconds() // 60)
    return [row["session_open"] + timedelta(minutes=i) for i in range(minutes)]


def minute_bars(sessions: list[date], *, start_price: float = 100.0, step: float = 0.01) -> pl.DataFrame:
    """A steadily rising price: bar i opens at start + i*step and closes one step higher."""
    ts = [minute for session in sessions for minute in session_minutes(session)]
    opens = [round(start_price + i * step, 6) for i in range(len(ts))]
    closes = [round(price + step, 6) for price in opens]
    return pl.DataFrame(
        {
            "ts": ts,
            "open": opens,
            "high": [price + step for price in closes],
            "low": [price - step for price in opens],
            "close": closes,
            "volume": [1000.0] * len(ts),
        },
        schema={
            "ts": pl.Datetime("us", "UTC"),
            "open": pl.Float64,
            "high": pl.Float64,
            "low": pl.Float64,
            "close": pl.Float64,
            "volume": pl.Float64,
        },
    )


def daily_bars(
    sessions: list[date], *, opens: list[float] | None = None, closes: list[float] | None = None
) -> pl.DataFrame:
    """Daily bars stamped 00:00 UTC; by default closes rise by 1 from 100 and each bar opens at the previous close."""
    closes = closes if closes is not None else [100.0 + i for i in range(len(sessions))]
    opens = opens if opens is not None else closes[:1] + closes[:-1]
    return pl.DataFrame(
        {
            "ts": [datetime(day.year, day.month, day.day, tzinfo=UTC) for day in sessions],
            "open": opens,
            "high": [max(pair) for pair in zip(opens, closes, strict=True)],
            "low": [min(pair) for pair in zip(opens, closes, strict=True)],
            "close": closes,
            "volume": [1000.0] * len(sessions),
        },
        schema=BAR_SCHEMA,
    )


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)
