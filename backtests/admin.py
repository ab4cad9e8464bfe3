from typing import Any

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from backtests import series
from backtests.models import DryRun, DryRunPass, Optimization, OptimizationRun, ProbeCut, Report, Strategy, Trial
from backtests.pages import report_statistics
from leroy.admin import ReadOnlyAdmin


def _number(value: Any) -> str:
    return "—" if value is None else f"{value:,.4f}" if isinstance(value, float) else str(value)


def statistics_table(statistics: dict[str, Any] | None) -> SafeString:
    """The contract's metrics as a two-column table instead of raw JSON."""
    rows = format_html_join(
        "", "<tr><th>{}</th><td>{}</td></tr>", ((n, _number(v)) for n, v in report_statistics(statistics))
    )
    return format_html("<table>{}</table>", rows)


@admin.register(Strategy)
class StrategyAdmin(ReadOnlyAdmin):
    list_display = ["name", "user", "version", "revision", "is_current", "created_at"]
    list_filter = ["is_current", "created_at"]
    search_fields = ["name", "user__email", "code_sha256", "lineage"]


@admin.register(DryRunPass)
class DryRunPassAdmin(ReadOnlyAdmin):
    list_display = ["user", "code_sha256", "created_at"]
    search_fields = ["user__email", "code_sha256"]


@admin.register(DryRun)
class DryRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "user", "status", "busy", "created_at", "finished_at"]
    list_filter = ["status", "busy"]
    search_fields = ["user__email"]


@admin.register(Report)
class ReportAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "user",
        "strategy",
        "status",
        "frequency",
        "credits_reserved",
        "credits_charged",
        "created_at",
    ]
    list_filter = ["status", "frequency", "created_at"]
    search_fields = ["user__email", "report_hash", "strategy__name", "id"]
    list_select_related = ["user", "strategy"]
    exclude = ["statistics", "trades", "equity"]
    readonly_fields = ["statistics_table", "trade_count", "equity_points"]

    @admin.display(description="Statistics")
    def statistics_table(self, report: Report) -> SafeString:
        return statistics_table(report.statistics)

    @admin.display(description="Trades")
    def trade_count(self, report: Report) -> int:
        return len(report.trades or [])

    @admin.display(description="Equity points")
    def equity_points(self, report: Report) -> int:
        return len(report.equity or [])


@admin.register(Optimization)
class OptimizationAdmin(ReadOnlyAdmin):
    list_display = ["id", "user", "strategy", "status", "completed_iterations", "total_iterations", "created_at"]
    list_filter = ["status", "mode", "target_metric", "created_at"]
    search_fields = ["user__email", "name", "strategy__name", "id"]
    list_select_related = ["user", "strategy"]
    readonly_fields = ["results"]

    @admin.display(description="Results (best first)")
    def results(self, optimization: Optimization) -> SafeString:
        metric = optimization.target_metric
        sign = -1 if optimization.target_direction == "maximize" else 1

        def best_first(run: OptimizationRun) -> tuple[bool, float]:
            value = (run.statistics or {}).get(metric)
            return value is None, sign * value if value is not None else 0.0

        runs = sorted(optimization.runs.all(), key=best_first)
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    run.iteration,
                    ", ".join(f"{k}={v}" for k, v in run.parameters.items()),
                    _number((run.statistics or {}).get(metric)),
                    run.status,
                )
                for run in runs
            ),
        )
        header = format_html("<tr><th>#</th><th>Parameters</th><th>{}</th><th>Status</th></tr>", metric)
        return format_html("<table>{}{}</table>", header, rows)


@admin.register(OptimizationRun)
class OptimizationRunAdmin(ReadOnlyAdmin):
    list_display = ["optimization", "iteration", "status", "started_at", "finished_at"]
    list_filter = ["status"]
    search_fields = ["optimization__name", "optimization__user__email"]
    exclude = ["statistics"]
    readonly_fields = ["statistics_table", "daily_returns"]

    @admin.display(description="Statistics")
    def statistics_table(self, run: OptimizationRun) -> SafeString:
        return statistics_table(run.statistics)

    @admin.display(description="Daily returns")
    def daily_returns(self, run: OptimizationRun) -> str:
        """The stored series (packed bytes) as how many days it covers, from when to when."""
        kept = series.unpack(run.returns)
        return f"{len(kept):,} days, {kept[0][0]} to {kept[-1][0]}" if kept else "none kept"


@admin.register(ProbeCut)
class ProbeCutAdmin(ReadOnlyAdmin):
    list_display = ["optimization", "index", "until_us", "status", "started_at", "finished_at"]
    list_filter = ["status"]
    search_fields = ["optimization__name", "optimization__user__email"]


@admin.register(Trial)
class TrialAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "user", "strategy", "kind", "frequency", "start", "end", "sharpe", "observations"]
    list_filter = ["kind", "frequency"]
    search_fields = ["user__email", "code_sha256", "lineage"]
