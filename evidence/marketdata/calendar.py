"""The XNYS calendar (exchange_calendars), loaded once per process; its lib and version go into lineage."""

import threading
from datetime import date, datetime, timedelta
from functools import lru_cache

import exchange_calendars
import pandas as pd
import polars as pl

CALENDAR_NAME = "XNYS"
# exchange-calendars sets XNYS no lower bound and carries its rules back to the 19th century (its default window
# is only 20 years): take them all, so no real history is refused as "not a session".
CALENDAR_START = "1885-01-01"
CALENDAR_END = "2030-12-31"


_LOCK = threading.Lock()
_CALENDAR: list[exchange_calendars.ExchangeCalendar] = []


def xnys() -> exchange_calendars.ExchangeCalendar:
    """The process's one XNYS calendar, built by the first caller while concurrent first callers wait for it."""
    if not _CALENDAR:
        with _LOCK:
            if not _CALENDAR:
                _CALENDAR.append(exchange_calendars.get_calendar(CALENDAR_NAME, start=CALENDAR_START, end=CALENDAR_END))
    return _CALENDAR[0]


def xnys_minutes() -> exchange_calendars.ExchangeCalendar:
    """The calendar with its index of every trading minute built, for minute lookups (is the market open at t,
    which session holds t). exchange_calendars builds that index (14 M minutes for 1885-2030, about 1 s) on first
    use in an unlocked cached_property, so concurrent first lookups, one thread per MCP request, each built it and
    stalled together for seconds; here one thread builds it and the others wait for that one."""
    cal = xnys()
    if "minutes_nanos" not in cal.__dict__:
        with _LOCK:
            if "minutes_nanos" not in cal.__dict__:
                cal.minutes_nanos  # noqa: B018  (the cached property's side effect is the point)
    return cal


def warm() -> None:
    """Build the calendar and its minute index now (a web process's start-up, before it takes requests)."""
    xnys_minutes()


def covered_days() -> tuple[date, date]:
    """The first and last day the loaded calendar covers. It can place no bar outside them, and pandas cannot even
    slice its schedule at a day past its nanosecond bounds (1677-2262): it raises KeyError."""
    return date.fromisoformat(CALENDAR_START), date.fromisoformat(CALENDAR_END)


def calendar_lineage() -> dict[str, str]:
    return {"lib": "exchange_calendars", "name": CALENDAR_NAME, "version": exchange_calendars.__version__}


def sessions_between(first: date, last: date) -> list[date]:
    """XNYS sessions from first through last, both inclusive."""
    labels = xnys().sessions_in_range(pd.Timestamp(first), pd.Timestamp(last))
    return [label.date() for label in labels]


def schedule(first: date, last: date) -> pl.DataFrame:
    """One row per XNYS session in [first, last]: session (date), session_open and session_close (UTC, µs)."""
    frame = xnys().schedule.loc[pd.Timestamp(first) : pd.Timestamp(last), ["open", "close"]]
    return pl.DataFrame(
        {
            "session": frame.index.to_numpy().astype("datetime64[D]"),
            "session_open": frame["open"].dt.tz_convert(None).to_numpy(),
            "session_close": frame["close"].dt.tz_convert(None).to_numpy(),
        }
    ).with_columns(
        pl.col("session").cast(pl.Date),
        pl.col("session_open", "session_close").cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
    )


@lru_cache(maxsize=4096)
def session_bounds(session: date) -> tuple[datetime, datetime]:
    """A session's open and close (aware UTC). A session's hours never change within a calendar version, so the
    request path computes each once per process instead of slicing the pandas schedule on every call."""
    row = schedule(session, session).row(0, named=True)
    return row["session_open"], row["session_close"]


HORIZON_CROSSES_CLOSE = "The horizon crosses the session close; outcomes never cross the close."


def horizon_crosses_close(start: datetime, minutes: int, close: datetime) -> bool:
    """Whether a holding of `minutes` from the bar starting at `start` would end past the session's last bar (an
    outcome never crosses the close, so Market Memory has none to show for it)."""
    return start + timedelta(minutes=minutes + 1) > close


def session_of_minute(ts: datetime) -> date | None:
    """The session whose regular hours contain the minute starting at ts, or None."""
    stamp = pd.Timestamp(ts)
    cal = xnys_minutes()
    if not cal.is_trading_minute(stamp):
        return None
    return cal.minute_to_session(stamp).date()  # side="left": the open minute counts, the close minute does not


def session_offset(session: date, offset: int) -> date:
    """The session `offset` sessions after (or before, if negative) a session."""
    return xnys().session_offset(pd.Timestamp(session), offset).date()
