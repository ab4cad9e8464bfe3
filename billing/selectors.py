"""Reads of the ledger. Usage figures come from the period's cached balances, never from Stripe."""

from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDate
from django.urls import reverse

from accounts.models import User
from billing.models import (
    ENDED_STATUSES,
    AccountPlan,
    Code,
    Kind,
    LedgerAccount,
    Period,
    Plan,
    StripeCustomer,
    Transfer,
    Unit,
    UsageEvent,
)
from leroy.clock import now

RESEARCH_BOUNDARY = {"broker_write_authority": "none", "paper_trading": False, "live_order": False}


def micros_to_usd(micros: int) -> float:
    """Integer micro-dollars as the JSON number the contracts show (exact to the cent and below)."""
    return micros / 1_000_000


def usd(micros: int) -> str:
    """Integer micro-dollars as exact dollars for people and finance, never rounded, at least to the cent:
    10,000 -> "0.01", 5,000 -> "0.005", 75,000 -> "0.075", 0 -> "0.00"."""
    whole, fraction = divmod(abs(micros), 1_000_000)
    return f"{'-' if micros < 0 else ''}{whole}.{f'{fraction:06d}'.rstrip('0').ljust(2, '0')}"


def period_end(start: date) -> datetime:
    """The instant the period starting on `start` ends: the 1st of the next UTC month."""
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return datetime(year, month, 1, tzinfo=UTC)


