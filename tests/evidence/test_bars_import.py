import json
import re
from datetime import date
from pathlib import Path

import polars as pl
import pytest
import time_machine
from django.core.management import CommandError, call_command

from evidence.marketdata import calendar
from evidence.marketdata.importers import ImportRejected, bars_import
from evidence.marketdata.selectors import bars_data_version, bars_read, bars_source
from evidence.models import BarPartition, Symbol
from tests.evidence.factories import daily_bars, minute_bars, utc

pytestmark = pytest.mark.django_db

SESSIONS = [date(2026, 6, 29), date(2026, 6, 30)]


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_import_writes_partition_and_reads_back_exact_bars(data_dir: Path) -> None:
    frame = minute_bars(SESSIONS)

    report = bars_import(ticker="aapl", frequency="1m", frame=frame, name="Apple")

    symbol = Symbol.objects.get()
    assert (symbol.ticker, symbol.name, symbol.asset_class, symbol.frequencies) == ("AAPL", "Apple", "equity", ["1m"])
    assert report.rows_written == 780
    assert report.symbol_created is True
    assert (report.gaps.checked, report.gaps.sessions_expected, report.gaps.missing_bars) == (True, 2, 0)
    assert report.warnings == []
    partition = BarPartition.objects.get()
    assert (partition.year, partition.row_count, partition.first_ts, partition.last_ts) == (
        2026,
        780,
        utc(2026, 6, 29, 13, 30),
        utc(2026, 6, 30, 19, 59),
    )
    assert (data_dir / partition.path).is_file()
    read = bars_read(symbol=symbol, frequency="1m")
    assert read.equals(frame)
    window = bars_read(symbol=symbol, frequency="1m", start=utc(2026, 6, 30, 13, 30), end=utc(2026, 6, 30, 13, 34))
    assert window.get_column("close").to_list() == [103.91, 103.92, 103.93, 103.94, 103.95]


def test_data_version_changes_with_the_bars_returned() -> None:
    bars_import(ticker="AAPL", frequency="1m", frame=minute_bars(SESSIONS))
    symbol = Symbol.objects.get()

    whole = bars_data_version(symbol=symbol, frequency="1m")
    again = bars_data_version(symbol=symbol, frequency="1m")
    first_day = bars_data_version(symbol=symbol, frequency="1m", end=utc(2026, 6, 29, 23))

    assert whole == again
    assert len(whole) == 64
    assert first_day != whole


def test_gap_report_lists_missing_minutes_and_sessions() -> None:
    frame = minute_bars([date(2026, 6, 26), date(2026, 6, 30)])
    frame = frame.filter(pl.col("ts") != utc(2026, 6, 30, 14, 0))

    report = bars_import(ticker="MSFT", frequency="1m", frame=frame)

    assert report.gaps.sessions_missing == ["2026-06-29"]
    assert report.gaps.sessions_with_gaps == [{"session": "2026-06-30", "missing_bars": 1}]
    assert report.gaps.missing_bars == 391


def test_gap_report_after_a_backfill_describes_the_stored_sessions_not_the_file() -> None:
    bars_import(ticker="MSFT", frequency="1m", frame=minute_bars([date(2026, 6, 29)]))

    report = bars_import(ticker="MSFT", frequency="1m", frame=minute_bars([date(2026, 6, 26), date(2026, 6, 30)]))

    assert (report.gaps.sessions_expected, report.gaps.sessions_missing, report.gaps.missing_bars) == (3, [], 0)
    assert (report.gaps.first_session, report.gaps.last_session) == ("2026-06-26", "2026-06-30")


