import json
import time

import pytest
from stripe import WebhookSignature

from billing import payments, selectors, services
from billing.models import MeterReport, Plan, StripeCustomer, StripeEvent, Transfer
from leroy import metrics
from tests.billing.fake_stripe import FakeStripeTransport
from tests.conftest import sending_to

pytestmark = pytest.mark.django_db

WHSEC = "whsec_test_secret"


@pytest.fixture(autouse=True)
def stripe_settings(settings):
    settings.LEROY_STRIPE_SECRET_KEY = "sk_test_leroy"
    settings.LEROY_STRIPE_WEBHOOK_SECRET = WHSEC
    settings.LEROY_STRIPE_METERED_PRICE_ID = "price_overage"
    return settings


@pytest.fixture
def fake():
    return FakeStripeTransport()


@pytest.fixture
def client_(fake):
    return payments.stripe_client(http_client=fake)


@pytest.fixture
def metered(owner):
    plan = Plan.objects.create(
        code="metered-1", name="Metered 1", included_lookups=1, overage_allowed=True, stripe_flat_price_id="price_flat"
    )
    services.plan_assign(user=owner, plan=plan)
    StripeCustomer.objects.create(
        user=owner, customer_id="cus_7", subscription_id="sub_7", subscription_status="active"
    )
    return owner


def test_without_a_key_billing_is_ledger_only(stripe_settings, owner, charge):
    stripe_settings.LEROY_STRIPE_SECRET_KEY = ""

    assert payments.stripe_client() is None
    charge(owner)
    assert MeterReport.objects.count() == 0


def test_subscription_is_created_with_real_sdk_requests(owner, fake, client_):
    plan = Plan.objects.get(code="pro")
    plan.stripe_flat_price_id = "price_pro"
    plan.save()

    link = payments.stripe_subscription_create(user=owner, plan=plan, client=client_)

    customer_call, subscription_call = fake.calls
    assert (customer_call.method, customer_call.host, customer_call.path) == ("post", "api.stripe.com", "/v1/customers")
    assert customer_call.headers["Authorization"] == "Bearer sk_test_leroy"
    assert customer_call.headers["Idempotency-Key"] == f"customer:{owner.pk}"
    assert customer_call.headers["Stripe-Version"].startswith("20")
    assert customer_call.form["email"] == "alice@example.com"
    assert subscription_call.headers["Idempotency-Key"] == f"subscription:{owner.pk}:pro"
    assert subscription_call.form == {
        "customer": "cus_1",
        "items[0][price]": "price_pro",
        "items[1][price]": "price_overage",
        "billing_cycle_anchor_config[day_of_month]": "1",
        "billing_cycle_anchor_config[hour]": "0",
        "billing_cycle_anchor_config[minute]": "0",
        "billing_cycle_anchor_config[second]": "0",
        "metadata[leroy_account_id]": str(owner.pk),
        "metadata[plan]": "pro",
    }
    assert (link.customer_id, link.subscription_id, link.subscription_status) == ("cus_1", "sub_2", "active")


def test_overage_reaches_stripe_once_per_transfer_even_when_the_sender_retries(metered, fake, client_, charge):
    for _ in range(3):  # 1 included, then 2 overage transfers queued in the charges' own transactions
        charge(metered)
    overage = list(Transfer.objects.filter(code="overage").order_by("pk"))
    assert MeterReport.objects.count() == 2

    fake.fail_next = 1
    assert payments.meter_reports_send(client=client_) == 0  # Stripe failed: nothing marked sent
    assert payments.meter_reports_send(client=client_) == 2
    assert payments.meter_reports_send(client=client_) == 0  # nothing left to send
    # A crash between Stripe's answer and our commit leaves a row pending: its resend is deduplicated.
    MeterReport.objects.filter(transfer=overage[0]).update(status=MeterReport.Status.PENDING)
    assert payments.meter_reports_send(client=client_) == 1

    sends = [c for c in fake.calls if c.path == "/v1/billing/meter_events"]
    assert [c.headers["Idempotency-Key"] for c in sends] == [f"meter:{overage[0].pk}"] * 2 + [
        f"meter:{overage[1].pk}",
        f"meter:{overage[0].pk}",
    ]
    assert fake.created == 2  # Stripe recorded exactly one event per overage transfer
    assert sends[1].form == {
        "event_name": "leroy_overage_lookup",
        "identifier": f"lrx_{overage[0].pk}",
        "payload[stripe_customer_id]": "cus_7",
        "payload[value]": "1",
        "timestamp": str(int(overage[0].occurred_at.timestamp())),
    }
    assert set(MeterReport.objects.values_list("status", flat=True)) == {"sent"}
    assert MeterReport.objects.get(transfer=overage[0]).attempts == 3


