"""Point-in-time features, daily regime and forward labels for one symbol, in the sorted-boundary-mask style.

One frame holds one symbol's dense minute grid sorted by ts, so a rolling window is valid as soon as it has its full
length (polars' default `min_samples = window`), and the only other boundary is the session (labels, VWAP, opening
ranges). Every feature at row t uses bars at or before t; daily context for session d uses sessions <= d-1 only.
"""

from datetime import date
from typing import Any

import polars as pl

from evidence.marketdata import calendar
from evidence.vocabulary import HORIZONS, WARMUP_SESSIONS

FEATURE_VERSION = "features.v2"  # v2: ratio floors, tie tolerance, an anchored session-VWAP variance
LABEL_SCALE = 100_000_000  # labels are int64 in 1e-8 units

# Floors. A ratio feature is null until its denominator is defined and at least its floor, so float noise in a
# vanishing denominator never becomes a value (without them the session-open VWAP z-score reached ±141,259).
PRICE_FLOOR = 1e-6  # a price level (close, moving average, VWAP, prior-day level) below this is bad data
# A price dispersion (standard deviation, range, ATR, mean move) must be at least this fraction of the close:
# 0.01 bp, below one cent at any price under $10,000 and far above the float64 error of the dispersions here.
RELATIVE_FLOOR = 1e-6
VOLUME_FLOOR = 1.0  # a volume denominator (a mean or a sum of volumes, or money flow per unit of price) in units
DI_FLOOR = 1e-6  # DI+ + DI-, in index points, below which DX (their normalised difference) is undefined
VWAP_Z_MIN_BARS = 5  # the session VWAP deviation is a dispersion only from the session's fifth bar
# Ties. A price move smaller than this fraction of the price is no move: a 1-ulp difference between tied prices
# (about 1e-16 of the price) never decides a direction (it once moved the money-flow index from 38 to 17).
TIE_TOLERANCE = 1e-9

FEATURES = (
    "r1", "r5", "r15", "r30", "r60",
    "sma20_gap", "sma50_gap", "ema9_gap", "ema21_gap", "ema_9_21", "ema_12_26", "sma_20_50",
    "macd", "macd_signal", "macd_hist", "rsi14", "stoch_k", "stoch_d", "williams_r", "cci20",
    "atr14_pct", "tr_atr", "adx14", "di_plus", "di_minus", "bb_z", "bb_width", "bb_squeeze",
    "keltner_pos", "donchian20_pos", "donchian55_pos", "vwap_gap", "vwap_z",
    "or5_pos", "or15_pos", "or30_pos", "gap", "session_return", "first_hour_return",
    "rvol", "obv_slope", "mfi14", "rvol20", "roc10", "linreg_slope30", "inside_break",
    "prev_high_gap", "prev_low_gap", "pivot_r1_gap", "pivot_s1_gap", "daily_sma20_gap", "daily_sma_20_50",
    "daily_rsi2", "daily_nr7", "daily_20d_high_gap", "daily_20d_low_gap", "minute_of_session", "minutes_to_close",
)  # fmt: skip
# Features that are legitimately null on ready rows (not yet defined in the session) rather than warming up.
SESSION_LATE = {"or5_pos": 5, "or15_pos": 15, "or30_pos": 30, "first_hour_return": 60}
# Ratios over a price dispersion or a volume: null on a ready row whenever the denominator is below its floor (a flat
# stretch, a quiet open), and every strategy reading them is then inactive. The warm-up (WARMUP_SESSIONS) covers
# their lookbacks, so readiness does not wait for them.
FLOORED = (
    "rsi14", "stoch_k", "stoch_d", "williams_r", "cci20", "tr_atr", "di_plus", "di_minus", "bb_z", "bb_width",
    "bb_squeeze", "keltner_pos",
    "donchian20_pos", "donchian55_pos", "vwap_z", "or5_pos", "or15_pos", "or30_pos", "rvol", "obv_slope", "mfi14",
    "daily_rsi2",
)  # fmt: skip


