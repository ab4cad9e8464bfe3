import json

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from alerts import services, signing
from alerts.models import AlertRule, Attempt, Delivery
from evidence.schemas import EvaluateArgs
from leroy.errors import DomainError
from tests.alerts.conftest import make_rule
from tests.alerts.receiver import verify
from tests.conftest import MCP_URL
from tests.mcp.test_transport import modern_call, modern_headers

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

MODERN = "2026-07-28"
WRITE_TOOLS = {
    "create_evidence_alert": None,
    "pause_evidence_alert": "alert",
    "resume_evidence_alert": "alert",
    "delete_evidence_alert": "alert",
    "test_evidence_alert": "alert",
    "rotate_evidence_alert_secret": "alert",
    "redeliver_alert_delivery": "delivery",
}
OTHER_ALERT = "alr_" + "0" * 24
OTHER_DELIVERY = "dlv_" + "0" * 24


def create_args(url: str, **fields) -> dict:
    return {"name": "AAPL wake", "universe": True, "side": "buy", "horizon_minutes": 15, "endpoint_url": url, **fields}


async def call(mcp_http, key: str, name: str, arguments: dict, mode: str = MODERN):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(key)), mode=mode) as client:
        return await client.call_tool(name, arguments)


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_create_returns_the_signing_secret_once(mcp_http, write_key, receiver, mode):
    created = await call(mcp_http, write_key, "create_evidence_alert", create_args(receiver.url()), mode)

    assert created.is_error is False
    out = created.structured_content
    secret = out["signing_secret"]
    assert secret.startswith("lr_whsec_") and len(secret) == len("lr_whsec_") + 43
    assert out["alert"]["status"] == "active"
    assert out["alert"]["secret_prefix"] == secret[:15]
    assert "no lookup" in out["metering"]
    row = await AlertRule.objects.values().aget(public_id=out["alert"]["alert_id"])
    assert secret not in json.dumps(row, default=str)
    assert signing.secret_decrypt(row["secret_ciphertext"]) == secret
    listed = await call(mcp_http, write_key, "list_evidence_alerts", {}, mode)
    assert secret not in json.dumps(listed.structured_content)
    assert [a["alert_id"] for a in listed.structured_content["alerts"]] == [out["alert"]["alert_id"]]


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("2030-01-01T00:00:00Z", "2030-01-01T00:00:00Z"),
        ("2030-01-01T02:30:00+02:00", "2030-01-01T00:30:00Z"),
        ("2030-01-01", "2030-01-01T00:00:00Z"),
    ],
)
async def test_a_rule_with_an_expiry_is_created_with_it_in_utc(mcp_http, write_key, receiver, given, stored):
    created = await call(mcp_http, write_key, "create_evidence_alert", create_args(receiver.url(), expires_at=given))

    assert created.is_error is False, created.structured_content
    assert created.structured_content["alert"]["expires_at"] == stored
    assert (await AlertRule.objects.aget()).expires_at.isoformat() == stored.replace("Z", "+00:00")


async def test_an_expiry_in_the_past_or_out_of_range_creates_nothing(mcp_http, write_key, receiver):
    past = await call(
        mcp_http, write_key, "create_evidence_alert", create_args(receiver.url(), expires_at="2020-01-01")
    )
    beyond = await call(
        mcp_http,
        write_key,
        "create_evidence_alert",
        create_args(receiver.url(), expires_at="9999-12-31T23:59:00-01:00"),
    )

    assert past.structured_content["error"] == {
        "code": "invalid_request",
        "message": "expires_at must be in the future.",
    }
    assert beyond.structured_content["error"]["problems"] == [
        {
            "field": "expires_at",
            "problem": "Value error, '9999-12-31T23:59:00-01:00' is outside the years 1 to 9999 in UTC",
        }
    ]
    assert await AlertRule.objects.aexists() is False


@pytest.mark.parametrize("name", sorted(WRITE_TOOLS))
async def test_read_keys_are_refused_on_every_write_tool(mcp_http, api_key, owner, name):
    rule, _ = await sync_to_async(make_rule)(owner, "https://hooks.example.com/x", expires_at=None)
    arguments = {
        None: create_args("https://hooks.example.com/y"),
        "alert": {"alert_id": rule.public_id},
        "delivery": {"delivery_id": OTHER_DELIVERY},
    }[WRITE_TOOLS[name]]
    async with mcp_http(api_key) as http:
        response = await http.post(
            "/api/mcp", json=modern_call(name, arguments), headers=modern_headers("tools/call", name)
        )

    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    assert await AlertRule.objects.acount() == 1
    assert (await AlertRule.objects.aget()).status == "active"
    assert await Delivery.objects.aexists() is False


