"""Finance exports: ledger entries (one row per transfer) and a usage summary (one row per account and month),
RFC 4180 CSV with money as 2-dp decimal strings, each recorded with a checksum manifest. Rows carry the stored
values (the JSON export serves them as they are); only the CSV escapes formula-like text, when it writes them."""

import csv
import hashlib
import io
import re
from collections.abc import Iterable, Iterator
from datetime import date
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Count, QuerySet

from billing.models import (
    Code,
    ExportBatch,
    Kind,
    LedgerAccount,
    MeterReport,
    Period,
    StripeCustomer,
    Transfer,
    Unit,
    UsageEvent,
)
from billing.selectors import net_credits, net_debits, usd
from leroy.clock import now

COLUMNS = (
    "entry_id",
    "posted_at_utc",
    "occurred_at_utc",
    "period",
    "entry_type",
    "unit",
    "quantity",
    "direction",
    "debit_account",
    "credit_account",
    "account_id",
    "stripe_customer_id",
    "plan_code",
    "unit_price_usd",
    "amount_usd",
    "currency",
    "source_type",
    "source_id",
    "usage_event_id",
    "client_request_id",
    "pending_entry_id",
    "reverses_entry_id",
    "reason",
    "created_by",
    "stripe_meter_identifier",
    "stripe_invoice_id",
    "stripe_sync_status",
    "export_batch_id",
)
SUMMARY_COLUMNS = (
    "period",
    "account_id",
    "stripe_customer_id",
    "plan_code",
    "included_lookups",
    "used_lookups",
    "overage_lookups",
    "cache_hits",
    "overage_rate_usd",
    "overage_amount_usd",
    "credits_granted",
    "credits_used",
    "credits_released",
    "credits_expired",
    "credits_reserved_open",
    "free_optimizations_used",
    "stripe_invoice_id",
    "stripe_invoice_status",
    "stripe_billed_quantity",
    "stripe_billed_amount_usd",
    "reconciliation_status",
)
KINDS = ("ledger_entries", "usage_summary")
# Cells a spreadsheet could read as a formula (OWASP CSV injection; ASVS 1.2.10 adds NUL); only free text is
# escaped, and only in the CSV, never numbers.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\x00")
FREE_TEXT = {"debit_account", "credit_account", "source_id", "client_request_id", "reason", "created_by"}
# Value returns to the account's balance (a grant, or a hold released).
CREDIT_CODES = {Code.GRANT, Code.VOID}


