"""The server's verdict on a backtest or an optimization: the probabilistic and deflated Sharpe ratios (Bailey &
López de Prado, 2014), the probability of backtest overfitting by CSCV (Bailey, Borwein, López de Prado & Zhu,
2017) and the rules that turn them, with the look-ahead probe and the trade count, into a status.

Conventions (documentation.md, "Verdicts"): returns are daily (the engine's TimeReturn series), so the Sharpe
ratio is per observation (per day, not annualised), `kurtosis` is the plain fourth standardised moment (3 for a
normal distribution, not excess kurtosis) and both moments are the biased sample estimates the paper uses. Pure
numpy and the standard library's normal distribution: no Django, deterministic for equal inputs.
"""

import hashlib
import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, TypeGuard

import numpy as np

EULER_GAMMA = 0.5772156649015329
NORMAL = NormalDist()
BOUNDARY = "Descriptive evidence about this backtest's history, not a forecast and not investment advice."


@dataclass(frozen=True)
class Moments:
    sharpe: float  # mean / sample standard deviation, per observation
    skewness: float
    kurtosis: float  # not excess: a normal distribution has 3
    observations: int


def moments(returns: Sequence[float]) -> Moments | None:
    """The Sharpe ratio and higher moments of a return series; None when undefined (under 3 returns, or flat)."""
    r = np.asarray(returns, dtype=float)
    if len(r) < 3:
        return None
    centred = r - r.mean()
    m2 = float((centred**2).mean())
    if m2 == 0.0:
        return None
    return Moments(
        sharpe=float(r.mean() / r.std(ddof=1)),
        skewness=float((centred**3).mean() / m2**1.5),
        kurtosis=float((centred**4).mean() / m2**2),
        observations=len(r),
    )


def probabilistic_sharpe(observed: Moments, benchmark: float) -> float | None:
    """PSR: the probability that the true Sharpe ratio exceeds `benchmark`, given the sample's length, skewness
    and kurtosis (paper eq. 9); None when the variance term is not positive (an extreme skew/Sharpe pair)."""
    sr = observed.sharpe
    spread = 1.0 - observed.skewness * sr + (observed.kurtosis - 1.0) / 4.0 * sr**2
    if spread <= 0.0:
        return None
    return NORMAL.cdf((sr - benchmark) * math.sqrt(observed.observations - 1) / math.sqrt(spread))


def expected_max_sharpe(trials: int, variance: float | None) -> float:
    """The Sharpe ratio the best of `trials` skill-less trials is expected to reach (paper eq. 6). One trial, or
    no measurable spread between trials, has no selection bias to deflate: 0."""
    if trials < 2 or not variance:
        return 0.0
    return math.sqrt(variance) * (
        (1.0 - EULER_GAMMA) * NORMAL.inv_cdf(1.0 - 1.0 / trials)
        + EULER_GAMMA * NORMAL.inv_cdf(1.0 - 1.0 / (trials * math.e))
    )


def deflated_sharpe(returns: Sequence[float], *, trials: int, trial_sharpe_variance: float | None) -> dict[str, Any]:
    """The `deflated_sharpe` block: DSR = PSR against the expected maximum Sharpe of `trials` trials."""
    observed = moments(returns)
    if observed is None:
        return {
            "value": None, "probabilistic_sharpe": None, "sharpe": None, "trials": trials,
            "trial_sharpe_variance": trial_sharpe_variance, "skewness": None, "kurtosis": None,
            "observations": len(returns),
        }  # fmt: skip
    return {
        "value": probabilistic_sharpe(observed, expected_max_sharpe(trials, trial_sharpe_variance)),
        "probabilistic_sharpe": probabilistic_sharpe(observed, 0.0),
        "sharpe": observed.sharpe,
        "trials": trials,
        "trial_sharpe_variance": trial_sharpe_variance,
        "skewness": observed.skewness,
        "kurtosis": observed.kurtosis,
        "observations": observed.observations,
    }


