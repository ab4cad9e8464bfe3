"""Concurrent charges on PostgreSQL: threads with their own connections race around the allowance boundary."""

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction

from billing import selectors, services
from billing.models import Plan, Transfer, UsageEvent
from billing.services import BillingError
from tests.races import race

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(settings.LEROY_TEST_DATABASE != "PostgreSQL", reason="row locks need PostgreSQL"),
    pytest.mark.usefixtures("mid_august"),
]

THREADS = 16


@pytest.fixture
def answered(charge: Callable[..., services.LookupCharge]) -> Callable[[Any, str | None], services.LookupCharge]:
    """A lookup charge and its stored answer, committed together as a metered tool commits them."""

    def answered(user: Any, key: str | None) -> services.LookupCharge:
        with transaction.atomic():
            result = charge(user, key=key)
            services.lookup_store_response(charge=result, response={"evaluation_id": f"eval_{result.usage_event_id}"})
            return result

    return answered


def test_208_concurrent_lookups_on_a_paid_plan_split_exactly_at_the_boundary(owner, answered):
    plan = Plan.objects.create(code="metered-100", name="Metered 100", included_lookups=100, overage_allowed=True)
    services.plan_assign(user=owner, plan=plan)

    results, _ = race(THREADS, 13, lambda thread, call: answered(owner, f"req-{thread}-{call}"))

    assert len(results) == 208
    assert all(isinstance(r, services.LookupCharge) for r in results)
    usage = selectors.lookup_usage(user=owner)
    assert usage == {
        "included_lookups": 100,
        "used_lookups": 208,
        "lookups_remaining": 0,
        "overage_lookups": 108,
        "overage_amount_usd": 1.08,
    }
    assert sum(Transfer.objects.filter(code="charge").values_list("amount", flat=True)) == 100
    assert sum(Transfer.objects.filter(code="overage").values_list("amount", flat=True)) == 108
    assert selectors.ledger_drift() == []


def test_208_concurrent_lookups_on_the_free_plan_stop_at_exactly_100(owner, answered):
    results, _ = race(THREADS, 13, lambda thread, call: answered(owner, f"req-{thread}-{call}"))

    refused = [r for r in results if isinstance(r, BillingError)]
    assert len(refused) == 108
    assert {r.code for r in refused} == {"quota_exhausted"}
    assert UsageEvent.objects.count() == 100
    assert selectors.lookup_usage(user=owner)["used_lookups"] == 100
    assert not Transfer.objects.filter(code="overage").exists()
    assert selectors.ledger_drift() == []


def test_16_concurrent_retries_of_one_request_charge_once_and_replay_the_same_answer(owner, answered):
    results, _ = race(THREADS, 1, lambda thread, call: answered(owner, "req-retried"))

    originals = [r for r in results if not r.replayed]
    replays = [r for r in results if r.replayed]
    assert len(originals) == 1
    assert len(replays) == 15
    original = originals[0]
    assert {r.usage_event_id for r in replays} == {original.usage_event_id}
    assert all(r.stored_response == {"evaluation_id": f"eval_{original.usage_event_id}"} for r in replays)
    assert all(r.usage == original.usage for r in replays)
    assert selectors.lookup_usage(user=owner)["used_lookups"] == 1


def test_concurrent_holds_never_overdraw_the_credit_balance(owner):
    # 1,000 monthly credits on the free plan; 16 jobs of 100 want 1,600.
    results, _ = race(
        THREADS, 1, lambda thread, call: services.credits_reserve(user=owner, amount=100, reference=f"job-{thread}")
    )

    assert sum(isinstance(r, services.CreditHold) for r in results) == 10
    assert {r.code for r in results if isinstance(r, BillingError)} == {"insufficient_credits"}
    assert selectors.credit_usage(user=owner)["credits_remaining"] == 0
    assert selectors.ledger_drift() == []


