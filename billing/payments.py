"""Stripe, thinly: a customer and subscription per paid account, overage as meter events from the outbox, and
verified webhooks. Stripe only collects what the ledger already decided; nothing here reads balances from it.
"""

import json
import logging
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from stripe import HTTPClient, SignatureVerificationError, StripeClient, StripeError, WebhookSignature
from stripe.params import SubscriptionCreateParams
from stripe.params.checkout import SessionCreateParams, SessionCreateParamsLineItem

from accounts.models import User
from billing import selectors, services
from billing.models import ENDED_STATUSES, LIVE_STATUSES, MeterReport, Plan, StripeCustomer, StripeEvent
from leroy.clock import now

logger = logging.getLogger(__name__)
WEBHOOK_TOLERANCE_SECONDS = 300
MAX_SEND_ATTEMPTS = 10
SUBSCRIPTION_EVENTS = {
    "customer.subscription.created",
    "customer.subscription.updated",
    "customer.subscription.deleted",
}


class WebhookRefused(Exception):
    """Not provably from Stripe, or not fresh: answered 400 `invalid_signature`."""

    error = "invalid_signature"


class EventMalformed(WebhookRefused):
    """Signed, but not shaped like a Stripe event: answered 400 `invalid_event`."""

    error = "invalid_event"


def stripe_client(*, http_client: HTTPClient | None = None) -> StripeClient | None:
    """The one StripeClient, or None when no key is configured (ledger-only). Tests pass a fake `http_client`."""
    if not settings.LEROY_STRIPE_SECRET_KEY:
        return None
    return StripeClient(settings.LEROY_STRIPE_SECRET_KEY, http_client=http_client, max_network_retries=2)


def stripe_meter_setup(*, client: StripeClient) -> dict[str, str]:
    """Create (idempotently) the overage Billing Meter, its product and the one metered price: $0.01 per unit.

    Every paid plan shares this price; the allowance lives in our Plan rows, so Stripe only ever sees overage.
    Returns the ids; put `price` into LEROY_STRIPE_METERED_PRICE_ID.
    """
    event_name = settings.LEROY_STRIPE_METER_EVENT_NAME
    meter = client.v1.billing.meters.create(
        {
            "display_name": "MCP overage lookups",
            "event_name": event_name,
            "default_aggregation": {"formula": "sum"},
            "customer_mapping": {"type": "by_id", "event_payload_key": "stripe_customer_id"},
            "value_settings": {"event_payload_key": "value"},
        },
        {"idempotency_key": f"meter:{event_name}"},
    )
    product = client.v1.products.create(
        {"name": "Leroy MCP overage lookups"}, {"idempotency_key": f"product:{event_name}"}
    )
    price = client.v1.prices.create(
        {
            "currency": "usd",
            "unit_amount": 1,  # cents: $0.01 per overage lookup
            "product": product.id,
            "recurring": {"interval": "month", "usage_type": "metered", "meter": meter.id},
        },
        {"idempotency_key": f"price:{event_name}"},
    )
    return {"meter": meter.id, "product": product.id, "price": price.id}


def stripe_subscription_create(*, user: User, plan: Plan, client: StripeClient) -> StripeCustomer:
    """Create (idempotently) the account's Stripe customer and a subscription anchored to the UTC month."""
    link = stripe_customer(user=user, client=client)
    if link.subscription_id and link.subscription_status in LIVE_STATUSES:
        return link  # subscribed already (e.g. through Checkout, whose webhook assigned this plan)
    params: SubscriptionCreateParams = {
        "customer": link.customer_id,
        # The plan's flat fee (when it has one) and the shared metered overage price.
        "items": [{"price": p} for p in (plan.stripe_flat_price_id, settings.LEROY_STRIPE_METERED_PRICE_ID) if p],
        # Our periods are UTC calendar months; Stripe interprets the anchor in UTC.
        "billing_cycle_anchor_config": {"day_of_month": 1, "hour": 0, "minute": 0, "second": 0},
        "metadata": {"leroy_account_id": str(user.pk), "plan": plan.code},
    }
    subscription = client.v1.subscriptions.create(params, {"idempotency_key": f"subscription:{user.pk}:{plan.code}"})
    link.subscription_id, link.subscription_status = subscription.id, subscription.status
    link.save(update_fields=["subscription_id", "subscription_status"])
    return link