def test_gap_report_counts_the_sessions_between_stored_and_new_bars() -> None:
    bars_import(ticker="MSFT", frequency="1d", frame=daily_bars([date(2025, 12, 29)]))  # the year's own partition
    bars_import(ticker="MSFT", frequency="1d", frame=daily_bars([date(2026, 1, 9)]))

    report = bars_import(ticker="MSFT", frequency="1d", frame=daily_bars([date(2026, 1, 5)]))

    assert (report.gaps.sessions_expected, report.gaps.sessions_missing, report.gaps.missing_bars) == (
        9,
        ["2025-12-30", "2025-12-31", "2026-01-02", "2026-01-06", "2026-01-07", "2026-01-08"],
        6,
    )
    assert (report.gaps.first_session, report.gaps.last_session) == ("2025-12-29", "2026-01-09")


def test_hourly_bars_that_crowd_a_stored_session_are_rejected_and_nothing_is_written(data_dir: Path) -> None:
    on_the_hour = minute_bars(SESSIONS[:1]).gather_every(60)  # 13:30 .. 19:30: the session's 7 hourly slots
    bars_import(ticker="HOURLY", frequency="1h", frame=on_the_hour)
    before = _files(data_dir)

    on_the_half_hour = minute_bars(SESSIONS[:1]).gather_every(60, offset=30)  # 6 more, each alone on its grid

    with pytest.raises(ImportRejected) as refused:
        bars_import(ticker="HOURLY", frequency="1h", frame=on_the_half_hour)

    assert refused.value.message == "1 sessions hold more bars than 1h bars can fill"
    assert refused.value.details["examples"] == ["2026-06-29: 13 bars, at most 7"]
    assert BarPartition.objects.get().row_count == 7
    assert _files(data_dir) == before


SPLIT_WEEK = [date(2026, 6, 23), date(2026, 6, 24), date(2026, 6, 25), date(2026, 6, 26)]


def test_a_session_opening_at_half_the_previous_close_is_stored_with_a_split_warning() -> None:
    frame = daily_bars(SPLIT_WEEK, opens=[198.0, 201.0, 100.2, 103.1], closes=[201.0, 200.4, 103.1, 99.0])

    report = bars_import(ticker="SPLT", frequency="1d", frame=frame)

    assert report.warnings == [
        "SPLT 2026-06-25: opened at 100.2, -50.0% from the close of 200.4 on 2026-06-24, within 1.5% of a 2:1 "
        "split's open: possibly an unadjusted split, possibly a real move; check that the bars are split-adjusted"
    ]
    assert report.warnings_total == 1
    assert len(bars_read(symbol=Symbol.objects.get(), frequency="1d")) == 4


def test_a_reverse_split_between_stored_and_new_sessions_is_warned() -> None:
    bars_import(ticker="RVRS", frequency="1m", frame=minute_bars([date(2026, 6, 26)], start_price=10.0))

    report = bars_import(ticker="RVRS", frequency="1m", frame=minute_bars([date(2026, 6, 29)], start_price=139.0))

    assert report.warnings == [
        "RVRS 2026-06-29: opened at 139, +900.0% from the close of 13.9 on 2026-06-26, within 1.5% of a 1:10 "
        "reverse split's open: possibly an unadjusted split, possibly a real move; check that the bars are "
        "split-adjusted"
    ]
    assert report.warnings_total == 1


def test_a_twenty_for_one_split_is_warned() -> None:
    frame = daily_bars(SPLIT_WEEK, opens=[2000.0, 2010.0, 100.8, 102.0], closes=[2010.0, 2000.0, 102.0, 103.0])

    report = bars_import(ticker="TWNY", frequency="1d", frame=frame)

    assert report.warnings == [
        "TWNY 2026-06-25: opened at 100.8, -95.0% from the close of 2000 on 2026-06-24, within 1.5% of a 20:1 "
        "split's open: possibly an unadjusted split, possibly a real move; check that the bars are split-adjusted"
    ]
    assert report.warnings_total == 1


