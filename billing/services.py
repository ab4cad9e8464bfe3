"""Writes to the ledger. Every quota or credit decision locks the account's `Period` row for the month, so
decisions serialise per account only; the database constraints are the backstop, not the mechanism.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Case, F, When

from accounts.models import User
from billing import selectors, tasks
from billing.models import (
    AccountPlan,
    Code,
    Kind,
    LedgerAccount,
    MeterReport,
    Period,
    Plan,
    StripeCustomer,
    Transfer,
    Unit,
    UsageEvent,
)
from leroy import broker
from leroy.clock import now
from leroy.errors import DomainError

# The plans every installation starts with (created after migrate/flush; editable in admin afterwards).
BUILTIN_PLANS: tuple[dict[str, Any], ...] = (
    {
        "code": "free",
        "name": "Free",
        "included_lookups": 100,
        "overage_allowed": False,
        "overage_micros_per_lookup": 10_000,
        "monthly_credits": 1_000,
        "free_optimizations": 1,
        "is_default": True,
    },
    {
        "code": "pro",
        "name": "Pro",
        "included_lookups": 2_000,
        "overage_allowed": True,
        "overage_micros_per_lookup": 10_000,
        "monthly_credits": 3_000,
        "free_optimizations": 3,
        "is_default": False,
    },
)
MAX_UNITS_PER_LOOKUP = 10
# The ledger accounts each account gets per month.
ACCOUNT_KINDS: dict[str, tuple[str, ...]] = {
    Unit.LOOKUP: (Kind.ISSUANCE, Kind.ALLOWANCE, Kind.OVERAGE, Kind.CONSUMED),
    Unit.CREDIT: (Kind.ISSUANCE, Kind.ALLOWANCE, Kind.CONSUMED, Kind.EXPIRED),
    Unit.FREE_OPTIMIZATION: (Kind.ISSUANCE, Kind.ALLOWANCE, Kind.CONSUMED),
}


class BillingError(DomainError):
    """A billing rule refused the request; nothing was charged. `code` is machine-readable."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(code, message, **(details or {}))


@dataclass(frozen=True)
class LookupCharge:
    """The outcome of `lookup_charge`. `replayed=True` means this call charged nothing: it is a retry of
    `usage_event_id`, whose charge and stored answer are returned."""

    usage_event_id: int
    units_charged: int
    cache_hit: bool
    replayed: bool
    stored_response: dict[str, Any] | None
    usage: dict[str, Any]


@dataclass(frozen=True)
class CreditHold:
    pk: int
    amount: int
    reference: str
    period_start: date


def period_start_of(instant: datetime) -> date:
    """The UTC calendar month an instant belongs to."""
    return instant.astimezone(UTC).date().replace(day=1)


def plans_ensure() -> None:
    """Create the built-in plans that are missing (never overwrites an edited plan)."""
    for spec in BUILTIN_PLANS:
        defaults = {k: v for k, v in spec.items() if k != "code"}
        if spec["is_default"] and Plan.objects.filter(is_default=True).exclude(code=spec["code"]).exists():
            defaults["is_default"] = False
        Plan.objects.get_or_create(code=spec["code"], defaults=defaults)


# --- ledger primitives -------------------------------------------------------------------------------------


def _accounts(period: Period, unit: str) -> dict[str, LedgerAccount]:
    rows = LedgerAccount.objects.filter(user_id=period.user_id, period_start=period.period_start, unit=unit)
    return {row.kind: row for row in rows}


def _transfer(
    *, debit: LedgerAccount, credit: LedgerAccount, amount: int, code: str, key: str, at: datetime, **extra: Any
) -> Transfer:
    """The unsaved row of one transfer between two accounts of a unit and month (`_post` and a charge's bulk
    insert both build theirs here)."""
    return Transfer(
        debit_account=debit,
        credit_account=credit,
        amount=amount,
        unit=debit.unit,
        code=code,
        period_start=debit.period_start,
        idempotency_key=key,
        occurred_at=at,
        **extra,
    )