def subscriptions_sync(*, client: StripeClient) -> int:
    """Subscribe every active account on a billed plan that has no subscription (its sync was not queued, the broker
    down, or gave up), and cancel the subscription a closed account still holds; idempotent on Stripe. Returns how
    many were subscribed."""
    for link in selectors.closed_accounts_subscribed():
        try:
            cancelled = client.v1.subscriptions.cancel(link.subscription_id)
        except StripeError as error:  # tried again by the next sweep
            logger.warning("Stripe subscription %s of closed account %s not cancelled: %s", link.subscription_id,
                           link.user_id, error)  # fmt: skip
            continue
        logger.warning("Stripe subscription %s of closed account %s cancelled", link.subscription_id, link.user_id)
        link.subscription_status = cancelled.status
        link.save(update_fields=["subscription_status"])
    subscribed = 0
    for assignment in selectors.accounts_awaiting_subscription():
        try:
            stripe_subscription_create(user=assignment.user, plan=assignment.plan, client=client)
        except (StripeError, IntegrityError) as error:  # Stripe refused, or a sync running beside this one
            logger.warning("Stripe subscription of account %s not created: %s", assignment.user_id, error)
            continue
        subscribed += 1
    return subscribed


def stripe_customer(*, user: User, client: StripeClient) -> StripeCustomer:
    """The account's Stripe customer, created (idempotently) on first need."""
    link = StripeCustomer.objects.filter(user=user).first()
    if link is None:
        customer = client.v1.customers.create(
            {"email": user.email, "metadata": {"leroy_account_id": str(user.pk)}},
            {"idempotency_key": f"customer:{user.pk}"},
        )
        link = StripeCustomer.objects.create(user=user, customer_id=customer.id)
    return link


def stripe_checkout_url(*, user: User, plan: Plan, client: StripeClient, return_url: str) -> str:
    """A Stripe Checkout session subscribing the account to `plan`; the webhook assigns the plan once paid."""
    if not plan.stripe_flat_price_id:
        raise ValueError(f"plan {plan.code} is not sold through Stripe")
    link = stripe_customer(user=user, client=client)
    line_items: list[SessionCreateParamsLineItem] = [{"price": plan.stripe_flat_price_id, "quantity": 1}]
    if settings.LEROY_STRIPE_METERED_PRICE_ID:
        line_items.append({"price": settings.LEROY_STRIPE_METERED_PRICE_ID})
    params: SessionCreateParams = {
        "mode": "subscription",
        "customer": link.customer_id,
        "client_reference_id": str(user.pk),
        "line_items": line_items,
        "subscription_data": {"metadata": {"leroy_account_id": str(user.pk), "plan": plan.code}},
        "success_url": return_url + "?checkout=done",
        "cancel_url": return_url,
    }
    session = client.v1.checkout.sessions.create(params)
    return str(session.url)


def stripe_portal_url(*, user: User, client: StripeClient, return_url: str) -> str:
    """A Stripe Customer Portal session: payment methods, invoices, plan changes and cancellation."""
    link = stripe_customer(user=user, client=client)
    session = client.v1.billing_portal.sessions.create({"customer": link.customer_id, "return_url": return_url})
    return str(session.url)


