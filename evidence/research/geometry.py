"""Setup geometry: context-only arithmetic on the caller's own price levels, never an execution."""

import math

from evidence.schemas import RequestSide, SetupGeometry
from leroy.errors import DomainError

PRICE_DECIMALS = 6
MIN_DISTANCE = f"{10**-PRICE_DECIMALS:.{PRICE_DECIMALS}f}"  # one unit of the last decimal kept


class InvalidSetup(DomainError):
    """The levels contradict the requested direction (e.g. a buy stop above the entry)."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_setup", message)


def setup_geometry(
    *, side: RequestSide, entry: float | None, stop: float | None, target: float | None
) -> SetupGeometry | None:
    """Risk and reward per share for one direction, each only when the prices it needs exist.

    For `both`, risk and reward depend on the direction, so only the levels are echoed.
    """
    if entry is None and stop is None and target is None:
        return None
    risk = reward = ratio = None
    if side != "both" and entry is not None:
        sign = 1 if side == "buy" else -1
        if stop is not None:
            risk = round(sign * (entry - stop), PRICE_DECIMALS)
            if risk <= 0:
                raise InvalidSetup(
                    f"a {side} stop must lie {'below' if side == 'buy' else 'above'} the entry price by at least "
                    f"{MIN_DISTANCE} (prices are compared to {PRICE_DECIMALS} decimals)"
                )
        if target is not None:
            reward = round(sign * (target - entry), PRICE_DECIMALS)
            if reward <= 0:
                raise InvalidSetup(
                    f"a {side} target must lie {'above' if side == 'buy' else 'below'} the entry price by at least "
                    f"{MIN_DISTANCE} (prices are compared to {PRICE_DECIMALS} decimals)"
                )
        if risk is not None and reward is not None:
            ratio = round(reward / risk, 4)
    # Finite but huge levels can still give an infinite figure (1.7e308 over a risk of 0.000001), which no JSON
    # answer, and no receipt hash of it, can carry: refused as the levels' fault, before anything is charged.
    if any(figure is not None and not math.isfinite(figure) for figure in (risk, reward, ratio)):
        raise InvalidSetup(
            "the price levels give a risk, reward or reward-to-risk too large to state as a finite number"
        )
    return SetupGeometry(
        entry_price=entry,
        stop_price=stop,
        target_price=target,
        risk_per_share=risk,
        reward_per_share=reward,
        reward_to_risk=ratio,
    )