def _zulu(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


def plan_of(*, user: User) -> Plan:
    """The account's assigned plan, else the default plan."""
    assignment = AccountPlan.objects.select_related("plan").filter(user=user).first()
    if assignment is not None:
        return assignment.plan
    return Plan.objects.get(is_default=True)


def plan_pricing() -> dict[str, Any]:
    """Figures quoted to prospective subscribers: the default plan's allowance and the cheapest overage rate."""
    free = Plan.objects.get(is_default=True)
    paid = Plan.objects.filter(overage_allowed=True).order_by("overage_micros_per_lookup").first()
    return {
        "free_plan_usd_per_month": 0,
        "free_included_lookups_per_month": free.included_lookups,
        "paid_overage_usd_per_lookup": micros_to_usd(paid.overage_micros_per_lookup) if paid else None,
    }


def _balances(user_id: int, start: date, unit: str) -> dict[str, LedgerAccount]:
    rows = LedgerAccount.objects.filter(user_id=user_id, period_start=start, unit=unit)
    return {row.kind: row for row in rows}


def _lookup_figures(*, included: int, remaining: int, overage: int, rate_micros: int) -> dict[str, Any]:
    return {
        "included_lookups": included,
        "used_lookups": included - remaining + overage,
        "lookups_remaining": remaining,
        "overage_lookups": overage,
        "overage_amount_usd": micros_to_usd(overage * rate_micros),
    }


def net_debits(account: LedgerAccount) -> int:
    """What flowed out of an account, net of reversals (issuance: granted; overage: billed)."""
    return account.debits_posted - account.credits_posted


def net_credits(account: LedgerAccount) -> int:
    """What flowed into an account, net of reversals (consumed: spent; expired: expired)."""
    return account.credits_posted - account.debits_posted


def lookup_usage_of_period(period: Period) -> dict[str, Any]:
    return lookup_usage_of_accounts(period, _balances(period.user_id, period.period_start, Unit.LOOKUP))


def lookup_usage_of_accounts(period: Period, accounts: dict[str, LedgerAccount]) -> dict[str, Any]:
    """The usage figures from the period's lookup accounts already in hand (e.g. read under the period lock)."""
    return _lookup_figures(
        included=net_debits(accounts[Kind.ISSUANCE]),
        remaining=accounts[Kind.ALLOWANCE].available,
        overage=net_debits(accounts[Kind.OVERAGE]),
        rate_micros=period.overage_micros_per_lookup,
    )


def _current(user: User) -> tuple[date, Period | None]:
    start = now().astimezone(UTC).date().replace(day=1)
    return start, Period.objects.filter(user=user, period_start=start).first()


@dataclass(frozen=True)
class MonthTerms:
    """What the current UTC month's lookups run on: its period's snapshot once a charge opened it (an upgrade may
    have raised it since; nothing lowers it before the month ends), else the plan it will open with."""

    plan: Plan
    overage_allowed: bool
    overage_micros_per_lookup: int
    ends_at: datetime


def month_terms(*, user: User) -> MonthTerms:
    return _month_terms(user, *_current(user))


def _month_terms(user: User, start: date, period: Period | None) -> MonthTerms:
    if period is not None:
        return MonthTerms(period.plan, period.overage_allowed, period.overage_micros_per_lookup, period_end(start))
    plan = plan_of(user=user)
    return MonthTerms(plan, plan.overage_allowed, plan.overage_micros_per_lookup, period_end(start))


def _usage_and_rate(user: User) -> tuple[date, dict[str, Any], int]:
    """The current UTC month's start, its `usage` figures and overage rate: from its period when a charge opened
    it, else from the plan it will open with (read once: 2 queries either way, 3 without a plan assignment)."""
    start, period = _current(user)
    if period is not None:
        return start, lookup_usage_of_period(period), period.overage_micros_per_lookup
    plan = plan_of(user=user)  # the month has not been opened by a charge yet
    usage = _lookup_figures(
        included=plan.included_lookups,
        remaining=plan.included_lookups,
        overage=0,
        rate_micros=plan.overage_micros_per_lookup,
    )
    return start, usage, plan.overage_micros_per_lookup


def lookup_usage(*, user: User) -> dict[str, Any]:
    """The `usage` object of Leroy's contract for the current UTC month (without the per-call lookup_cost)."""
    return _usage_and_rate(user)[1]


def usage_report(*, user: User) -> dict[str, Any]:
    """The `get_usage` answer of Leroy's contract."""
    start, usage, rate = _usage_and_rate(user)
    return {
        "period_start": start.isoformat(),
        **usage,
        "overage_rate_usd": micros_to_usd(rate),
        "billing_status": "ledgered",
        "research_boundary": dict(RESEARCH_BOUNDARY),
    }


def quota_exhausted_details(period: Period) -> dict[str, Any]:
    origin = settings.LEROY_PUBLIC_ORIGIN
    return {
        **lookup_usage_of_period(period),
        "plan": period.plan.code,
        "period_start": period.period_start.isoformat(),
        "period_resets_at": _zulu(period_end(period.period_start)),
        "upgrade_url": origin + reverse("accounts:account"),
    }


def credit_usage(*, user: User) -> dict[str, Any]:
    """The backtesting contract's credit `usage` object plus the free optimizations left this UTC month."""
    start, period = _current(user)
    if period is None:
        plan = plan_of(user=user)
        total, consumed, remaining, reserved = plan.monthly_credits, 0, plan.monthly_credits, 0
        free_left = plan.free_optimizations
    else:
        credits = _balances(user.pk, start, Unit.CREDIT)
        total, consumed = net_debits(credits[Kind.ISSUANCE]), net_credits(credits[Kind.CONSUMED])
        remaining, reserved = credits[Kind.ALLOWANCE].available, credits[Kind.ALLOWANCE].debits_pending
        free_left = _balances(user.pk, start, Unit.FREE_OPTIMIZATION)[Kind.ALLOWANCE].available
    return {
        "credits_consumed": consumed,
        "credits_remaining": remaining,
        "credits_total_monthly": total,
        "credits_reserved": reserved,
        "period": f"{start:%Y-%m}",
        "free_optimizations_remaining": free_left,
    }


def ledger_drift() -> list[dict[str, Any]]:
    """Ledger accounts whose cached balances differ from the sums of their transfers (empty = consistent)."""
    expected: dict[int, dict[str, int]] = {}

    def add(account_id: int, field: str, amount: int) -> None:
        row = expected.setdefault(
            account_id, {"debits_pending": 0, "debits_posted": 0, "credits_pending": 0, "credits_posted": 0}
        )
        row[field] += amount

    posted = Transfer.objects.exclude(code__in=[Code.RESERVE, Code.VOID])
    for side in ("debit", "credit"):
        for row in posted.values(f"{side}_account").annotate(total=Sum("amount")):
            add(row[f"{side}_account"], f"{side}s_posted", row["total"])
        open_holds = Transfer.objects.filter(code=Code.RESERVE).exclude(
            pk__in=Transfer.objects.filter(pending__isnull=False).values("pending")
        )
        for row in open_holds.values(f"{side}_account").annotate(total=Sum("amount")):
            add(row[f"{side}_account"], f"{side}s_pending", row["total"])

    drift = []
    fields = ("debits_pending", "debits_posted", "credits_pending", "credits_posted")
    for account in LedgerAccount.objects.order_by("pk"):
        want = expected.get(account.pk, dict.fromkeys(fields, 0))
        have = {field: getattr(account, field) for field in fields}
        if have != want:
            drift.append({"ledger_account": account.pk, "label": str(account), "cached": have, "transfers": want})
    return drift


# --- the account pages -------------------------------------------------------------------------------------


def usage_page(*, user: User, recent: int = 20) -> dict[str, Any]:
    """This month's lookups for the Usage page: the meter figures, one row per day, cache hits, recent calls."""
    start, period = _current(user)
    usage = lookup_usage(user=user)
    terms = _month_terms(user, start, period)
    rate = terms.overage_micros_per_lookup
    events = UsageEvent.objects.filter(user=user, period_start=start)
    per_day: dict[date, dict[str, Any]] = {
        row["day"]: dict(row)
        for row in events.annotate(day=TruncDate("occurred_at", tzinfo=UTC))
        .values("day")
        .annotate(included=Sum("included_qty"), overage=Sum("overage_qty"), calls=Count("pk"))
    }
    # Lookups a correcting transfer gave back count on no day and no call, as they count in no balance.
    undone: dict[int, dict[str, int]] = {}
    charges = (Code.CHARGE, Code.OVERAGE)
    reversals = Transfer.objects.filter(reverses__usage_event__in=events, reverses__code__in=charges)
    for event_id, at, code, amount in reversals.values_list(
        "reverses__usage_event_id", "reverses__usage_event__occurred_at", "reverses__code", "amount"
    ):
        undone.setdefault(event_id, {Code.CHARGE: 0, Code.OVERAGE: 0})[code] += amount
        row = per_day.setdefault(at.astimezone(UTC).date(), {})
        row["undone"] = row.get("undone", 0) + amount
    today = now().astimezone(UTC).date()
    days = []
    for day_number in range(1, today.day + 1):
        day = start.replace(day=day_number)
        row = per_day.get(day, {})
        days.append((f"{day:%m-%d}", (row.get("included") or 0) + (row.get("overage") or 0) - row.get("undone", 0)))
    counts = events.aggregate(calls=Count("pk"), hits=Count("pk", filter=Q(cache_hit=True)))
    calls = []
    for event in events.order_by("-occurred_at", "-pk")[:recent]:
        back = undone.get(event.pk, {Code.CHARGE: 0, Code.OVERAGE: 0})
        overage = event.overage_qty - back[Code.OVERAGE]
        calls.append(
            {
                "tool": event.tool,
                "occurred_at": event.occurred_at,
                "lookups": event.units_charged - back[Code.CHARGE] - back[Code.OVERAGE],
                "overage_lookups": overage,
                "overage_usd": micros_to_usd(overage * rate),
                "cache_hit": event.cache_hit,
                "reversed": event.pk in undone,
            }
        )
    included = usage["included_lookups"]
    return {
        "period_start": start,
        "period_resets_at": period_end(start),
        "plan": terms.plan,
        "overage_allowed": terms.overage_allowed,
        **usage,
        "overage_rate_usd": micros_to_usd(rate),
        "share_used": usage["used_lookups"] / included if included else 0.0,
        "daily": days,
        "calls": counts["calls"],
        "cache_hits": counts["hits"],
        "recent": calls,
    }


def plan_rows() -> list[dict[str, Any]]:
    """Every plan with its overage rate in dollars, for the pricing tables."""
    return [{"plan": plan, "overage_usd": micros_to_usd(plan.overage_micros_per_lookup)} for plan in Plan.objects.all()]


def stripe_subscription(*, user: User) -> StripeCustomer | None:
    return StripeCustomer.objects.filter(user=user).exclude(subscription_id="").first()


def accounts_awaiting_subscription() -> list[AccountPlan]:
    """Active accounts on a billed plan (overage allowed) without a Stripe subscription: its sync never ran or gave
    up. A suspended or closed account is never subscribed."""
    return list(
        AccountPlan.objects.filter(plan__overage_allowed=True, user__is_active=True)
        .exclude(user__stripe_customer__subscription_id__gt="")
        .select_related("user", "plan")
        .order_by("pk")
    )


def closed_accounts_subscribed() -> list[StripeCustomer]:
    """Closed accounts still holding a Stripe subscription that has not ended: a Checkout opened before the close
    and paid after it."""
    return list(
        StripeCustomer.objects.filter(user__closed_at__isnull=False, subscription_id__gt="")
        .exclude(subscription_status__in=ENDED_STATUSES)
        .order_by("pk")
    )


def ledger_statement(*, user: User, start: date | None = None) -> list[dict[str, Any]]:
    """The month's posted transfers touching the account, oldest first, each with what it did and why."""
    start = start or _current(user)[0]
    transfers = (
        Transfer.objects.filter(period_start=start, debit_account__user=user)
        .exclude(code__in=[Code.RESERVE, Code.VOID])
        .select_related("debit_account", "credit_account", "usage_event")
        .order_by("occurred_at", "pk")
    )
    return [
        {
            "occurred_at": transfer.occurred_at,
            "unit": transfer.unit,
            "code": transfer.code,
            "amount": transfer.amount,
            "from": transfer.debit_account.kind,
            "to": transfer.credit_account.kind,
            "why": transfer.usage_event.tool if transfer.usage_event else transfer.reference,
        }
        for transfer in transfers
    ]


def credit_history(*, user: User, limit: int = 50) -> list[dict[str, Any]]:
    """Credit grants, spends and expiries across months, newest first."""
    transfers = (
        Transfer.objects.filter(unit=Unit.CREDIT, debit_account__user=user)
        .exclude(code__in=[Code.RESERVE, Code.VOID])
        .select_related("debit_account", "credit_account")
        .order_by("-occurred_at", "-pk")[:limit]
    )
    return [
        {
            "occurred_at": transfer.occurred_at,
            "code": transfer.code,
            "amount": transfer.amount,
            "to": transfer.credit_account.kind,
            "reference": transfer.reference,
        }
        for transfer in transfers
    ]
