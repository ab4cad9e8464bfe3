import csv
import hashlib
import io
import json
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.db.models import Sum
from django.test import Client

from accounts import services as account_services
from billing import exports, services
from billing.models import Code, ExportBatch, Plan, Transfer

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mid_august")]


@pytest.fixture
def activity(owner, charge):
    plan = Plan.objects.create(
        code="metered-3", name="Metered 3", included_lookups=3, overage_allowed=True, monthly_credits=100
    )
    services.plan_assign(user=owner, plan=plan)
    for n in range(5):
        charge(owner, fingerprint=f"fp{n}", key=f'=HYPERLINK("http://evil")-{n}')
    hold = services.credits_reserve(user=owner, amount=40, reference="-job-1")
    services.credits_settle(hold_id=hold.pk, amount=25)
    return owner


def read(body: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_export_command_writes_csv_and_manifest_that_reconcile_to_the_ledger(activity, tmp_path, capsys):
    out = tmp_path / "ledger_entries_2026-08.csv"

    call_command("export_ledger", "--month", "2026-08", "--out", str(out))

    body = out.read_bytes()
    rows = read(body)
    manifest = json.loads((tmp_path / "ledger_entries_2026-08.csv.manifest.json").read_text())
    assert manifest["sha256"] == hashlib.sha256(body).hexdigest()
    assert manifest["row_count"] == len(rows) == Transfer.objects.count()
    for code in (Code.CHARGE, Code.OVERAGE, Code.RESERVE, Code.POST):
        in_csv = sum(int(r["quantity"]) for r in rows if r["entry_type"] == code)
        assert in_csv == Transfer.objects.filter(code=code).aggregate(total=Sum("amount"))["total"]
    assert manifest["totals"]["charge"] == {"rows": 3, "quantity": 3, "amount_usd": "0.00"}
    assert manifest["totals"]["overage"] == {"rows": 2, "quantity": 2, "amount_usd": "0.02"}
    assert sum(Decimal(r["amount_usd"]) for r in rows) == Decimal("0.02")
    assert ExportBatch.objects.get().sha256 == manifest["sha256"]
    assert {r["export_batch_id"] for r in rows} == {str(manifest["export_batch_id"])}


def test_export_escapes_formula_like_text_but_not_numbers(activity, tmp_path):
    out = tmp_path / "ledger.csv"
    call_command("export_ledger", "--month", "2026-08", "--out", str(out))

    rows = read(out.read_bytes())
    charged = [r for r in rows if r["entry_type"] == "charge"]
    assert charged[0]["client_request_id"] == '\'=HYPERLINK("http://evil")-0'
    post = next(r for r in rows if r["entry_type"] == "post")
    assert post["source_id"] == "'-job-1"
    grant = next(r for r in rows if r["entry_type"] == "grant")
    assert grant["quantity"].startswith("-")  # grants are credits: negative, and a number stays a number


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "\x00x"])
def test_csv_escapes_a_cell_starting_with_any_formula_prefix(text):
    out = io.StringIO()

    exports.write_csv([{"reason": text, "quantity": -1}], out, ("reason", "quantity"))

    assert read(out.getvalue().encode()) == [{"reason": "'" + text, "quantity": "-1"}]


def test_export_rejects_a_bad_month_and_writes_nothing(tmp_path):
    with pytest.raises(CommandError, match="YYYY-MM"):
        call_command("export_ledger", "--month", "2026-8", "--out", str(tmp_path / "x.csv"))

    assert not (tmp_path / "x.csv").exists()
    assert ExportBatch.objects.count() == 0


def staff_member(email: str, *permissions: str):
    user = account_services.user_create(email=email, password="correct horse battery staple")
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="billing", codename__in=permissions))
    return user


@pytest.fixture
def staff(db):
    return staff_member("finance@example.com", "view_transfer")


def test_finance_api_pages_json(activity, staff, client):
    client.force_login(staff)

    response = client.get("/api/finance/ledger", {"month": "2026-08", "page_size": 4})

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == Transfer.objects.count()
    assert len(body["results"]) == 4
    assert body["next"].endswith("month=2026-08&page=2&page_size=4")
    assert [r["entry_id"] for r in body["results"]] == list(
        Transfer.objects.order_by("occurred_at", "pk").values_list("pk", flat=True)[:4]
    )


def test_finance_api_json_carries_the_stored_text_unescaped(activity, staff, client):
    client.force_login(staff)

    response = client.get("/api/finance/ledger", {"month": "2026-08"})

    rows = response.json()["results"]
    charged = [r for r in rows if r["entry_type"] == "charge"]
    assert charged[0]["client_request_id"] == '=HYPERLINK("http://evil")-0'
    assert next(r for r in rows if r["entry_type"] == "post")["source_id"] == "-job-1"


def test_finance_api_csv_escapes_formula_like_text(activity, staff, client):
    client.force_login(staff)

    response = client.get("/api/finance/ledger", {"month": "2026-08", "format": "csv"})

    rows = read(response.content)
    charged = [r for r in rows if r["entry_type"] == "charge"]
    assert charged[0]["client_request_id"] == '\'=HYPERLINK("http://evil")-0'
    assert next(r for r in rows if r["entry_type"] == "post")["source_id"] == "'-job-1"


def test_finance_api_renders_csv(activity, staff, client):
    client.force_login(staff)

    response = client.get("/api/finance/ledger", {"month": "2026-08", "format": "csv"})

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    rows = read(response.content)
    assert len(rows) == Transfer.objects.count()
    assert sum(Decimal(r["amount_usd"]) for r in rows) == Decimal("0.02")


