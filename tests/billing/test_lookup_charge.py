from datetime import UTC, date, datetime

import pytest
import time_machine
from django.db import transaction

from billing import selectors, services
from billing.models import Code, LedgerAccount, Plan, Transfer, UsageEvent
from billing.services import BillingError

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_free_plan(db):
    """The free plan with a 4-lookup allowance, to reach its limit quickly."""
    Plan.objects.filter(code="free").update(included_lookups=4)


def pro(user):
    services.plan_assign(user=user, plan=Plan.objects.get(code="pro"))


@pytest.mark.usefixtures("mid_august")
def test_first_lookup_opens_the_month_and_charges_one(owner, charge):
    result = charge(owner)

    assert result.units_charged == 1
    assert result.replayed is False
    assert result.stored_response is None
    assert result.usage == {
        "included_lookups": 100,
        "used_lookups": 1,
        "lookups_remaining": 99,
        "overage_lookups": 0,
        "overage_amount_usd": 0.0,
        "lookup_cost": 1,
        "cache": "miss",
    }
    grant, spend = Transfer.objects.order_by("pk").filter(unit="lookup")
    assert (grant.code, grant.amount, grant.idempotency_key) == ("grant", 100, f"grant:{owner.pk}:lookup:2026-08")
    assert (spend.code, spend.amount, spend.period_start.isoformat()) == ("charge", 1, "2026-08-01")


@pytest.mark.usefixtures("mid_august")
def test_side_both_charges_two(owner, charge):
    result = charge(owner, units=2)

    assert result.units_charged == 2
    assert selectors.lookup_usage(user=owner)["used_lookups"] == 2


@pytest.mark.usefixtures("mid_august")
def test_cache_hit_is_recorded_and_charges_nothing(owner, charge):
    charge(owner)
    result = charge(owner, cache_hit=True)

    assert result.units_charged == 0
    assert result.usage["cache"] == "hit"
    assert result.usage["lookup_cost"] == 0
    assert result.usage["used_lookups"] == 1
    assert UsageEvent.objects.filter(cache_hit=True).count() == 1
    assert Transfer.objects.filter(code="charge").count() == 1


@pytest.mark.usefixtures("mid_august")
def test_a_failing_tool_rolls_its_charge_back(owner, charge):
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        services.lookup_charge(user=owner, tool="t", units=1, request_fingerprint="fp", client_request_id="req-1")
        1 / 0  # noqa: B018  the tool's own work fails after the charge

    assert UsageEvent.objects.count() == 0
    assert not Transfer.objects.filter(code="charge").exists()
    assert charge(owner, key="req-1").replayed is False  # the key is free again


@pytest.mark.usefixtures("mid_august")
def test_a_cache_hit_whose_answer_fails_leaves_no_event(owner, charge):
    charge(owner, fingerprint="opens-the-period")

    def respond(usage: dict) -> dict:
        raise ZeroDivisionError  # presenting the cached answer fails after the unlocked read

    with pytest.raises(ZeroDivisionError), transaction.atomic():
        services.lookup_charge(
            user=owner, tool="t", units=1, request_fingerprint="opens-the-period", client_request_id="req-1",
            cache_hit=True, respond=respond,
        )  # fmt: skip

    assert UsageEvent.objects.count() == 1
    assert not UsageEvent.objects.filter(cache_hit=True).exists()
    assert selectors.lookup_usage(user=owner)["used_lookups"] == 1
    assert charge(owner, key="req-1", cache_hit=True).replayed is False  # the key is free again


@pytest.mark.usefixtures("mid_august")
def test_retry_with_same_key_replays_the_stored_answer_without_charging(owner, charge):
    first = charge(owner, key="req-1")
    services.lookup_store_response(charge=first, response={"evaluation_id": "eval_1"})
    retry = charge(owner, key="req-1")

    assert retry.replayed is True
    assert retry.stored_response == {"evaluation_id": "eval_1"}
    assert retry.usage == first.usage
    assert retry.units_charged == 1
    assert selectors.lookup_usage(user=owner)["used_lookups"] == 1


@pytest.mark.usefixtures("mid_august")
def test_same_key_with_different_arguments_is_refused(owner, charge):
    charge(owner, key="req-1", fingerprint="fp-a")

    with pytest.raises(BillingError) as refused:
        charge(owner, key="req-1", fingerprint="fp-b")

    assert refused.value.code == "idempotency_conflict"
    assert selectors.lookup_usage(user=owner)["used_lookups"] == 1


