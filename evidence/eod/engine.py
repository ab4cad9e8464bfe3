"""The end-of-day trend engine (rules: evidence/eod/documentation.md): pure functions over one daily close series.

Lines published at the close of session t apply to session t + 1. The action of session t compares its close with
the lines published at t - 1; the confirmed state is the closing-bar transition recorded through t - 1, so on an
EXIT session it still reads LONG while `action` is EXIT and `recommended_state` FLAT.
"""

import hashlib
from dataclasses import asdict, dataclass
from math import isnan
from typing import Any, Literal

import numpy as np
import rfc8785

ENGINE_NAME = "leroy-eod-trend"
ENGINE_VERSION = "1.0.0"

State = Literal["LONG", "FLAT"]
Action = Literal["ENTER", "HOLD", "EXIT", "STAY_FLAT"]
LONG: State = "LONG"
FLAT: State = "FLAT"


@dataclass(frozen=True)
class EngineParams:
    """Every parameter of the engine, named; its hash (with the engine's name and version) is the engine hash."""

    entry_lookback: int = 20  # buy line: highest close of the last N sessions
    exit_lookback: int = 10  # sell line: lowest close of the last N sessions
    trend_lookback: int = 50  # ENTER also needs the close above its N-session simple moving average

    def __post_init__(self) -> None:
        if min(self.entry_lookback, self.exit_lookback, self.trend_lookback) < 2:
            raise ValueError("every lookback is at least 2 sessions")

    @property
    def warmup(self) -> int:
        """Sessions of closes before the first published lines."""
        return max(self.entry_lookback, self.exit_lookback, self.trend_lookback)


DEFAULT_PARAMS = EngineParams()


def canonical_sha256(value: Any) -> str:
    """SHA-256 of the RFC 8785 (JCS) bytes: the one serialisation every end-of-day hash is taken over."""
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def engine_identity(params: EngineParams) -> dict[str, object]:
    return {"engine": ENGINE_NAME, "version": ENGINE_VERSION, "params": asdict(params)}


def engine_sha256(params: EngineParams) -> str:
    return canonical_sha256(engine_identity(params))


@dataclass(frozen=True)
class Run:
    """The engine over closes[0..n-1]: per session, the lines it published at that close (NaN in warm-up), the
    action at that close, the confirmed state before it and the recommended state after it."""

    buy_line: np.ndarray
    sell_line: np.ndarray
    sma: np.ndarray
    action: list[Action]
    state: list[State]
    recommended: list[State]

    def position(self) -> np.ndarray:
        """Target weight held after each close (1 LONG, 0 FLAT)."""
        return np.array([1.0 if r == LONG else 0.0 for r in self.recommended])


def _rolling(closes: np.ndarray, n: int, how: str) -> np.ndarray:
    out = np.full(len(closes), np.nan)
    if len(closes) >= n:
        windows = np.lib.stride_tricks.sliding_window_view(closes, n)
        if how == "max":
            out[n - 1 :] = windows.max(axis=1)
        elif how == "min":
            out[n - 1 :] = windows.min(axis=1)
        else:
            out[n - 1 :] = windows.mean(axis=1)
    return out


def run(closes: np.ndarray, params: EngineParams = DEFAULT_PARAMS) -> Run:
    """Apply the rules to a series of daily closes (oldest first). Causal: every output at session t depends only
    on closes[0..t], so the run over a prefix is the prefix of the run."""
    closes = np.asarray(closes, dtype=float)
    buy = _rolling(closes, params.entry_lookback, "max")
    sell = _rolling(closes, params.exit_lookback, "min")
    sma = _rolling(closes, params.trend_lookback, "mean")
    actions: list[Action] = []
    states: list[State] = []
    recommended: list[State] = []
    confirmed: State = FLAT
    # Plain floats: the loop reads one value at a time, which numpy scalars make ten times slower.
    prices, buys, sells, smas = closes.tolist(), buy.tolist(), sell.tolist(), sma.tolist()
    for t, close in enumerate(prices):
        states.append(confirmed)
        ready = t >= 1 and not (isnan(buys[t - 1]) or isnan(sells[t - 1]) or isnan(smas[t - 1]))
        action: Action
        if confirmed == LONG:
            action = "EXIT" if ready and close < sells[t - 1] else "HOLD"
        else:
            action = "ENTER" if ready and close > buys[t - 1] and close > smas[t - 1] else "STAY_FLAT"
        actions.append(action)
        after: State = LONG if action in ("ENTER", "HOLD") else FLAT
        recommended.append(after)
        confirmed = after  # recorded by the closing-bar transition, i.e. visible from the next session
    return Run(buy_line=buy, sell_line=sell, sma=sma, action=actions, state=states, recommended=recommended)