def month_start(month: str) -> date:
    """`YYYY-MM` as the first day of that month; ValueError for anything else."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}", month):  # ASCII digits only: str.isdigit() takes "٢٠٢٦"
        raise ValueError(f"month must be YYYY-MM, not {month!r}")
    return date(int(month[:4]), int(month[5:]), 1)


def escape(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_PREFIXES) else value


def _zulu(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z")


def ledger_entries(period_start: date) -> QuerySet[Transfer]:
    return (
        Transfer.objects.filter(period_start=period_start)
        .select_related("debit_account", "credit_account", "usage_event", "created_by", "reverses")
        .order_by("occurred_at", "pk")
    )


def _label(account: LedgerAccount) -> str:
    return f"{account.user_id}:{account.unit}:{account.kind}"


def ledger_rows(transfers: Iterable[Transfer], *, export_batch_id: int | None = None) -> Iterator[dict[str, Any]]:
    """Export rows for `transfers` (one period), with Stripe and plan context looked up once per account."""
    transfers = list(transfers)
    user_ids = {t.debit_account.user_id for t in transfers}
    customers = dict(StripeCustomer.objects.filter(user_id__in=user_ids).values_list("user_id", "customer_id"))
    periods = {
        (p.user_id, p.period_start): p
        for p in Period.objects.filter(user_id__in=user_ids).select_related("plan")
        if p.period_start in {t.period_start for t in transfers}
    }
    reports = {r.transfer_id: r for r in MeterReport.objects.filter(transfer__in=transfers)}
    for t in transfers:
        user_id = t.debit_account.user_id
        period = periods.get((user_id, t.period_start))
        # A reversal carries the opposite sign of what it reverses (a reversed overage is a money credit).
        kind = t.reverses.code if t.reverses is not None else t.code
        rate = period.overage_micros_per_lookup if period and kind == Code.OVERAGE else None
        sign = -1 if (kind in CREDIT_CODES) != (t.reverses is not None) else 1
        event = t.usage_event
        report = reports.get(t.pk)
        row: dict[str, Any] = {
            "entry_id": t.pk,
            "posted_at_utc": _zulu(t.occurred_at),
            "occurred_at_utc": _zulu(event.occurred_at if event else t.occurred_at),
            "period": f"{t.period_start:%Y-%m}",
            "entry_type": t.code,
            "unit": t.unit,
            "quantity": sign * t.amount,
            "direction": "credit" if sign < 0 else "debit",
            "debit_account": _label(t.debit_account),
            "credit_account": _label(t.credit_account),
            "account_id": user_id,
            "stripe_customer_id": customers.get(user_id, ""),
            "plan_code": period.plan.code if period else "",
            "unit_price_usd": usd(rate) if rate is not None else "",
            "amount_usd": usd(sign * t.amount * rate) if rate is not None else usd(0),
            "currency": "usd",
            "source_type": "usage_event" if event else ("job" if t.reference else "period"),
            "source_id": event.tool if event else t.reference,
            "usage_event_id": event.pk if event else "",
            "client_request_id": (event.client_request_id or "") if event else "",
            "pending_entry_id": t.pending_id or "",
            "reverses_entry_id": t.reverses_id or "",
            "reason": t.reason,
            "created_by": t.created_by.email if t.created_by else "",
            "stripe_meter_identifier": report.identifier if report else "",
            "stripe_invoice_id": "",
            "stripe_sync_status": report.status if report else "",
            "export_batch_id": export_batch_id or "",
        }
        yield row


def write_csv(rows: Iterable[dict[str, Any]], out: io.TextIOBase | Any, columns: tuple[str, ...] = COLUMNS) -> None:
    """`rows` as CSV, each free-text cell escaped for spreadsheets (the rows themselves are left as stored)."""
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows({key: escape(value) if key in FREE_TEXT else value for key, value in row.items()} for row in rows)


def usage_summary_rows(period_start: date) -> list[dict[str, Any]]:
    """One row per account with an opened period: lookups, overage and credits straight from its ledger accounts."""
    periods = list(Period.objects.filter(period_start=period_start).select_related("plan").order_by("user_id"))
    balances = {(a.user_id, a.unit, a.kind): a for a in LedgerAccount.objects.filter(period_start=period_start)}
    cache_hits = dict(
        UsageEvent.objects.filter(period_start=period_start, cache_hit=True)
        .values("user_id")
        .annotate(n=Count("pk"))
        .values_list("user_id", "n")
    )
    released: dict[int, int] = {}
    credit_moves = Transfer.objects.filter(period_start=period_start, unit=Unit.CREDIT).select_related(
        "debit_account", "pending"
    )
    for t in credit_moves.filter(code__in=[Code.POST, Code.VOID]):
        assert t.pending is not None  # the resolution_names_its_hold constraint
        freed = t.pending.amount - (t.amount if t.code == Code.POST else 0)
        released[t.debit_account.user_id] = released.get(t.debit_account.user_id, 0) + freed
    customers = dict(StripeCustomer.objects.values_list("user_id", "customer_id"))
    meter_states: dict[int, set[str]] = {}
    for user_id, status in MeterReport.objects.filter(transfer__period_start=period_start).values_list(
        "transfer__debit_account__user_id", "status"
    ):
        meter_states.setdefault(user_id, set()).add(status)

    rows = []
    for period in periods:
        user_id = period.user_id

        def account(unit: str, kind: str, user_id: int = user_id) -> LedgerAccount:
            return balances[(user_id, unit, kind)]

        included = net_debits(account(Unit.LOOKUP, Kind.ISSUANCE))
        overage = net_debits(account(Unit.LOOKUP, Kind.OVERAGE))
        credits = account(Unit.CREDIT, Kind.ALLOWANCE)
        states = meter_states.get(user_id, set())
        if user_id not in customers:
            reconciliation = "ledger_only"
        elif MeterReport.Status.FAILED in states:
            reconciliation = "meter_failed"
        elif MeterReport.Status.PENDING in states:
            reconciliation = "meter_pending"
        else:
            reconciliation = "meter_sent"
        rows.append(
            {
                "period": f"{period_start:%Y-%m}",
                "account_id": user_id,
                "stripe_customer_id": customers.get(user_id, ""),
                "plan_code": period.plan.code,
                "included_lookups": included,
                "used_lookups": included - account(Unit.LOOKUP, Kind.ALLOWANCE).available + overage,
                "overage_lookups": overage,
                "cache_hits": cache_hits.get(user_id, 0),
                "overage_rate_usd": usd(period.overage_micros_per_lookup),
                "overage_amount_usd": usd(overage * period.overage_micros_per_lookup),
                "credits_granted": net_debits(account(Unit.CREDIT, Kind.ISSUANCE)),
                "credits_used": net_credits(account(Unit.CREDIT, Kind.CONSUMED)),
                "credits_released": released.get(user_id, 0),
                "credits_expired": net_credits(account(Unit.CREDIT, Kind.EXPIRED)),
                "credits_reserved_open": credits.debits_pending,
                "free_optimizations_used": net_credits(account(Unit.FREE_OPTIMIZATION, Kind.CONSUMED)),
                # Invoices are not mirrored from Stripe yet: unknown, so empty rather than guessed.
                "stripe_invoice_id": "",
                "stripe_invoice_status": "",
                "stripe_billed_quantity": "",
                "stripe_billed_amount_usd": "",
                "reconciliation_status": reconciliation,
            }
        )
    return rows


def summary_totals_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Control totals of a usage summary (money as exact strings)."""
    counted = ("used_lookups", "overage_lookups", "cache_hits", "credits_granted", "credits_used", "credits_expired")
    return {
        "accounts": len(rows),
        **{column: sum(row[column] for row in rows) for column in counted},
        "overage_amount_usd": str(sum((Decimal(row["overage_amount_usd"]) for row in rows), Decimal("0.00"))),
    }