async def test_read_keys_may_list(mcp_http, api_key, owner):
    await sync_to_async(make_rule)(owner, "https://hooks.example.com/x")

    listed = await call(mcp_http, api_key, "list_evidence_alerts", {})
    deliveries = await call(mcp_http, api_key, "list_alert_deliveries", {})

    assert listed.is_error is False and listed.structured_content["total"] == 1
    assert deliveries.structured_content == {"deliveries": []}


async def test_another_accounts_rules_and_deliveries_are_invisible_and_untouchable(
    mcp_http, write_key, outsider, receiver
):
    theirs, _ = await sync_to_async(make_rule)(outsider, receiver.url())
    their_delivery = await sync_to_async(services.send_test_event)(user=outsider, alert_id=theirs.public_id)
    seen = len(receiver.requests)

    listed = await call(mcp_http, write_key, "list_evidence_alerts", {})
    log = await call(mcp_http, write_key, "list_alert_deliveries", {"alert_id": theirs.public_id})
    results = {
        name: await call(mcp_http, write_key, name, {"alert_id": theirs.public_id})
        for name in ("pause_evidence_alert", "resume_evidence_alert", "test_evidence_alert",
                     "rotate_evidence_alert_secret", "delete_evidence_alert")
    }  # fmt: skip
    redelivered = await call(mcp_http, write_key, "redeliver_alert_delivery", {"delivery_id": their_delivery.public_id})

    assert listed.structured_content["alerts"] == []
    for result in [log, *results.values(), redelivered]:
        assert result.is_error is True
        assert result.structured_content["error"]["code"] == "not_found"
    after = await AlertRule.objects.aget(pk=theirs.pk)
    assert (after.status, after.secret_ciphertext) == ("active", theirs.secret_ciphertext)
    assert await Attempt.objects.acount() == 1
    assert len(receiver.requests) == seen


async def test_an_unsafe_endpoint_creates_nothing(mcp_http, write_key):
    result = await call(mcp_http, write_key, "create_evidence_alert", create_args("http://hooks.example.com/x"))

    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "unsafe_endpoint"
    assert result.structured_content["error"]["reason"] == "scheme"
    assert await AlertRule.objects.aexists() is False


async def test_bad_arguments_are_refused(mcp_http, write_key):
    both = await call(
        mcp_http, write_key, "create_evidence_alert", create_args("https://h.example.com/", symbols=["ALFA"])
    )
    tier = await call(
        mcp_http, write_key, "create_evidence_alert", create_args("https://h.example.com/", min_match_tier=6)
    )

    assert both.structured_content["error"]["code"] == "invalid_request"
    assert tier.is_error is True
    assert await AlertRule.objects.aexists() is False


async def test_an_account_keeps_at_most_the_configured_number_of_rules(mcp_http, write_key, owner):
    with override_settings(LEROY_ALERTS_MAX_RULES=2):
        for _ in range(2):
            await sync_to_async(make_rule)(owner, "https://hooks.example.com/x")
        result = await call(mcp_http, write_key, "create_evidence_alert", create_args("https://hooks.example.com/z"))

    assert result.structured_content["error"]["code"] == "alert_limit_reached"
    assert await AlertRule.objects.acount() == 2


async def test_test_event_is_signed_and_its_outcome_returned(mcp_http, write_key, receiver):
    created = await call(mcp_http, write_key, "create_evidence_alert", create_args(receiver.url()))
    alert_id, secret = created.structured_content["alert"]["alert_id"], created.structured_content["signing_secret"]

    result = await call(mcp_http, write_key, "test_evidence_alert", {"alert_id": alert_id})

    out = result.structured_content
    assert result.is_error is False
    assert (out["event"], out["status"], out["attempt_count"], out["last_status_code"]) == (
        "alert.test", "delivered", 1, 200,
    )  # fmt: skip
    [attempt] = out["attempts"]
    assert (attempt["outcome"], attempt["trigger"], attempt["resolved_ip"]) == ("success", "test", "127.0.0.1")
    [received] = receiver.requests
    assert verify(secret, received)
    assert received.body.decode() == out["request_body"]
    assert received.headers["x-leroy-event"] == "alert.test"
    assert received.headers["x-leroy-delivery"] == out["delivery_id"]
    assert json.loads(received.body)["alert_id"] == alert_id


async def test_rotation_invalidates_the_old_secret(mcp_http, write_key, receiver):
    created = await call(mcp_http, write_key, "create_evidence_alert", create_args(receiver.url()))
    alert_id, old = created.structured_content["alert"]["alert_id"], created.structured_content["signing_secret"]

    rotated = await call(mcp_http, write_key, "rotate_evidence_alert_secret", {"alert_id": alert_id})
    await call(mcp_http, write_key, "test_evidence_alert", {"alert_id": alert_id})

    new = rotated.structured_content["signing_secret"]
    [received] = receiver.requests
    assert new != old
    assert verify(new, received) is True
    assert verify(old, received) is False


