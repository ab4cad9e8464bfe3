"""Look-ahead property: perturbing every bar after a cut changes nothing known at or before the cut."""

from collections.abc import Callable
from datetime import date, timedelta

import numpy as np
import polars as pl
import pytest

from evidence.marketdata import demo
from evidence.memory import strategies
from evidence.memory.features import symbol_frame
from evidence.vocabulary import HORIZONS, WARMUP_SESSIONS

Pipeline = Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame]
LABEL_COLUMNS = {f"{kind}_{h}": h for h in HORIZONS for kind in ("lbl", "hi", "lo")}


def shipped(bars: pl.DataFrame, bench: pl.DataFrame) -> pl.DataFrame:
    return strategies.with_states(symbol_frame(bars, bench))


def leaky(bars: pl.DataFrame, bench: pl.DataFrame) -> pl.DataFrame:
    # A planted look-ahead: the session's final high is unknown until the close.
    return shipped(bars, bench).with_columns(session_high_gap=pl.col("close") / pl.col("high").max().over("session"))


@pytest.fixture(scope="module")
def universe() -> dict[str, pl.DataFrame]:
    return demo.generate(symbols=1, sessions=WARMUP_SESSIONS + 3, seed=11, start=date(2024, 1, 2))


def perturbed(bars: pl.DataFrame, cut: object, rng: np.random.Generator) -> pl.DataFrame:
    after = bars.get_column("ts") > cut
    factor = pl.Series(np.where(after.to_numpy(), rng.uniform(0.5, 1.5, len(bars)), 1.0))
    volume = pl.Series(np.where(after.to_numpy(), rng.integers(0, 100_000, len(bars)), bars["volume"].to_numpy()))
    return bars.with_columns(
        *[pl.col(name) * factor for name in ("open", "high", "low", "close")], volume=volume.cast(pl.Float64)
    )


def violations(pipeline: Pipeline, universe: dict[str, pl.DataFrame], cuts: int, seed: int) -> set[str]:
    bars, bench = universe["ALFA"], universe[demo.BENCHMARK]
    base = pipeline(bars, bench)
    ready_ts = base.filter(pl.col("ready")).get_column("ts")
    rng = np.random.default_rng(seed)
    found: set[str] = set()
    for position in rng.choice(len(ready_ts), size=cuts, replace=False):
        cut = ready_ts[int(position)]
        other = pipeline(perturbed(bars, cut, rng), perturbed(bench, cut, rng))
        assert other.columns == base.columns
        for column in base.columns:
            horizon = LABEL_COLUMNS.get(column, 0)
            known = pl.col("ts") <= cut - timedelta(minutes=horizon)
            if not base.filter(known).get_column(column).equals(other.filter(known).get_column(column)):
                found.add(column)
    return found


def test_nothing_known_at_the_cut_changes_when_later_bars_change(universe: dict[str, pl.DataFrame]) -> None:
    frame = shipped(universe["ALFA"], universe[demo.BENCHMARK])
    assert frame.get_column("ready").sum() > 0
    assert frame.get_column("lbl_60").is_not_null().sum() > 0

    assert violations(shipped, universe, cuts=4, seed=1) == set()


def test_the_property_catches_a_planted_leaky_feature(universe: dict[str, pl.DataFrame]) -> None:
    assert violations(leaky, universe, cuts=2, seed=2) == {"session_high_gap"}
