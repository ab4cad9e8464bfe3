"""Strategies, backtest reports and optimizations, as the account owner reads them in the browser."""

from typing import Any

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from accounts.models import User
from accounts.views import account_page
from backtests import selectors
from backtests.models import OptimizationMode
from backtests.statistics import METRICS
from leroy.charts import drawdown, heat_map, line_chart

TRADES_PER_PAGE = 25


# Where the metric's name does not read as words (an acronym, an abbreviation).
LABELS = {
    "realized_pnl": "Realized P&L",
    "cagr": "CAGR",
    "annualized_sharpe_ratio": "Annualized Sharpe ratio",
    "std_dev_returns": "Standard deviation of returns",
    "avg_bars_held": "Average bars held",
}


def _label(name: str) -> str:
    return LABELS.get(name) or name.replace("_", " ").replace("percentage", "%").capitalize()


@require_safe
@account_page
def strategies(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    # A strategy's reports are those of every revision, as its own page lists them.
    rows = [
        {
            "strategy": strategy,
            "reports": selectors.reports_of(user=request.user).filter(strategy__lineage=strategy.lineage)[:3],
        }
        for strategy in selectors.strategies_current(user=request.user)
    ]
    optimizations = selectors.optimizations_of(user=request.user)[:20]
    return render(request, "backtests/strategies.html", {"rows": rows, "optimizations": optimizations})


@require_safe
@account_page
def strategy(request: HttpRequest, strategy_id: str) -> HttpResponse:
    assert isinstance(request.user, User)
    found = selectors.strategy_get(user=request.user, strategy_id=strategy_id)
    if found is None:
        raise Http404("No such strategy on this account.")
    versions = selectors.strategy_versions(strategy=found)
    reports = selectors.reports_of(user=request.user).filter(strategy__lineage=found.lineage)
    context = {"strategy": found, "versions": versions, "reports": reports}
    return render(request, "backtests/strategy.html", context)


def report_statistics(statistics: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The contract's metrics in their fixed order, readable names first (shared with the admin)."""
    statistics = statistics or {}
    return [(_label(name), statistics.get(name)) for name in METRICS]


@require_safe
@account_page
def report(request: HttpRequest, report_id: str) -> HttpResponse:
    assert isinstance(request.user, User)
    found = selectors.report_get(user=request.user, report_id=report_id)
    if found is None:
        raise Http404("No such report on this account.")
    curve = [(str(time), float(value)) for time, value in found.equity or []]
    trades = Paginator(found.trades or [], TRADES_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "report": found,
        "statistics": report_statistics(found.statistics),
        "equity_chart": line_chart(curve) if curve else None,
        "drawdown_chart": line_chart(drawdown(curve)) if curve else None,
        "trades": trades,
    }
    return render(request, "backtests/report.html", context)


@require_safe
@account_page
def optimization(request: HttpRequest, optimization_id: str) -> HttpResponse:
    assert isinstance(request.user, User)
    found = selectors.optimization_get(user=request.user, optimization_id=optimization_id)
    if found is None:
        raise Http404("No such optimization on this account.")
    metric = found.target_metric
    runs, _ = selectors.optimization_runs(
        optimization=found, sort_by=metric, descending=found.target_direction == "maximize", skip=0, limit=10_000
    )
    names = [grid["name"] for grid in found.grids]
    metrics = [metric, *[m for m in found.additional_metrics if m != metric]]
    rows = [
        {
            "run": run,
            "parameters": [run.parameters.get(name) for name in names],
            "metrics": [(run.statistics or {}).get(m) for m in metrics],
        }
        for run in runs
    ]
    chart = None
    walk_forward = found.walk_forward if found.mode == OptimizationMode.WALK_FORWARD else None
    if len(names) == 2 and walk_forward is None:  # one heat map per grid; a walk-forward's points span folds
        columns = sorted({run.parameters[names[0]] for run in runs})
        grid_rows = sorted({run.parameters[names[1]] for run in runs})
        values = {
            (str(run.parameters[names[0]]), str(run.parameters[names[1]])): (run.statistics or {}).get(metric)
            for run in runs
        }
        chart = heat_map(
            values,
            columns=[str(c) for c in columns],
            rows=[str(r) for r in grid_rows],
            column_name=names[0],
            row_name=names[1],
        )
    context = {
        "optimization": found,
        "names": names,
        "metrics": [_label(m) for m in metrics],
        "target": _label(metric),
        "rows": rows,
        "heat_map": chart,
        "walk_forward": walk_forward,
        "folds": _folds(walk_forward, names=names, metric=metric) if walk_forward else [],
        "oos_chart": line_chart([(day, value) for day, value in walk_forward["oos_equity_curve"]])
        if walk_forward and walk_forward.get("oos_equity_curve")
        else None,
    }
    return render(request, "backtests/optimization.html", context)


def _folds(walk_forward: dict[str, Any], *, names: list[str], metric: str) -> list[dict[str, Any]]:
    """One row per fold: its windows, the point chosen on the train window and the target metric on each side."""
    return [
        {
            "fold": fold["fold"],
            "train": (fold["train_start"][:10], fold["train_end"][:10]),
            "test": (fold["test_start"][:10], fold["test_end"][:10]),
            "parameters": [(fold.get("parameters") or {}).get(name) for name in names],
            "in_sample": (fold.get("in_sample") or {}).get(metric),
            "out_of_sample": (fold.get("out_of_sample") or {}).get(metric),
            "test_status": fold.get("test_status"),
        }
        for fold in walk_forward["folds"]
    ]