def dense_minutes(bars: pl.DataFrame, *, through: date | None = None) -> pl.DataFrame:
    """Stage 0: one row per regular-session minute from the first bar's session; a missing minute becomes an explicit
    no-trade bar (OHLC = previous close, volume 0, is_fill)."""
    if bars.is_empty():
        raise ValueError("no bars")
    first = bars.get_column("ts").min().date()  # type: ignore[union-attr]
    last = bars.get_column("ts").max().date()  # type: ignore[union-attr]
    if through is not None:
        last = min(last, through)
    sched = calendar.schedule(first, last).with_row_index("session_pos")
    grid = sched.with_columns(
        ts=pl.datetime_ranges(
            "session_open", pl.col("session_close") - pl.duration(minutes=1), interval="1m", time_unit="us"
        ),
        session_minutes=(pl.col("session_close") - pl.col("session_open")).dt.total_minutes(),
    ).explode("ts")
    grid = grid.with_columns(
        minute_of_session=(pl.col("ts") - pl.col("session_open")).dt.total_minutes().cast(pl.Int32),
    ).with_columns(minutes_to_close=(pl.col("session_minutes") - pl.col("minute_of_session")).cast(pl.Int32))
    frame = grid.join(bars, on="ts", how="left", maintain_order="left")  # the grid is in time order
    frame = frame.with_columns(is_fill=pl.col("close").is_null())
    carried = pl.col("close").forward_fill()
    frame = frame.with_columns(
        open=pl.col("open").fill_null(carried),
        high=pl.col("high").fill_null(carried),
        low=pl.col("low").fill_null(carried),
        volume=pl.col("volume").fill_null(0.0),
        close=carried,
    ).filter(pl.col("close").is_not_null())
    return frame.select(
        "ts", "session", "session_pos", "minute_of_session", "minutes_to_close", "is_fill",
        "open", "high", "low", "close", "volume",
    )  # fmt: skip


def _ratio(numerator: pl.Expr, denominator: pl.Expr, floor: pl.Expr | float) -> pl.Expr:
    """numerator / denominator, null unless the denominator is defined and at least `floor` (denominators here are
    non-negative: prices, dispersions, volumes)."""
    return pl.when(denominator >= floor).then(numerator / denominator).otherwise(None)


def _gap(value: pl.Expr, level: pl.Expr) -> pl.Expr:
    """value / level - 1 for a price level (null below PRICE_FLOOR)."""
    return _ratio(value, level, PRICE_FLOOR) - 1


def _tie(price: pl.Expr) -> pl.Expr:
    """The largest price difference that still counts as a tie at `price`."""
    return TIE_TOLERANCE * price.abs()


def _wilder(expr: pl.Expr, n: int) -> pl.Expr:
    return expr.ewm_mean(alpha=1.0 / n, adjust=False, min_samples=n)


def _ema(expr: pl.Expr, span: int) -> pl.Expr:
    return expr.ewm_mean(span=span, adjust=False, min_samples=span)


