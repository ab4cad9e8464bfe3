"""The ledger: plans, monthly periods, double-entry accounts and immutable transfers (TigerBeetle-shaped).

The database enforces the invariants: no overdraw (CHECK), one transfer per idempotency key (UNIQUE), a pending
transfer resolves at most once (partial UNIQUE), and transfers are append-only (trigger on PostgreSQL).
"""

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q


class Unit(models.TextChoices):
    LOOKUP = "lookup"
    CREDIT = "credit"
    FREE_OPTIMIZATION = "free_optimization"


class Kind(models.TextChoices):
    ISSUANCE = "issuance"  # source of every grant: its credits mirror what was granted
    ALLOWANCE = "allowance"  # what the account may still spend this period (never overdrawn)
    OVERAGE = "overage"  # lookups beyond the allowance, billed at the period's rate
    CONSUMED = "consumed"  # sink of everything spent
    EXPIRED = "expired"  # credits left unused when their month closed (they never roll over)


class Code(models.TextChoices):
    GRANT = "grant"
    CHARGE = "charge"
    OVERAGE = "overage"
    RESERVE = "reserve"  # pending: raises debits_pending/credits_pending until posted or voided
    POST = "post"  # resolves a reserve: posts `amount` (<= reserved), releasing the rest
    VOID = "void"  # resolves a reserve: releases all of it
    EXPIRE = "expire"
    ADJUST = "adjust"


class Plan(models.Model):
    """What an account gets each UTC month. Snapshotted into its `Period` when the period opens."""

    code = models.SlugField(unique=True)
    name = models.CharField(max_length=64)
    included_lookups = models.PositiveIntegerField()
    overage_allowed = models.BooleanField()  # False = hard stop at the allowance (Free)
    overage_micros_per_lookup = models.PositiveIntegerField(default=10_000)  # $0.01
    monthly_credits = models.PositiveIntegerField(default=0)
    free_optimizations = models.PositiveIntegerField(default=0)
    is_default = models.BooleanField(default=False)  # the plan of accounts without an assignment
    stripe_flat_price_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["included_lookups", "code"]
        constraints = [
            models.UniqueConstraint(fields=["is_default"], condition=Q(is_default=True), name="one_default_plan"),
        ]

    def __str__(self) -> str:
        return self.name


class AccountPlan(models.Model):
    """The plan assigned to an account (admin or Stripe); absent = the default plan."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="billing_plan")
    plan = models.ForeignKey(Plan, on_delete=models.PROTECT)
    assigned_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.user} → {self.plan}"


class Period(models.Model):
    """One account's UTC calendar month: the lock taken by every quota or credit decision, and the plan snapshot."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="billing_periods")
    period_start = models.DateField()  # the 1st of the UTC month
    plan = models.ForeignKey(Plan, on_delete=models.PROTECT)
    overage_allowed = models.BooleanField()
    overage_micros_per_lookup = models.PositiveIntegerField()
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)  # unused credits expired

    class Meta:
        ordering = ["-period_start", "user_id"]
        constraints = [models.UniqueConstraint(fields=["user", "period_start"], name="one_period_per_month")]

    def __str__(self) -> str:
        return f"{self.user} {self.period_start:%Y-%m}"


class LedgerAccount(models.Model):
    """Cached balances of one (account, unit, kind, period); always equal to the sums of its transfers."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="ledger_accounts")
    unit = models.CharField(max_length=24, choices=Unit)
    kind = models.CharField(max_length=24, choices=Kind)
    period_start = models.DateField()
    debits_pending = models.BigIntegerField(default=0)
    debits_posted = models.BigIntegerField(default=0)
    credits_pending = models.BigIntegerField(default=0)
    credits_posted = models.BigIntegerField(default=0)
    debits_must_not_exceed_credits = models.BooleanField(default=False)
    # The account's month, joined on (user, period_start) and stored in no column of its own: a decision locks the
    # period and its accounts, and reads their balances, in one statement.
    period = models.ForeignObject(
        Period,
        on_delete=models.DO_NOTHING,
        from_fields=["user", "period_start"],
        to_fields=["user", "period_start"],
        related_name="accounts",
    )

    class Meta:
        ordering = ["-period_start", "user_id", "unit", "kind"]
        constraints = [
            models.UniqueConstraint(fields=["user", "unit", "kind", "period_start"], name="uniq_ledger_account"),
            models.CheckConstraint(
                condition=Q(debits_must_not_exceed_credits=False)
                | Q(debits_posted__lte=F("credits_posted") - F("debits_pending")),
                name="debits_within_credits",
            ),
            models.CheckConstraint(
                condition=Q(debits_pending__gte=0, debits_posted__gte=0, credits_pending__gte=0, credits_posted__gte=0),
                name="balances_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.unit}:{self.kind}:{self.period_start:%Y-%m}"

    @property
    def available(self) -> int:
        return self.credits_posted - self.debits_posted - self.debits_pending


class UsageEvent(models.Model):
    """One metered request: the idempotency anchor (per account) and the answer a retry replays."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="usage_events")
    client_request_id = models.CharField(max_length=255, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=128)
    tool = models.CharField(max_length=64)
    units = models.PositiveSmallIntegerField()  # the request's price before cache
    cache_hit = models.BooleanField(default=False)
    included_qty = models.PositiveSmallIntegerField(default=0)
    overage_qty = models.PositiveSmallIntegerField(default=0)
    period_start = models.DateField()
    occurred_at = models.DateTimeField()
    usage = models.JSONField(default=dict)  # the usage object returned with the original answer
    response = models.JSONField(null=True, blank=True)  # the original answer, replayed verbatim on retry

    class Meta:
        ordering = ["-occurred_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["user", "client_request_id"], name="uniq_client_request"),
            models.CheckConstraint(condition=Q(included_qty__lte=F("units")), name="included_within_units"),
        ]
        indexes = [models.Index(fields=["user", "period_start"])]

    def __str__(self) -> str:
        return f"{self.tool} #{self.pk}"

    @property
    def units_charged(self) -> int:
        return self.included_qty + self.overage_qty


