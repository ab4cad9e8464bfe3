"""Evidence wake rules, their signed webhook deliveries and every attempt to send one.

A rule belongs to one account. A match on a frame creates at most one `Delivery` per rule and frame (a unique
constraint); each send of it is an `Attempt` row, so the log keeps everything that went over the wire.
"""

from django.db import models
from django.db.models import Q

SIDES = ("buy", "sell")
HORIZONS = (5, 15, 30, 60)
TIERS = (1, 2, 3, 4, 5)


class AlertRule(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"  # by the owner, or automatically after repeated failures (see status_reason)
        DISABLED = "disabled"  # the receiver answered 410 Gone

    public_id = models.CharField(max_length=40, unique=True)  # alr_<hex>
    user = models.ForeignKey("accounts.User", on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=100)
    universe = models.BooleanField(default=False)  # every symbol the frame feed follows
    symbols = models.JSONField(default=list)  # uppercase tickers when not `universe`
    side = models.CharField(max_length=4, choices=[(s, s) for s in SIDES])
    horizon_minutes = models.PositiveSmallIntegerField(choices=[(h, h) for h in HORIZONS])
    min_active_signals = models.PositiveSmallIntegerField(default=1)
    min_match_tier = models.PositiveSmallIntegerField(default=1, choices=[(t, t) for t in TIERS])
    min_win_rate = models.FloatField(null=True, blank=True)  # fraction 0..1
    min_average_return_pct = models.FloatField(null=True, blank=True)
    endpoint_url = models.CharField(max_length=2000)
    expires_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status, default=Status.ACTIVE)
    status_reason = models.CharField(max_length=300, blank=True, default="")
    # The signing secret, Fernet-encrypted with a key derived from SECRET_KEY (it must be recoverable to sign).
    secret_ciphertext = models.TextField()
    secret_prefix = models.CharField(max_length=24)  # shown in the UI to tell secrets apart
    secret_rotated_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)  # matched deliveries that ended failed, in a row
    suppressed_matches = models.PositiveIntegerField(default=0)  # matches dropped by the per-rule hourly limit
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["user_id", "-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(condition=Q(side__in=SIDES), name="alerts_rule_side"),
            models.CheckConstraint(condition=Q(horizon_minutes__in=HORIZONS), name="alerts_rule_horizon"),
            models.CheckConstraint(condition=Q(min_match_tier__in=TIERS), name="alerts_rule_tier"),
            models.CheckConstraint(condition=Q(status__in=["active", "paused", "disabled"]), name="alerts_rule_status"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.name}"


class Delivery(models.Model):
    class Event(models.TextChoices):
        MATCHED = "alert.matched"
        TEST = "alert.test"

    class Status(models.TextChoices):
        PENDING = "pending"  # waiting for its next attempt
        DELIVERED = "delivered"
        FAILED = "failed"  # gave up: the window ended, 410 Gone, or a one-shot test failed

    public_id = models.CharField(max_length=40, unique=True)  # dlv_<hex>: X-Leroy-Delivery, constant across retries
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=20, choices=Event)
    ticker = models.CharField(max_length=20, blank=True, default="")
    frame_time = models.DateTimeField(null=True, blank=True)  # the matched frame's minute; null for tests
    body = models.TextField()  # the exact JSON bytes (UTF-8) sent on every attempt
    status = models.CharField(max_length=10, choices=Status, default=Status.PENDING)
    attempt_count = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)
    lease_until = models.DateTimeField(null=True, blank=True)  # an attempt is in flight until then
    expires_at = models.DateTimeField()  # end of the delivery window: no attempt starts after it
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "ticker", "frame_time"],
                condition=Q(event="alert.matched"),
                name="alerts_one_delivery_per_rule_and_frame",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "delivered", "failed"]), name="alerts_delivery_status"
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class Attempt(models.Model):
    class Trigger(models.TextChoices):
        SCHEDULED = "scheduled"
        TEST = "test"
        REDELIVER = "redeliver"

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    trigger = models.CharField(max_length=10, choices=Trigger)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)  # null while in flight, or if the worker died
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    request_headers = models.JSONField(default=dict)
    resolved_ip = models.CharField(max_length=45, blank=True, default="")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    # success, http_error, gone, redirect_refused, timeout, connection_error, tls_error, unsafe_endpoint,
    # interrupted (the worker died mid-attempt)
    outcome = models.CharField(max_length=20, blank=True, default="")
    error = models.CharField(max_length=300, blank=True, default="")
    response_snippet = models.TextField(blank=True, default="")  # at most LEROY_WEBHOOK_RESPONSE_BYTES

    class Meta:
        ordering = ["delivery_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="alerts_attempt_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id}#{self.number}"


class FrameCursor(models.Model):
    """The watermark of evaluation: the newest frame of a symbol whose rules were evaluated."""

    ticker = models.CharField(max_length=20, unique=True)
    source_time = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.ticker}@{self.source_time.isoformat()}"