@pytest.mark.usefixtures("mid_august")
def test_keys_are_per_account(owner, outsider, charge):
    charge(owner, key="req-1", fingerprint="fp-a")
    other = charge(outsider, key="req-1", fingerprint="fp-b")

    assert other.replayed is False
    assert other.units_charged == 1


@pytest.mark.usefixtures("mid_august")
def test_free_plan_stops_at_its_allowance_and_charges_nothing(owner, small_free_plan, charge):
    for _ in range(2):
        charge(owner, units=2)

    with pytest.raises(BillingError) as refused:
        charge(owner, key="one-too-many")

    error = refused.value
    assert error.code == "quota_exhausted"
    assert error.details["period_resets_at"] == "2026-09-01T00:00:00Z"
    assert error.details["upgrade_url"] == "http://127.0.0.1:8000/account/"
    assert error.details["used_lookups"] == 4
    assert not UsageEvent.objects.filter(client_request_id="one-too-many").exists()
    assert selectors.lookup_usage(user=owner)["used_lookups"] == 4


@pytest.mark.usefixtures("mid_august")
def test_free_plan_refuses_a_two_lookup_call_with_one_left(owner, small_free_plan, charge):
    for _ in range(3):
        charge(owner)

    with pytest.raises(BillingError):
        charge(owner, units=2)

    assert selectors.lookup_usage(user=owner)["lookups_remaining"] == 1


@pytest.mark.usefixtures("mid_august")
def test_paid_plan_splits_a_charge_across_the_boundary_into_overage(owner, charge):
    plan = Plan.objects.create(code="metered-3", name="Metered 3", included_lookups=3, overage_allowed=True)
    services.plan_assign(user=owner, plan=plan)
    for _ in range(2):
        charge(owner)
    result = charge(owner, units=2)

    assert result.usage == {
        "included_lookups": 3,
        "used_lookups": 4,
        "lookups_remaining": 0,
        "overage_lookups": 1,
        "overage_amount_usd": 0.01,
        "lookup_cost": 2,
        "cache": "miss",
    }
    assert list(Transfer.objects.filter(usage_event_id=result.usage_event_id).values_list("code", "amount")) == [
        ("charge", 1),
        ("overage", 1),
    ]


def test_month_boundary_is_utc(owner, charge):
    with time_machine.travel(datetime(2026, 8, 31, 23, 59, 59, tzinfo=UTC), tick=False):
        charge(owner)
    with time_machine.travel(datetime(2026, 9, 1, 0, 0, 0, tzinfo=UTC), tick=False):
        september = charge(owner, units=2)
        report = selectors.usage_report(user=owner)

    assert september.usage["used_lookups"] == 2
    assert report["period_start"] == "2026-09-01"
    assert list(UsageEvent.objects.order_by("pk").values_list("period_start", flat=True)) == [
        date(2026, 8, 1),
        date(2026, 9, 1),
    ]


def test_bad_input_is_refused_and_changes_nothing(owner, charge):
    for bad in ({"units": 0}, {"units": 11}, {"fingerprint": ""}, {"key": ""}):
        with pytest.raises(BillingError) as refused:
            charge(owner, **bad)
        assert refused.value.code == "invalid_request"

    assert UsageEvent.objects.count() == 0
    assert LedgerAccount.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_charging_outside_a_transaction_is_a_programming_error(owner):
    with pytest.raises(RuntimeError):
        services.lookup_charge(user=owner, tool="t", units=1, request_fingerprint="fp", client_request_id=None)


@pytest.mark.usefixtures("mid_august")
def test_upgrade_mid_month_adds_the_difference_and_keeps_usage(owner, small_free_plan, charge):
    for _ in range(4):
        charge(owner)
    pro(owner)

    result = charge(owner)

    assert result.usage["included_lookups"] == 2000
    assert result.usage["used_lookups"] == 5
    assert result.usage["lookups_remaining"] == 1995
    assert Transfer.objects.filter(code=Code.GRANT, unit="lookup").count() == 2


def _charge_sql(charge, owner, **kwargs) -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        charge(owner, **kwargs)
    return [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]


def _after_the_lock(sql: list[str]) -> list[str]:
    from django.db import connection

    lock = next(i for i, s in enumerate(sql) if s.startswith("SELECT") and 'FROM "billing_period"' in s)
    assert "FOR UPDATE" in sql[lock] or connection.vendor == "sqlite"  # SQLite locks the whole database instead
    return sql[lock + 1 :]