@pytest.mark.parametrize(
    ("open_", "ratio"),
    [(68.0, None), (66.0, "3:2"), (51.6, None), (50.7, "2:1"), (1012.0, "1:10 reverse"), (1020.0, None)],
)
def test_only_opens_within_the_tolerance_of_a_split_ratio_are_warned(open_: float, ratio: str | None) -> None:
    # against a close of 100: a -32% crash is 2.0% from a 3:2 split's open, 51.6 is 3.2% from a 2:1's, 1,020 is 2.0%
    # from a 1:10 reverse split's; 66, 50.7 and 1,012 lie within 1.5% of one
    frame = daily_bars(SPLIT_WEEK[:2], opens=[100.0, open_], closes=[100.0, open_])

    report = bars_import(ticker="EDGE", frequency="1d", frame=frame)

    named = [found.group(1) for warning in report.warnings if (found := re.search(r"of a (.+?) split's", warning))]
    assert (named, report.warnings_total) == (([ratio], 1) if ratio else ([], 0))


def test_ordinary_overnight_gaps_carry_no_split_warning() -> None:
    # +8%, -10% and +30% overnight: large moves, but none within the tolerance of a split ratio
    frame = daily_bars(SPLIT_WEEK, opens=[100.0, 108.0, 90.0, 104.0], closes=[100.0, 100.0, 80.0, 85.0])

    report = bars_import(ticker="GAPS", frequency="1d", frame=frame)

    assert (report.warnings, report.warnings_total) == ([], 0)


def test_a_file_of_jumps_lists_the_first_twenty_warnings_and_counts_them_all() -> None:
    sessions = calendar.schedule(date(2026, 4, 1), date(2026, 6, 30)).get_column("session").head(31).to_list()
    prices = [100.0 if i % 2 == 0 else 50.0 for i in range(len(sessions))]  # halves, then doubles, every session

    report = bars_import(ticker="JUMPY", frequency="1d", frame=daily_bars(sessions, opens=prices, closes=prices))

    assert report.warnings_total == 30
    assert len(report.warnings) == 20
    assert report.warnings[0] == (
        "JUMPY 2026-04-02: opened at 50, -50.0% from the close of 100 on 2026-04-01, within 1.5% of a 2:1 split's "
        "open: possibly an unadjusted split, possibly a real move; check that the bars are split-adjusted"
    )
    assert report.warnings[19] == (
        f"JUMPY {sessions[20]}: opened at 100, +100.0% from the close of 50 on {sessions[19]}, within 1.5% of a 1:2 "
        "reverse split's open: possibly an unadjusted split, possibly a real move; check that the bars are "
        "split-adjusted"
    )
    assert len(bars_read(symbol=Symbol.objects.get(), frequency="1d")) == 31


def test_command_prints_the_capped_warnings_with_their_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = calendar.schedule(date(2026, 4, 1), date(2026, 6, 30)).get_column("session").head(25).to_list()
    prices = [100.0 if i % 2 == 0 else 50.0 for i in range(len(sessions))]
    path = tmp_path / "jumpy.parquet"
    daily_bars(sessions, opens=prices, closes=prices).write_parquet(path)

    call_command("import_bars", str(path), "--symbol", "JUMPY", "--frequency", "1d")

    report = json.loads(capsys.readouterr().out)
    assert (len(report["warnings"]), report["warnings_total"]) == (20, 24)
    assert report["gaps"]["missing_bars"] == 0


