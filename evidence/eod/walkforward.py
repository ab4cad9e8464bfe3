"""Rolling walk-forward: each calendar year's variant is chosen on closes through the preceding year only, then
scored on that year, next to holding and the champion-free base (the default engine). Lagging years are kept."""

from dataclasses import asdict
from datetime import date
from typing import Any

import numpy as np

from evidence.eod.engine import DEFAULT_PARAMS, EngineParams, run
from evidence.eod.replay import DIGITS, strategy_returns
from evidence.marketdata import calendar

# The declared, finite variant set (its order breaks ties: the first best wins).
VARIANTS: tuple[EngineParams, ...] = tuple(
    EngineParams(entry_lookback=entry, exit_lookback=exit_, trend_lookback=50)
    for entry in (20, 55)
    for exit_ in (10, 20)
)
METHOD = (
    "Each calendar year's variant is chosen only on closes through the preceding year, then scored on that year; "
    "years where it lagged holding or the champion-free base are kept."
)
FIT_YEARS = 2  # the fit scores each variant on the two calendar years before the scored year


def variant_set() -> list[dict[str, int]]:
    return [asdict(v) for v in VARIANTS]


def _compounded(daily: np.ndarray) -> float:
    return float(np.prod(1 + daily) - 1)


def _in_years(sessions: list[date], daily: np.ndarray, first: int, last: int) -> float:
    return _compounded(daily[np.array([first <= day.year <= last for day in sessions])])


def _whole_year(year: int) -> tuple[date, date]:
    """The first and last XNYS session of the calendar year."""
    days = calendar.sessions_between(date(year, 1, 1), date(year, 12, 31))
    return days[0], days[-1]


def walk_forward(sessions: list[date], closes: np.ndarray, first_year: int, last_year: int) -> list[dict[str, Any]]:
    """One row per scored calendar year from first_year through last_year that has sessions and a fit window. A
    year the series does not cover from its first XNYS session to its last (the current one, year to date) is scored
    over the sessions it has and marked `complete: false`: its returns are part-year, not comparable with a full
    year's.

    Each variant runs once over the whole series: the engine is causal, so its returns through year - 1 are those
    of a run on closes through year - 1 only (tests perturb later years to prove the choice never sees them)."""
    daily = [strategy_returns(closes, run(closes, variant)) for variant in VARIANTS]
    base = strategy_returns(closes, run(closes, DEFAULT_PARAMS))
    rows = []
    for year in range(first_year, last_year + 1):
        in_year = [i for i, day in enumerate(sessions) if day.year == year]
        if len(in_year) < 2 or sessions[0].year > year - FIT_YEARS:
            continue  # no scored sessions, or the fit window is not fully covered
        fits = [_in_years(sessions, d, year - FIT_YEARS, year - 1) for d in daily]
        index = int(np.argmax(fits))  # the first best in declared order
        before = closes[in_year[0] - 1] if in_year[0] > 0 else closes[in_year[0]]
        score = _in_years(sessions, daily[index], year, year)
        holding = float(closes[in_year[-1]] / before - 1)
        base_return = _in_years(sessions, base, year, year)
        first, last = sessions[in_year[0]], sessions[in_year[-1]]
        rows.append(
            {
                "year": year,
                "first_session": first.isoformat(),
                "last_session": last.isoformat(),
                "complete": (first, last) == _whole_year(year),
                "chosen_variant": index,
                "chosen_params": asdict(VARIANTS[index]),
                "fit_through": date(year - 1, 12, 31).isoformat(),
                "fit_score": round(fits[index], DIGITS),
                "score": round(score, DIGITS),
                "holding_return": round(holding, DIGITS),
                "base_return": round(base_return, DIGITS),
                "lagged_holding": score < holding,
                "lagged_base": score < base_return,
                "sessions": len(in_year),
            }
        )
    return rows
