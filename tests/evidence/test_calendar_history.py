"""The XNYS calendar covers real history before 2005: every session, holiday and early close of 1990-2005."""

import csv
import gzip
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl
import pytest

from evidence.marketdata import calendar
from evidence.marketdata.importers import bars_import
from evidence.models import Symbol

# The real XNYS sessions 1990-2005 with their open and close (exchange-calendars' own reference file).
SESSIONS = Path(__file__).with_name("resources") / "xnys_sessions_1990_2005.csv.gz"


def real_sessions() -> list[tuple[date, str, str]]:
    with gzip.open(SESSIONS, "rt") as handle:
        rows = list(csv.reader(line for line in handle if not line.startswith("#")))
    return [(date.fromisoformat(day), open_, close) for day, open_, close in rows[1:]]


def test_every_session_1990_to_2005_with_its_open_and_close():
    expected = real_sessions()
    frame = calendar.schedule(date(1990, 1, 1), date(2005, 12, 31))

    got = list(
        zip(
            frame.get_column("session").to_list(),
            frame.get_column("session_open").dt.strftime("%H:%M").to_list(),
            frame.get_column("session_close").dt.strftime("%H:%M").to_list(),
            strict=True,
        )
    )

    assert len(expected) == 4036
    assert got == expected
    assert calendar.sessions_between(date(1990, 1, 1), date(2005, 12, 31)) == [row[0] for row in expected]


def test_closures_and_early_closes_of_the_1990s_and_2000s():
    sessions = set(calendar.sessions_between(date(1990, 1, 1), date(2005, 12, 31)))
    closes = dict(real_sessions_closes())

    assert {date(2001, 9, d) for d in (11, 12, 13, 14)} & sessions == set()  # closed after the attacks
    assert {date(2001, 9, 10), date(2001, 9, 17)} <= sessions
    assert date(1994, 4, 27) not in sessions  # President Nixon's funeral
    assert date(2004, 6, 11) not in sessions  # President Reagan's funeral
    assert date(1985, 9, 27) not in calendar.sessions_between(date(1985, 9, 1), date(1985, 9, 30))  # Hurricane Gloria
    assert closes[date(1998, 11, 27)] == "18:00"  # the day after Thanksgiving: 13:00 in New York
    assert closes[date(1998, 11, 25)] == "21:00"
    assert calendar.session_offset(date(2001, 9, 10), 1) == date(2001, 9, 17)


def real_sessions_closes():
    return [(day, close) for day, _, close in real_sessions()]


@pytest.mark.django_db
def test_real_daily_bars_from_2004_import(settings, tmp_path):
    settings.LEROY_DATA_DIR = str(tmp_path / "data")
    days = [day for day, _, _ in real_sessions() if day.year == 2004]
    frame = pl.DataFrame(
        {
            "ts": [datetime(d.year, d.month, d.day, tzinfo=UTC) for d in days],
            **{column: [100.0 + i / 10 for i in range(len(days))] for column in ("open", "high", "low", "close")},
            "volume": [1000.0] * len(days),
        }
    ).with_columns(pl.col("ts").cast(pl.Datetime("us", "UTC")))

    bars_import(ticker="OLD", frequency="1d", frame=frame, asset_class="equity", name="Old Co")

    assert len(days) == 252
    assert Symbol.objects.get(ticker="OLD").frequencies == ["1d"]