def daily_context(frame: pl.DataFrame) -> pl.DataFrame:
    """Per session d, values known before its open: computed over sessions <= d-1 (shifted by one session)."""
    daily = (
        frame.group_by("session", maintain_order=True)
        .agg(
            d_high=pl.col("high").max(),
            d_low=pl.col("low").min(),
            d_close=pl.col("close").last(),
        )
        .sort("session")
    )
    close = pl.col("d_close")
    change = close.diff()
    gain, loss = change.clip(lower_bound=0), (-change).clip(lower_bound=0)
    rng = pl.col("d_high") - pl.col("d_low")
    pivot = (pl.col("d_high") + pl.col("d_low") + close) / 3
    gain2, loss2 = _wilder(gain, 2), _wilder(loss, 2)
    known = daily.with_columns(
        k_high=pl.col("d_high"),
        k_low=pl.col("d_low"),
        k_close=close,
        k_sma20=close.rolling_mean(20),
        k_sma50=close.rolling_mean(50),
        k_rsi2=_ratio(100 * gain2, gain2 + loss2, RELATIVE_FLOOR * close),
        # Narrowest of the last 7 (ties within the tolerance count as narrowest).
        k_nr7=(rng - rng.rolling_min(7) <= _tie(close)).cast(pl.Float64),
        k_high20=pl.col("d_high").rolling_max(20),
        k_low20=pl.col("d_low").rolling_min(20),
        k_r1=2 * pivot - pl.col("d_low"),
        k_s1=2 * pivot - pl.col("d_high"),
    )
    columns = [c for c in known.columns if c.startswith("k_")]
    return known.select("session", *[pl.col(c).shift(1).alias(c.replace("k_", "prev_")) for c in columns])


def regime_sessions(benchmark: pl.DataFrame) -> pl.DataFrame:
    """Per benchmark session d: trend and volatility buckets from sessions <= d-1, with trailing-window thresholds
    (never full-sample quantiles)."""
    daily = benchmark.group_by("session", maintain_order=True).agg(close=pl.col("close").last()).sort("session")
    vol = pl.col("close").log().diff().rolling_std(20)
    known = daily.with_columns(sma20=pl.col("close").rolling_mean(20), vol20=vol).with_columns(
        vol_q33=pl.col("vol20").rolling_quantile(1 / 3, window_size=40, interpolation="linear"),
        vol_q67=pl.col("vol20").rolling_quantile(2 / 3, window_size=40, interpolation="linear"),
    )
    shifted = known.select(
        "session",
        *[pl.col(c).shift(1).alias(f"bench_{c}") for c in ("close", "sma20", "vol20", "vol_q33", "vol_q67")],
    )
    return shifted.with_columns(
        trend=pl.when(pl.col("bench_sma20").is_null())
        .then(None)
        .otherwise((pl.col("bench_close") - pl.col("bench_sma20") > _tie(pl.col("bench_close"))).cast(pl.Int8)),
        volatility=pl.when(pl.col("bench_vol_q67").is_null())
        .then(None)
        .when(pl.col("bench_vol20") <= pl.col("bench_vol_q33"))
        .then(0)
        .when(pl.col("bench_vol20") <= pl.col("bench_vol_q67"))
        .then(1)
        .otherwise(2)
        .cast(pl.Int8),
    )


