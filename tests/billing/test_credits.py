from datetime import UTC, datetime

import pytest
import time_machine

from billing import selectors, services
from billing.models import LedgerAccount, Plan, Transfer
from billing.services import BillingError

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mid_month")]


@pytest.fixture
def mid_month():
    with time_machine.travel(datetime(2026, 2, 10, 9, 0, tzinfo=UTC), tick=False):
        yield


@pytest.fixture
def pro_owner(owner):
    services.plan_assign(user=owner, plan=Plan.objects.get(code="pro"))  # 3,000 credits, 3 free optimizations
    return owner


def test_credit_usage_before_any_job_shows_the_monthly_grant(pro_owner):
    assert selectors.credit_usage(user=pro_owner) == {
        "credits_consumed": 0,
        "credits_remaining": 3000,
        "credits_total_monthly": 3000,
        "credits_reserved": 0,
        "period": "2026-02",
        "free_optimizations_remaining": 3,
    }


def test_reserve_then_settle_charges_the_actual_cost_and_releases_the_rest(pro_owner):
    hold = services.credits_reserve(user=pro_owner, amount=250, reference="job-1")
    assert selectors.credit_usage(user=pro_owner)["credits_remaining"] == 2750
    assert selectors.credit_usage(user=pro_owner)["credits_reserved"] == 250

    services.credits_settle(hold_id=hold.pk, amount=100)

    usage = selectors.credit_usage(user=pro_owner)
    assert (usage["credits_consumed"], usage["credits_remaining"], usage["credits_reserved"]) == (100, 2900, 0)
    assert selectors.ledger_drift() == []


def test_void_refunds_the_whole_hold(pro_owner):
    hold = services.credits_reserve(user=pro_owner, amount=250, reference="job-1")

    services.credits_void(hold_id=hold.pk)

    usage = selectors.credit_usage(user=pro_owner)
    assert (usage["credits_consumed"], usage["credits_remaining"]) == (0, 3000)


def test_a_hold_resolves_only_once(pro_owner):
    hold = services.credits_reserve(user=pro_owner, amount=250, reference="job-1")
    services.credits_settle(hold_id=hold.pk, amount=250)

    for again in (
        lambda: services.credits_settle(hold_id=hold.pk, amount=10),
        lambda: services.credits_void(hold_id=hold.pk),
    ):
        with pytest.raises(BillingError) as refused:
            again()
        assert refused.value.code == "hold_already_resolved"

    assert selectors.credit_usage(user=pro_owner)["credits_consumed"] == 250
    assert Transfer.objects.filter(pending_id=hold.pk).count() == 1


def test_settling_more_than_reserved_is_refused(pro_owner):
    hold = services.credits_reserve(user=pro_owner, amount=250, reference="job-1")

    with pytest.raises(BillingError) as refused:
        services.credits_settle(hold_id=hold.pk, amount=251)

    assert refused.value.code == "invalid_request"
    assert selectors.credit_usage(user=pro_owner)["credits_reserved"] == 250


def test_reserve_is_idempotent_on_its_reference(pro_owner):
    first = services.credits_reserve(user=pro_owner, amount=250, reference="job-1")
    again = services.credits_reserve(user=pro_owner, amount=250, reference="job-1")

    assert again == first
    assert selectors.credit_usage(user=pro_owner)["credits_remaining"] == 2750
    with pytest.raises(BillingError) as refused:
        services.credits_reserve(user=pro_owner, amount=300, reference="job-1")
    assert refused.value.code == "idempotency_conflict"


def test_a_short_balance_is_refused_and_nothing_is_held(pro_owner):
    with pytest.raises(BillingError) as refused:
        services.credits_reserve(user=pro_owner, amount=3001, reference="job-big")

    assert refused.value.code == "insufficient_credits"
    assert refused.value.details["credits_available"] == 3000
    assert refused.value.details["period_resets_at"] == "2026-03-01T00:00:00Z"
    assert not Transfer.objects.filter(code="reserve").exists()


def test_bad_amounts_are_refused(pro_owner):
    for amount in (0, -5, True):
        with pytest.raises(BillingError) as refused:
            services.credits_reserve(user=pro_owner, amount=amount, reference="job")
        assert refused.value.code == "invalid_request"
    with pytest.raises(BillingError) as refused:
        services.credits_settle(hold_id=999_999, amount=1)
    assert refused.value.code == "hold_not_found"


def test_a_job_that_ends_next_month_is_charged_to_the_month_it_was_reserved_in(pro_owner):
    hold = services.credits_reserve(user=pro_owner, amount=250, reference="job-1")

    with time_machine.travel(datetime(2026, 3, 1, 0, 0, 5, tzinfo=UTC), tick=False):
        services.credits_settle(hold_id=hold.pk, amount=200)
        march = selectors.credit_usage(user=pro_owner)

    assert march["period"] == "2026-03"
    assert march["credits_consumed"] == 0
    post = Transfer.objects.get(code="post")
    assert post.period_start.isoformat() == "2026-02-01"


def test_credits_do_not_roll_over(pro_owner):
    services.credits_reserve(user=pro_owner, amount=10, reference="job-1")

    with time_machine.travel(datetime(2026, 3, 2, tzinfo=UTC), tick=False):
        services.credits_reserve(user=pro_owner, amount=10, reference="job-2")
        assert selectors.credit_usage(user=pro_owner)["credits_remaining"] == 2990


def test_free_optimizations_are_held_once_per_reference_run_out_and_come_back_when_voided(owner):
    first = services.free_optimization_reserve(user=owner, reference="opt-1")
    again = services.free_optimization_reserve(user=owner, reference="opt-1")
    assert (again, selectors.credit_usage(user=owner)["free_optimizations_remaining"]) == (first, 0)

    with pytest.raises(BillingError) as refused:
        services.free_optimization_reserve(user=owner, reference="opt-2")
    services.credits_void(hold_id=first.pk)

    assert refused.value.code == "no_free_optimizations"
    assert refused.value.details == {"period_resets_at": "2026-03-01T00:00:00Z"}
    assert selectors.credit_usage(user=owner)["free_optimizations_remaining"] == 1
    assert selectors.ledger_drift() == []


def test_closing_a_month_expires_unused_credits_and_later_releases(pro_owner):
    used = services.credits_reserve(user=pro_owner, amount=10, reference="job-1")
    services.credits_settle(hold_id=used.pk, amount=10)
    running = services.credits_reserve(user=pro_owner, amount=50, reference="job-2")

    with time_machine.travel(datetime(2026, 3, 1, 0, 5, tzinfo=UTC), tick=False):
        assert services.periods_close() == 1
        assert services.periods_close() == 0
        services.credits_settle(hold_id=running.pk, amount=20)  # the job ends after the month closed

    expired = dict(Transfer.objects.filter(code="expire").values_list("idempotency_key", "amount"))
    assert expired == {f"expire:{pro_owner.pk}:credit:2026-02": 2940, f"expire:{running.pk}": 30}
    february = LedgerAccount.objects.get(user=pro_owner, unit="credit", kind="allowance", period_start="2026-02-01")
    assert (february.available, february.debits_pending) == (0, 0)
    assert selectors.ledger_drift() == []
