from datetime import date, timedelta

import polars as pl

from evidence.marketdata import calendar
from evidence.memory.features import regime_sessions, symbol_frame
from evidence.vocabulary import HORIZONS
from tests.evidence.factories import minute_bars, utc

EARLY_CLOSE = date(2025, 11, 28)  # Black Friday: XNYS closes at 13:00 ET


def _row(frame: pl.DataFrame, ts: object) -> dict:
    return frame.filter(pl.col("ts") == ts).row(0, named=True)


def test_label_is_the_same_session_forward_return_in_1e8_units() -> None:
    bars = minute_bars([date(2026, 6, 29)])
    frame = symbol_frame(bars, bars)

    row = _row(frame, utc(2026, 6, 29, 13, 30))

    # close 100.01 at t, 100.06 five bars later; highs run one step above each close, lows one step below opens
    assert row["lbl_5"] == round((100.06 / 100.01 - 1) * 1e8)
    assert row["hi_5"] == round((100.07 / 100.01 - 1) * 1e8)
    assert row["lo_5"] == round((100.00 / 100.01 - 1) * 1e8)
    assert row["lbl_60"] == round((100.61 / 100.01 - 1) * 1e8)


def test_labels_never_cross_the_close() -> None:
    bars = minute_bars([date(2026, 6, 29), date(2026, 6, 30)])
    frame = symbol_frame(bars, bars)

    last_with_5 = _row(frame, utc(2026, 6, 29, 19, 54))
    first_without_5 = _row(frame, utc(2026, 6, 29, 19, 55))
    last_minute = _row(frame, utc(2026, 6, 29, 19, 59))

    assert last_with_5["lbl_5"] is not None
    assert first_without_5["lbl_5"] is None
    assert [last_minute[f"lbl_{h}"] for h in HORIZONS] == [None, None, None, None]
    coverage = [frame.get_column(f"lbl_{h}").is_not_null().sum() for h in HORIZONS]
    assert coverage == [2 * (390 - h) for h in HORIZONS]


def test_a_missing_future_bar_leaves_the_label_null() -> None:
    bars = minute_bars([date(2026, 6, 29)]).filter(pl.col("ts") != utc(2026, 6, 29, 14, 0))
    frame = symbol_frame(bars, bars)

    assert _row(frame, utc(2026, 6, 29, 14, 0))["is_fill"] is True
    assert _row(frame, utc(2026, 6, 29, 13, 55))["lbl_5"] is None  # its window (13:56..14:00] holds the gap
    assert _row(frame, utc(2026, 6, 29, 13, 54))["lbl_5"] is not None
    assert _row(frame, utc(2026, 6, 29, 14, 0))["lbl_5"] is None  # no trade at t: no entry price
    assert _row(frame, utc(2026, 6, 29, 14, 1))["lbl_5"] is not None


def test_an_early_close_ends_labels_at_its_own_close() -> None:
    session = calendar.schedule(EARLY_CLOSE, EARLY_CLOSE).row(0, named=True)
    assert session["session_close"] == utc(2025, 11, 28, 18, 0)  # 13:00 ET
    bars = minute_bars([EARLY_CLOSE])
    frame = symbol_frame(bars, bars)

    assert len(frame) == 210
    assert _row(frame, utc(2025, 11, 28, 17, 54))["lbl_5"] is not None
    assert _row(frame, utc(2025, 11, 28, 17, 55))["lbl_5"] is None
    assert _row(frame, utc(2025, 11, 28, 17, 0) - timedelta(minutes=1))["lbl_60"] is not None
    assert _row(frame, utc(2025, 11, 28, 17, 0))["lbl_60"] is None
    assert frame.get_column("lbl_60").is_not_null().sum() == 150


def test_regime_thresholds_use_only_trailing_sessions() -> None:
    sessions = calendar.sessions_between(date(2026, 1, 2), date(2026, 4, 30))[:70]
    bars = minute_bars(sessions, step=0.001)
    full = regime_sessions(symbol_frame(bars, bars).select("session", "close", "session_pos"))
    early = regime_sessions(
        symbol_frame(bars.filter(pl.col("ts").dt.date() <= sessions[62]), bars).select(
            "session", "close", "session_pos"
        )
    )

    # buckets for session d depend on sessions <= d-1 only: a shorter history gives the same early buckets
    assert full.head(63).equals(early)
    assert full.filter(pl.col("session") == sessions[59]).get_column("volatility").item() is None
    assert full.filter(pl.col("session") == sessions[60]).get_column("volatility").item() is not None
    assert full.filter(pl.col("session") == sessions[60]).get_column("trend").item() == 1  # a steady uptrend
