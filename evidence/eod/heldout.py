"""The held-out static tail: a fixed window declared in the universe file, excluded from the engine's design. Later
research reused it, so its class is "validation", never "test"."""

from datetime import date
from typing import Any

import numpy as np

from evidence.eod.engine import EngineParams, run
from evidence.eod.replay import DIGITS, strategy_returns

EVIDENCE_CLASS = "validation"
REUSE_ADMISSION = (
    "The tail was excluded when the engine's rules were written, but later research looked at it again: treat it "
    "as validation, not as a pristine unseen test."
)


def heldout_row(
    ticker: str, sessions: list[date], closes: np.ndarray, params: EngineParams, first: date, last: date
) -> dict[str, Any] | None:
    """The engine over every close through `last` (warm-up before the tail), scored on sessions first..last."""
    cut = sum(1 for day in sessions if day <= last)
    seen, upto = sessions[:cut], closes[:cut]
    tail = [i for i, day in enumerate(seen) if day >= first]
    if len(tail) < 2:
        return None
    result = run(upto, params)
    daily = strategy_returns(upto, result)[tail[1:]]
    held = result.position()[tail]
    return {
        "symbol": ticker,
        "first_session": seen[tail[0]].isoformat(),
        "last_session": seen[tail[-1]].isoformat(),
        "sessions": len(tail),
        "engine_return": round(float(np.prod(1 + daily) - 1), DIGITS),
        "holding_return": round(float(upto[tail[-1]] / upto[tail[0]] - 1), DIGITS),
        "entries": sum(1 for i in tail if result.action[i] == "ENTER"),
        "exits": sum(1 for i in tail if result.action[i] == "EXIT"),
        "exposure": round(float(held.mean()), DIGITS),
    }
