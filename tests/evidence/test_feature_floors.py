"""Features that are not float noise: ratio floors, tie tolerance, a session-open VWAP z-score that stays sane."""

from datetime import date

import numpy as np
import polars as pl
import pytest

from evidence.marketdata import demo
from evidence.memory import strategies
from evidence.memory.features import FEATURES, FLOORED, RELATIVE_FLOOR, VWAP_Z_MIN_BARS, symbol_frame
from evidence.memory.strategies import STATE_TOLERANCE, STRATEGIES
from evidence.vocabulary import SIDES, WARMUP_SESSIONS
from tests.evidence.factories import minute_bars

PRICES = ("open", "high", "low", "close")


@pytest.fixture(scope="module")
def bars() -> tuple[pl.DataFrame, pl.DataFrame]:
    """A demo symbol (prices on a cent grid, so exact ties are common) with one flat hour in its last session, where
    averages converge and every price move is a tie."""
    universe = demo.generate(symbols=1, sessions=WARMUP_SESSIONS + 3, seed=5, start=date(2024, 1, 2))
    symbol = universe["ALFA"]
    last = symbol.get_column("ts").dt.date().max()
    flat = (pl.col("ts").dt.date() == last) & pl.col("ts").dt.hour().is_between(16, 16)
    level = symbol.filter(flat).get_column("open").first()
    symbol = symbol.with_columns(*[pl.when(flat).then(pl.lit(level)).otherwise(pl.col(p)).alias(p) for p in PRICES])
    return symbol, universe[demo.BENCHMARK]


def states(bars: pl.DataFrame, benchmark: pl.DataFrame) -> pl.DataFrame:
    return strategies.with_states(symbol_frame(bars, benchmark))


def one_ulp(frame: pl.DataFrame, rng: np.random.Generator) -> pl.DataFrame:
    """Every price moved by -1, 0 or +1 ulp at random."""
    moved = {}
    for name in PRICES:
        values = frame.get_column(name).to_numpy()
        direction = rng.choice([-np.inf, 0.0, np.inf], len(values))
        moved[name] = np.where(direction == 0.0, values, np.nextafter(values, direction))
    return frame.with_columns(**{name: pl.Series(values) for name, values in moved.items()})


@pytest.mark.parametrize("seed", [1, 2])
def test_a_one_ulp_price_perturbation_changes_no_state(bars: tuple[pl.DataFrame, pl.DataFrame], seed: int) -> None:
    symbol, benchmark = bars
    rng = np.random.default_rng(seed)
    base = states(symbol, benchmark)
    other = states(one_ulp(symbol, rng), one_ulp(benchmark, rng))
    assert base.get_column("ready").equals(other.get_column("ready"))
    ready = base.get_column("ready").to_numpy()
    assert ready.sum() == 3 * 390

    # A feature value may only move by more than the tolerance (or appear/vanish) if the perturbation really crossed
    # something; 1 ulp of price crosses nothing, so no feature on a ready row moves that far.
    moved: dict[str, np.ndarray] = {}
    for name in FEATURES:
        a = base.get_column(name).to_numpy().astype(float)[ready]
        b = other.get_column(name).to_numpy().astype(float)[ready]
        jumped = (np.isnan(a) != np.isnan(b)) | (np.abs(np.nan_to_num(a) - np.nan_to_num(b)) > STATE_TOLERANCE)
        moved[name] = jumped
    assert {name for name, jumped in moved.items() if jumped.any()} == set()

    # So a state may change only where one of the features it reads moved by more than the tolerance: nowhere.
    for side in SIDES:
        mask = f"{side}_mask"
        flipped = base.filter(ready).get_column(mask).to_numpy() ^ other.filter(ready).get_column(mask).to_numpy()
        for bit, strategy in enumerate(STRATEGIES):
            changed = (flipped >> bit & 1).astype(bool)
            reads = getattr(strategy, side)().meta.root_names()
            justified = np.logical_or.reduce([moved[name] for name in reads if name in moved])
            assert not (changed & ~justified).any(), (side, strategy.name)
        assert int(np.count_nonzero(flipped)) == 0, side


