"""Legs of an engine run and their statistics: the historical replay (today's rules applied retrospectively)."""

from dataclasses import dataclass
from datetime import date
from statistics import median
from typing import Any

import numpy as np

from evidence.eod.engine import EngineParams, Run, run

DIGITS = 6  # returns and ratios are rounded once, here
LABEL = "retrospective_replay"  # what a replay is: today's rules run over the past, not validation


@dataclass(frozen=True)
class Leg:
    entry_date: date
    entry_price: float
    exit_date: date | None  # None while open
    exit_price: float | None
    return_pct: float  # closed: exit / entry - 1; open: last close / entry - 1, marked to the last close
    holding_days: int  # sessions from the entry close to the exit (or last) close
    open: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "entry_date": self.entry_date.isoformat(),
            "entry_price": self.entry_price,
            "exit_date": self.exit_date.isoformat() if self.exit_date else None,
            "exit_price": self.exit_price,
            "return": self.return_pct,
            "holding_days": self.holding_days,
            "open": self.open,
        }


def legs(sessions: list[date], closes: np.ndarray, result: Run) -> list[Leg]:
    """Every leg: entered at the close of an ENTER session, left at the close of the next EXIT session."""
    out: list[Leg] = []
    entry: int | None = None
    for t, action in enumerate(result.action):
        if action == "ENTER":
            entry = t
        elif action == "EXIT" and entry is not None:
            out.append(_leg(sessions, closes, entry, t, closed=True))
            entry = None
    if entry is not None:
        out.append(_leg(sessions, closes, entry, len(closes) - 1, closed=False))
    return out


def _leg(sessions: list[date], closes: np.ndarray, entry: int, end: int, *, closed: bool) -> Leg:
    return Leg(
        entry_date=sessions[entry],
        entry_price=float(closes[entry]),
        exit_date=sessions[end] if closed else None,
        exit_price=float(closes[end]) if closed else None,
        return_pct=round(float(closes[end] / closes[entry] - 1), DIGITS),
        holding_days=end - entry,
        open=not closed,
    )


def strategy_returns(closes: np.ndarray, result: Run) -> np.ndarray:
    """Daily return of holding the engine's target weight from each close to the next (0 on the first session)."""
    held = result.position()
    out = np.zeros(len(closes))
    if len(closes) > 1:
        out[1:] = held[:-1] * (closes[1:] / closes[:-1] - 1)
    return out


def max_drawdown(daily: np.ndarray) -> float:
    """Largest fall of the compounded equity from its running peak, as a positive fraction."""
    if len(daily) == 0:
        return 0.0
    equity = np.cumprod(1 + daily)
    peak = np.maximum.accumulate(np.concatenate([[1.0], equity]))[1:]
    return round(float(np.max(1 - equity / peak)), DIGITS)


def leg_statistics(closed: list[float]) -> dict[str, Any]:
    """Over closed legs only: count, win rate, average and median return, profit factor (null without a loss)."""
    wins = [r for r in closed if r > 0]
    losses = [r for r in closed if r < 0]
    return {
        "closed_legs": len(closed),
        "winners": len(wins),
        "losers": len(losses),
        "win_rate": round(len(wins) / len(closed), DIGITS) if closed else None,
        "average_return": round(sum(closed) / len(closed), DIGITS) if closed else None,
        "median_return": round(median(closed), DIGITS) if closed else None,
        "profit_factor": round(sum(wins) / -sum(losses), DIGITS) if losses else None,
    }


@dataclass(frozen=True)
class SymbolReplay:
    legs: list[Leg]
    daily: np.ndarray  # strategy daily returns over the window
    summary: dict[str, Any]


def replay(sessions: list[date], closes: np.ndarray, params: EngineParams) -> SymbolReplay:
    """The engine run fresh over the window's closes (its warm-up inside the window)."""
    result = run(closes, params)
    found = legs(sessions, closes, result)
    daily = strategy_returns(closes, result)
    summary = {
        "first_session": sessions[0].isoformat() if sessions else None,
        "last_session": sessions[-1].isoformat() if sessions else None,
        "sessions": len(sessions),
        "legs": len(found),
        "open_legs": sum(1 for leg in found if leg.open),
        **leg_statistics([leg.return_pct for leg in found if not leg.open]),
        "max_drawdown": max_drawdown(daily),
        "exposure": round(float(result.position().mean()), DIGITS) if len(closes) else None,
    }
    return SymbolReplay(legs=found, daily=daily, summary=summary)


def universe_summary(replays: dict[str, SymbolReplay]) -> dict[str, Any]:
    """Closed legs pooled over symbols; drawdown of the equal-weight daily average; mean exposure."""
    closed = [leg.return_pct for r in replays.values() for leg in r.legs if not leg.open]
    length = max((len(r.daily) for r in replays.values()), default=0)
    # Symbols with shorter windows are aligned on the latest session (their earlier days count as cash).
    stacked = np.array([np.concatenate([np.zeros(length - len(r.daily)), r.daily]) for r in replays.values()])
    exposures = [r.summary["exposure"] for r in replays.values() if r.summary["exposure"] is not None]
    return {
        "symbols": len(replays),
        "legs": sum(len(r.legs) for r in replays.values()),
        "open_legs": sum(1 for r in replays.values() for leg in r.legs if leg.open),
        **leg_statistics(closed),
        "max_drawdown": max_drawdown(stacked.mean(axis=0)) if len(stacked) else 0.0,
        "exposure": round(sum(exposures) / len(exposures), DIGITS) if exposures else None,
    }