async def test_redelivery_resends_the_same_delivery_with_a_fresh_signature(mcp_http, write_key, receiver):
    created = await call(mcp_http, write_key, "create_evidence_alert", create_args(receiver.url()))
    alert_id, secret = created.structured_content["alert"]["alert_id"], created.structured_content["signing_secret"]
    receiver.behaviour.status = 500
    first = await call(mcp_http, write_key, "test_evidence_alert", {"alert_id": alert_id})
    receiver.behaviour.status = 204

    again = await call(
        mcp_http, write_key, "redeliver_alert_delivery", {"delivery_id": first.structured_content["delivery_id"]}
    )
    log = await call(mcp_http, write_key, "list_alert_deliveries", {"alert_id": alert_id})

    assert first.structured_content["status"] == "failed"
    assert again.structured_content["status"] == "delivered"
    assert [a["outcome"] for a in again.structured_content["attempts"]] == ["http_error", "success"]
    assert [a["trigger"] for a in again.structured_content["attempts"]] == ["test", "redeliver"]
    assert [r.body for r in receiver.requests] == [receiver.requests[0].body] * 2
    assert {r.headers["x-leroy-delivery"] for r in receiver.requests} == {first.structured_content["delivery_id"]}
    assert all(verify(secret, r) for r in receiver.requests)
    [logged] = log.structured_content["deliveries"]
    assert (
        logged["attempts"][1]["request_headers"]["X-Leroy-Signature"]
        == receiver.requests[1].headers["x-leroy-signature"]
    )
    assert logged["attempts"][0]["status_code"] == 500


async def test_pause_resume_and_delete(mcp_http, write_key, receiver):
    created = await call(mcp_http, write_key, "create_evidence_alert", create_args(receiver.url()))
    alert_id = created.structured_content["alert"]["alert_id"]

    paused = await call(mcp_http, write_key, "pause_evidence_alert", {"alert_id": alert_id})
    resumed = await call(mcp_http, write_key, "resume_evidence_alert", {"alert_id": alert_id})
    deleted = await call(mcp_http, write_key, "delete_evidence_alert", {"alert_id": alert_id})

    assert (paused.structured_content["status"], paused.structured_content["status_reason"]) == (
        "paused", "Paused by the owner.",
    )  # fmt: skip
    assert resumed.structured_content["status"] == "active"
    assert deleted.structured_content == {"alert_id": alert_id, "deleted": True}
    assert await AlertRule.objects.aexists() is False


async def test_the_hourly_limit_refuses_further_tests(mcp_http, write_key, receiver):
    created = await call(mcp_http, write_key, "create_evidence_alert", create_args(receiver.url()))
    alert_id = created.structured_content["alert"]["alert_id"]

    with override_settings(LEROY_ALERTS_DELIVERIES_PER_HOUR=1):
        first = await call(mcp_http, write_key, "test_evidence_alert", {"alert_id": alert_id})
        second = await call(mcp_http, write_key, "test_evidence_alert", {"alert_id": alert_id})

    assert first.structured_content["status"] == "delivered"
    assert second.structured_content["error"]["code"] == "rate_limited"
    assert len(receiver.requests) == 1


async def test_a_minimum_of_active_signals_above_the_registered_strategies_creates_nothing(
    mcp_http, write_key, receiver
):
    # The bound was a fixed 64 while the registry holds fewer: a rule that could never match was created.
    from evidence.memory.strategies import STRATEGIES

    count = len(STRATEGIES)
    above = await call(
        mcp_http, write_key, "create_evidence_alert", create_args(receiver.url(), min_active_signals=count + 1)
    )
    problems = above.structured_content["error"]["problems"]
    assert problems == [{"field": "min_active_signals", "problem": f"Input should be less than or equal to {count}"}]
    assert await AlertRule.objects.aexists() is False

    at = await call(mcp_http, write_key, "create_evidence_alert", create_args(receiver.url(), min_active_signals=count))
    assert at.is_error is False
    assert [rule.min_active_signals async for rule in AlertRule.objects.all()] == [count]


@pytest.mark.parametrize("ticker", ["ABCDEFGHIJK", "1AB", "A B", ""])
async def test_a_ticker_the_evidence_tools_refuse_is_refused_alike_and_creates_nothing(mcp_http, write_key, ticker):
    # Alerts kept a Ticker of their own, which refused an 11-letter ticker in other words than the evidence tools.
    with pytest.raises(DomainError) as evidence:
        EvaluateArgs.from_arguments({"symbol": ticker, "side": "buy"})
    arguments = create_args("https://h.example.com/", universe=False, symbols=[ticker])
    result = await call(mcp_http, write_key, "create_evidence_alert", arguments)

    [problem] = evidence.value.details["problems"]
    assert result.structured_content["error"]["problems"] == [{"field": "symbols.0", "problem": problem["problem"]}]
    assert await AlertRule.objects.aexists() is False