def meter_reports_send(*, client: StripeClient, limit: int = 100) -> int:
    """Send pending overage meter events; each row is claimed with SKIP LOCKED so workers never double-send.

    The identifier and idempotency key derive from the transfer id, so a resend after a crash or a failed
    attempt is deduplicated by Stripe. Returns how many were sent.
    """
    sent = 0
    for _ in range(limit):
        with transaction.atomic():
            report = (
                MeterReport.objects.select_for_update(skip_locked=True)
                .filter(status=MeterReport.Status.PENDING)
                .order_by("event_at", "pk")
                .first()
            )
            if report is None:
                break
            report.attempts += 1
            try:
                client.v1.billing.meter_events.create(
                    {
                        "event_name": settings.LEROY_STRIPE_METER_EVENT_NAME,
                        "identifier": report.identifier,
                        "payload": {"stripe_customer_id": report.customer_id, "value": str(report.value)},
                        "timestamp": int(report.event_at.timestamp()),
                    },
                    {"idempotency_key": f"meter:{report.transfer_id}"},
                )
            except StripeError as error:
                report.last_error = str(error)[:2000]
                if report.attempts >= MAX_SEND_ATTEMPTS:
                    report.status = MeterReport.Status.FAILED
                report.save(update_fields=["attempts", "last_error", "status"])
                break  # Stripe is unhappy: stop this run, the row stays queued for the next one
            report.status, report.sent_at, report.last_error = MeterReport.Status.SENT, now(), ""
            report.save(update_fields=["attempts", "status", "sent_at", "last_error"])
            sent += 1
    return sent


def _signed_at(header: str) -> int | None:
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isdigit():
            return int(value)
    return None


def stripe_event_receive(*, payload: bytes, signature: str) -> tuple[str, bool]:
    """Verify a Stripe webhook (signature and ±300 s), store its event id once and apply it.

    Returns (event id, duplicate). Raises WebhookRefused for anything not provably from Stripe and fresh, and
    EventMalformed for a signed event that lacks what every Stripe event carries; either way nothing is stored.
    """
    secret = settings.LEROY_STRIPE_WEBHOOK_SECRET
    if not secret:
        raise WebhookRefused("no webhook secret is configured")
    try:
        WebhookSignature.verify_header(payload.decode(), signature, secret, tolerance=WEBHOOK_TOLERANCE_SECONDS)
    except UnicodeDecodeError as error:
        raise EventMalformed("the body is not UTF-8") from error
    except SignatureVerificationError as error:
        raise WebhookRefused(str(error)) from error
    signed_at = _signed_at(signature)
    # The SDK only refuses old timestamps; a future one is as suspect.
    if signed_at is None or abs(now().timestamp() - signed_at) > WEBHOOK_TOLERANCE_SECONDS:
        raise WebhookRefused("timestamp outside the tolerance")
    event = _event_parse(payload)
    with transaction.atomic():
        try:
            with transaction.atomic():
                stored = StripeEvent.objects.create(
                    id=event["id"], type=event["type"], payload=event, received_at=now()
                )
        except IntegrityError:
            return event["id"], True
        if stored.type in SUBSCRIPTION_EVENTS:
            _subscription_changed(
                event["data"]["object"],
                deleted=stored.type.endswith(".deleted"),
                created=datetime.fromtimestamp(event["created"], UTC),
                event_id=stored.id,
            )
        StripeEvent.objects.filter(pk=stored.pk).update(processed_at=now())
    return stored.id, False