def _post(
    *,
    debit: LedgerAccount,
    credit: LedgerAccount,
    amount: int,
    code: str,
    key: str,
    at: datetime,
    pending: Transfer | None = None,
    **extra: Any,
) -> Transfer:
    """Append one transfer and move the cached balances with it (the caller holds the period lock)."""
    transfer = _transfer(debit=debit, credit=credit, amount=amount, code=code, key=key, at=at, pending=pending, **extra)
    transfer.save(force_insert=True)
    if code == Code.RESERVE:
        debit_change = {"debits_pending": F("debits_pending") + amount}
        credit_change = {"credits_pending": F("credits_pending") + amount}
    elif pending is not None:  # post or void: release the whole hold, post what was used
        posted = amount if code == Code.POST else 0
        debit_change = {
            "debits_pending": F("debits_pending") - pending.amount,
            "debits_posted": F("debits_posted") + posted,
        }
        credit_change = {
            "credits_pending": F("credits_pending") - pending.amount,
            "credits_posted": F("credits_posted") + posted,
        }
    else:
        debit_change = {"debits_posted": F("debits_posted") + amount}
        credit_change = {"credits_posted": F("credits_posted") + amount}
    LedgerAccount.objects.filter(pk=debit.pk).update(**debit_change)
    LedgerAccount.objects.filter(pk=credit.pk).update(**credit_change)
    return transfer


def _grant(period: Period, unit: str, amount: int, key: str, at: datetime) -> None:
    if amount > 0:
        accounts = _accounts(period, unit)
        _post(
            debit=accounts[Kind.ISSUANCE],
            credit=accounts[Kind.ALLOWANCE],
            amount=amount,
            code=Code.GRANT,
            key=key,
            at=at,
        )


def _open(user: User, start: date, at: datetime) -> None:
    """Create the month's ledger accounts and post its grants, once (the caller holds the period lock)."""
    period = Period.objects.select_related("plan").get(user=user, period_start=start)
    if LedgerAccount.objects.filter(user=user, period_start=start).exists():
        return
    LedgerAccount.objects.bulk_create(
        LedgerAccount(
            user=user,
            unit=unit,
            kind=kind,
            period_start=start,
            debits_must_not_exceed_credits=(kind == Kind.ALLOWANCE),
        )
        for unit, kinds in ACCOUNT_KINDS.items()
        for kind in kinds
    )
    plan = period.plan
    month = f"{start:%Y-%m}"
    _grant(period, Unit.LOOKUP, plan.included_lookups, f"grant:{user.pk}:lookup:{month}", at)
    _grant(period, Unit.CREDIT, plan.monthly_credits, f"grant:{user.pk}:credit:{month}", at)
    _grant(period, Unit.FREE_OPTIMIZATION, plan.free_optimizations, f"grant:{user.pk}:free_optimization:{month}", at)


def _lock_period(user: User, at: datetime) -> Period:
    """Lock (opening it on first use) the account's period for the UTC month of `at`."""
    start = period_start_of(at)
    period = Period.objects.select_for_update().filter(user=user, period_start=start).first()
    if period is None:
        plan = selectors.plan_of(user=user)
        # Concurrent first calls of the month: the loser's insert waits on the unique index, then does nothing.
        Period.objects.bulk_create(
            [
                Period(
                    user=user,
                    period_start=start,
                    plan=plan,
                    overage_allowed=plan.overage_allowed,
                    overage_micros_per_lookup=plan.overage_micros_per_lookup,
                    opened_at=at,
                )
            ],
            ignore_conflicts=True,
        )
        period = Period.objects.select_for_update().get(user=user, period_start=start)
        _open(user, start, at)
    return period


# What a decision reads of its period and of each of the unit's accounts, in the statement that locks them.
_PERIOD_FIELDS = ("id", "plan_id", "overage_allowed", "overage_micros_per_lookup", "opened_at", "closed_at")
_ACCOUNT_FIELDS = (
    "id",
    "kind",
    "debits_pending",
    "debits_posted",
    "credits_pending",
    "credits_posted",
    "debits_must_not_exceed_credits",
)