def test_the_flat_hour_is_a_tie_not_a_direction(bars: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    symbol, benchmark = bars
    frame = states(symbol, benchmark)
    last = pl.col("session") == pl.col("session").max()
    flat = frame.filter(last & (pl.col("ts").dt.hour() == 16) & (pl.col("ts").dt.minute() >= 30) & pl.col("ready"))
    assert len(flat) == 30
    # Twenty flat minutes in: no dispersion, so the ratios over it are undefined (null), never a huge value ...
    assert flat.get_column("bb_z").null_count() == 30
    assert flat.get_column("stoch_k").null_count() == 30
    # ... and no move is a direction: the money flow is zero (MFI undefined) and OBV does not move.
    assert flat.get_column("mfi14").null_count() == 30
    assert flat.get_column("obv_slope").to_list() == [0.0] * 30
    for name in ("stoch_14_3_cross", "bollinger_20_2_reversion", "bollinger_20_2_breakout", "mfi_14",
                 "obv_trend_confirmation"):  # fmt: skip
        bit = [s.name for s in STRATEGIES].index(name)
        for side in SIDES:
            assert {mask >> bit & 1 for mask in flat.get_column(f"{side}_mask").to_list()} == {0}, (name, side)


def opening_bars(session: date, *, flat_minutes: int) -> pl.DataFrame:
    """A session whose first `flat_minutes` bars are identical (high 100.10, low 99.90, close 100.05: the close is
    off the typical price, so a near-zero dispersion would blow the z-score up), then a rising price."""
    rising = minute_bars([session])
    same = pl.col("ts").rank("ordinal") <= flat_minutes
    return rising.with_columns(
        open=pl.when(same).then(100.0).otherwise(pl.col("open") + 1),
        high=pl.when(same).then(100.10).otherwise(pl.col("high") + 1),
        low=pl.when(same).then(99.90).otherwise(pl.col("low") + 1),
        close=pl.when(same).then(100.05).otherwise(pl.col("close") + 1),
        volume=pl.when(same).then(pl.Series(np.arange(1, 391) * 977.0)).otherwise(pl.col("volume")),
    )


def test_session_open_vwap_z_is_null_until_it_is_a_dispersion_and_never_huge() -> None:
    bars = opening_bars(date(2024, 3, 4), flat_minutes=8)
    frame = symbol_frame(bars, bars)
    z = frame.get_column("vwap_z").to_list()

    assert z[: VWAP_Z_MIN_BARS - 1] == [None] * (VWAP_Z_MIN_BARS - 1)  # minutes 0-3: too few bars to be a dispersion
    # Minutes 4-7: eight identical bars have no dispersion at all (the old formula divided by its float noise).
    assert z[VWAP_Z_MIN_BARS - 1 : 8] == [None] * (8 - VWAP_Z_MIN_BARS + 1)
    defined = [value for value in z[8:] if value is not None]
    assert len(defined) == 390 - 8
    assert max(abs(value) for value in defined) < 20
    # Where it is defined, the dispersion it divides by is at least the floor.
    sd = (
        frame.get_column("close") - frame.get_column("close") / (1 + frame.get_column("vwap_gap"))
    ) / frame.get_column("vwap_z")
    assert (sd.drop_nulls().abs() >= RELATIVE_FLOOR * 100).all()


def test_floored_features_do_not_hold_back_readiness(bars: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    symbol, benchmark = bars
    frame = symbol_frame(symbol, benchmark).filter(pl.col("ready"))
    nulls = {name for name in FEATURES if frame.get_column(name).null_count()}
    # Only floored ratios (and the opening-range / first-hour features early in the session) may be null when ready.
    assert nulls <= set(FLOORED) | {"first_hour_return"}
    assert {"bb_z", "stoch_k", "vwap_z"} <= nulls
