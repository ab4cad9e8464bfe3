"""Admin: plans are editable and assignable; the ledger and the Stripe logs are read-only."""

from django.contrib import admin
from django.db.models import Model
from django.forms import ModelForm
from django.http import HttpRequest

from billing import services
from billing.models import (
    AccountPlan,
    ExportBatch,
    LedgerAccount,
    MeterReport,
    Period,
    Plan,
    StripeCustomer,
    StripeEvent,
    Transfer,
    UsageEvent,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by billing services: viewable, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    list_display = [
        "code",
        "name",
        "included_lookups",
        "overage_allowed",
        "overage_micros_per_lookup",
        "monthly_credits",
        "free_optimizations",
        "is_default",
    ]


@admin.register(AccountPlan)
class AccountPlanAdmin(admin.ModelAdmin):
    list_display = ["user", "plan", "assigned_at"]
    list_filter = ["plan"]
    search_fields = ["user__email"]
    autocomplete_fields = ["user"]
    fields = ["user", "plan"]

    def save_model(self, request: HttpRequest, obj: AccountPlan, form: ModelForm, change: bool) -> None:
        # Through the service, so an upgrade posts this month's extra grants in the ledger.
        saved = services.plan_assign(user=obj.user, plan=obj.plan)
        obj.pk, obj.assigned_at = saved.pk, saved.assigned_at

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(Period)
class PeriodAdmin(ReadOnlyAdmin):
    list_display = ["user", "period_start", "plan", "overage_allowed", "overage_micros_per_lookup", "opened_at"]
    list_filter = ["period_start", "plan"]
    search_fields = ["user__email"]


@admin.register(LedgerAccount)
class LedgerAccountAdmin(ReadOnlyAdmin):
    list_display = [
        "user",
        "period_start",
        "unit",
        "kind",
        "debits_pending",
        "debits_posted",
        "credits_pending",
        "credits_posted",
    ]
    list_filter = [("user", admin.RelatedOnlyFieldListFilter), "period_start", "unit", "kind"]
    search_fields = ["user__email"]


@admin.register(Transfer)
class TransferAdmin(ReadOnlyAdmin):
    list_display = ["pk", "occurred_at", "period_start", "code", "unit", "amount", "debit_account", "credit_account"]
    list_filter = [("debit_account__user", admin.RelatedOnlyFieldListFilter), "period_start", "code", "unit"]
    search_fields = ["debit_account__user__email", "idempotency_key", "reference"]
    list_select_related = ["debit_account", "credit_account"]


@admin.register(UsageEvent)
class UsageEventAdmin(ReadOnlyAdmin):
    list_display = ["pk", "user", "tool", "occurred_at", "units", "cache_hit", "included_qty", "overage_qty"]
    list_filter = ["period_start", "tool", "cache_hit"]
    search_fields = ["user__email", "client_request_id"]


@admin.register(StripeCustomer)
class StripeCustomerAdmin(ReadOnlyAdmin):
    list_display = ["user", "customer_id", "subscription_id", "subscription_status"]
    search_fields = ["user__email", "customer_id"]


@admin.register(MeterReport)
class MeterReportAdmin(ReadOnlyAdmin):
    list_display = ["identifier", "customer_id", "value", "event_at", "status", "attempts", "sent_at"]
    list_filter = ["status"]


@admin.register(StripeEvent)
class StripeEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "type", "received_at", "processed_at"]
    list_filter = ["type"]


@admin.register(ExportBatch)
class ExportBatchAdmin(ReadOnlyAdmin):
    list_display = ["pk", "kind", "period_start", "row_count", "sha256", "created_at"]
