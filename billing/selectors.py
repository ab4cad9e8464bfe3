"""Reads of the ledger. Usage figures come from the period's cached balances, never from Stripe."""

from datetime import UTC, date, datetime
from typing import Any

from django.conf import settings
from django.db.models import Sum
from django.urls import reverse

from accounts.models import User
from billing.models import AccountPlan, Code, Kind, LedgerAccount, Period, Plan, Transfer, Unit
from leroy.clock import now

RESEARCH_BOUNDARY = {"broker_write_authority": "none", "paper_trading": False, "live_order": False}


def micros_to_usd(micros: int) -> float:
    """Integer micro-dollars as the JSON number the contracts show (exact to the cent and below)."""
    return micros / 1_000_000


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
    accounts = _balances(period.user_id, period.period_start, Unit.LOOKUP)
    return _lookup_figures(
        included=net_debits(accounts[Kind.ISSUANCE]),
        remaining=accounts[Kind.ALLOWANCE].available,
        overage=net_debits(accounts[Kind.OVERAGE]),
        rate_micros=period.overage_micros_per_lookup,
    )


def _current(user: User) -> tuple[date, Period | None]:
    start = now().astimezone(UTC).date().replace(day=1)
    return start, Period.objects.filter(user=user, period_start=start).first()


def lookup_usage(*, user: User) -> dict[str, Any]:
    """The `usage` object of Leroy's contract for the current UTC month (without the per-call lookup_cost)."""
    _, period = _current(user)
    if period is not None:
        return lookup_usage_of_period(period)
    plan = plan_of(user=user)  # the month has not been opened by a charge yet
    return _lookup_figures(
        included=plan.included_lookups,
        remaining=plan.included_lookups,
        overage=0,
        rate_micros=plan.overage_micros_per_lookup,
    )


def usage_report(*, user: User) -> dict[str, Any]:
    """The `get_usage` answer of Leroy's contract."""
    start, period = _current(user)
    rate = period.overage_micros_per_lookup if period else plan_of(user=user).overage_micros_per_lookup
    return {
        "period_start": start.isoformat(),
        **lookup_usage(user=user),
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
