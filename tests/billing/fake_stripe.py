"""A recording Stripe transport: the real SDK builds real requests; this answers them offline like the API.

It keeps Stripe's idempotency semantics (the first answer for a key is replayed) and can fail on demand.
"""

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from stripe import HTTPClient


@dataclass
class Call:
    method: str
    path: str
    host: str
    headers: dict[str, str]
    form: dict[str, str]


class FakeStripeTransport(HTTPClient):
    name = "fake"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.fail_next = 0
        self.replays: dict[str, tuple[str, int, dict[str, str]]] = {}
        self.created = 0

    def request(self, method: str, url: str, headers: Any, post_data: Any = None, *, _usage: Any = None):
        parts = urlsplit(url)
        form = dict(parse_qsl(post_data or ""))
        self.calls.append(Call(method, parts.path, parts.netloc, dict(headers or {}), form))
        if self.fail_next:
            self.fail_next -= 1
            # Told not to retry, the SDK gives up at once (no sleeps in tests): the app-level retry is under test.
            return (
                json.dumps({"error": {"type": "api_error", "message": "boom"}}),
                500,
                {"stripe-should-retry": "false"},
            )
        key = (headers or {}).get("Idempotency-Key")
        if key in self.replays:
            return self.replays[key]
        self.created += 1
        answer = json.dumps(self._object(parts.path, form)), 200, {"request-id": f"req_{self.created}"}
        if key:
            self.replays[key] = answer
        return answer

    def _object(self, path: str, form: dict[str, str]) -> dict[str, Any]:
        n = self.created
        if path == "/v1/customers":
            return {"id": f"cus_{n}", "object": "customer", "email": form.get("email")}
        if path == "/v1/subscriptions":
            return {"id": f"sub_{n}", "object": "subscription", "status": "active", "customer": form["customer"]}
        if path.startswith("/v1/subscriptions/"):  # DELETE: cancel
            return {"id": path.rsplit("/", 1)[1], "object": "subscription", "status": "canceled"}
        if path == "/v1/billing/meters":
            return {"id": f"mtr_{n}", "object": "billing.meter", "event_name": form["event_name"], "status": "active"}
        if path == "/v1/products":
            return {"id": f"prod_{n}", "object": "product", "name": form["name"]}
        if path == "/v1/prices":
            return {"id": f"price_{n}", "object": "price", "unit_amount": int(form["unit_amount"])}
        if path == "/v1/checkout/sessions":
            return {
                "id": f"cs_test_{n}",
                "object": "checkout.session",
                "mode": form["mode"],
                "customer": form["customer"],
                "status": "open",
                "url": f"https://checkout.stripe.com/c/pay/cs_test_{n}",
            }
        if path == "/v1/billing_portal/sessions":
            return {
                "id": f"bps_{n}",
                "object": "billing_portal.session",
                "customer": form["customer"],
                "return_url": form["return_url"],
                "url": f"https://billing.stripe.com/p/session/test_{n}",
            }
        if path == "/v1/billing/meter_events":
            return {
                "object": "billing.meter_event",
                "event_name": form["event_name"],
                "identifier": form["identifier"],
                "payload": {"stripe_customer_id": form["payload[stripe_customer_id]"], "value": form["payload[value]"]},
                "timestamp": int(form["timestamp"]),
                "livemode": False,
                "created": int(form["timestamp"]),
            }
        raise AssertionError(f"unexpected Stripe call {path}")

    def close(self) -> None:
        pass