# --- probability of backtest overfitting -----------------------------------------------------------------------


class CscvRefused(ValueError):
    """The grid or the period is too small for CSCV; the message says which and by how much."""


def _sharpe(total: np.ndarray, squares: np.ndarray, n: int) -> np.ndarray:
    """Per-observation Sharpe from sums; a flat column (never traded in that half) scores 0."""
    mean = total / n
    variance = np.maximum(squares - n * mean**2, 0.0) / (n - 1)
    sd = np.sqrt(variance)
    return np.divide(mean, sd, out=np.zeros_like(mean), where=sd > 1e-15)


def _cscv_refusal(observations: int, points: int, blocks: int, min_block_observations: int) -> None:
    if blocks < 2 or blocks % 2:
        raise CscvRefused(f"blocks must be even and at least 2, not {blocks}.")
    if points < 2:
        raise CscvRefused(f"The grid has {points} completed point(s); CSCV needs at least 2 to choose between.")
    if observations // blocks < min_block_observations:
        raise CscvRefused(
            f"The period has {observations} observations; {blocks} blocks need at least "
            f"{blocks * min_block_observations} ({min_block_observations} per block)."
        )


def block_sums(column: np.ndarray, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """One point's returns in time order as CSCV reads them: the oldest len mod `blocks` dropped, then each of the
    `blocks` equal blocks' sum and sum of squares. Every CSCV goes through here, so a point's sums computed when it
    finished are bit for bit those its column of the grid's matrix gives."""
    size = len(column) // blocks
    trimmed = np.ascontiguousarray(column[len(column) - size * blocks :]).reshape(blocks, size)
    return trimmed.sum(axis=1), (trimmed**2).sum(axis=1)


def cscv(matrix: np.ndarray, *, blocks: int = 16, min_block_observations: int = 2) -> dict[str, Any]:
    """PBO by combinatorially symmetric cross-validation over a T x N matrix of per-observation returns (rows in
    time order, one column per grid point): `cscv_of_sums` of each column's `block_sums`."""
    observations, points = matrix.shape
    _cscv_refusal(observations, points, blocks, min_block_observations)
    columns = [block_sums(matrix[:, j], blocks) for j in range(points)]
    sums = np.column_stack([total for total, _ in columns])
    squares = np.column_stack([square for _, square in columns])
    return cscv_of_sums(sums, squares, observations=observations, min_block_observations=min_block_observations)


def cscv_of_sums(
    sums: np.ndarray, squares: np.ndarray, *, observations: int, min_block_observations: int = 2
) -> dict[str, Any]:
    """PBO by CSCV from the S x N per-block sums and sums of squares of N points' T returns (`block_sums`).

    For each of the C(S, S/2) choices of in-sample blocks, the column with the best in-sample Sharpe (the lowest
    column on ties) is ranked among all columns out of sample; ω = rank / (N + 1) and λ = ln(ω / (1 - ω)). PBO is
    the share of combinations with λ ≤ 0; the degradation slope is the least-squares slope of the chosen column's
    out-of-sample on in-sample Sharpe.
    """
    blocks, points = sums.shape
    _cscv_refusal(observations, points, blocks, min_block_observations)
    if len(np.unique(np.vstack([sums, squares]), axis=1).T) < 2:
        # Every combination would rank a tie at the median (λ = 0, counted as overfit): no information, not PBO 1.
        raise CscvRefused(
            f"All {points} completed points have the same returns: the parameters changed nothing to choose between."
        )
    size = observations // blocks
    chosen = np.array(list(itertools.combinations(range(blocks), blocks // 2)))
    mask = np.zeros((len(chosen), blocks))
    mask[np.arange(len(chosen))[:, None], chosen] = 1.0
    half = size * blocks // 2
    in_sum, in_sq = mask @ sums, mask @ squares
    in_sharpe = _sharpe(in_sum, in_sq, half)
    out_sharpe = _sharpe(sums.sum(axis=0) - in_sum, squares.sum(axis=0) - in_sq, half)
    best = in_sharpe.argmax(axis=1)
    rows = np.arange(len(chosen))
    best_in, best_out = in_sharpe[rows, best], out_sharpe[rows, best]
    below = (out_sharpe < best_out[:, None]).sum(axis=1)
    ties = (out_sharpe == best_out[:, None]).sum(axis=1)
    omega = (below + (ties + 1) / 2.0) / (points + 1)  # ties share their average rank
    logits = np.log(omega / (1.0 - omega))
    slope = float(np.polyfit(best_in, best_out, 1)[0]) if np.ptp(best_in) > 0 else None
    q1, median, q3 = (float(v) for v in np.quantile(logits, [0.25, 0.5, 0.75]))
    return {
        "value": float((logits <= 0).mean()),
        "blocks": blocks,
        "combinations": len(chosen),
        "grid_points": points,
        "observations": size * blocks,
        "logit": {
            "mean": float(logits.mean()),
            "median": median,
            "q1": q1,
            "q3": q3,
            "min": float(logits.min()),
            "max": float(logits.max()),
        },
        "degradation_slope": slope,
        "probability_oos_loss": float((best_out < 0).mean()),
    }


def return_blocks(series: Sequence[Sequence[Any]], blocks: int) -> dict[str, Any] | None:
    """A grid point's `block_sums`, kept with the point when it finishes so that the grid's PBO reads S sums a point
    instead of every point's whole series; with the SHA-256 of its days, since only points whose days agree make
    the grid's matrix without a union. None when it has fewer days than `blocks`, or a day that is not a string."""
    days = [day for day, _ in series]
    values = [value for _, value in series]
    # Exact types first, as the engine's JSON gives them (C loops: a generator per item took 1.2 ms a point).
    if set(map(type, days)) != {str} and not all(isinstance(day, str) for day in days):
        return None
    numbers = set(map(type, values)) <= {int, float} or all(
        isinstance(value, int | float) and not isinstance(value, bool) for value in values
    )
    if numbers and all(map(operator.lt, days, days[1:])):
        # Days already ascending and distinct (the engine's series): its values are the matrix column as they are.
        column = np.array(values, dtype=float)
    else:
        days = sorted(set(days))
        column = returns_matrix([series])[:, 0]
    if len(days) < blocks:
        return None
    sums, squares = block_sums(column, blocks)
    return {
        "days": hashlib.sha256("\n".join(days).encode()).hexdigest(),
        "observations": len(days),
        "blocks": blocks,
        "sums": sums.tolist(),
        "squares": squares.tolist(),
    }


def blocks_align(records: Sequence[dict[str, Any] | None], blocks: int) -> TypeGuard[Sequence[dict[str, Any]]]:
    """Whether the points' `return_blocks` make the grid's CSCV: every point has them, over the same days, in
    `blocks` blocks (else CSCV reads the whole series, aligned on the union of their days)."""
    shapes = {(r["days"], r["observations"], r["blocks"]) if r else None for r in records}
    return len(shapes) == 1 and None not in shapes and records[0]["blocks"] == blocks  # type: ignore[index]


def cscv_of_blocks(records: Sequence[dict[str, Any]], *, min_block_observations: int = 2) -> dict[str, Any]:
    """`cscv_of_sums` of aligned points' `return_blocks`, in column order."""
    # S x N and C-contiguous, as `cscv` stacks its columns: the same layout for the same products.
    sums = np.ascontiguousarray(np.array([r["sums"] for r in records]).T)
    squares = np.ascontiguousarray(np.array([r["squares"] for r in records]).T)
    return cscv_of_sums(
        sums, squares, observations=records[0]["observations"], min_block_observations=min_block_observations
    )


def returns_matrix(series: Sequence[Sequence[Sequence[Any]]]) -> np.ndarray:
    """Align each grid point's [[day, return], ...] on the union of days (a day a point has no return is 0)."""
    days = sorted({day for points in series for day, _ in points})
    index = {day: i for i, day in enumerate(days)}
    matrix = np.zeros((len(days), len(series)))
    for column, points in enumerate(series):
        for day, value in points:
            matrix[index[day], column] = value
    return matrix


# --- the verdict -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Thresholds:
    min_deflated_sharpe: float
    max_pbo: float
    min_trades: int

    def named(self) -> dict[str, float | int]:
        return {
            "LEROY_VERDICT_MIN_DEFLATED_SHARPE": self.min_deflated_sharpe,
            "LEROY_VERDICT_MAX_PBO": self.max_pbo,
            "LEROY_VERDICT_MIN_TRADES": self.min_trades,
        }


def verdict(
    *,
    deflated: dict[str, Any],
    pbo: dict[str, Any] | None,
    pbo_refusal: str | None,
    lookahead: str,
    trades: int,
    thresholds: Thresholds,
    max_drawdown_pct: float | None = None,
) -> dict[str, Any]:
    """The status and its reasons. Overfit (look-ahead failed, or PBO above the limit) outranks insufficient
    evidence (too few trades, an undefined DSR, no look-ahead probe, a PBO that could not be computed, an account
    value that reached zero), which outranks fragile (DSR below the limit); robust needs none of them."""
    found: dict[str, list[dict[str, str]]] = {"overfit": [], "insufficient_evidence": [], "fragile": []}
    if lookahead == "failed":
        found["overfit"].append({"code": "lookahead", "message": "The look-ahead probe found decisions that change "
                                 "when later bars are removed."})  # fmt: skip
    elif lookahead == "not_run":
        found["insufficient_evidence"].append({"code": "lookahead_not_run", "message": "The look-ahead probe did "
                                               "not run."})  # fmt: skip
    if pbo is not None and pbo["value"] > thresholds.max_pbo:
        found["overfit"].append({"code": "pbo", "message": f"PBO {pbo['value']:.3f} is above "
                                 f"the limit of {thresholds.max_pbo} (LEROY_VERDICT_MAX_PBO)."})  # fmt: skip
    if pbo_refusal is not None:
        found["insufficient_evidence"].append({"code": "pbo_not_computed", "message": pbo_refusal})
    if trades < thresholds.min_trades:
        required = f"the {thresholds.min_trades} required (LEROY_VERDICT_MIN_TRADES)"
        found["insufficient_evidence"].append({"code": "trades", "message": f"{trades} trades, fewer than {required}."})
    if max_drawdown_pct is not None and max_drawdown_pct >= 100:
        # A drawdown of 100 % or more is an account value at or below zero (a short larger than the cash allows):
        # returns measured on it, and every ratio built on them, describe nothing an account could have had.
        found["insufficient_evidence"].append({"code": "account_value_not_positive", "message": "The account value "
                                               f"fell to zero or below (maximum drawdown {max_drawdown_pct:.2f} %): "
                                               "its returns and ratios are not meaningful."})  # fmt: skip
    dsr = deflated["value"]
    if dsr is None:
        found["insufficient_evidence"].append({"code": "deflated_sharpe_undefined", "message": "The returns are "
                                               "too few or too flat for a deflated Sharpe ratio."})  # fmt: skip
    elif dsr < thresholds.min_deflated_sharpe:
        found["fragile"].append({"code": "deflated_sharpe", "message": f"Deflated Sharpe {dsr:.3f} over "
                                 f"{deflated['trials']} trials is below the {thresholds.min_deflated_sharpe} "
                                 "required (LEROY_VERDICT_MIN_DEFLATED_SHARPE)."})  # fmt: skip
    status = next((name for name, reasons in found.items() if reasons), "robust")
    return {
        "status": status,
        "reasons": [reason for reasons in found.values() for reason in reasons],
        "deflated_sharpe": deflated,
        "pbo": pbo,
        "lookahead_check": lookahead,
        "thresholds": thresholds.named(),
        "note": BOUNDARY,
    }
