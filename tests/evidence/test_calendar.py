from datetime import date

import pandas as pd
import polars as pl

from evidence.marketdata import calendar
from tests.evidence.factories import utc


def test_the_historical_contract_has_4088_xnys_sessions() -> None:
    sessions = calendar.sessions_between(date(2010, 3, 31), date(2026, 7, 1))

    assert len(sessions) == 4088
    assert (sessions[0], sessions[-1]) == (date(2010, 3, 31), date(2026, 7, 1))
    # the corpus starts 60 sessions earlier: the point-in-time warm-up
    assert len(calendar.sessions_between(date(2010, 1, 4), date(2026, 7, 1))) == 4148
    assert date(2025, 1, 9) not in sessions  # national day of mourning


def test_early_closes_end_at_13_00_new_york_time() -> None:
    cal = calendar.xnys()
    early = [d.date() for d in cal.early_closes if date(2010, 1, 1) <= d.date() <= date(2026, 12, 31)]

    assert len(early) == 36
    closes = calendar.schedule(date(2010, 1, 1), date(2026, 12, 31)).filter(pl.col("session").is_in(early))
    local = closes.get_column("session_close").dt.convert_time_zone("America/New_York")
    assert set(zip(local.dt.hour().to_list(), local.dt.minute().to_list(), strict=True)) == {(13, 0)}
    assert calendar.session_of_minute(utc(2025, 11, 28, 17, 59)) == date(2025, 11, 28)
    assert calendar.session_of_minute(utc(2025, 11, 28, 18, 0)) is None
    assert cal.session_minutes(pd.Timestamp("2025-11-28")).size == 210


def test_concurrent_first_minute_lookups_build_one_calendar_and_one_minute_index(monkeypatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from exchange_calendars import exchange_calendar

    built, created = [], []
    real = exchange_calendar.compute_minutes
    kind = type(calendar.xnys())

    def counted(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    def fresh(name, *, start, end):  # exchange_calendars hands out its cached instance: build a new one
        created.append(name)
        return kind(start=start, end=end)

    monkeypatch.setattr(exchange_calendar, "compute_minutes", counted)
    monkeypatch.setattr(calendar.exchange_calendars, "get_calendar", fresh)
    monkeypatch.setattr(calendar, "_CALENDAR", [])  # this process's calendar, as before its first use
    minute = utc(2026, 2, 23, 15, 30)

    with ThreadPoolExecutor(max_workers=8) as pool:
        calendars = list(pool.map(lambda _: calendar.xnys_minutes(), range(8)))
        sessions = list(pool.map(lambda _: calendar.session_of_minute(minute), range(8)))

    assert len({id(cal) for cal in calendars}) == 1
    assert calendars[0] is calendar.xnys()
    assert created == ["XNYS"]
    assert built == [1]
    assert sessions == [date(2026, 2, 23)] * 8
