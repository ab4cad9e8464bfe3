import csv
import io

import pytest

from accounts import services as account_services
from billing import exports, selectors, services
from billing.models import Code, MeterReport, Plan, StripeCustomer, Transfer
from billing.services import BillingError

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mid_august")]


@pytest.fixture
def staff(db):
    return account_services.user_create(email="finance@example.com", password="correct horse battery staple")


def test_reversing_a_charge_gives_the_lookups_back_with_a_reasoned_adjust_transfer(owner, staff, charge):
    charge(owner, units=2)
    original = Transfer.objects.get(code=Code.CHARGE)

    reversal = services.transfer_reverse(transfer_id=original.pk, reason="evaluation failed upstream", created_by=staff)

    assert (reversal.code, reversal.amount, reversal.reverses_id) == ("adjust", 2, original.pk)
    assert (reversal.reason, reversal.created_by_id) == ("evaluation failed upstream", staff.pk)
    assert selectors.lookup_usage(user=owner) == {
        "included_lookups": 100,
        "used_lookups": 0,
        "lookups_remaining": 100,
        "overage_lookups": 0,
        "overage_amount_usd": 0.0,
    }
    assert Transfer.objects.get(pk=original.pk).amount == 2  # the original stays as it was
    assert selectors.ledger_drift() == []


def test_a_transfer_is_reversed_at_most_once(owner, staff, charge):
    charge(owner)
    original = Transfer.objects.get(code=Code.CHARGE)
    services.transfer_reverse(transfer_id=original.pk, reason="duplicate", created_by=staff)

    with pytest.raises(BillingError) as refused:
        services.transfer_reverse(transfer_id=original.pk, reason="again", created_by=staff)

    assert refused.value.code == "already_reversed"
    assert Transfer.objects.filter(code=Code.ADJUST).count() == 1


def test_refused_corrections_change_nothing(owner, staff, charge):
    charge(owner, units=2)
    grant = Transfer.objects.get(code=Code.GRANT, unit="lookup")
    hold = services.credits_reserve(user=owner, amount=5, reference="job")
    before = Transfer.objects.count()

    cases = [
        ({"transfer_id": grant.pk, "reason": "  "}, "invalid_request"),
        ({"transfer_id": 10**9, "reason": "x"}, "transfer_not_found"),
        ({"transfer_id": hold.pk, "reason": "x"}, "not_reversible"),
        ({"transfer_id": grant.pk, "reason": "x"}, "insufficient_balance"),  # 2 of the 100 granted are used
    ]
    for arguments, code in cases:
        with pytest.raises(BillingError) as refused:
            services.transfer_reverse(created_by=staff, **arguments)
        assert refused.value.code == code

    assert Transfer.objects.count() == before


def test_overage_already_queued_for_stripe_is_corrected_in_stripe_not_here(owner, staff, charge):
    plan = Plan.objects.create(code="metered-0", name="Metered 0", included_lookups=0, overage_allowed=True)
    services.plan_assign(user=owner, plan=plan)
    StripeCustomer.objects.create(user=owner, customer_id="cus_1", subscription_id="sub_1")
    charge(owner)
    overage = Transfer.objects.get(code=Code.OVERAGE)
    assert MeterReport.objects.filter(transfer=overage).exists()

    with pytest.raises(BillingError) as refused:
        services.transfer_reverse(transfer_id=overage.pk, reason="x", created_by=staff)

    assert refused.value.code == "reported_to_stripe"


def test_a_reversed_overage_exports_as_a_money_credit(owner, staff, charge):
    plan = Plan.objects.create(code="metered-0", name="Metered 0", included_lookups=0, overage_allowed=True)
    services.plan_assign(user=owner, plan=plan)
    charge(owner, units=2)
    overage = Transfer.objects.get(code=Code.OVERAGE)
    services.transfer_reverse(transfer_id=overage.pk, reason="=goodwill", created_by=staff)

    batch, body = exports.finance_export(month="2026-08")

    rows = {r["entry_type"]: r for r in csv.DictReader(io.StringIO(body.decode()))}
    assert (rows["overage"]["quantity"], rows["overage"]["amount_usd"]) == ("2", "0.02")
    assert (rows["adjust"]["quantity"], rows["adjust"]["amount_usd"]) == ("-2", "-0.02")
    assert rows["adjust"]["reverses_entry_id"] == str(overage.pk)
    assert rows["adjust"]["reason"] == "'=goodwill"
    assert rows["adjust"]["created_by"] == "finance@example.com"
    assert selectors.lookup_usage(user=owner)["overage_lookups"] == 0
    assert batch.totals["adjust"] == {"rows": 1, "quantity": -2, "amount_usd": "-0.02"}


def test_the_usage_page_counts_a_reversed_charge_on_no_day_and_no_call(owner, staff, charge):
    charge(owner, units=2, fingerprint="kept")
    charge(owner, units=3, fingerprint="reversed")
    reversed_event = Transfer.objects.get(code=Code.CHARGE, amount=3).usage_event
    services.transfer_reverse(
        transfer_id=Transfer.objects.get(code=Code.CHARGE, amount=3).pk, reason="failed upstream", created_by=staff
    )

    page = selectors.usage_page(user=owner)

    assert page["used_lookups"] == 2
    assert page["daily"][-1] == ("08-18", 2)
    assert sum(lookups for _, lookups in page["daily"]) == 2
    assert [(call["lookups"], call["reversed"]) for call in page["recent"]] == [(0, True), (2, False)]
    assert reversed_event.units_charged == 3  # the event itself stays as it was