def minute_features(frame: pl.DataFrame) -> pl.DataFrame:
    """Stage 1 for one symbol's dense frame (sorted by ts)."""
    c, h, lo, o, v = pl.col("close"), pl.col("high"), pl.col("low"), pl.col("open"), pl.col("volume")
    m, session = pl.col("minute_of_session"), pl.col("session")
    prev_close = c.shift(1)
    tr = pl.max_horizontal(h - lo, (h - prev_close).abs(), (lo - prev_close).abs())
    tp = (h + lo + c) / 3
    change = c.diff()
    spread_floor = RELATIVE_FLOOR * c  # the floor of every price-dispersion denominator at this close
    # A session's first value by a boundary mask (rows are sorted by ts), cheaper than first().over(session).
    session_start = (session != session.shift(1)).fill_null(True)
    frame = frame.with_columns(
        _tp=tp,
        _session_open=pl.when(session_start).then(o).forward_fill(),
    )
    frame = frame.with_columns(_dtp=pl.col("_tp") - pl.when(session_start).then(pl.col("_tp")).forward_fill())
    dtp = pl.col("_dtp")
    base = frame.with_columns(
        _tr=tr,
        _gain=change.clip(lower_bound=0),
        _loss=(-change).clip(lower_bound=0),
        _up=h.diff(),
        _down=-lo.diff(),
        _sma20=c.rolling_mean(20),
        _sma50=c.rolling_mean(50),
        _ema9=_ema(c, 9),
        _ema12=_ema(c, 12),
        _ema20=_ema(c, 20),
        _ema21=_ema(c, 21),
        _ema26=_ema(c, 26),
        _sd20=c.rolling_std(20),
        _hh14=h.rolling_max(14),
        _ll14=lo.rolling_min(14),
        # Cumulative sums stay per session partition (a global cumsum minus an offset loses precision); the VWAP
        # variance sums deviations from the session's first typical price, so it does not cancel price squared.
        _cum_v=v.cum_sum().over(session),
        _cum_pv=(tp * v).cum_sum().over(session),
        _cum_dv=(dtp * v).cum_sum().over(session),
        _cum_d2v=(dtp**2 * v).cum_sum().over(session),
        # Rolling windows read by more than one feature, computed once (eager frames do no common-subexpression
        # elimination).
        _hh20=h.rolling_max(20),
        _ll20=lo.rolling_min(20),
        _hh55=h.rolling_max(55),
        _ll55=lo.rolling_min(55),
        _mean_i30=pl.int_range(pl.len()).cast(pl.Float64).rolling_mean(30),
    )
    up, down, tie = pl.col("_up"), pl.col("_down"), _tie(c)
    tp_move = pl.col("_tp") - pl.col("_tp").shift(1)
    base = base.with_columns(
        _atr=_wilder(pl.col("_tr"), 14),
        _plus_dm=pl.when((up - down > tie) & (up > tie)).then(up).otherwise(0.0),
        _minus_dm=pl.when((down - up > tie) & (down > tie)).then(down).otherwise(0.0),
        _macd=pl.col("_ema12") - pl.col("_ema26"),
        _vwap=_ratio(pl.col("_cum_pv"), pl.col("_cum_v"), VOLUME_FLOOR),
        _k=100 * _ratio(c - pl.col("_ll14"), pl.col("_hh14") - pl.col("_ll14"), spread_floor),
        _flow=pl.when(tp_move > _tie(pl.col("_tp")))
        .then(pl.col("_tp") * v)
        .when(tp_move < -_tie(pl.col("_tp")))
        .then(-pl.col("_tp") * v)
        .otherwise(0.0),
        _obv=(pl.when(change > tie).then(v).when(change < -tie).then(-v).otherwise(0.0)).cum_sum(),
    )
    di_plus = 100 * _ratio(_wilder(pl.col("_plus_dm"), 14), pl.col("_atr"), spread_floor)
    di_minus = 100 * _ratio(_wilder(pl.col("_minus_dm"), 14), pl.col("_atr"), spread_floor)
    mean_dev = _ratio(pl.col("_cum_dv"), pl.col("_cum_v"), VOLUME_FLOOR)
    base = base.with_columns(
        _di_plus=di_plus,
        _di_minus=di_minus,
        _macd_signal=_ema(pl.col("_macd"), 9),
        _vwap_sd=pl.when(m >= VWAP_Z_MIN_BARS - 1).then(
            (_ratio(pl.col("_cum_d2v"), pl.col("_cum_v"), VOLUME_FLOOR) - mean_dev**2).clip(lower_bound=0).sqrt()
        ),
        # The band width is the dispersion itself (relative to price), so it is undefined where the dispersion is.
        _bb_width=pl.when(pl.col("_sd20") >= spread_floor).then(
            _ratio(4 * pl.col("_sd20"), pl.col("_sma20"), PRICE_FLOOR)
        ),
    )
    base = base.with_columns(
        _dx=100
        * _ratio((pl.col("_di_plus") - pl.col("_di_minus")).abs(), pl.col("_di_plus") + pl.col("_di_minus"), DI_FLOOR),
    )
    # The opening range is complete when bar k-1 closes; before that the feature is null (never a partial range).
    base = base.with_columns(
        **{
            f"_or{k}_{side}": pl.when(m == k - 1).then(window).forward_fill()
            for k in (5, 15, 30)
            for side, window in (("high", h.rolling_max(k)), ("low", lo.rolling_min(k)))
        }
    )
    opening = {}
    for k in (5, 15, 30):
        high_k, low_k = pl.col(f"_or{k}_high"), pl.col(f"_or{k}_low")
        opening[f"or{k}_pos"] = pl.when(m >= k - 1).then(_ratio(c - low_k, high_k - low_k, spread_floor))
    # Same minute-of-session volume over the prior 20 sessions: a window per minute of the session, in time order
    # (null until 20 earlier sessions had that minute). Sorting by (minute, ts), rolling across the minutes' boundaries
    # and masking them, then joining back on ts, gave the same values for five times the CPU (0.31 s against 0.06 s
    # over 21 symbols x 180 sessions).
    base = base.with_columns(_rv_mean=pl.col("volume").rolling_mean(20).shift(1).over("minute_of_session"))
    prev_session_close = pl.when(pl.col("minutes_to_close") == 1).then(c).shift(1).forward_fill()
    first_hour_close = pl.when(m == 59).then(c).forward_fill()
    i, mean_x = pl.int_range(pl.len()).cast(pl.Float64), pl.col("_mean_i30")
    slope = ((i * c).rolling_mean(30) - mean_x * c.rolling_mean(30)) / ((i**2).rolling_mean(30) - mean_x**2)
    pos_flow = pl.col("_flow").clip(lower_bound=0).rolling_sum(14)
    neg_flow = (-pl.col("_flow")).clip(lower_bound=0).rolling_sum(14)
    gain14, loss14 = _wilder(pl.col("_gain"), 14), _wilder(pl.col("_loss"), 14)
    tp_sd20 = pl.col("_tp").rolling_std(20)
    features = base.with_columns(
        r1=_gap(c, c.shift(1)),
        r5=_gap(c, c.shift(5)),
        r15=_gap(c, c.shift(15)),
        r30=_gap(c, c.shift(30)),
        r60=_gap(c, c.shift(60)),
        sma20_gap=_gap(c, pl.col("_sma20")),
        sma50_gap=_gap(c, pl.col("_sma50")),
        ema9_gap=_gap(c, pl.col("_ema9")),
        ema21_gap=_gap(c, pl.col("_ema21")),
        ema_9_21=_gap(pl.col("_ema9"), pl.col("_ema21")),
        ema_12_26=_gap(pl.col("_ema12"), pl.col("_ema26")),
        sma_20_50=_gap(pl.col("_sma20"), pl.col("_sma50")),
        macd=_ratio(pl.col("_macd"), c, PRICE_FLOOR),
        macd_signal=_ratio(pl.col("_macd_signal"), c, PRICE_FLOOR),
        macd_hist=_ratio(pl.col("_macd") - pl.col("_macd_signal"), c, PRICE_FLOOR),
        rsi14=_ratio(100 * gain14, gain14 + loss14, spread_floor),
        stoch_k=pl.col("_k"),
        stoch_d=pl.col("_k").rolling_mean(3),
        williams_r=pl.col("_k") - 100,
        cci20=_ratio((pl.col("_tp") - pl.col("_tp").rolling_mean(20)) / 0.015, tp_sd20, spread_floor),
        atr14_pct=_ratio(pl.col("_atr"), c, PRICE_FLOOR),
        tr_atr=_ratio(pl.col("_tr"), pl.col("_atr"), spread_floor),
        # Wilder's ADX: a minute without directional movement (DX undefined) contributes 0.
        adx14=_wilder(pl.col("_dx").fill_null(0.0), 14),
        di_plus=pl.col("_di_plus"),
        di_minus=pl.col("_di_minus"),
        bb_z=_ratio(c - pl.col("_sma20"), pl.col("_sd20"), spread_floor),
        bb_width=pl.col("_bb_width"),
        bb_squeeze=(pl.col("_bb_width") - 1.05 * pl.col("_bb_width").rolling_min(120) <= TIE_TOLERANCE).cast(
            pl.Float64
        ),
        keltner_pos=_ratio(c - pl.col("_ema20"), 2 * pl.col("_atr"), spread_floor),
        donchian20_pos=_ratio(c - pl.col("_ll20").shift(1), (pl.col("_hh20") - pl.col("_ll20")).shift(1), spread_floor),
        donchian55_pos=_ratio(c - pl.col("_ll55").shift(1), (pl.col("_hh55") - pl.col("_ll55")).shift(1), spread_floor),
        vwap_gap=_gap(c, pl.col("_vwap")),
        vwap_z=_ratio(c - pl.col("_vwap"), pl.col("_vwap_sd"), spread_floor),
        **opening,
        gap=_gap(pl.col("_session_open"), prev_session_close),
        session_return=_gap(c, pl.col("_session_open")),
        first_hour_return=pl.when(m >= 59).then(_gap(first_hour_close, pl.col("_session_open"))),
        rvol=_ratio(v, pl.col("_rv_mean"), VOLUME_FLOOR),
        obv_slope=_ratio(pl.col("_obv") - pl.col("_obv").shift(20), v.rolling_sum(20), VOLUME_FLOOR),
        mfi14=_ratio(100 * pos_flow, pos_flow + neg_flow, VOLUME_FLOOR * c),
        rvol20=_ratio(c, c.shift(1), PRICE_FLOOR).log().rolling_std(20),
        roc10=_gap(c, c.shift(10)),
        linreg_slope30=_ratio(slope, c, PRICE_FLOOR),
        inside_break=pl.when((h.shift(2) - h.shift(1) > tie) & (lo.shift(1) - lo.shift(2) > tie))
        .then(pl.when(c - h.shift(1) > tie).then(1.0).when(lo.shift(1) - c > tie).then(-1.0).otherwise(0.0))
        .otherwise(pl.when(h.shift(2).is_not_null()).then(0.0)),
    )
    return features