def test_second_import_extends_history_and_rejects_overlap(data_dir: Path) -> None:
    bars_import(ticker="AAPL", frequency="1m", frame=minute_bars(SESSIONS[:1]))
    bars_import(ticker="AAPL", frequency="1m", frame=minute_bars(SESSIONS[1:]))
    symbol = Symbol.objects.get()
    before = _files(data_dir)

    with pytest.raises(ImportRejected, match="390 bars overlap bars already stored"):
        bars_import(ticker="AAPL", frequency="1m", frame=minute_bars(SESSIONS[1:]))

    assert BarPartition.objects.get().row_count == 780
    assert len(bars_read(symbol=symbol, frequency="1m")) == 780
    assert _files(data_dir) == before


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: pl.concat([f, f.tail(1)]), "1 duplicate timestamps"),
        (lambda f: f.reverse(), "timestamps are not increasing at 389 rows"),
        (lambda f: f.with_columns(high=pl.col("low")), "high_below_open_or_close (390 rows)"),
        (lambda f: f.with_columns(low=pl.col("high") + 1), "low_above_open_or_close (390 rows)"),
        (lambda f: f.with_columns(volume=pl.lit(-1.0)), "negative_or_non_finite_volume (390 rows)"),
        (lambda f: f.with_columns(ts=pl.col("ts") + pl.duration(hours=7)), "bars fall outside XNYS regular sessions"),
        (lambda f: f.with_columns(ts=pl.col("ts") + pl.duration(seconds=30)), "must start on a whole minute"),
        (lambda f: f.drop("volume"), "missing columns: volume"),
        (lambda f: f.with_columns(ts=pl.col("ts").dt.replace_time_zone(None)), "time-zone-aware"),
    ],
)
def test_malformed_bars_are_rejected_and_nothing_is_written(mutate, message: str, data_dir: Path) -> None:
    frame = mutate(minute_bars(SESSIONS[:1]))

    with pytest.raises(ImportRejected, match=re.escape(message)):
        bars_import(ticker="AAPL", frequency="1m", frame=frame)

    assert Symbol.objects.exists() is False
    assert BarPartition.objects.exists() is False
    assert _files(data_dir) == []


def test_five_minute_bars_must_sit_on_the_session_grid() -> None:
    frame = minute_bars(SESSIONS[:1]).filter(pl.col("ts").dt.minute() % 5 == 2)

    with pytest.raises(ImportRejected, match="multiples of 5 minutes from the session open") as raised:
        bars_import(ticker="AAPL", frequency="5m", frame=frame)

    assert raised.value.details["examples"][0] == "2026-06-29T13:32:00+00:00"
    assert Symbol.objects.exists() is False


def test_daily_bars_on_a_holiday_are_rejected() -> None:
    frame = pl.DataFrame(
        {
            "ts": [utc(2026, 7, 2), utc(2026, 7, 3)],
            "open": [1.0] * 2,
            "high": [1.0] * 2,
            "low": [1.0] * 2,
            "close": [1.0] * 2,
            "volume": [0.0] * 2,
        },
        schema_overrides={"ts": pl.Datetime("us", "UTC")},
    )

    with pytest.raises(ImportRejected, match="1 daily bars fall on days that are not XNYS sessions"):
        bars_import(ticker="SPY", frequency="1d", frame=frame, asset_class="etf")

    assert Symbol.objects.exists() is False


def test_crypto_bars_skip_the_exchange_calendar() -> None:
    frame = minute_bars(SESSIONS[:1]).with_columns(ts=pl.col("ts") + pl.duration(hours=7))

    report = bars_import(ticker="BTC-USD", frequency="1m", frame=frame, asset_class="crypto", currency="USD")

    assert (report.rows_written, report.gaps.checked) == (390, False)


def test_command_reads_vendor_csv_with_split_date_and_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bars = minute_bars(SESSIONS[:1]).head(3)
    local = bars.get_column("ts").dt.convert_time_zone("America/New_York")
    csv = pl.DataFrame(
        {
            "<DATE>": local.dt.strftime("%Y%m%d"),
            "<TIME>": local.dt.strftime("%H%M%S"),
            "<OPEN>": bars["open"],
            "<HIGH>": bars["high"],
            "<LOW>": bars["low"],
            "<CLOSE>": bars["close"],
            "<VOL>": bars["volume"],
        }
    )
    path = tmp_path / "aapl.csv"
    csv.write_csv(path)

    call_command("import_bars", str(path), "--symbol", "aapl", "--frequency", "1m", "--timezone", "America/New_York")

    report = json.loads(capsys.readouterr().out)
    assert (report["ticker"], report["rows_written"], report["first_ts"]) == ("AAPL", 3, "2026-06-29T13:30:00+00:00")
    assert bars_read(symbol=Symbol.objects.get(), frequency="1m").equals(bars)