def event(
    event_type="customer.subscription.updated",
    event_id="evt_1",
    status="past_due",
    price="price_flat",
    subscription_id="sub_7",
    created=1_790_000_000,
):
    return json.dumps(
        {
            "id": event_id,
            "object": "event",
            "type": event_type,
            "created": created,
            "data": {
                "object": {
                    "id": subscription_id,
                    "object": "subscription",
                    "customer": "cus_7",
                    "status": status,
                    "items": {"data": [{"price": {"id": price}}]},
                }
            },
        }
    )


def post(client, body, signature):
    return client.post(
        "/billing/stripe/webhook", data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=signature
    )


def test_signed_webhook_updates_the_subscription_and_a_duplicate_is_ignored(client, metered):
    body = event(status="past_due")
    signature = WebhookSignature.generate_signature_header(body, WHSEC)

    first = post(client, body, signature)
    again = post(client, body, signature)

    assert first.status_code == again.status_code == 200
    assert first.json() == {"received": "evt_1", "duplicate": False}
    assert again.json() == {"received": "evt_1", "duplicate": True}
    assert StripeCustomer.objects.get(user=metered).subscription_status == "past_due"
    assert selectors.plan_of(user=metered).code == "free"  # unpaid: back to the default plan
    assert StripeEvent.objects.get().processed_at is not None


def test_subscription_deleted_returns_the_account_to_the_default_plan(client, metered):
    body = event(event_type="customer.subscription.deleted", status="canceled")

    response = post(client, body, WebhookSignature.generate_signature_header(body, WHSEC))

    assert response.status_code == 200
    link = StripeCustomer.objects.get(user=metered)
    assert (link.subscription_id, link.subscription_status) == ("", "canceled")
    assert selectors.plan_of(user=metered).code == "free"


@pytest.mark.parametrize(
    # 30 s past the 300 s tolerance: the header's whole seconds drop up to 1 s of the clock, and the request's own
    # time counts against a future stamp (301 s ahead was read 299.x s ahead on a loaded machine, and taken).
    ("secret", "offset"),
    [("whsec_forged", 0), (WHSEC, -330), (WHSEC, 330)],
    ids=["forged", "stale", "future"],
)
def test_forged_or_stale_webhooks_are_refused_and_change_nothing(client, metered, secret, offset):
    body = event()
    signature = WebhookSignature.generate_signature_header(body, secret, timestamp=int(time.time()) + offset)

    response = post(client, body, signature)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_signature"
    assert StripeEvent.objects.count() == 0
    assert StripeCustomer.objects.get(user=metered).subscription_status == "active"


def test_tampered_body_is_refused(client, metered):
    signature = WebhookSignature.generate_signature_header(event(), WHSEC)

    response = post(client, event(status="canceled"), signature)

    assert response.status_code == 400
    assert StripeEvent.objects.count() == 0


def test_an_overage_charge_enqueues_the_sender_once_committed(
    metered, client_, monkeypatch, django_capture_on_commit_callbacks, charge
):
    monkeypatch.setattr(payments, "stripe_client", lambda **kwargs: client_)
    with django_capture_on_commit_callbacks(execute=True) as included:
        charge(metered)
    with django_capture_on_commit_callbacks(execute=True) as overage:
        charge(metered)

    assert (len(included), len(overage)) == (0, 1)
    assert MeterReport.objects.get().status == MeterReport.Status.SENT


def test_meter_setup_creates_the_meter_and_a_one_cent_metered_price_idempotently(fake, client_):
    first = payments.stripe_meter_setup(client=client_)
    again = payments.stripe_meter_setup(client=client_)

    assert first == again == {"meter": "mtr_1", "product": "prod_2", "price": "price_3"}
    meter, _, price = fake.calls[:3]
    assert meter.path == "/v1/billing/meters"
    assert meter.form["event_name"] == "leroy_overage_lookup"
    assert meter.form["customer_mapping[event_payload_key]"] == "stripe_customer_id"
    assert price.form == {
        "currency": "usd",
        "unit_amount": "1",
        "product": "prod_2",
        "recurring[interval]": "month",
        "recurring[usage_type]": "metered",
        "recurring[meter]": "mtr_1",
    }
    assert fake.created == 3


