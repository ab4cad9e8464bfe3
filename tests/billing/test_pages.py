"""The Usage and Plan-and-billing pages, and the hand-over to Stripe Checkout and the Customer Portal.

Stripe is the real SDK whose HTTP layer answers offline (tests/billing/fake_stripe.py); the webhook that
follows a paid Checkout carries a real signature computed here.
"""

import json

import pytest
from django.db import transaction
from stripe import WebhookSignature

from billing import payments, selectors, services
from billing.models import Plan, StripeCustomer
from tests.billing.fake_stripe import FakeStripeTransport

pytestmark = pytest.mark.django_db

WHSEC = "whsec_pages"


@pytest.fixture
def signed_in(client, owner):
    client.force_login(owner)
    return client


@pytest.fixture
def fake(settings, monkeypatch):
    settings.LEROY_STRIPE_SECRET_KEY = "sk_test_pages"
    settings.LEROY_STRIPE_WEBHOOK_SECRET = WHSEC
    settings.LEROY_STRIPE_METERED_PRICE_ID = "price_overage"
    Plan.objects.filter(code="pro").update(stripe_flat_price_id="price_pro")
    transport = FakeStripeTransport()
    real = payments.stripe_client
    monkeypatch.setattr(payments, "stripe_client", lambda **_: real(http_client=transport))
    return transport


def charge(user, n, *, cache_hit=False):
    for i in range(n):
        with transaction.atomic():
            services.lookup_charge(
                user=user,
                tool="probe",
                units=1,
                request_fingerprint=f"fp{i}",
                client_request_id=None,
                cache_hit=cache_hit,
            )


def test_usage_page_shows_the_meter_the_notice_at_80_percent_and_recent_calls(signed_in, owner):
    charge(owner, 80)
    charge(owner, 2, cache_hit=True)

    page = signed_in.get("/account/usage/").content.decode()

    assert '<meter id="lookup-meter" min="0" max="100"' in page
    assert 'value="80"' in page
    assert 'id="usage-notice"' in page
    assert '<dd id="cache-hits">2</dd>' in page
    assert '<dd id="calls">82</dd>' in page
    assert page.count("<code>probe</code>") == 20


def test_usage_page_stays_quiet_below_80_percent(signed_in, owner):
    charge(owner, 79)

    page = signed_in.get("/account/usage/").content.decode()

    assert 'value="79"' in page
    assert 'id="usage-notice"' not in page


def test_plan_page_without_stripe_keys_is_ledger_only_and_checkout_sends_nothing(signed_in, settings):
    settings.LEROY_STRIPE_SECRET_KEY = ""

    page = signed_in.get("/account/billing/").content.decode()
    response = signed_in.post("/account/billing/checkout/pro/")

    assert 'id="ledger-only"' in page
    assert "Stripe Checkout" not in page
    assert 'id="portal"' not in page
    assert response.status_code == 302
    assert response["Location"] == "/account/billing/"
    assert StripeCustomer.objects.exists() is False


def test_statement_lists_what_the_ledger_posted_and_why(signed_in, owner):
    charge(owner, 1)

    statement = selectors.ledger_statement(user=owner)
    page = signed_in.get("/account/billing/").content.decode()

    assert [(row["code"], row["unit"], row["amount"]) for row in statement if row["code"] == "charge"] == [
        ("charge", "lookup", 1)
    ]
    assert "<code>probe</code>" in page
    assert "1 lookups used" in page


def test_checkout_creates_a_subscription_session_and_redirects_to_stripe(signed_in, owner, fake):
    page = signed_in.get("/account/billing/").content.decode()

    response = signed_in.post("/account/billing/checkout/pro/")

    assert "Switch to Pro with Stripe Checkout" in page
    assert response.status_code == 303
    assert response["Location"].startswith("https://checkout.stripe.com/c/pay/cs_test_")
    customer, session = fake.calls
    assert customer.path == "/v1/customers"
    assert session.path == "/v1/checkout/sessions"
    assert session.headers["Authorization"] == "Bearer sk_test_pages"
    assert session.form["mode"] == "subscription"
    assert session.form["customer"] == StripeCustomer.objects.get(user=owner).customer_id
    assert session.form["line_items[0][price]"] == "price_pro"
    assert session.form["line_items[1][price]"] == "price_overage"
    assert session.form["success_url"] == "http://127.0.0.1:8000/account/billing/?checkout=done"
    assert selectors.plan_of(user=owner).code == "free"  # nothing changes until Stripe says it is paid