def _event_parse(payload: bytes) -> dict[str, Any]:
    """The event, if it has the shape every Stripe event has (and a subscription event's object what we read)."""
    try:
        event = json.loads(payload)
    except (ValueError, RecursionError) as error:
        raise EventMalformed("the body is not JSON") from error
    if not isinstance(event, dict):
        raise EventMalformed("the event is not a JSON object")
    for key, limit in (("id", 64), ("type", 96)):  # the inbox's columns
        if not isinstance(event.get(key), str) or not 1 <= len(event[key]) <= limit:
            raise EventMalformed(f"the event's {key} must be a string of 1 to {limit} characters")
    created = event.get("created")
    if not isinstance(created, int) or isinstance(created, bool) or not 0 < created < 2**32:
        raise EventMalformed("the event's created must be a Unix timestamp")
    data = event.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("object"), dict):
        raise EventMalformed("the event's data.object must be an object")
    if event["type"] in SUBSCRIPTION_EVENTS:
        subscription = data["object"]
        for key, limit in (("id", 64), ("customer", 64), ("status", 32)):
            if not isinstance(subscription.get(key), str) or not 1 <= len(subscription[key]) <= limit:
                raise EventMalformed(f"the subscription's {key} must be a string of 1 to {limit} characters")
        items = subscription.get("items", {"data": []})
        if not isinstance(items, dict) or not isinstance(items.get("data"), list):
            raise EventMalformed("the subscription's items.data must be a list")
        for item in items["data"]:
            if not (
                isinstance(item, dict)
                and isinstance(item.get("price"), dict)
                and isinstance(item["price"].get("id"), str)
            ):
                raise EventMalformed("each subscription item must carry a price id")
    return event


def _subscription_changed(subscription: dict[str, Any], *, deleted: bool, created: datetime, event_id: str) -> None:
    """Apply a subscription event to the account linked to its customer, unless the account knows better.

    Stripe neither orders deliveries nor sends each once, so an event is judged against what was applied:
    - older than the last event applied to this customer's link: ignored (a late update cannot revive a
      subscription whose deletion was applied);
    - about the linked subscription: applied (an equal `created` too: Stripe stamps in whole seconds);
    - about another subscription: linked only when it is newer, has not ended, and the account has no
      subscription or the linked one is not live (e.g. Checkout after a cancel or after a failed first payment);
      otherwise ignored: a second subscription never moves or cancels the linked one.
    """
    link = (
        StripeCustomer.objects.select_for_update()
        .select_related("user")
        .filter(customer_id=subscription["customer"])
        .first()
    )
    if link is None:
        return  # not a Leroy customer (or created outside Leroy): nothing to update
    status = subscription["status"]
    ended = deleted or status in ENDED_STATUSES
    if not _event_applies(link, subscription["id"], live=status in LIVE_STATUSES, ended=ended, created=created):
        logger.info(
            "Stripe event %s about subscription %s of %s ignored: the account holds %s (%s) as of %s",
            event_id,
            subscription["id"],
            link.customer_id,
            link.subscription_id or "no subscription",
            link.subscription_status,
            link.subscription_event_at,
        )
        return
    link.subscription_id = "" if ended else subscription["id"]
    link.subscription_status = status
    link.subscription_event_at = created
    link.save(update_fields=["subscription_id", "subscription_status", "subscription_event_at"])
    if link.user.closed_at is not None:
        return  # a closed account takes no plan; a subscription it holds is cancelled by subscriptions_sync
    plan: Plan | None
    if ended or status not in LIVE_STATUSES:
        plan = Plan.objects.get(is_default=True)
    else:
        prices = [item["price"]["id"] for item in subscription.get("items", {"data": []})["data"]]
        plan = Plan.objects.filter(stripe_flat_price_id__in=prices).exclude(stripe_flat_price_id="").first()
    if plan is None:
        return  # a price Leroy does not sell as a plan
    if selectors.plan_of(user=link.user) != plan:
        services.plan_assign(user=link.user, plan=plan)


def _event_applies(link: StripeCustomer, subscription_id: str, *, live: bool, ended: bool, created: datetime) -> bool:
    applied = link.subscription_event_at
    if subscription_id == link.subscription_id:
        return applied is None or created >= applied
    if (applied is not None and created <= applied) or ended:
        return False  # older than what was applied, or the end of a subscription the account does not hold
    # Another subscription takes the link only where there is none, or where the linked one is not live.
    return link.subscription_id == "" or (live and link.subscription_status not in LIVE_STATUSES)