def test_assigning_a_billed_plan_creates_the_subscription_after_commit(
    owner, fake, client_, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(payments, "stripe_client", lambda **kwargs: client_)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        services.plan_assign(user=owner, plan=Plan.objects.get(code="pro"))

    assert len(callbacks) == 1
    assert [call.path for call in fake.calls] == ["/v1/customers", "/v1/subscriptions"]
    assert StripeCustomer.objects.get(user=owner).subscription_id == "sub_2"


def test_assigning_the_free_plan_calls_no_stripe(owner, fake, client_, monkeypatch, django_capture_on_commit_callbacks):
    monkeypatch.setattr(payments, "stripe_client", lambda **kwargs: client_)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        services.plan_assign(user=owner, plan=Plan.objects.get(code="free"))

    assert callbacks == []
    assert fake.calls == []


def test_an_overage_the_broker_does_not_take_is_charged_and_the_beat_task_reports_it(
    metered, fake, client_, charge, dead_redis_url, django_capture_on_commit_callbacks
):
    charge(metered)  # the included lookup
    refused_before = metrics.DEPENDENCY_ERRORS.labels("broker")._value.get()
    with sending_to(dead_redis_url), django_capture_on_commit_callbacks(execute=True):
        answered = charge(metered)  # the overage: its meter report is queued, its send refused

    refused = metrics.DEPENDENCY_ERRORS.labels("broker")._value.get() - refused_before
    pending = list(MeterReport.objects.values_list("status", flat=True))
    assert (answered.units_charged, refused, pending) == (1, 1, ["pending"])
    assert payments.meter_reports_send(client=client_) == 1  # what the `meter-reports` beat task runs
    assert fake.created == 1


def test_a_billed_plan_whose_sync_the_broker_does_not_take_is_subscribed_by_the_sweep_once(
    owner, fake, client_, dead_redis_url, django_capture_on_commit_callbacks
):
    plan = Plan.objects.create(code="metered-2", name="Metered 2", included_lookups=1, overage_allowed=True)
    with sending_to(dead_redis_url), django_capture_on_commit_callbacks(execute=True):
        services.plan_assign(user=owner, plan=plan)  # committed; the sync's send is refused

    before = (StripeCustomer.objects.count(), len(fake.calls))
    subscribed = [payments.subscriptions_sync(client=client_) for _ in range(2)]  # what the beat task runs

    link = StripeCustomer.objects.get(user=owner)
    assert (before, subscribed) == ((0, 0), [1, 0])
    assert (link.customer_id, link.subscription_id, link.subscription_status) == ("cus_1", "sub_2", "active")
    assert [c.path for c in fake.calls] == ["/v1/customers", "/v1/subscriptions"]


def test_the_sweep_leaves_subscribed_and_unbilled_accounts_alone(metered, outsider, fake, client_):
    assert payments.subscriptions_sync(client=client_) == 0
    assert fake.calls == []


def deliver(client, body):
    return post(client, body, WebhookSignature.generate_signature_header(body, WHSEC))


def link_state(user):
    link = StripeCustomer.objects.get(user=user)
    return link.subscription_id, link.subscription_status, selectors.plan_of(user=user).code


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({k: v for k, v in json.loads(event(status="canceled")).items() if k != "id"}),
        json.dumps({k: v for k, v in json.loads(event(status="canceled")).items() if k != "created"}),
        json.dumps({**json.loads(event(status="canceled")), "id": "evt_" + "x" * 61}),
        json.dumps({**json.loads(event(status="canceled")), "data": {"object": "sub_7"}}),
        event(status="canceled").replace('"customer": "cus_7"', '"customer": null'),
        event(status="canceled").replace('"status": "canceled"', '"status": 3'),
        event(status="canceled").replace('{"price": {"id": "price_flat"}}', '{"price": "price_flat"}'),
        "[]",
        "{not json",
    ],
    ids=[
        "no-id",
        "no-created",
        "id-too-long",
        "object-not-an-object",
        "no-customer",
        "status-not-a-string",
        "item-without-price-id",
        "not-an-object",
        "not-json",
    ],
)
def test_a_signed_event_not_shaped_like_a_stripe_event_is_refused_and_changes_nothing(client, metered, body):
    response = deliver(client, body)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_event"
    assert StripeEvent.objects.count() == 0
    assert link_state(metered) == ("sub_7", "active", "metered-1")


@pytest.fixture
def checkout_customer(owner):
    """Alice's Stripe customer before Checkout subscribed it; the plan it sells has the flat price `price_flat`."""
    Plan.objects.create(
        code="metered-1", name="Metered 1", included_lookups=1, overage_allowed=True, stripe_flat_price_id="price_flat"
    )
    StripeCustomer.objects.create(user=owner, customer_id="cus_7")
    return owner