def totals_of(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Control totals per entry type: row count, quantity and amount (strings, exact)."""
    totals: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = totals.setdefault(row["entry_type"], {"rows": 0, "quantity": 0, "amount_usd": Decimal("0.00")})
        entry["rows"] += 1
        entry["quantity"] += row["quantity"]
        entry["amount_usd"] += Decimal(row["amount_usd"])
    return {code: {**entry, "amount_usd": str(entry["amount_usd"])} for code, entry in sorted(totals.items())}


@transaction.atomic
def finance_export(*, month: str, kind: str = "ledger_entries") -> tuple[ExportBatch, bytes]:
    """Build one month's CSV of `kind` and record its manifest (row count, control totals, sha256)."""
    start = month_start(month)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    batch = ExportBatch.objects.create(
        period_start=start, kind=kind, row_count=0, totals={}, sha256="", created_at=now()
    )
    buffer = io.StringIO()
    if kind == "ledger_entries":
        rows = list(ledger_rows(ledger_entries(start), export_batch_id=batch.pk))
        write_csv(rows, buffer)
        batch.totals = totals_of(rows)
    else:
        rows = usage_summary_rows(start)
        write_csv(rows, buffer, SUMMARY_COLUMNS)
        batch.totals = summary_totals_of(rows)
    body = buffer.getvalue().encode()
    batch.row_count = len(rows)
    batch.sha256 = hashlib.sha256(body).hexdigest()
    batch.save(update_fields=["row_count", "totals", "sha256"])
    return batch, body


def manifest_of(batch: ExportBatch, file_name: str) -> dict[str, Any]:
    return {
        "file": file_name,
        "export_batch_id": batch.pk,
        "kind": batch.kind,
        "period": f"{batch.period_start:%Y-%m}",
        "row_count": batch.row_count,
        "totals": batch.totals,
        "sha256": batch.sha256,
        "created_at": _zulu(batch.created_at),
    }
