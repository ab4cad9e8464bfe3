"""The one door from `alerts` into `evidence`: every import of evidence internals by the alerts app is here.

Rules are evaluated with evidence's own evaluation, the code behind `evaluate_current_setup` minus its metering
(an alert costs no lookup). Evidence never imports alerts; when evidence modules move, only this file changes.
"""

from dataclasses import dataclass
from datetime import datetime

from evidence.live import frames
from evidence.memory.selectors import MemoryUnavailable
from evidence.models import Frame
from evidence.research.evaluation import build_evaluation, situation
from evidence.schemas import EvaluateArgs, EvaluationOut, ResearchBoundary
from evidence.vocabulary import HORIZONS, TIER_NAMES, Horizon, Side

__all__ = [
    "HORIZONS",
    "TIER_NAMES",
    "EvaluationOut",
    "FrameRef",
    "Horizon",
    "MemoryUnavailable",
    "ResearchBoundary",
    "Side",
    "current_frames",
    "evaluate",
    "session_close",
    "universe",
]


@dataclass(frozen=True)
class FrameRef:
    """One symbol's current verified frame, named by the minute its bar opened."""

    ticker: str
    source_time: datetime


def current_frames() -> list[FrameRef]:
    """Every symbol's current frame as the feed last stored it (one row per symbol, replaced on each tick)."""
    rows = Frame.objects.order_by("symbol__ticker").values_list("symbol__ticker", "source_time")
    return [FrameRef(ticker, source_time) for ticker, source_time in rows]


def universe() -> list[str]:
    """The tickers the frame feed follows: the only symbols a rule can ever match."""
    return [symbol.ticker for symbol in frames.feed_universe()]


def evaluate(*, ticker: str, side: Side, horizon: Horizon) -> EvaluationOut:
    """`evaluate_current_setup`'s evaluation of one side and horizon on the current frame, uncharged.

    Raises MemoryUnavailable when no verified artifact is active."""
    args = EvaluateArgs(symbol=ticker, side=side, holding_horizons=[horizon])
    return build_evaluation(args, situation(ticker))


def session_close(at: datetime) -> datetime | None:
    """When the regular session open at `at` closes, or None when the market is closed."""
    window = frames.open_session(at)
    return window.close if window else None