def _period_accounts(
    user: User, at: datetime, unit: str, *, for_update: bool = True
) -> tuple[Period, dict[str, LedgerAccount]]:
    """Read (opening it on first use) the account's period for the UTC month of `at` and its `unit` accounts,
    locked for update unless `for_update=False`.

    One statement: FROM the period JOIN its accounts FOR UPDATE locks the period row first (PostgreSQL locks a
    row's tables in FROM order, and every writer takes the period before touching an account, so there is no lock
    cycle) and then each account row. Because the accounts are locked themselves, the balances returned after a
    wait are their latest committed versions; a join locking only the period (FOR UPDATE OF) would return the
    balances from before the wait and overcharge the allowance (the 208-call race tests).

    `for_update=False` (a decision that moves no balance) reads the same rows as last committed, without waiting
    for the charges in flight; a month not opened yet is still opened, under the lock."""
    start = period_start_of(at)
    periods = Period.objects.select_for_update() if for_update else Period.objects.all()
    rows = list(
        periods.filter(user=user, period_start=start, accounts__unit=unit)
        .order_by("accounts__kind")
        .values(*_PERIOD_FIELDS, *(f"accounts__{name}" for name in _ACCOUNT_FIELDS))
    )
    if not rows:  # the month's first decision
        period = _lock_period(user, at)
        return period, _accounts(period, unit)
    period = Period(user=user, period_start=start, **{name: rows[0][name] for name in _PERIOD_FIELDS})
    accounts = {}
    for row in rows:
        fields = {name: row[f"accounts__{name}"] for name in _ACCOUNT_FIELDS}
        accounts[fields["kind"]] = LedgerAccount(user=user, unit=unit, period_start=start, **fields)
    return period, accounts


def _require_atomic() -> None:
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("lookup_charge must run inside the caller's transaction.atomic() block")


# --- lookups -------------------------------------------------------------------------------------------------


def _replay(*, user: User, client_request_id: str, request_fingerprint: str) -> LookupCharge:
    event = UsageEvent.objects.get(user=user, client_request_id=client_request_id)
    if event.request_fingerprint != request_fingerprint:
        raise BillingError(
            "idempotency_conflict",
            "This client_request_id was already used for a different request; send a new id for a new request.",
            {"client_request_id": client_request_id},
        )
    return LookupCharge(
        usage_event_id=event.pk,
        units_charged=event.units_charged,
        cache_hit=event.cache_hit,
        replayed=True,
        stored_response=event.response,
        usage=event.usage,
    )


def _validate_lookup(*, tool: str, units: int, request_fingerprint: str, client_request_id: str | None) -> None:
    problems = []
    if not isinstance(units, int) or isinstance(units, bool) or not 1 <= units <= MAX_UNITS_PER_LOOKUP:
        problems.append(f"units must be an integer from 1 to {MAX_UNITS_PER_LOOKUP}")
    if not tool or len(tool) > 64:
        problems.append("tool must be 1-64 characters")
    if not request_fingerprint or len(request_fingerprint) > 128:
        problems.append("request_fingerprint must be 1-128 characters")
    if client_request_id is not None and not 1 <= len(client_request_id) <= 255:
        problems.append("client_request_id must be 1-255 characters")
    if problems:
        raise BillingError("invalid_request", "; ".join(problems), {"problems": problems})