class AppendOnly(Exception):
    pass


class TransferQuerySet(models.QuerySet["Transfer"]):
    """The ORM side of append-only (the PostgreSQL trigger is the database side; SQLite relies on this)."""

    def update(self, **kwargs: Any) -> int:
        raise AppendOnly("transfers are append-only; post a correcting transfer instead")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnly("transfers are append-only; post a correcting transfer instead")


class Transfer(models.Model):
    """An immutable movement of `amount` units from one ledger account to another."""

    debit_account = models.ForeignKey(LedgerAccount, on_delete=models.PROTECT, related_name="+")
    credit_account = models.ForeignKey(LedgerAccount, on_delete=models.PROTECT, related_name="+")
    amount = models.BigIntegerField()
    unit = models.CharField(max_length=24, choices=Unit)
    code = models.CharField(max_length=16, choices=Code)
    period_start = models.DateField()
    pending = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    reverses = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    idempotency_key = models.CharField(max_length=255, unique=True)
    usage_event = models.ForeignKey(
        UsageEvent, on_delete=models.PROTECT, null=True, blank=True, related_name="transfers"
    )
    reference = models.CharField(max_length=128, blank=True)  # backtest / optimization job id
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    occurred_at = models.DateTimeField()

    objects = TransferQuerySet.as_manager()

    class Meta:
        ordering = ["occurred_at", "pk"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gte=0), name="amount_non_negative"),
            models.CheckConstraint(condition=~Q(debit_account=F("credit_account")), name="distinct_accounts"),
            models.CheckConstraint(
                condition=Q(code__in=["post", "void"], pending__isnull=False)
                | (~Q(code__in=["post", "void"]) & Q(pending__isnull=True)),
                name="resolution_names_its_hold",
            ),
            models.UniqueConstraint(
                fields=["pending"], condition=Q(code__in=["post", "void"]), name="pending_resolves_once"
            ),
            models.UniqueConstraint(fields=["reverses"], name="reversed_at_most_once"),
            models.CheckConstraint(
                condition=Q(reverses__isnull=True) | Q(code="adjust", reason__gt=""), name="reversal_has_a_reason"
            ),
        ]
        indexes = [models.Index(fields=["period_start", "occurred_at"])]

    def __str__(self) -> str:
        return f"{self.code} {self.amount} {self.unit} #{self.pk}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnly("transfers are append-only; post a correcting transfer instead")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnly("transfers are append-only; post a correcting transfer instead")


LIVE_STATUSES = frozenset({"active", "trialing"})  # the statuses that grant the subscription's plan
ENDED_STATUSES = frozenset({"canceled", "incomplete_expired"})  # terminal: Stripe never revives these


class StripeCustomer(models.Model):
    """The Stripe customer and metered subscription of a paid account (thin link, no mirror)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="stripe_customer")
    customer_id = models.CharField(max_length=64, unique=True)
    subscription_id = models.CharField(max_length=64, blank=True)
    subscription_status = models.CharField(max_length=32, blank=True)
    # Stripe's `created` of the last subscription event applied here: an older one arriving late is ignored.
    subscription_event_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.customer_id

    @property
    def subscription_unended(self) -> bool:
        """A subscription Stripe may still collect: live, or past due, unpaid, incomplete or paused."""
        return self.subscription_id != "" and self.subscription_status not in ENDED_STATUSES


class MeterReport(models.Model):
    """Transactional outbox: one Stripe meter event per overage transfer, written in the charge's transaction."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    transfer = models.OneToOneField(Transfer, on_delete=models.PROTECT, related_name="meter_report")
    identifier = models.CharField(max_length=100, unique=True)
    customer_id = models.CharField(max_length=64)
    value = models.PositiveIntegerField()
    event_at = models.DateTimeField()
    status = models.CharField(max_length=12, choices=Status, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["event_at", "pk"]
        indexes = [models.Index(fields=["status", "event_at"])]

    def __str__(self) -> str:
        return self.identifier


class StripeEvent(models.Model):
    """Inbox of verified Stripe webhook events, stored once per event id."""

    id = models.CharField(primary_key=True, max_length=64)
    type = models.CharField(max_length=96)
    payload = models.JSONField()
    received_at = models.DateTimeField()
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return self.id


class ExportBatch(models.Model):
    """Manifest of one finance export: row count, control totals and the file's sha256."""

    period_start = models.DateField()
    kind = models.CharField(max_length=32)
    row_count = models.PositiveIntegerField()
    totals = models.JSONField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "export batches"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.period_start:%Y-%m}"
