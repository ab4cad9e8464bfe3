"""Admin: plans are editable and assignable; the ledger and the Stripe logs are read-only."""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Model, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.template.response import TemplateResponse

from accounts.models import User
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
from billing.services import BillingError
from leroy.admin import ReadOnlyAdmin


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
    actions = ["reverse_transfers"]

    def has_reverse_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("billing.add_transfer")  # posting a correction is adding a transfer

    @admin.action(
        description="Post correcting transfers (reversals) for the selected transfers", permissions=["reverse"]
    )
    def reverse_transfers(self, request: HttpRequest, queryset: QuerySet[Transfer]) -> TemplateResponse | None:
        reason = request.POST.get("reason", "").strip()
        if not request.POST.get("confirm") or not reason:
            context = {
                **self.admin_site.each_context(request),
                "title": "Post correcting transfers",
                "transfers": queryset,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "missing_reason": bool(request.POST.get("confirm")),
                "opts": self.model._meta,
            }
            return TemplateResponse(request, "admin/billing/transfer/reverse.html", context)
        staff = request.user
        assert isinstance(staff, User)  # the admin site only serves authenticated staff
        for transfer in queryset:
            try:
                reversal = services.transfer_reverse(transfer_id=transfer.pk, reason=reason, created_by=staff)
            except BillingError as refused:
                self.message_user(request, f"Transfer {transfer.pk}: {refused.message}", messages.ERROR)
            else:
                self.message_user(request, f"Transfer {transfer.pk} reversed by transfer {reversal.pk}.")
        return None


@admin.register(UsageEvent)
class UsageEventAdmin(ReadOnlyAdmin):
    list_display = ["pk", "user", "tool", "occurred_at", "units", "cache_hit", "included_qty", "overage_qty"]
    list_filter = ["period_start", "tool", "cache_hit"]
    search_fields = ["user__email", "client_request_id"]


@admin.register(StripeCustomer)
class StripeCustomerAdmin(ReadOnlyAdmin):
    list_display = ["user", "customer_id", "subscription_id", "subscription_status", "subscription_event_at"]
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