def test_command_reads_epoch_millisecond_parquet_and_reports_rejection(tmp_path: Path) -> None:
    bars = minute_bars(SESSIONS[:1]).head(3)
    path = tmp_path / "bad.parquet"
    bars.select(
        t=pl.col("ts").dt.epoch("ms"), o="open", h="high", l="low", c="close", v=pl.col("volume") * -1
    ).write_parquet(path)

    with pytest.raises(CommandError, match="import rejected: inconsistent OHLCV bars: negative_or_non_finite_volume"):
        call_command("import_bars", str(path), "--symbol", "AAPL", "--frequency", "1m")

    assert Symbol.objects.exists() is False


HEADER = "ts,open,high,low,close,volume\n"


def _import_file(tmp_path: Path, content: bytes, *options: str) -> None:
    path = tmp_path / "bars.csv"
    path.write_bytes(content)
    call_command("import_bars", str(path), "--symbol", "AAPL", "--frequency", "1m", *options)


NOW = utc(2026, 7, 1, 15, 0)


@pytest.mark.parametrize(
    ("row", "frequency", "asset_class"),
    [
        ("9999-12-31T23:59:00Z", "1m", "equity"),  # past pandas' nanosecond bounds: the schedule slice raised KeyError
        ("0001-01-01T00:00:00Z", "1d", "equity"),
        ("2031-01-02T15:00:00Z", "1m", "equity"),  # a weekday the calendar has not loaded, not "no session"
        ("9999-12-31T23:59:00Z", "1m", "crypto"),  # a 24/7 calendar has no range of its own to check
        ("0001-01-01T00:00:00Z", "1d", "crypto"),
        ("1884-12-31T00:00:00Z", "1d", "crypto"),
        ("2026-07-01T15:06:00Z", "1m", "crypto"),  # one minute past the clock skew
    ],
)
def test_command_rejects_bars_before_the_stores_first_day_or_in_the_future_and_writes_nothing(
    row: str, frequency: str, asset_class: str, tmp_path: Path, data_dir: Path
) -> None:
    before = _files(data_dir)

    with time_machine.travel(NOW, tick=False), pytest.raises(CommandError) as raised:
        _import_file(
            tmp_path, f"{HEADER}{row},1,1,1,1,1\n".encode(), "--frequency", frequency, "--asset-class", asset_class
        )

    example = row.replace("Z", "+00:00")
    assert str(raised.value) == (
        "import rejected: 1 bars lie outside the dates the store accepts, 1885-01-01 (its earliest day, the first of "
        "the XNYS calendar) to 2026-07-01T15:05:00+00:00 (now plus 5 minutes of clock skew) "
        f'{{"earliest": "1885-01-01", "examples": ["{example}"], "latest": "2026-07-01T15:05:00+00:00", '
        '"outside_count": 1}'
    )
    assert Symbol.objects.exists() is False
    assert BarPartition.objects.exists() is False
    assert _files(data_dir) == before


def test_crypto_bars_on_the_stores_first_day_and_within_the_clock_skew_are_stored() -> None:
    frame = pl.DataFrame(
        {
            "ts": [utc(1885, 1, 1), utc(2026, 7, 1)],
            **{c: [1.0, 1.0] for c in ("open", "high", "low", "close", "volume")},
        },
        schema_overrides={"ts": pl.Datetime("us", "UTC")},
    )
    minute = frame.with_columns(ts=pl.Series([utc(2026, 7, 1, 15, 4), utc(2026, 7, 1, 15, 5)]))

    with time_machine.travel(NOW, tick=False):
        daily = bars_import(ticker="BTCUSD", frequency="1d", frame=frame, asset_class="crypto")
        minutes = bars_import(ticker="BTCUSD", frequency="1m", frame=minute, asset_class="crypto")

    assert (daily.rows_written, daily.first_ts) == (2, utc(1885, 1, 1))
    assert (minutes.rows_written, minutes.last_ts) == (2, utc(2026, 7, 1, 15, 5))


