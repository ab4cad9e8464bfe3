"""The contract's 14 metrics, from well-kept libraries only (notes/backtesting.md §4); formulas and units are in
documentation.md.

Trade metrics come from backtrader's TradeAnalyzer output; return metrics from empyrical-reloaded applied to
daily returns (TimeReturn, Days) with a 0 % risk-free rate. The maximum drawdown is not: it is Backtrader's
DrawDown analyzer over the account value at every bar, at the data's own frequency (daily returns would hide an
intraday trough). A metric that is undefined for the run (no losing trade, no returns) is null, never a
substitute value.
"""

import hashlib
import json
import math
from collections import defaultdict
from typing import Any

METRICS = (
    "realized_pnl", "total_return", "cagr", "calmar_ratio", "recovery_factor", "annualized_sharpe_ratio",
    "maximum_drawdown_percentage", "std_dev_returns", "profit_factor", "payoff_ratio", "expectancy",
    "average_trade", "percentage_of_winning_trades", "avg_bars_held",
)  # fmt: skip


# A trade's net P&L within this part of what it moved (its quantity at its entry price) is the rounding of a price
# that did not change (in at 110.22999999999999, out at 110.23): break-even, neither a winner nor a loser.
PNL_ROUNDING = 1e-9


def trade_sign(total: float, notional: float) -> int:
    """1 for a closed trade with this net P&L that won, -1 for one that lost, 0 for a break-even one."""
    margin = PNL_ROUNDING * abs(notional)
    return 1 if total > margin else -1 if total < -margin else 0


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _dig(tree: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _ratio(numerator: Any, denominator: Any) -> float | None:
    if numerator is None or not denominator:
        return None
    return _finite(numerator / abs(denominator))


def warm() -> None:
    """Import the return metrics' libraries now (a worker process, before its first result)."""
    import empyrical  # noqa: F401
    import pandas  # noqa: F401


# A drawdown below this (a 10⁻¹² part of the peak) is the rounding of an account value that did not fall (one
# measured 3.1e-14 %): counted as none, so Calmar and the recovery factor are null, not 10¹⁶.
DRAWDOWN_ROUNDING_PERCENT = 1e-10


def return_metrics(
    daily_returns: list[list[Any]], *, drawdown: dict[str, float] | None = None, net_profit: float | None = None
) -> dict[str, float | None]:
    """Return metrics; `drawdown` is the bar-level maximum drawdown ({percentage, money}) and `net_profit` the
    final account value less the initial cash, in money."""
    import empyrical
    import pandas as pd

    worst = _finite((drawdown or {}).get("percentage"))
    worst_money = _finite((drawdown or {}).get("money"))
    if worst is not None and worst < DRAWDOWN_ROUNDING_PERCENT:
        worst, worst_money = 0.0, 0.0
    if not daily_returns:
        names = ("total_return", "cagr", "calmar_ratio", "annualized_sharpe_ratio", "std_dev_returns")
        return dict.fromkeys(names) | {
            "maximum_drawdown_percentage": worst,
            "recovery_factor": _ratio(net_profit, worst_money),
        }
    # empyrical reads the values only (the period's factor, not the index, annualises): parsing the days into an
    # index took 1.3 ms of a point's 1.7 ms here, for the same metrics to the bit.
    returns = pd.Series([float(r) for _, r in daily_returns], dtype=float)
    cagr = _finite(empyrical.cagr(returns, period="daily"))
    return {
        "total_return": _finite(empyrical.cum_returns_final(returns)),
        "cagr": cagr,
        "calmar_ratio": _ratio(cagr, worst / 100) if worst else None,
        "recovery_factor": _ratio(net_profit, worst_money),
        "annualized_sharpe_ratio": _finite(empyrical.sharpe_ratio(returns, risk_free=0.0, period="daily")),
        "maximum_drawdown_percentage": worst,
        "std_dev_returns": _finite(returns.std()) if len(returns) > 1 else None,
    }


def trade_metrics(analysis: dict[str, Any], *, tally: dict[str, Any] | None = None) -> dict[str, float | None]:
    """`tally`: the closed trades that won and lost (`trade_sign`) and their net P&L, as the run counted them; a
    result recorded before it counted them has TradeAnalyzer's, whose `won` holds the break-even trades too."""
    closed = _dig(analysis, "total", "closed") or 0
    if tally is None:
        tally = {side: _dig(analysis, side, "total") or 0 for side in ("won", "lost")} | {
            f"{side}_pnl": _dig(analysis, side, "pnl", "total") for side in ("won", "lost")
        }
    won, lost = tally["won"], tally["lost"]
    average = _finite(_dig(analysis, "pnl", "net", "average")) if closed else None
    return {
        "realized_pnl": _finite(_dig(analysis, "pnl", "net", "total")) if closed else 0.0,
        "profit_factor": _ratio(tally["won_pnl"] or 0.0, tally["lost_pnl"]) if lost else None,
        "payoff_ratio": _ratio(tally["won_pnl"] / won, tally["lost_pnl"] / lost) if won and lost else None,
        "expectancy": average,
        "average_trade": average,
        "percentage_of_winning_trades": won / closed * 100 if closed else None,
        "avg_bars_held": _finite(_dig(analysis, "len", "average")) if closed else None,
    }


def compute(result: dict[str, Any]) -> dict[str, float | None]:
    """All 14 metrics for one engine result, in the contract's order."""
    net_profit = result["final_value"] - result["initial_cash"]
    returns = return_metrics(result["daily_returns"], drawdown=result["max_drawdown"], net_profit=net_profit)
    values = returns | trade_metrics(result["trade_analyzer"], tally=result.get("trade_tally"))
    return {name: values[name] for name in METRICS}


def per_symbol(result: dict[str, Any]) -> list[dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for trade in result["trades"]:
        groups[trade["symbol"]].append(trade)
    rows = []
    for symbol, bars in result["bars"].items():
        trades = groups.get(symbol, [])
        wins = sum(1 for t in trades if trade_sign(t["total"], t["quantity"] * t["entry_price"]) > 0)
        rows.append(
            {
                "symbol": symbol,
                "bars": bars,
                "trades": len(trades),
                "gross_pnl": sum(t["gross_pnl"] for t in trades),
                "net_pnl": sum(t["total"] for t in trades),
                "percentage_of_winning_trades": wins / len(trades) * 100 if trades else None,
            }
        )
    return rows


def report_hash(
    *, statistics: dict[str, Any], result: dict[str, Any], lookahead_check: dict[str, Any], verdict: dict[str, Any]
) -> str:
    """SHA-256 over the report's content, its look-ahead probe and its verdict; equal inputs (version, data,
    parameters and the trials counted before it) give equal hashes."""
    body = {
        "statistics": statistics,
        "trades": result["trades"],
        "equity": result["equity"],
        "final_value": result["final_value"],
        "lookahead_check": lookahead_check,
        "verdict": verdict,
    }
    return _sha256(body)


def optimization_hash(
    *,
    points: list[dict[str, Any]],
    lookahead_check: dict[str, Any],
    verdict: dict[str, Any],
    walk_forward: dict[str, Any] | None = None,
) -> str:
    """SHA-256 over every completed point (iteration, parameters, statistics), the probe, the verdict and, walking
    forward, the folds' result (a grid optimization's hash is unchanged)."""
    body = {"points": points, "lookahead_check": lookahead_check, "verdict": verdict}
    return _sha256(body if walk_forward is None else body | {"walk_forward": walk_forward})


def _sha256(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