def lookup_charge(
    *,
    user: User,
    tool: str,
    units: int,
    request_fingerprint: str,
    client_request_id: str | None,
    cache_hit: bool = False,
    respond: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> LookupCharge:
    """Charge `units` lookups (0 for a cache hit) for one request, or replay a retried `client_request_id`.

    `respond(usage)`, when given, builds the answer from the charge's usage once the charge is decided; it is
    stored with the event in the same write (what a retry replays), so a failure in it also leaves no charge.

    Runs in the caller's transaction: the charge commits or rolls back with the tool's own work, and a refusal
    leaves nothing behind (it is decided before anything is written; a keyed request's idempotency row is undone
    by its savepoint).
    """
    _require_atomic()
    _validate_lookup(
        tool=tool, units=units, request_fingerprint=request_fingerprint, client_request_id=client_request_id
    )
    at = now()
    event = UsageEvent(
        user=user,
        client_request_id=client_request_id,
        request_fingerprint=request_fingerprint,
        tool=tool,
        units=units,
        cache_hit=cache_hit,
        period_start=period_start_of(at),
        occurred_at=at,
    )
    if client_request_id is None:
        # Without an idempotency key there is no row to gate on: lock, decide, then write (one INSERT per row).
        return _lookup_decide(event, user, units, at, respond)
    with transaction.atomic():  # a refusal below also removes the UsageEvent
        try:
            with transaction.atomic():
                # The insert is the idempotency gate: a concurrent retry waits here on the unique index, then
                # replays what the first request committed.
                event.save(force_insert=True)
        except IntegrityError:
            return _replay(user=user, client_request_id=client_request_id, request_fingerprint=request_fingerprint)
        return _lookup_decide(event, user, units, at, respond)


def _lookup_decide(
    event: UsageEvent,
    user: User,
    units: int,
    at: datetime,
    respond: Callable[[dict[str, Any]], dict[str, Any]] | None,
) -> LookupCharge:
    """Lock the period, split the charge into included and overage, post it and record the event's usage.

    The balances read under the lock are the ones the decision moves, so the usage is computed from them, not
    read again. A cache hit moves none: it reads them as last committed and does not queue behind the charges in
    flight for the lock."""
    period, accounts = _period_accounts(user, at, Unit.LOOKUP, for_update=not event.cache_hit)
    if not event.cache_hit:
        _charge(event, period, accounts, units)
    usage = selectors.lookup_usage_of_accounts(period, accounts)
    usage.update(lookup_cost=event.units_charged, cache="hit" if event.cache_hit else "miss")
    event.usage = usage
    event.response = respond(dict(usage)) if respond is not None else None
    if event.pk is None:
        event.save(force_insert=True)
    else:
        UsageEvent.objects.filter(pk=event.pk).update(
            included_qty=event.included_qty, overage_qty=event.overage_qty, usage=usage, response=event.response
        )
    if not event.cache_hit:
        _charge_post(event, accounts, at)
    return LookupCharge(
        usage_event_id=event.pk,
        units_charged=event.units_charged,
        cache_hit=event.cache_hit,
        replayed=False,
        stored_response=event.response,
        usage=usage,
    )


def _meter_customer(user_id: int) -> StripeCustomer | None:
    """The Stripe customer an overage is reported to (ledger-only accounts have none)."""
    return StripeCustomer.objects.filter(user_id=user_id).exclude(subscription_id="").first()


def _charge(event: UsageEvent, period: Period, accounts: dict[str, LedgerAccount], units: int) -> None:
    """Decide the split (nothing is written yet, so a refusal leaves nothing behind)."""
    included = min(units, max(accounts[Kind.ALLOWANCE].available, 0))
    overage = units - included
    if overage and not period.overage_allowed:
        month = f"{period.period_start:%Y-%m}"
        if included:  # some are left, just fewer than this call costs: "used up" would contradict lookups_remaining
            short = (
                f"This call costs {units} lookups and only {included} of the {period.plan.name} plan's included "
                f"lookups for {month} {'remains' if included == 1 else 'remain'}."
            )
        else:
            short = f"The {period.plan.name} plan's included lookups for {month} are used up."
        raise BillingError(
            "quota_exhausted",
            f"{short} Upgrade to a paid plan or wait for the period to reset.",
            selectors.quota_exhausted_details(period),
        )
    event.included_qty, event.overage_qty = included, overage
    # The in-hand balances move as the posting below will move them, so the usage is read from them.
    accounts[Kind.ALLOWANCE].debits_posted += included
    accounts[Kind.OVERAGE].debits_posted += overage
    accounts[Kind.CONSUMED].credits_posted += units


def _charge_post(event: UsageEvent, accounts: dict[str, LedgerAccount], at: datetime) -> None:
    """Post the decided split: its legs in one INSERT, the three accounts' cached balances in one UPDATE."""
    consumed = accounts[Kind.CONSUMED]
    legs = []
    if event.included_qty:
        legs.append((accounts[Kind.ALLOWANCE], event.included_qty, Code.CHARGE, f"ue:{event.pk}:charge"))
    if event.overage_qty:
        legs.append((accounts[Kind.OVERAGE], event.overage_qty, Code.OVERAGE, f"ue:{event.pk}:overage"))
    transfers = Transfer.objects.bulk_create(
        _transfer(debit=debit, credit=consumed, amount=amount, code=code, key=key, at=at, usage_event=event)
        for debit, amount, code, key in legs
    )
    balance = BigIntegerField()
    debits = [When(pk=debit.pk, then=F("debits_posted") + amount) for debit, amount, _, _ in legs]
    LedgerAccount.objects.filter(pk__in=[consumed.pk, *(debit.pk for debit, *_ in legs)]).update(
        debits_posted=Case(*debits, default=F("debits_posted"), output_field=balance),
        credits_posted=Case(
            When(pk=consumed.pk, then=F("credits_posted") + event.units_charged),
            default=F("credits_posted"),
            output_field=balance,
        ),
    )
    overage = next((t for t in transfers if t.code == Code.OVERAGE), None)
    if overage is not None:
        customer = _meter_customer(event.user_id)  # read only when there is an overage to report
        if customer is not None:
            _meter_report_enqueue(overage, customer)


def _meter_report_enqueue(transfer: Transfer, customer: StripeCustomer) -> None:
    """Queue the overage for Stripe in the charge's own transaction."""
    MeterReport.objects.create(
        transfer=transfer,
        identifier=f"lrx_{transfer.pk}",
        customer_id=customer.customer_id,
        value=transfer.amount,
        event_at=transfer.occurred_at,
    )
    # Not sent (the broker down) it still goes: the `meter-reports` beat task sends every unsent report.
    transaction.on_commit(lambda: broker.sent(tasks.meter_reports_send.delay, "meter reports"))


def lookup_store_response(*, charge: LookupCharge, response: dict[str, Any]) -> None:
    """Keep the tool's answer so that a retry with the same client_request_id returns it verbatim."""
    if charge.replayed:
        return
    UsageEvent.objects.filter(pk=charge.usage_event_id).update(response=response)


# --- credits -------------------------------------------------------------------------------------------------


def _positive(amount: int, name: str = "amount") -> None:
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
        raise BillingError("invalid_request", f"{name} must be a positive integer", {"field": name})


def _hold_of(transfer: Transfer) -> CreditHold:
    return CreditHold(
        pk=transfer.pk, amount=transfer.amount, reference=transfer.reference, period_start=transfer.period_start
    )


@transaction.atomic
def credits_reserve(*, user: User, amount: int, reference: str) -> CreditHold:
    """Hold `amount` credits for a job; the same `reference` returns the existing hold."""
    _positive(amount)
    if not reference or len(reference) > 128:
        raise BillingError("invalid_request", "reference must be 1-128 characters", {"field": "reference"})
    at = now()
    period, accounts = _period_accounts(user, at, Unit.CREDIT)
    key = f"reserve:{user.pk}:{reference}"
    existing = Transfer.objects.filter(idempotency_key=key).first()
    if existing is not None:
        if existing.amount != amount:
            raise BillingError(
                "idempotency_conflict",
                "This reference already holds a different amount.",
                {"reference": reference, "held": existing.amount},
            )
        return _hold_of(existing)
    allowance = accounts[Kind.ALLOWANCE]
    if allowance.available < amount:
        raise BillingError(
            "insufficient_credits",
            f"The job needs {amount} credits and {allowance.available} are available this period.",
            {
                "credits_required": amount,
                "credits_available": allowance.available,
                "period_resets_at": selectors.period_end(period.period_start).isoformat().replace("+00:00", "Z"),
            },
        )
    hold = _post(
        debit=allowance,
        credit=accounts[Kind.CONSUMED],
        amount=amount,
        code=Code.RESERVE,
        key=key,
        at=at,
        reference=reference,
    )
    return _hold_of(hold)


def _resolve(*, hold_id: int, amount: int, code: str) -> None:
    hold = Transfer.objects.filter(pk=hold_id, code=Code.RESERVE).select_related("debit_account").first()
    if hold is None:
        raise BillingError("hold_not_found", f"No credit hold {hold_id}.", {"hold_id": hold_id})
    if not 0 <= amount <= hold.amount:
        raise BillingError(
            "invalid_request",
            f"The settled amount must be from 0 to the {hold.amount} held.",
            {"hold_id": hold_id, "held": hold.amount},
        )
    # A job is charged to the period it was reserved in, even when it ends in the next month.
    period = Period.objects.select_for_update().get(user_id=hold.debit_account.user_id, period_start=hold.period_start)
    if Transfer.objects.filter(pending=hold).exists():
        raise BillingError(
            "hold_already_resolved", f"Credit hold {hold_id} was already settled or voided.", {"hold_id": hold_id}
        )
    at = now()
    debit = LedgerAccount.objects.get(pk=hold.debit_account_id)
    credit = LedgerAccount.objects.get(pk=hold.credit_account_id)
    _post(
        debit=debit,
        credit=credit,
        amount=amount,
        code=code,
        key=f"{code}:{hold.pk}",
        at=at,
        pending=hold,
        reference=hold.reference,
    )
    released = hold.amount - (amount if code == Code.POST else 0)
    if period.closed_at is not None and released and hold.debit_account.unit == Unit.CREDIT:
        # The month already closed: what the hold gives back expires instead of becoming spendable (a free
        # optimization returns to its past month's allowance, which nothing can spend any more).
        _post(
            debit=debit,
            credit=_accounts(period, Unit.CREDIT)[Kind.EXPIRED],
            amount=released,
            code=Code.EXPIRE,
            key=f"expire:{hold.pk}",
            at=at,
            reference=hold.reference,
        )


@transaction.atomic
def credits_settle(*, hold_id: int, amount: int) -> None:
    """Post the `amount` actually used (<= reserved); the rest of the hold returns to the balance."""
    _resolve(hold_id=hold_id, amount=amount, code=Code.POST)


@transaction.atomic
def credits_void(*, hold_id: int) -> None:
    """Release the whole hold (job failed or cancelled before using anything)."""
    hold = Transfer.objects.filter(pk=hold_id, code=Code.RESERVE).first()
    _resolve(hold_id=hold_id, amount=hold.amount if hold else 0, code=Code.VOID)


@transaction.atomic
def free_optimization_reserve(*, user: User, reference: str) -> CreditHold:
    """Hold one of the month's free optimizations for `reference` (only when the caller explicitly asked): settled
    as one when the optimization ran a point, voided when it ran none (cancelled while queued, every point failed,
    the queue refused it). The same `reference` returns the existing hold."""
    if not reference or len(reference) > 128:
        raise BillingError("invalid_request", "reference must be 1-128 characters", {"field": "reference"})
    at = now()
    period, accounts = _period_accounts(user, at, Unit.FREE_OPTIMIZATION)
    key = f"freeopt:{user.pk}:{reference}"
    existing = Transfer.objects.filter(idempotency_key=key).first()
    if existing is not None:
        return _hold_of(existing)
    if accounts[Kind.ALLOWANCE].available < 1:
        raise BillingError(
            "no_free_optimizations",
            f"No free optimizations are left for {period.period_start:%Y-%m}.",
            {"period_resets_at": selectors.period_end(period.period_start).isoformat().replace("+00:00", "Z")},
        )
    hold = _post(
        debit=accounts[Kind.ALLOWANCE],
        credit=accounts[Kind.CONSUMED],
        amount=1,
        code=Code.RESERVE,
        key=key,
        at=at,
        reference=reference,
    )
    return _hold_of(hold)


def periods_close() -> int:
    """Expire the unused credits of every month that has ended (credits never roll over); returns how many
    periods were closed. Credits still held by running jobs expire when those holds resolve."""
    current = period_start_of(now())
    closed = 0
    for pk in Period.objects.filter(closed_at__isnull=True, period_start__lt=current).values_list("pk", flat=True):
        with transaction.atomic():
            period = Period.objects.select_for_update().get(pk=pk)
            if period.closed_at is not None:
                continue  # another worker closed it first
            accounts = _accounts(period, Unit.CREDIT)
            unused = accounts[Kind.ALLOWANCE].available
            at = now()
            if unused > 0:
                _post(
                    debit=accounts[Kind.ALLOWANCE],
                    credit=accounts[Kind.EXPIRED],
                    amount=unused,
                    code=Code.EXPIRE,
                    key=f"expire:{period.user_id}:credit:{period.period_start:%Y-%m}",
                    at=at,
                )
            Period.objects.filter(pk=pk).update(closed_at=at)
            closed += 1
    return closed


REVERSIBLE = {Code.GRANT, Code.CHARGE, Code.OVERAGE}


@transaction.atomic
def transfer_reverse(*, transfer_id: int, reason: str, created_by: User) -> Transfer:
    """Correct the ledger with a new `adjust` transfer that undoes `transfer_id` (transfers are never edited)."""
    reason = reason.strip()
    if not reason:
        raise BillingError("invalid_request", "A correction needs a reason.", {"field": "reason"})
    original = Transfer.objects.filter(pk=transfer_id).select_related("debit_account").first()
    if original is None:
        raise BillingError("transfer_not_found", f"No transfer {transfer_id}.", {"transfer_id": transfer_id})
    if original.code not in REVERSIBLE:
        raise BillingError(
            "not_reversible",
            f"A {original.code} transfer is corrected by settling or voiding its credit hold, not by reversal.",
            {"transfer_id": transfer_id},
        )
    if MeterReport.objects.filter(transfer=original).exists():
        raise BillingError(
            "reported_to_stripe",
            "This overage is queued for or already on a Stripe invoice: correct it in Stripe (meter event "
            "adjustment or credit note) and record that there.",
            {"transfer_id": transfer_id},
        )
    Period.objects.select_for_update().get(user_id=original.debit_account.user_id, period_start=original.period_start)
    if Transfer.objects.filter(reverses=original).exists():
        raise BillingError(
            "already_reversed", f"Transfer {transfer_id} was already reversed.", {"transfer_id": transfer_id}
        )
    debit = LedgerAccount.objects.get(pk=original.credit_account_id)
    credit = LedgerAccount.objects.get(pk=original.debit_account_id)
    if debit.debits_must_not_exceed_credits and debit.available < original.amount:
        raise BillingError(
            "insufficient_balance",
            f"Reversing this {original.code} would overdraw the account by {original.amount - debit.available}.",
            {"transfer_id": transfer_id, "available": debit.available},
        )
    return _post(
        debit=debit,
        credit=credit,
        amount=original.amount,
        code=Code.ADJUST,
        key=f"reverse:{original.pk}",
        at=now(),
        reverses=original,
        reason=reason,
        created_by=created_by,
        usage_event_id=original.usage_event_id,
        reference=original.reference,
    )


# --- plans ---------------------------------------------------------------------------------------------------


@transaction.atomic
def plan_assign(*, user: User, plan: Plan) -> AccountPlan:
    """Assign a plan. An upgrade (more included lookups, or overage where the month had none) tops this month's
    grants up to the new plan's now; a downgrade waits a month. The month's overage rate is never changed once
    overage could be charged at it: a lookup already billed keeps its price."""
    at = now()
    assignment, _ = AccountPlan.objects.update_or_create(user=user, defaults={"plan": plan, "assigned_at": at})
    if plan.overage_allowed and settings.LEROY_STRIPE_SECRET_KEY:
        # Billed plans need a Stripe subscription for the overage meter; Stripe calls never run inside our transaction.
        # Not sent (the broker down) it still comes: the `subscriptions-sync` beat task subscribes such accounts.
        transaction.on_commit(
            lambda: broker.sent(lambda: tasks.stripe_subscription_sync.delay(user.pk, plan.pk), "Stripe subscription")
        )
    start = period_start_of(at)
    if not Period.objects.filter(user=user, period_start=start).exists():
        return assignment  # the period opens with the new plan
    period = _lock_period(user, at)
    granted = {unit: selectors.net_debits(_accounts(period, unit)[Kind.ISSUANCE]) for unit in Unit.values}
    opens_overage = plan.overage_allowed and not period.overage_allowed
    if plan.included_lookups <= granted[Unit.LOOKUP] and not opens_overage:
        return assignment
    # Top this month's grants up to the new plan's (measured against what the ledger actually granted).
    change = f"{start:%Y-%m}:{plan.code}:{at.timestamp():.6f}"
    targets = {
        Unit.LOOKUP: plan.included_lookups,
        Unit.CREDIT: plan.monthly_credits,
        Unit.FREE_OPTIMIZATION: plan.free_optimizations,
    }
    for unit, target in targets.items():
        _grant(period, unit, target - granted[unit], f"grant-delta:{user.pk}:{unit}:{change}", at)
    overage = {"overage_allowed": True, "overage_micros_per_lookup": plan.overage_micros_per_lookup}
    Period.objects.filter(pk=period.pk).update(plan=plan, **(overage if opens_overage else {}))
    return assignment