def _attach_daily(features: pl.DataFrame, context: pl.DataFrame, regimes: pl.DataFrame) -> pl.DataFrame:
    c = pl.col("close")
    joined = features.join(context, on="session", how="left", maintain_order="left").join(
        regimes.select("session", "trend", "volatility"), on="session", how="left", maintain_order="left"
    )
    tod = pl.when(pl.col("minute_of_session") < 30).then(0).when(pl.col("minutes_to_close") <= 30).then(2).otherwise(1)
    return joined.with_columns(
        prev_high_gap=_gap(c, pl.col("prev_high")),
        prev_low_gap=_gap(c, pl.col("prev_low")),
        pivot_r1_gap=_gap(c, pl.col("prev_r1")),
        pivot_s1_gap=_gap(c, pl.col("prev_s1")),
        daily_sma20_gap=_gap(pl.col("prev_close"), pl.col("prev_sma20")),
        daily_sma_20_50=_gap(pl.col("prev_sma20"), pl.col("prev_sma50")),
        daily_rsi2=pl.col("prev_rsi2"),
        daily_nr7=pl.col("prev_nr7"),
        daily_20d_high_gap=_gap(c, pl.col("prev_high20")),
        daily_20d_low_gap=_gap(c, pl.col("prev_low20")),
        tod=tod.cast(pl.Int8),
        minute_of_session=pl.col("minute_of_session"),
    ).with_columns(
        regime=pl.when(pl.col("trend").is_null() | pl.col("volatility").is_null())
        .then(None)
        .otherwise(pl.col("trend") * 9 + pl.col("volatility") * 3 + pl.col("tod"))
        .cast(pl.Int8),
    )