def test_an_update_older_than_the_applied_deletion_does_not_revive_the_subscription(client, checkout_customer):
    created = event("customer.subscription.created", "evt_1", "active", created=100)
    deleted = event("customer.subscription.deleted", "evt_2", "canceled", created=300)
    late_update = event("customer.subscription.updated", "evt_3", "active", created=200)

    states = []
    for body in (created, deleted, late_update):
        assert deliver(client, body).status_code == 200
        states.append(link_state(checkout_customer))

    assert states == [("sub_7", "active", "metered-1"), ("", "canceled", "free"), ("", "canceled", "free")]
    assert StripeEvent.objects.filter(processed_at__isnull=False).count() == 3


def test_an_update_stamped_in_the_same_second_as_the_applied_deletion_does_not_revive_it(client, checkout_customer):
    deliver(client, event("customer.subscription.created", "evt_1", "active", created=100))
    deliver(client, event("customer.subscription.deleted", "evt_2", "canceled", created=300))

    response = deliver(client, event("customer.subscription.updated", "evt_3", "active", created=300))

    assert response.status_code == 200
    assert link_state(checkout_customer) == ("", "canceled", "free")


def test_an_older_event_of_the_linked_subscription_arriving_late_is_ignored_and_one_of_the_same_second_applies(
    client, checkout_customer
):
    deliver(client, event("customer.subscription.updated", "evt_2", "active", created=101))
    deliver(client, event("customer.subscription.created", "evt_1", "incomplete", created=100))
    after_late_created = link_state(checkout_customer)

    deliver(client, event("customer.subscription.updated", "evt_3", "past_due", created=101))

    assert after_late_created == ("sub_7", "active", "metered-1")
    assert link_state(checkout_customer) == ("sub_7", "past_due", "free")


def test_the_deletion_of_another_subscription_of_the_customer_changes_nothing(client, metered):
    response = deliver(client, event("customer.subscription.deleted", status="canceled", subscription_id="sub_OLD"))

    assert response.status_code == 200
    assert link_state(metered) == ("sub_7", "active", "metered-1")
    assert StripeEvent.objects.get().processed_at is not None


def test_an_update_of_another_subscription_of_the_customer_changes_nothing(client, metered):
    response = deliver(client, event(status="past_due", subscription_id="sub_OTHER"))

    assert response.status_code == 200
    assert link_state(metered) == ("sub_7", "active", "metered-1")


def test_a_subscription_bought_after_a_cancel_is_linked_and_a_late_event_of_the_old_one_changes_nothing(
    client, checkout_customer
):
    deliver(client, event("customer.subscription.created", "evt_1", "active", created=100))
    deliver(client, event("customer.subscription.deleted", "evt_2", "canceled", created=300))
    deliver(client, event("customer.subscription.created", "evt_3", "active", subscription_id="sub_8", created=400))
    after_checkout = link_state(checkout_customer)

    deliver(client, event("customer.subscription.updated", "evt_4", "past_due", created=250))

    assert after_checkout == ("sub_8", "active", "metered-1")
    assert link_state(checkout_customer) == ("sub_8", "active", "metered-1")


def test_a_live_subscription_replaces_a_linked_one_whose_first_payment_failed(client, checkout_customer):
    deliver(client, event("customer.subscription.created", "evt_1", "incomplete", created=100))
    deliver(client, event("customer.subscription.created", "evt_2", "active", subscription_id="sub_8", created=200))
    replaced = link_state(checkout_customer)

    deliver(client, event("customer.subscription.updated", "evt_3", "incomplete_expired", created=90_000))

    assert replaced == ("sub_8", "active", "metered-1")
    assert link_state(checkout_customer) == ("sub_8", "active", "metered-1")


def test_a_checkout_paid_after_its_account_closed_gives_no_plan_and_the_sweep_cancels_it(
    client, checkout_customer, fake, client_
):
    from accounts.services import account_close

    account_close(user=checkout_customer)  # Checkout was opened before the close

    deliver(client, event("customer.subscription.created", "evt_1", "active", subscription_id="sub_8", created=100))
    paid = link_state(checkout_customer)
    subscribed = payments.subscriptions_sync(client=client_)  # what the beat task runs: it also cancels

    assert paid == ("sub_8", "active", "free")
    assert subscribed == 0
    assert [(c.method, c.path) for c in fake.calls] == [("delete", "/v1/subscriptions/sub_8")]
    assert link_state(checkout_customer) == ("sub_8", "canceled", "free")
    payments.subscriptions_sync(client=client_)
    assert len(fake.calls) == 1  # cancelled once


def test_a_suspended_account_on_a_billed_plan_is_not_subscribed_by_the_sweep(owner, fake, client_):
    plan = Plan.objects.create(code="metered-2", name="Metered 2", included_lookups=1, overage_allowed=True)
    services.plan_assign(user=owner, plan=plan)
    owner.is_active = False
    owner.save(update_fields=["is_active"])

    assert payments.subscriptions_sync(client=client_) == 0
    assert fake.calls == []
