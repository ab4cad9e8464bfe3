"""Reads for backtests; every query is scoped to the calling account (symbols are shared reference data)."""

import re
import uuid
from typing import Any

from django.db.models import Q, QuerySet

from accounts.models import User
from backtests.models import Optimization, OptimizationMode, OptimizationRun, Report, Status, Strategy, Trial
from evidence.marketdata.selectors import with_bars_source
from evidence.models import Symbol

# Everyday names agents use for pairs whose tickers are codes.
SYMBOL_ALIASES = {"GOLD": "XAU", "SILVER": "XAG", "BITCOIN": "BTC", "ETHER": "ETH", "ETHEREUM": "ETH"}


def parse_id(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def page(queryset: QuerySet[Any], *, skip: int, limit: int) -> tuple[list[Any], int]:
    return list(queryset[skip : skip + limit]), queryset.count()


def strategies_current(*, user: User) -> QuerySet[Strategy]:
    return Strategy.objects.filter(user=user, is_current=True).order_by("-created_at", "-pk")


def strategy_get(*, user: User, strategy_id: str) -> Strategy | None:
    key = parse_id(strategy_id)
    return Strategy.objects.filter(user=user, pk=key).first() if key else None


def strategy_versions(*, strategy: Strategy) -> list[Strategy]:
    return list(Strategy.objects.filter(lineage=strategy.lineage, user_id=strategy.user_id).order_by("revision"))


def reports_of(*, user: User, strategy_id: str | None = None) -> QuerySet[Report]:
    reports = Report.objects.filter(user=user).select_related("strategy").order_by("-created_at", "-pk")
    if strategy_id is not None:
        key = parse_id(strategy_id)
        reports = reports.filter(strategy_id=key) if key else reports.none()
    return reports


def report_get(*, user: User, report_id: str) -> Report | None:
    key = parse_id(report_id)
    return Report.objects.filter(user=user, pk=key).select_related("strategy").first() if key else None


def optimizations_of(*, user: User) -> QuerySet[Optimization]:
    return Optimization.objects.filter(user=user).select_related("strategy").order_by("-created_at", "-pk")


def optimization_get(*, user: User, optimization_id: str) -> Optimization | None:
    key = parse_id(optimization_id)
    return optimizations_of(user=user).filter(pk=key).first() if key else None


def walk_forward_get(*, user: User, optimization_id: str) -> Optimization | None:
    found = optimization_get(user=user, optimization_id=optimization_id)
    return found if found is not None and found.mode == OptimizationMode.WALK_FORWARD else None


def optimization_latest(*, user: User, strategy_id: str) -> Optimization | None:
    key = parse_id(strategy_id)
    return optimizations_of(user=user).filter(strategy_id=key).first() if key else None


def optimization_completed_runs(*, optimization: Optimization) -> list[OptimizationRun]:
    """The completed points in iteration order, read as far as the chart and the report hash need them (iteration,
    parameters, statistics): a point's returns and decisions are the bulk of its row and are left unread."""
    completed = OptimizationRun.objects.filter(optimization=optimization, status=Status.COMPLETED)
    return list(completed.only("iteration", "parameters", "statistics").order_by("iteration"))


def optimization_results_order(
    *, optimization: Optimization, sort_by: str | None, descending: bool | None
) -> tuple[str, bool]:
    """Results follow the target metric in the target direction unless told otherwise; an explicit sort_by is
    ascending unless descending is asked for."""
    if sort_by is None:
        return optimization.target_metric, (
            descending if descending is not None else optimization.target_direction == "maximize"
        )
    return sort_by, bool(descending)


def optimization_runs(
    *, optimization: Optimization, sort_by: str, descending: bool, skip: int, limit: int
) -> tuple[list[OptimizationRun], int]:
    """Runs ordered by iteration or by a metric (runs without that metric last, whatever the direction)."""
    runs = list(OptimizationRun.objects.filter(optimization=optimization).order_by("iteration"))
    if sort_by == "iteration":
        runs.sort(key=lambda run: run.iteration, reverse=descending)
    else:
        valued = [r for r in runs if (r.statistics or {}).get(sort_by) is not None]
        missing = [r for r in runs if (r.statistics or {}).get(sort_by) is None]
        valued.sort(
            key=lambda run: ((run.statistics or {})[sort_by], run.iteration if not descending else -run.iteration),
            reverse=descending,
        )
        runs = valued + missing
    return runs[skip : skip + limit], len(runs)


def trial_tally(*, user: User, strategy: Strategy) -> tuple[int, float | None]:
    """Trials this account ran on the strategy's lineage or on its exact code, and the sample variance of their
    per-observation Sharpe ratios (null under two defined Sharpes)."""
    sharpes = list(
        Trial.objects.filter(user=user)
        .filter(Q(lineage=strategy.lineage) | Q(code_sha256=strategy.code_sha256))
        .values_list("sharpe", flat=True)
    )
    defined = [s for s in sharpes if s is not None]
    if len(defined) < 2:
        return len(sharpes), None
    mean = sum(defined) / len(defined)
    return len(sharpes), sum((s - mean) ** 2 for s in defined) / (len(defined) - 1)


def symbols(*, is_global: bool | None = None, asset_class: str | None = None) -> QuerySet[Symbol]:
    if is_global is False:
        return Symbol.objects.none()  # every stored symbol is global; accounts cannot upload their own
    found = with_bars_source(Symbol.objects.all()).order_by("ticker")
    return found.filter(asset_class=asset_class) if asset_class else found


SYMBOL_ID = re.compile(r"[0-9]{1,18}")  # ASCII digits only (str.isdigit takes "²", int() then fails), within bigint


def symbol_get(*, symbol_id: str) -> Symbol | None:
    if not SYMBOL_ID.fullmatch(symbol_id):
        return None
    return with_bars_source(Symbol.objects.filter(pk=int(symbol_id))).first()


def compact(text: str) -> str:
    return re.sub(r"[^A-Z0-9]", "", text.upper())


def symbols_search(*, text: str, limit: int = 50) -> list[Symbol]:
    """Exact ticker (any pair form) first, then ticker prefixes, then names containing the text."""
    raw = text.strip()
    key = compact(raw)
    key = SYMBOL_ALIASES.get(key, key)
    if not key:
        return []
    candidates = (
        with_bars_source(Symbol.objects.all())
        .filter(Q(ticker__istartswith=key) | Q(name__icontains=raw) | Q(ticker__istartswith=raw[:1]))
        .order_by("ticker")[:2000]
    )
    ranked = []
    for symbol in candidates:
        ticker = compact(symbol.ticker)
        if ticker == key:
            rank = 0
        elif ticker.startswith(key):
            rank = 1
        elif raw.lower() in symbol.name.lower():
            rank = 2
        else:
            continue
        ranked.append((rank, symbol.ticker, symbol))
    return [symbol for _, _, symbol in sorted(ranked, key=lambda item: item[:2])][:limit]