@pytest.mark.parametrize(
    ("content", "options", "message"),
    [
        (b"", [], "unreadable file or timestamps: empty CSV"),
        (HEADER.encode(), [], "no bars to import {}"),
        (
            f"{HEADER}2026-06-29T13:30:00Z,\xff,1,1,1,1\n".encode("latin-1"),
            [],
            "unreadable file or timestamps: invalid utf-8 sequence",
        ),
        (
            f"{HEADER}2026-06-29T13:30:00Z,true,true,true,true,false\n".encode(),
            [],
            'price and volume columns must be numeric, not true/false '
            '{"boolean_columns": ["open", "high", "low", "close", "volume"]}',
        ),
        (
            f"{HEADER}2026-06-29T13:30:00Z,1,1\n2026-06-29T13:31:00Z,1,1,1,1,1,1\n".encode(),
            [],
            "unreadable file or timestamps: found more fields than defined in 'Schema'\n\n"
            "Consider setting 'truncate_ragged_lines=True'.",
        ),
        (
            f"{HEADER}99999999999999999999999999,1,1,1,1,1\n".encode(),
            [],
            "unreadable file or timestamps: conversion from `f64` to `i64` failed in column 'ts' for 1 out of 1 "
            "values: [1.0000e23]",
        ),
    ],
)  # fmt: skip
def test_command_rejects_a_hostile_file_with_a_message_and_writes_nothing(
    content: bytes, options: list[str], message: str, tmp_path: Path, data_dir: Path
) -> None:
    with pytest.raises(CommandError) as raised:
        _import_file(tmp_path, content, *options)

    assert str(raised.value) == f"import rejected: {message}"
    assert Symbol.objects.exists() is False
    assert BarPartition.objects.exists() is False
    assert _files(data_dir) == []


@pytest.mark.parametrize(
    ("zone", "row", "message"),
    [
        ("Bogus/Zone", "2026-06-29 09:30:00", "unable to parse time zone: 'Bogus/Zone'"),
        ("America/New_York", "2026-03-08 02:30:00", "datetime '2026-03-08 02:30:00' is non-existent in time zone"),
        ("America/New_York", "2026-11-01 01:30:00", "datetime '2026-11-01 01:30:00' is ambiguous in time zone"),
    ],
)
def test_command_rejects_a_zone_it_cannot_apply_and_writes_nothing(
    zone: str, row: str, message: str, tmp_path: Path, data_dir: Path
) -> None:
    with pytest.raises(CommandError) as raised:
        _import_file(tmp_path, f"{HEADER}{row},1,1,1,1,1\n".encode(), "--timezone", zone)

    assert str(raised.value).startswith(f"import rejected: unreadable file or timestamps: {message}")
    assert Symbol.objects.exists() is False
    assert BarPartition.objects.exists() is False
    assert _files(data_dir) == []


@pytest.mark.parametrize("ticker", ["A/../../../ESC", "A/..", "A/./B", "A//B", "A/"])
def test_a_ticker_that_would_leave_its_directory_is_refused_and_nothing_is_written(ticker: str, data_dir: Path) -> None:
    around = _files(data_dir.parent)  # A/../../../ESC was written beside the store, not in it

    with pytest.raises(ImportRejected, match=re.escape(f"invalid ticker {ticker!r}")):
        bars_import(ticker=ticker, frequency="1m", frame=minute_bars(SESSIONS[:1]))

    assert Symbol.objects.exists() is False
    assert _files(data_dir.parent) == around
    assert _files(data_dir) == []


@pytest.mark.parametrize("ticker", ["BRK.B", "^GSPC", "EUR/USD"])
def test_vendor_tickers_with_dots_carets_and_slashes_are_stored(ticker: str) -> None:
    bars_import(ticker=ticker, frequency="1m", frame=minute_bars(SESSIONS[:1]))

    assert Symbol.objects.get().ticker == ticker