@pytest.mark.parametrize("format", ["json", "csv"])
def test_finance_api_answers_are_never_cached(activity, staff, client, format):
    client.force_login(staff)

    response = client.get("/api/finance/ledger", {"month": "2026-08", "format": format})
    refused = Client().get("/api/finance/ledger", {"month": "2026-08", "format": format})

    assert response.status_code == 200
    assert response["Cache-Control"] == "max-age=0, no-cache, no-store, must-revalidate, private"
    assert response["Vary"] == "Accept, Cookie"
    assert refused.status_code == 403
    assert refused["Cache-Control"] == "max-age=0, no-cache, no-store, must-revalidate, private"


@pytest.mark.parametrize(
    ("query", "headers", "status"),
    [
        ({"month": "2026-08", "format": "xml"}, {}, 404),
        ({"format": "xml"}, {}, 404),
        ({"month": "2026-08"}, {"Accept": "application/xml"}, 406),
        ({"month": "2026-13"}, {}, 400),
        ({"month": "2026-08", "page": "9"}, {}, 404),
    ],
)
def test_finance_api_refusals_are_never_cached_and_vary_on_the_cookie(staff, client, query, headers, status):
    client.force_login(staff)

    response = client.get("/api/finance/ledger", query, headers=headers)
    signed_out = Client().get("/api/finance/ledger", query, headers=headers)

    assert response.status_code == status
    for answer in (response, signed_out):
        assert answer["Cache-Control"] == "max-age=0, no-cache, no-store, must-revalidate, private"
        assert answer["Vary"] == "Accept, Cookie"
    assert ExportBatch.objects.exists() is False


def test_finance_api_is_for_staff_only(activity, client):
    assert client.get("/api/finance/ledger", {"month": "2026-08"}).status_code == 403
    client.force_login(activity)
    assert client.get("/api/finance/ledger", {"month": "2026-08"}).status_code == 403


def test_finance_api_is_not_for_staff_without_the_ledgers_view_permission(activity, client):
    client.force_login(staff_member("support@example.com"))

    assert client.get("/api/finance/ledger", {"month": "2026-08"}).status_code == 403
    assert client.get("/admin/billing/transfer/").status_code == 403


@pytest.mark.parametrize("month", ["August", "٢٠٢٦-٠٨", "2026-8", "2026-08-01", " 2026-08"])
def test_finance_api_refuses_a_bad_month(staff, client, month):
    client.force_login(staff)

    response = client.get("/api/finance/ledger", {"month": month})

    assert (response.status_code, response.json()) == (400, {"month": [f"month must be YYYY-MM, not {month!r}"]})


def test_finance_api_states_a_bad_month_in_csv_as_text(staff, client):
    client.force_login(staff)

    response = client.get("/api/finance/ledger", {"month": "2026-13", "format": "csv"})

    assert (response.status_code, response.content) == (400, b"detail\r\nmonth: month must be in 1..12\r\n")


def test_usage_summary_has_one_row_per_account_that_reconciles_to_the_ledger(activity, outsider, tmp_path, charge):
    charge(outsider, fingerprint="a")
    charge(outsider, fingerprint="a", cache_hit=True)
    out = tmp_path / "usage_summary_2026-08.csv"

    call_command("export_ledger", "--month", "2026-08", "--out", str(out), "--kind", "usage_summary")

    rows = {row["account_id"]: row for row in read(out.read_bytes())}
    mine, theirs = rows[str(activity.pk)], rows[str(outsider.pk)]
    assert {k: mine[k] for k in ("plan_code", "included_lookups", "used_lookups", "overage_lookups")} == {
        "plan_code": "metered-3",
        "included_lookups": "3",
        "used_lookups": "5",
        "overage_lookups": "2",
    }
    assert (mine["overage_rate_usd"], mine["overage_amount_usd"]) == ("0.01", "0.02")
    assert (mine["credits_granted"], mine["credits_used"], mine["credits_released"]) == ("100", "25", "15")
    assert (mine["reconciliation_status"], mine["stripe_invoice_id"]) == ("ledger_only", "")
    assert (theirs["plan_code"], theirs["used_lookups"], theirs["cache_hits"]) == ("free", "1", "1")
    manifest = json.loads((tmp_path / "usage_summary_2026-08.csv.manifest.json").read_text())
    assert manifest["totals"]["overage_amount_usd"] == "0.02"
    assert manifest["totals"]["used_lookups"] == 6
    assert manifest["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()


def test_a_sub_cent_rate_is_exported_exactly_not_rounded_to_the_cent(owner, charge, tmp_path):
    plan = Plan.objects.create(
        code="half-cent", name="Half cent", included_lookups=1, overage_allowed=True, overage_micros_per_lookup=5_000
    )
    services.plan_assign(user=owner, plan=plan)
    for n in range(16):
        charge(owner, fingerprint=f"fp{n}")  # 15 beyond the allowance: $0.075
    entries, summary = tmp_path / "entries.csv", tmp_path / "summary.csv"

    call_command("export_ledger", "--month", "2026-08", "--out", str(entries))
    call_command("export_ledger", "--month", "2026-08", "--out", str(summary), "--kind", "usage_summary")

    overage = [r for r in read(entries.read_bytes()) if r["entry_type"] == "overage"]
    (row,) = read(summary.read_bytes())
    manifest = json.loads((tmp_path / "entries.csv.manifest.json").read_text())
    assert {(r["unit_price_usd"], r["amount_usd"]) for r in overage} == {("0.005", "0.005")}
    assert len(overage) == 15
    assert manifest["totals"]["overage"] == {"rows": 15, "quantity": 15, "amount_usd": "0.075"}
    assert (row["overage_rate_usd"], row["overage_amount_usd"]) == ("0.005", "0.075")
