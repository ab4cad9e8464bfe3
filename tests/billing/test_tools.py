import pytest
from asgiref.sync import sync_to_async
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from billing import services
from leroy.clock import now
from tests.conftest import MCP_URL

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

MODERN = "2026-07-28"


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_get_usage_answers_with_the_ledger_figures(mcp_http, owner, api_key, mode, charge):
    for units in (1, 2):
        await sync_to_async(charge)(owner, units=units)

    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=mode) as client:
        result = await client.call_tool("get_usage", {})

    assert result.is_error is False
    assert result.structured_content == {
        "period_start": now().date().replace(day=1).isoformat(),
        "included_lookups": 100,
        "used_lookups": 3,
        "lookups_remaining": 97,
        "overage_lookups": 0,
        "overage_amount_usd": 0.0,
        "overage_rate_usd": 0.01,
        "billing_status": "ledgered",
        "research_boundary": {"broker_write_authority": "none", "paper_trading": False, "live_order": False},
    }


async def test_get_credit_usage_answers_with_holds_and_free_optimizations(mcp_http, owner, api_key):
    hold = await sync_to_async(services.credits_reserve)(user=owner, amount=300, reference="job-1")
    await sync_to_async(services.credits_settle)(hold_id=hold.pk, amount=120)
    await sync_to_async(services.credits_reserve)(user=owner, amount=50, reference="job-2")

    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        result = await client.call_tool("get_credit_usage", {})

    assert result.is_error is False
    assert result.structured_content == {
        "credits_consumed": 120,
        "credits_remaining": 830,
        "credits_total_monthly": 1000,
        "credits_reserved": 50,
        "period": f"{now():%Y-%m}",
        "free_optimizations_remaining": 1,
    }


async def test_usage_tools_are_scoped_to_the_caller(mcp_http, owner, outsider, api_key, charge):
    for units in (1, 2):
        await sync_to_async(charge)(outsider, units=units)

    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        result = await client.call_tool("get_usage", {})

    assert result.structured_content["used_lookups"] == 0


async def test_usage_tools_refuse_arguments(mcp_http, api_key):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        result = await client.call_tool("get_usage", {"month": "2026-08"})

    assert result.is_error is True
