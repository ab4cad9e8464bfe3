"""Admin: alert rules, deliveries and attempts are written only by alerts.services, so they are read-only here."""

from django.contrib import admin

from alerts.models import AlertRule, Attempt, Delivery, FrameCursor
from leroy.admin import ReadOnlyAdmin


@admin.register(AlertRule)
class AlertRuleAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "name", "user", "status", "side", "horizon_minutes", "consecutive_failures"]
    list_filter = ["status", "side"]
    search_fields = ["public_id", "name", "user__email"]
    exclude = ["secret_ciphertext"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "rule", "event", "ticker", "frame_time", "status", "attempt_count", "created_at"]
    list_filter = ["status", "event"]
    search_fields = ["public_id", "rule__public_id"]


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ["delivery", "number", "trigger", "started_at", "status_code", "outcome", "duration_ms"]
    list_filter = ["outcome", "trigger"]


@admin.register(FrameCursor)
class FrameCursorAdmin(ReadOnlyAdmin):
    list_display = ["ticker", "source_time"]
