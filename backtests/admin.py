from django.contrib import admin

from backtests.models import DryRun, DryRunPass, Optimization, OptimizationRun, Report, Strategy
from leroy.admin import ReadOnlyAdmin


@admin.register(Strategy)
class StrategyAdmin(ReadOnlyAdmin):
    list_display = ["name", "user", "version", "revision", "is_current", "created_at"]
    list_filter = ["is_current"]
    search_fields = ["name", "user__email", "code_sha256"]


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
    list_filter = ["status", "frequency"]
    search_fields = ["user__email", "report_hash"]


@admin.register(Optimization)
class OptimizationAdmin(ReadOnlyAdmin):
    list_display = ["id", "user", "strategy", "status", "completed_iterations", "total_iterations", "created_at"]
    list_filter = ["status"]
    search_fields = ["user__email", "name"]


@admin.register(OptimizationRun)
class OptimizationRunAdmin(ReadOnlyAdmin):
    list_display = ["optimization", "iteration", "status", "started_at", "finished_at"]
    list_filter = ["status"]
