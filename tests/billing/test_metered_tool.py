"""End to end over MCP: a metered tool charging through billing (the probe in tests/billing/tools.py)."""

import pytest
from asgiref.sync import sync_to_async
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from billing import selectors
from billing.models import Plan, UsageEvent
from tests.conftest import MCP_URL

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

MODERN = "2026-07-28"


def connect(mcp_http, key):
    return Client(streamable_http_client(MCP_URL, http_client=mcp_http(key)), mode=MODERN)


async def test_side_both_costs_two_and_the_result_carries_usage(mcp_http, owner, api_key):
    async with connect(mcp_http, api_key) as client:
        result = await client.call_tool("probe_metered", {"side": "both"})

    assert result.is_error is False
    assert result.structured_content["usage"] == {
        "lookup_cost": 2,
        "cache": "miss",
        "included_lookups": 100,
        "used_lookups": 2,
        "lookups_remaining": 98,
        "overage_lookups": 0,
        "overage_amount_usd": 0.0,
    }


async def test_a_retried_call_returns_the_identical_answer_and_charges_once(mcp_http, owner, api_key):
    arguments = {"side": "buy", "client_request_id": "9b2f0c1e-retry"}
    async with connect(mcp_http, api_key) as client:
        first = await client.call_tool("probe_metered", arguments)
        again = await client.call_tool("probe_metered", arguments)
        conflict = await client.call_tool("probe_metered", {**arguments, "side": "sell"})

    assert again.structured_content == first.structured_content
    assert conflict.is_error is True
    assert conflict.structured_content["error"]["code"] == "idempotency_conflict"
    assert (await sync_to_async(selectors.lookup_usage)(user=owner))["used_lookups"] == 1


async def test_a_failing_tool_charges_nothing(mcp_http, owner, api_key):
    async with connect(mcp_http, api_key) as client:
        result = await client.call_tool("probe_metered", {"side": "buy", "fail": True})

    assert result.structured_content["error"]["code"] == "probe_failed"
    assert (await sync_to_async(selectors.lookup_usage)(user=owner))["used_lookups"] == 0


async def test_a_free_account_at_its_limit_gets_quota_exhausted(mcp_http, owner, api_key, charge):
    await Plan.objects.filter(code="free").aupdate(included_lookups=2)  # reach the limit quickly
    for _ in range(2):
        await sync_to_async(charge)(owner)

    async with connect(mcp_http, api_key) as client:
        result = await client.call_tool("probe_metered", {"side": "buy"})

    assert result.is_error is True
    error = result.structured_content["error"]
    assert error["code"] == "quota_exhausted"
    assert error["upgrade_url"] == "http://127.0.0.1:8000/account/"
    assert error["period_resets_at"].endswith("T00:00:00Z")
    assert error["used_lookups"] == 2
    assert (await sync_to_async(selectors.lookup_usage)(user=owner))["used_lookups"] == 2


async def test_invalid_arguments_are_refused_by_field_and_charge_nothing(mcp_http, owner, api_key):
    async with connect(mcp_http, api_key) as client:
        result = await client.call_tool("probe_metered", {"side": "up", "fail": False})

    assert result.is_error is True
    error = result.structured_content["error"]
    assert (error["code"], [p["field"] for p in error["problems"]]) == ("invalid_arguments", ["side"])
    assert await sync_to_async(UsageEvent.objects.exists)() is False