def test_checkout_of_a_plan_not_sold_online_calls_nobody(signed_in, fake):
    response = signed_in.post("/account/billing/checkout/free/")

    assert response.status_code == 302
    assert fake.calls == []


def test_checkout_when_stripe_fails_says_so_and_charges_nothing(signed_in, fake):
    fake.fail_next = 2  # the customer call fails

    response = signed_in.post("/account/billing/checkout/pro/", follow=True)

    assert "Stripe is not answering" in response.content.decode()
    assert StripeCustomer.objects.exists() is False


def test_portal_opens_a_session_for_the_accounts_customer(signed_in, owner, fake):
    response = signed_in.post("/account/billing/portal/")

    assert response.status_code == 303
    assert response["Location"].startswith("https://billing.stripe.com/p/session/")
    portal = fake.calls[-1]
    assert portal.path == "/v1/billing_portal/sessions"
    assert portal.form["return_url"] == "http://127.0.0.1:8000/account/billing/"


def test_paid_checkout_webhook_assigns_the_plan_without_a_second_subscription(client, owner, fake):
    signed_in = client
    signed_in.force_login(owner)
    signed_in.post("/account/billing/checkout/pro/")
    customer_id = StripeCustomer.objects.get(user=owner).customer_id
    body = json.dumps(
        {
            "id": "evt_checkout",
            "object": "event",
            "type": "customer.subscription.created",
            "created": 1_790_000_000,
            "data": {
                "object": {
                    "id": "sub_from_checkout",
                    "object": "subscription",
                    "customer": customer_id,
                    "status": "active",
                    "items": {"data": [{"price": {"id": "price_pro"}}, {"price": {"id": "price_overage"}}]},
                }
            },
        }
    )
    calls_before = len(fake.calls)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("django.db.transaction.on_commit", lambda func, *a, **k: func())
        response = client.post(
            "/billing/stripe/webhook",
            data=body,
            content_type="application/json",
            HTTP_STRIPE_SIGNATURE=WebhookSignature.generate_signature_header(body, WHSEC),
        )

    assert response.status_code == 200
    assert selectors.plan_of(user=owner).code == "pro"
    assert StripeCustomer.objects.get(user=owner).subscription_id == "sub_from_checkout"
    assert [call.path for call in fake.calls[calls_before:]] == []  # Checkout already subscribed the account


def test_after_a_downgrade_the_pages_show_the_terms_this_month_runs_on(signed_in, owner, settings):
    settings.LEROY_STRIPE_SECRET_KEY = ""
    services.plan_assign(user=owner, plan=Plan.objects.get(code="pro"))
    charge(owner, 1)
    services.plan_assign(user=owner, plan=Plan.objects.get(code="free"))

    plan_page = signed_in.get("/account/billing/").content.decode()
    usage_page = signed_in.get("/account/usage/").content.decode()

    assert '<strong id="current-plan">Free</strong>' in plan_page
    assert 'id="month-terms"' in plan_page
    assert "(the Pro plan): 2000 lookups, extra lookups $0.01 each" in plan_page
    assert "<div><dt>Plan</dt><dd>Pro</dd></div>" in usage_page


def test_a_sub_cent_rate_is_shown_exactly_on_the_pages(signed_in, owner, settings):
    settings.LEROY_STRIPE_SECRET_KEY = ""
    half_cent = Plan.objects.create(
        code="half-cent", name="Half cent", included_lookups=1, overage_allowed=True, overage_micros_per_lookup=5_000
    )
    services.plan_assign(user=owner, plan=half_cent)
    charge(owner, 16)

    plan_page = signed_in.get("/account/billing/").content.decode()
    usage_page = signed_in.get("/account/usage/").content.decode()

    assert "extra lookups $0.005 each" in plan_page
    assert "15 beyond the allowance ($0.075)" in plan_page
    assert '<dd id="overage">15 lookups · $0.075</dd>' in usage_page
    assert 'id="month-terms"' not in plan_page