def labels(frame: pl.DataFrame) -> pl.DataFrame:
    """Stage 2: buy-oriented forward return, max favourable (hi) and adverse (lo) excursion per horizon, int64 1e-8.

    A label exists only if bar t+h is in the same session and no bar in (t, t+h] (nor t itself) is a fill.
    """
    c, fills, pos = pl.col("close"), pl.col("_fills"), pl.col("session_pos")
    # One validity mask per horizon, materialised once and read by its three label columns.
    valid = frame.with_columns(_fills=pl.col("is_fill").cast(pl.Int64).cum_sum()).select(
        **{f"_ok_{h}": (pos.shift(-h) == pos) & (fills.shift(-h) - fills == 0) & ~pl.col("is_fill") for h in HORIZONS}
    )
    frame = pl.concat([frame, valid], how="horizontal")
    columns = {}
    for h in HORIZONS:
        ok = pl.col(f"_ok_{h}")
        scale = float(LABEL_SCALE)
        columns[f"lbl_{h}"] = pl.when(ok).then(((c.shift(-h) / c - 1) * scale).round(0).cast(pl.Int64))
        columns[f"hi_{h}"] = pl.when(ok).then(
            ((pl.col("high").rolling_max(h).shift(-h) / c - 1) * scale).round(0).cast(pl.Int64)
        )
        columns[f"lo_{h}"] = pl.when(ok).then(
            ((pl.col("low").rolling_min(h).shift(-h) / c - 1) * scale).round(0).cast(pl.Int64)
        )
    return frame.with_columns(**columns).drop(valid.columns)