def test_an_included_charge_is_four_statements_from_the_lock_that_reads_the_accounts(owner, charge):
    charge(owner, fingerprint="opens-the-period")
    sql = _charge_sql(charge, owner, fingerprint="included")

    assert sql[0].startswith("SELECT") and 'FROM "billing_period"' in sql[0]  # nothing is written before it
    # the lock's own statement reads the lookup accounts: the period and its accounts are locked together
    assert 'FROM "billing_period" INNER JOIN "billing_ledgeraccount"' in sql[0]
    held = _after_the_lock(sql)
    # the event (with its usage), the transfer, both balances in one UPDATE: no re-read, no Stripe
    assert [s.split()[0] + " " + s.split('"')[1] for s in held] == [
        "INSERT billing_usageevent",
        "INSERT billing_transfer",
        "UPDATE billing_ledgeraccount",
    ]


def test_an_overage_charge_reads_the_stripe_customer_only_to_queue_its_report(owner, charge):
    from billing.models import MeterReport, StripeCustomer

    pro(owner)
    StripeCustomer.objects.create(user=owner, customer_id="cus_1", subscription_id="sub_1")
    Plan.objects.filter(code="pro").update(included_lookups=0)
    charge(owner, fingerprint="opens-the-period")
    held = _after_the_lock(_charge_sql(charge, owner, fingerprint="overage"))

    assert [s.split()[0] + " " + s.split('"')[1] for s in held] == [
        "INSERT billing_usageevent",
        "INSERT billing_transfer",
        "UPDATE billing_ledgeraccount",
        "SELECT billing_stripecustomer",
        "INSERT billing_meterreport",
    ]
    assert MeterReport.objects.filter(customer_id="cus_1", value=1).count() == 2


def test_a_cache_hit_reads_the_accounts_without_locking_them_and_writes_only_its_event(owner, charge):
    charge(owner, fingerprint="opens-the-period")
    sql = _charge_sql(charge, owner, fingerprint="opens-the-period", cache_hit=True)

    assert sql[0].startswith("SELECT") and 'FROM "billing_period" INNER JOIN "billing_ledgeraccount"' in sql[0]
    assert "FOR UPDATE" not in sql[0]
    assert [s.split()[0] + " " + s.split('"')[1] for s in sql[1:]] == ["INSERT billing_usageevent"]


@pytest.mark.usefixtures("mid_august")
def test_an_upgrade_mid_month_never_reprices_overage_already_billed(owner, charge):
    half_cent = Plan.objects.create(
        code="half-cent", name="Half cent", included_lookups=2, overage_allowed=True, overage_micros_per_lookup=5_000
    )
    services.plan_assign(user=owner, plan=half_cent)
    for n in range(5):
        charge(owner, fingerprint=f"before-{n}")  # 3 beyond the 2 included, at $0.005
    before = selectors.usage_report(user=owner)

    pro(owner)  # 2,000 included, overage at $0.01 from next month
    after = selectors.usage_report(user=owner)
    charge(owner, fingerprint="after")  # inside the new allowance

    assert (before["overage_lookups"], before["overage_amount_usd"], before["overage_rate_usd"]) == (3, 0.015, 0.005)
    assert (after["overage_lookups"], after["overage_amount_usd"], after["overage_rate_usd"]) == (3, 0.015, 0.005)
    assert selectors.lookup_usage(user=owner)["lookups_remaining"] == 2000 - 3
    assert selectors.month_terms(user=owner).plan.code == "pro"


@pytest.mark.usefixtures("mid_august")
def test_a_plan_that_adds_overage_without_more_lookups_allows_overage_this_month(owner, small_free_plan, charge):
    for n in range(4):
        charge(owner, fingerprint=f"free-{n}")
    with pytest.raises(BillingError) as refused:
        charge(owner, fingerprint="over-on-free")
    metered = Plan.objects.create(code="metered-4", name="Metered 4", included_lookups=4, overage_allowed=True)

    services.plan_assign(user=owner, plan=metered)
    result = charge(owner, fingerprint="over-on-metered")

    assert refused.value.code == "quota_exhausted"
    assert (result.usage["overage_lookups"], result.usage["overage_amount_usd"]) == (1, 0.01)
    assert Transfer.objects.filter(code=Code.GRANT, unit="lookup").count() == 1  # nothing more to grant
    assert selectors.month_terms(user=owner).plan.code == "metered-4"


@pytest.mark.usefixtures("mid_august")
def test_a_downgrade_mid_month_keeps_the_months_terms(owner, charge):
    pro(owner)
    charge(owner)

    services.plan_assign(user=owner, plan=Plan.objects.get(code="free"))
    terms = selectors.month_terms(user=owner)

    assert (terms.plan.code, terms.overage_allowed, terms.overage_micros_per_lookup) == ("pro", True, 10_000)
    assert selectors.lookup_usage(user=owner)["included_lookups"] == 2000
