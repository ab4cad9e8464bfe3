import json
import re
from datetime import date
from pathlib import Path

import polars as pl
import pytest
from django.core.management import CommandError, call_command

from evidence.marketdata.importers import ImportRejected, bars_import
from evidence.marketdata.selectors import bars_data_version, bars_read
from evidence.models import BarPartition, Symbol
from tests.evidence.factories import minute_bars, utc

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