YAHOO_US = "Date,Open,High,Low,Close,Adj Close,Volume\n06/01/2015,10,11,9,10,10,100\n06/02/2015,10,11,9,10,10,100\n"


def test_slashed_dates_are_refused_as_ambiguous_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "us.csv"
    path.write_text(YAHOO_US)

    with pytest.raises(CommandError) as refused:
        call_command("import_bars", str(path), "--symbol", "USD8", "--frequency", "1d")

    assert str(refused.value) == (
        "import rejected: dates like '06/01/2015' read either day or month first; pass --date-format "
        "(e.g. '%m/%d/%Y' or '%d/%m/%Y %H:%M') {\"example\": \"06/01/2015\"}"
    )
    assert Symbol.objects.exists() is False


def test_a_date_format_reads_month_first_dates_as_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "us.csv"
    path.write_text(YAHOO_US)

    call_command("import_bars", str(path), "--symbol", "USD8", "--frequency", "1d", "--date-format", "%m/%d/%Y")

    report = json.loads(capsys.readouterr().out)
    assert (report["first_ts"], report["last_ts"], report["rows_written"]) == (
        "2015-06-01T00:00:00+00:00",
        "2015-06-02T00:00:00+00:00",
        2,
    )


def test_split_times_without_seconds_are_read_as_hours_and_minutes(tmp_path: Path) -> None:
    path = tmp_path / "hhmm.csv"
    path.write_text("date,time,open,high,low,close,volume\n2026-06-29,09:30,1,1,1,1,1\n2026-06-29,9:31,1,1,1,1,1\n")

    call_command("import_bars", str(path), "--symbol", "HHMM", "--frequency", "1m", "--timezone", "America/New_York")

    stored = bars_read(symbol=Symbol.objects.get(), frequency="1m").get_column("ts").to_list()
    assert stored == [utc(2026, 6, 29, 13, 30), utc(2026, 6, 29, 13, 31)]


def test_hourly_bars_denser_than_hours_are_rejected_and_nothing_is_written(data_dir: Path) -> None:
    half_hours = minute_bars(SESSIONS[:1]).gather_every(30)  # 13 bars in a session an hourly grid fills with 7

    with pytest.raises(ImportRejected) as refused:
        bars_import(ticker="HOURLY", frequency="1h", frame=half_hours)

    assert refused.value.message == "1 sessions hold more bars than 1h bars can fill"
    assert refused.value.details["examples"] == ["2026-06-29: 13 bars, at most 7"]
    assert Symbol.objects.exists() is False
    assert _files(data_dir) == []


def test_a_lone_time_column_of_epoch_seconds_is_the_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "tradingview.csv"
    path.write_text("time,open,high,low,close,Volume\n1782739800,1,1,1,1,1\n1782739860,1,1,1,1,1\n")

    call_command("import_bars", str(path), "--symbol", "TV", "--frequency", "1m")

    stored = bars_read(symbol=Symbol.objects.get(), frequency="1m").get_column("ts").to_list()
    assert stored == [utc(2026, 6, 29, 13, 30), utc(2026, 6, 29, 13, 31)]


def test_imported_bars_are_named_vendor_per_frequency_and_a_frequency_not_stored_has_no_source() -> None:
    bars_import(ticker="AAPL", frequency="1m", frame=minute_bars(SESSIONS))
    symbol = Symbol.objects.get()

    assert (bars_source(symbol=symbol), bars_source(symbol=symbol, frequency="1m")) == ("vendor", "vendor")
    assert bars_source(symbol=symbol, frequency="1d") is None


def test_demo_bars_are_named_synthetic_in_every_frequency(world) -> None:
    symbol = Symbol.objects.get(ticker="ALFA")

    assert (bars_source(symbol=symbol), bars_source(symbol=symbol, frequency="1m")) == ("synthetic", "synthetic")