def test_208_concurrent_unkeyed_lookups_on_the_free_plan_stop_at_exactly_100(owner, answered):
    # Without a client_request_id nothing is written before the lock: the lock's own read decides every charge.
    results, _ = race(THREADS, 13, lambda thread, call: answered(owner, None))

    refused = [r for r in results if isinstance(r, BillingError)]
    assert len(results) == 208
    assert len(refused) == 108
    assert {r.code for r in refused} == {"quota_exhausted"}
    assert UsageEvent.objects.count() == 100
    assert selectors.lookup_usage(user=owner)["lookups_remaining"] == 0
    assert sum(Transfer.objects.filter(code="charge").values_list("amount", flat=True)) == 100
    assert selectors.ledger_drift() == []


def test_reversals_racing_new_charges_neither_deadlock_nor_lose_a_lookup(owner, charge):
    # A reversal locks the period, then updates the consumed and allowance accounts; a charge locks the period and
    # its accounts in one statement. Period first in both, so 40 of each at once all complete.
    for n in range(40):
        charge(owner, fingerprint=f"before-{n}")
    charges = list(Transfer.objects.filter(code="charge").order_by("pk").values_list("pk", flat=True))
    staff = owner  # transfer_reverse records who corrected; the ledger does not check it

    def work(thread: int, call: int) -> Any:
        if thread % 2:
            transfer_id = charges[(thread // 2) * 5 + call]
            return services.transfer_reverse(transfer_id=transfer_id, reason="race", created_by=staff)
        return charge(owner, fingerprint=f"during-{thread}-{call}")

    results, _ = race(THREADS, 5, work)

    assert len(results) == 80
    assert not [r for r in results if isinstance(r, BillingError)]
    assert Transfer.objects.filter(code="charge").count() == 80
    assert Transfer.objects.filter(code="adjust").count() == 40
    assert selectors.lookup_usage(user=owner)["lookups_remaining"] == 100 - 80 + 40
    assert selectors.ledger_drift() == []


def test_a_plan_upgrade_racing_charges_grants_once_and_loses_no_charge(owner, charge):
    # The upgrade locks the period, then posts the lookup grant's delta to the issuance and allowance accounts.
    charge(owner, fingerprint="opens-the-period")
    pro = Plan.objects.get(code="pro")

    def work(thread: int, call: int) -> Any:
        if thread == 0 and call == 2:
            return services.plan_assign(user=owner, plan=pro)
        return charge(owner, fingerprint=f"during-{thread}-{call}")

    results, _ = race(THREADS, 6, work)

    assert len(results) == 96
    assert not [r for r in results if isinstance(r, BillingError)]
    assert UsageEvent.objects.count() == 96  # 95 during the race and the one that opened the period
    assert Transfer.objects.filter(code="grant", unit="lookup").count() == 2
    assert selectors.lookup_usage(user=owner) == {
        "included_lookups": 2000,
        "used_lookups": 96,
        "lookups_remaining": 2000 - 96,
        "overage_lookups": 0,
        "overage_amount_usd": 0.0,
    }
    assert selectors.ledger_drift() == []


def test_a_cache_hit_does_not_wait_for_a_charge_holding_the_period_lock(owner, charge):
    from django.db import connection

    charge(owner, fingerprint="opens-the-period")
    locked, release = threading.Event(), threading.Event()

    def respond_once_released(usage: dict) -> dict:  # runs under the lock, inside the charge's transaction
        locked.set()
        release.wait(10)
        return usage

    def hold() -> None:  # a charge in flight: the period and its accounts locked until its commit
        try:
            with transaction.atomic():
                services.lookup_charge(
                    user=owner, tool="evaluate_current_setup", units=1, request_fingerprint="in-flight",
                    client_request_id=None, respond=respond_once_released,
                )  # fmt: skip
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '1s'")  # the old lock-taking read failed here
            hit = services.lookup_charge(
                user=owner, tool="evaluate_current_setup", units=1, request_fingerprint="opens-the-period",
                client_request_id=None, cache_hit=True,
            )  # fmt: skip
    finally:
        release.set()
        holder.join()

    assert (hit.units_charged, hit.usage["used_lookups"], hit.usage["cache"]) == (0, 1, "hit")
    assert selectors.lookup_usage(user=owner)["used_lookups"] == 2
    assert UsageEvent.objects.filter(cache_hit=True).count() == 1
