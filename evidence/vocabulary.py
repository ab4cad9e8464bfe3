"""Evidence's words, each defined once: asset classes, bar frequencies, sides, horizons, tiers, regimes, tickers.

Every layer (market data, Market Memory, the live feed, research, the schemas) imports them from here, so a new
horizon or tier is one edit. This module imports nothing of Leroy.
"""

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

# --- market data -------------------------------------------------------------------------------------------------
AssetClass = Literal["equity", "etf", "index", "forex", "crypto"]
# Each is its own pool: a cross-ticker tier pools only symbols of the asset class the request names (an index or an
# ETF is never evidence for a single stock).
ASSET_CLASSES: tuple[AssetClass, ...] = ("equity", "etf", "index", "forex", "crypto")
DEFAULT_ASSET_CLASS: AssetClass = "equity"  # the pool of a request that names no symbol and no class
# How an answer counts the members of a pool: (one, many).
ASSET_CLASS_NOUNS: dict[str, tuple[str, str]] = {
    "equity": ("US equity", "US equities"),
    "etf": ("ETF", "ETFs"),
    "index": ("index", "indices"),
    "forex": ("currency pair", "currency pairs"),
    "crypto": ("crypto asset", "crypto assets"),
}
# Asset classes whose intraday bars must sit on XNYS regular-session minutes.
XNYS_ASSET_CLASSES = ("equity", "etf", "index")
FREQUENCIES = ("1m", "5m", "15m", "30m", "1h", "4h", "1d")
FREQUENCY_MINUTES = {"1m": 1, "5m": 5, "15m": 15, "30m": 30, "1h": 60, "4h": 240, "1d": 1440}
# Where stored bars (and an artifact built from them) come from: "synthetic" is generated demo data, never market
# history, and a build over any synthetic bar is synthetic.
Source = Literal["vendor", "synthetic"]
SOURCES: tuple[Source, ...] = ("vendor", "synthetic")
# What a stored ticker may look like (after upper-casing): vendor symbols such as BRK.B, ^GSPC or EUR/USD. A ticker
# names its directory in the bar store, so no part between slashes may be empty, `.` or `..` (A/../../X escaped it).
TICKER_RE = re.compile(r"^(?!.*(?:^|/)\.{1,2}(?:/|$))(?!.*//)(?!.*/$)[A-Z0-9^][A-Z0-9.\-^=/]{0,19}$")
# Sessions of daily history a feature needs before a minute row is ready (the longest daily lookback: regime
# thresholds); the demo universe must be longer than this.
WARMUP_SESSIONS = 60


def normalize_ticker(text: str) -> str:
    """The one spelling of a ticker: surrounding blanks removed, upper case."""
    return text.strip().upper()


# A US equity ticker as the evidence tools accept it, normalised to upper case once, at parse time.
Ticker = Annotated[
    str,
    Field(min_length=1, max_length=10, pattern=r"^[A-Za-z][A-Za-z0-9.\-]{0,9}$"),
    AfterValidator(normalize_ticker),
]

# --- sides and horizons ------------------------------------------------------------------------------------------
Side = Literal["buy", "sell"]
RequestSide = Literal["buy", "sell", "both"]
SIDES: tuple[Side, ...] = ("buy", "sell")
Horizon = Literal[5, 15, 30, 60]
HORIZONS: tuple[Horizon, ...] = (5, 15, 30, 60)  # forward label horizons, minutes inside the same session

# --- Market Memory tiers -----------------------------------------------------------------------------------------
TierName = Literal[
    "exact_setup",
    "cross_ticker_setup",
    "signal_pattern",
    "contextual_analogue",
    "direction_only_baseline",
    "no_comparable_evidence",
]
TIER_NAMES: dict[int, TierName] = {
    5: "exact_setup",
    4: "cross_ticker_setup",
    3: "signal_pattern",
    2: "contextual_analogue",
    1: "direction_only_baseline",
    0: "no_comparable_evidence",
}

# --- regimes: id = trend*9 + volatility*3 + time_of_day -----------------------------------------------------------
Trend = Literal["down_or_flat", "up"]
Volatility = Literal["low", "mid", "high"]
TimeOfDay = Literal["open", "mid", "close"]
TRENDS: tuple[Trend, ...] = ("down_or_flat", "up")
VOLATILITIES: tuple[Volatility, ...] = ("low", "mid", "high")
TIMES_OF_DAY: tuple[TimeOfDay, ...] = ("open", "mid", "close")  # first 30 minutes, the middle, the last 30
REGIME_DEFINITION = {
    "trend": "benchmark close(d-1) vs its 20-session SMA through d-1: 0 below or equal, 1 above",
    "volatility": (
        "benchmark 20-session realized vol through d-1 vs terciles of its trailing 40 values: 0 low, 1 mid, 2 high"
    ),
    "time_of_day": "0 first 30 minutes, 1 middle, 2 last 30 minutes of the regular session",
    "id": "trend*9 + volatility*3 + time_of_day",
}


def regime_parts(regime_id: int) -> tuple[Trend, Volatility, TimeOfDay]:
    """Decode a regime id into its trend, volatility and time-of-day names."""
    return TRENDS[regime_id // 9], VOLATILITIES[regime_id // 3 % 3], TIMES_OF_DAY[regime_id % 3]
