"""The strategy registry: named, versioned, pure functions of point-in-time features giving a buy and a sell state.

Bit positions are the registry order and are append-only: adding a strategy appends, so old masks keep meaning.
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from evidence.vocabulary import SIDES

REGISTRY_VERSION = "registry.v2"  # v2: every comparison clears STATE_TOLERANCE (bits unchanged)
# A feature must pass its threshold (or another feature) by more than this to decide a state; a value within it is a
# tie and activates neither side. Features are dimensionless ratios or oscillators, and float noise in them (a 1-ulp
# price difference moves a feature by about 1e-13 at most) stays far below it, while every threshold is far above.
STATE_TOLERANCE = 1e-9

Condition = Callable[[], pl.Expr]


@dataclass(frozen=True)
class Strategy:
    name: str
    family: str
    buy: Condition
    sell: Condition
    params: dict[str, Any] = field(default_factory=dict)
    version: int = 1

    @property
    def params_sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.params, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def f(name: str) -> pl.Expr:
    return pl.col(name)


def above(value: pl.Expr, threshold: pl.Expr | float) -> pl.Expr:
    """value > threshold by more than the tolerance (null stays null: an undefined feature decides nothing)."""
    return value - threshold > STATE_TOLERANCE


def below(value: pl.Expr, threshold: pl.Expr | float) -> pl.Expr:
    """value < threshold by more than the tolerance."""
    return threshold - value > STATE_TOLERANCE


def _both(buy: Callable[[], pl.Expr], sell: Callable[[], pl.Expr]) -> tuple[Condition, Condition]:
    return buy, sell


def _sign(feature: str, threshold: float = 0.0) -> tuple[Condition, Condition]:
    return (lambda: above(f(feature), threshold)), (lambda: below(f(feature), -threshold))


def _band(feature: str, low: float, high: float) -> tuple[Condition, Condition]:
    """Mean reversion: buy below `low`, sell above `high`."""
    return (lambda: below(f(feature), low)), (lambda: above(f(feature), high))


def _breakout(feature: str, low: float, high: float) -> tuple[Condition, Condition]:
    """Breakout: buy above `high`, sell below `low`."""
    return (lambda: above(f(feature), high)), (lambda: below(f(feature), low))


def _make(name: str, family: str, pair: tuple[Condition, Condition], **params: Any) -> Strategy:
    return Strategy(name=name, family=family, buy=pair[0], sell=pair[1], params=params)


GAP = 0.005
STRATEGIES: tuple[Strategy, ...] = (
    # trend / moving averages
    _make("sma_cross_20_50", "trend", _sign("sma_20_50"), fast=20, slow=50),
    _make("ema_cross_9_21", "trend", _sign("ema_9_21"), fast=9, slow=21),
    _make("ema_cross_12_26", "trend", _sign("ema_12_26"), fast=12, slow=26),
    _make("macd_signal_cross_12_26_9", "trend", _sign("macd_hist"), fast=12, slow=26, signal=9),
    _make("macd_zero_line", "trend", _sign("macd"), fast=12, slow=26),
    _make("price_vs_sma50", "trend", _sign("sma50_gap"), window=50),
    _make("price_vs_sma20_daily", "trend", _sign("daily_sma20_gap"), window=20),
    _make("sma_20_50_daily_cross", "trend", _sign("daily_sma_20_50"), fast=20, slow=50),
    _make("adx_di_trend_14", "trend",
          _both(lambda: above(f("adx14"), 25) & above(f("di_plus"), f("di_minus")),
                lambda: above(f("adx14"), 25) & above(f("di_minus"), f("di_plus"))), window=14, adx=25),
    _make("linreg_slope_30", "trend", _sign("linreg_slope30", 0.0002), window=30, min_slope=0.0002),
    _make("ema_stack_9_21_sma50", "trend",
          _both(lambda: above(f("ema_9_21"), 0) & above(f("ema21_gap"), 0) & above(f("sma50_gap"), 0),
                lambda: below(f("ema_9_21"), 0) & below(f("ema21_gap"), 0) & below(f("sma50_gap"), 0)),
          fast=9, mid=21, slow=50),
    # momentum / oscillators
    _make("rsi14_reversion_30_70", "momentum", _band("rsi14", 30, 70), window=14, low=30, high=70),
    _make("rsi14_midline_momentum", "momentum", _breakout("rsi14", 45, 55), window=14, low=45, high=55),
    _make("rsi2_daily_reversion", "momentum", _band("daily_rsi2", 10, 90), window=2, low=10, high=90),
    _make("stoch_14_3_cross", "momentum",
          _both(lambda: above(f("stoch_k"), f("stoch_d")) & below(f("stoch_d"), 20),
                lambda: below(f("stoch_k"), f("stoch_d")) & above(f("stoch_d"), 80)), k=14, d=3, low=20, high=80),
    _make("williams_r_14", "momentum", _band("williams_r", -80, -20), window=14, low=-80, high=-20),
    _make("cci_20", "momentum", _band("cci20", -100, 100), window=20, low=-100, high=100),
    _make("roc_10_momentum", "momentum", _sign("roc10", 0.002), window=10, threshold=0.002),
    _make("mfi_14", "momentum", _band("mfi14", 20, 80), window=14, low=20, high=80),
    # volatility / bands
    _make("bollinger_20_2_reversion", "volatility", _band("bb_z", -2, 2), window=20, width=2),
    _make("bollinger_20_2_breakout", "volatility", _breakout("bb_z", -2, 2), window=20, width=2),
    _make("bollinger_squeeze_breakout", "volatility",
          _both(lambda: above(f("bb_squeeze"), 0) & above(f("bb_z"), 1),
                lambda: above(f("bb_squeeze"), 0) & below(f("bb_z"), -1)),
          window=20, lookback=120, z=1),
    _make("keltner_20_breakout", "volatility", _breakout("keltner_pos", -1, 1), window=20, atr_mult=2),
    _make("atr_expansion_breakout", "volatility",
          _both(lambda: above(f("tr_atr"), 2) & above(f("r1"), 0), lambda: above(f("tr_atr"), 2) & below(f("r1"), 0)),
          window=14, mult=2),
    _make("nr7_daily_breakout", "volatility",
          _both(lambda: above(f("daily_nr7"), 0) & above(f("prev_high_gap"), 0),
                lambda: above(f("daily_nr7"), 0) & below(f("prev_low_gap"), 0)), days=7),
    # breakout / levels
    _make("donchian_20_breakout", "breakout", _breakout("donchian20_pos", 0, 1), window=20),
    _make("donchian_55_breakout", "breakout", _breakout("donchian55_pos", 0, 1), window=55),
    _make("prior_day_high_low_break", "breakout",
          _both(lambda: above(f("prev_high_gap"), 0), lambda: below(f("prev_low_gap"), 0))),
    _make("floor_pivot_r1_s1", "breakout",
          _both(lambda: above(f("pivot_r1_gap"), 0), lambda: below(f("pivot_s1_gap"), 0))),
    _make("daily_20d_high_low_breakout", "breakout",
          _both(lambda: above(f("daily_20d_high_gap"), 0), lambda: below(f("daily_20d_low_gap"), 0)), days=20),
    # session / intraday
    _make("vwap_trend", "session", _sign("vwap_gap")),
    _make("vwap_band_reversion_2sd", "session", _band("vwap_z", -2, 2), width=2),
    _make("opening_range_breakout_5", "session", _breakout("or5_pos", 0, 1), minutes=5),
    _make("opening_range_breakout_15", "session", _breakout("or15_pos", 0, 1), minutes=15),
    _make("opening_range_breakout_30", "session", _breakout("or30_pos", 0, 1), minutes=30),
    _make("gap_and_go", "session",
          _both(lambda: above(f("gap"), GAP) & above(f("session_return"), 0),
                lambda: below(f("gap"), -GAP) & below(f("session_return"), 0)), gap=GAP),
    _make("gap_fade", "session",
          _both(lambda: below(f("gap"), -GAP) & (f("minute_of_session") < 60),
                lambda: above(f("gap"), GAP) & (f("minute_of_session") < 60)), gap=GAP, minutes=60),
    _make("first_hour_trend_continuation", "session", _sign("first_hour_return", 0.002), minutes=60, threshold=0.002),
    _make("inside_bar_breakout", "session", _sign("inside_break")),
    # volume
    _make("rvol_spike_3x", "volume",
          _both(lambda: above(f("rvol"), 3) & above(f("r1"), 0), lambda: above(f("rvol"), 3) & below(f("r1"), 0)),
          sessions=20, mult=3),
    _make("obv_trend_confirmation", "volume",
          _both(lambda: above(f("obv_slope"), 0) & above(f("sma20_gap"), 0),
                lambda: below(f("obv_slope"), 0) & below(f("sma20_gap"), 0)), window=20),
)  # fmt: skip
# A side has at most one active signal per registered strategy: no key holds more, and asking for more matches none.
MAX_ACTIVE_SIGNALS = len(STRATEGIES)


def registry_lineage() -> dict[str, Any]:
    entries = [
        {"bit": bit, "name": s.name, "family": s.family, "version": s.version, "params_sha256": s.params_sha256}
        for bit, s in enumerate(STRATEGIES)
    ]
    hashed = {"state_tolerance": STATE_TOLERANCE, "strategies": entries}
    sha = hashlib.sha256(json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return {"version": REGISTRY_VERSION, "count": len(STRATEGIES), "registry_sha256": sha,
            "state_tolerance": STATE_TOLERANCE, "strategies": entries}  # fmt: skip


def with_states(frame: pl.DataFrame) -> pl.DataFrame:
    """Add buy_mask/sell_mask (bit i = strategy i active) and active counts on ready rows; null elsewhere."""
    out = {}
    for side in SIDES:
        # A null condition (an undefined feature) is inactive: `when` takes only true. Selecting the bit's literal is a
        # third cheaper than casting each condition to an integer and multiplying (0.30 against 0.47 s of CPU for
        # 21 symbols x 180 sessions).
        terms = [
            pl.when(getattr(s, side)()).then(pl.lit(1 << bit, pl.Int64)).otherwise(0)
            for bit, s in enumerate(STRATEGIES)
        ]
        mask = pl.sum_horizontal(terms)
        out[f"{side}_mask"] = pl.when(pl.col("ready")).then(mask).otherwise(None)
    frame = frame.with_columns(**out)
    return frame.with_columns(
        n_buy=pl.col("buy_mask").bitwise_count_ones().cast(pl.Int8),
        n_sell=pl.col("sell_mask").bitwise_count_ones().cast(pl.Int8),
    )


def mask_names(mask: int) -> list[str]:
    return [s.name for bit, s in enumerate(STRATEGIES) if mask >> bit & 1]


def names_mask(names: list[str]) -> int:
    index = {s.name: bit for bit, s in enumerate(STRATEGIES)}
    unknown = sorted(set(names) - set(index))
    if unknown:
        raise ValueError(f"unknown strategies: {', '.join(unknown)}")
    return sum(1 << index[name] for name in set(names))
