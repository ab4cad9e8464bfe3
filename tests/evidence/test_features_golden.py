"""Golden check: the Polars boundary-mask pipeline against a plain per-session pandas reference."""

from datetime import date

import numpy as np
import pandas as pd
import polars as pl
import pytest

from evidence.marketdata import demo
from evidence.memory.features import symbol_frame


@pytest.fixture(scope="module")
def frames() -> tuple[pl.DataFrame, pd.DataFrame]:
    bars = demo.generate(symbols=1, sessions=25, seed=4, start=date(2024, 3, 1))
    shipped = symbol_frame(bars["ALFA"], bars[demo.BENCHMARK])
    return shipped, shipped.select("session", "minute_of_session", "open", "high", "low", "close", "volume").to_pandas()


def reference(frame: pd.DataFrame) -> pd.DataFrame:
    c, h, lo, v = frame["close"], frame["high"], frame["low"], frame["volume"]
    delta = c.diff()
    gain = delta.clip(lower=0).ewm(alpha=1 / 14, adjust=False, min_periods=14).mean()
    loss = (-delta).clip(lower=0).ewm(alpha=1 / 14, adjust=False, min_periods=14).mean()
    tp = (h + lo + c) / 3
    by_session = frame.groupby("session", sort=False)
    vwap = (tp * v).groupby(frame["session"]).cumsum() / v.groupby(frame["session"]).cumsum()
    prior_high, prior_low = h.rolling(20).max().shift(1), lo.rolling(20).min().shift(1)
    same_minute = v.groupby(frame["minute_of_session"]).transform(lambda s: s.rolling(20).mean().shift(1))
    or_high = by_session["high"].transform(lambda s: s.iloc[:15].max())
    or_low = by_session["low"].transform(lambda s: s.iloc[:15].min())
    return pd.DataFrame(
        {
            "rsi14": 100 * gain / (gain + loss),
            "vwap_gap": c / vwap - 1,
            "donchian20_pos": (c - prior_low) / (prior_high - prior_low),
            "rvol": v / same_minute,
            "or15_pos": ((c - or_low) / (or_high - or_low)).where(frame["minute_of_session"] >= 14),
            "r15": c / c.shift(15) - 1,
        }
    )


@pytest.mark.parametrize("name", ["rsi14", "vwap_gap", "donchian20_pos", "rvol", "or15_pos", "r15"])
def test_polars_features_match_the_pandas_reference(frames: tuple[pl.DataFrame, pd.DataFrame], name: str) -> None:
    shipped, raw = frames
    expected = reference(raw)[name].to_numpy(dtype=float, na_value=np.nan)
    actual = shipped.get_column(name).to_numpy().astype(float)

    assert np.array_equal(np.isnan(actual), np.isnan(expected))
    assert np.allclose(actual, expected, rtol=1e-9, atol=1e-12, equal_nan=True)