def symbol_frame(bars: pl.DataFrame, benchmark_bars: pl.DataFrame, *, through: date | None = None) -> pl.DataFrame:
    """Features, regime, readiness and labels for one symbol (strategy states are added by the registry)."""
    return symbol_frame_in(bars, benchmark_regimes(benchmark_bars, through=through), through=through)


def benchmark_regimes(benchmark_bars: pl.DataFrame, *, through: date | None = None) -> pl.DataFrame:
    return regime_sessions(dense_minutes(benchmark_bars, through=through))


def symbol_frame_in(bars: pl.DataFrame, regimes: pl.DataFrame, *, through: date | None = None) -> pl.DataFrame:
    """`symbol_frame` given the benchmark's `benchmark_regimes`, which every symbol of a build shares."""
    frame = dense_minutes(bars, through=through)
    featured = _attach_daily(minute_features(frame), daily_context(frame), regimes)
    not_late = [
        pl.col(name).is_not_null() | (pl.col("minute_of_session") < SESSION_LATE[name])
        if name in SESSION_LATE
        else pl.col(name).is_not_null()
        for name in FEATURES
        if name not in FLOORED
    ]
    featured = featured.with_columns(
        ready=(pl.col("session_pos") >= WARMUP_SESSIONS)
        & ~pl.col("is_fill")
        & pl.col("regime").is_not_null()
        & pl.all_horizontal(not_late),
    )
    keep = [
        "ts",
        "session",
        "session_pos",
        "minute_of_session",
        "minutes_to_close",
        "is_fill",
        "open",
        "high",
        "low",
        "close",
        "volume",
        "ready",
        "trend",
        "volatility",
        "tod",
        "regime",
        *FEATURES,
    ]
    return labels(featured.select(list(dict.fromkeys(keep))))


def describe() -> dict[str, Any]:
    return {
        "version": FEATURE_VERSION,
        "features": list(FEATURES),
        "horizons": list(HORIZONS),
        "warmup_sessions": WARMUP_SESSIONS,
        "floors": {
            "price": PRICE_FLOOR,
            "relative_dispersion": RELATIVE_FLOOR,
            "volume": VOLUME_FLOOR,
            "di_sum": DI_FLOOR,
            "vwap_z_min_bars": VWAP_Z_MIN_BARS,
        },
        "floored": list(FLOORED),
        "tie_tolerance": TIE_TOLERANCE,
    }
