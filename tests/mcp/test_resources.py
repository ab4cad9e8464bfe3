"""Resources and prompts are real: results by URI through the tool that answers the same question, scoped to the
caller; the strategy documentation; prompts for the common research flows; in both protocol eras."""

import json
from datetime import UTC, date, datetime

import pytest
from asgiref.sync import sync_to_async
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from accounts.models import User
from backtests.models import Report, Status, Strategy
from backtests.schemas import IdArgs
from backtests.statistics import METRICS
from backtests.tools import DOCUMENTATION
from tests.calls import call_tool
from tests.conftest import MCP_URL

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

ERAS = ["legacy", "2026-07-28"]
AT = datetime(2026, 11, 2, 15, 0, tzinfo=UTC)


def client(mcp_http, key: str | None, mode: str) -> Client:
    return Client(streamable_http_client(MCP_URL, http_client=mcp_http(key)), mode=mode)


def completed_report(user: User) -> Report:
    strategy = Strategy.objects.create(user=user, name="s", code="class S: pass", code_sha256="a" * 64, created_at=AT)
    return Report.objects.create(
        user=user,
        strategy=strategy,
        status=Status.COMPLETED,
        data_ids=["SPY"],
        tickers=["SPY"],
        frequency="1d",
        start_date=date(2026, 1, 2),
        end_date=date(2026, 1, 5),
        simulation={"initial_cash": 10_000, "commission": 0.0, "leverage": 1.0, "buy_on_close": False},
        statistics=dict.fromkeys(METRICS, 0.5) | {"total_return": 0.125},
        trades=[],
        equity=[["2026-01-02T00:00:00Z", 10_000.0], ["2026-01-05T00:00:00Z", 11_250.0]],
        created_at=AT,
        finished_at=AT,
    )


@pytest.mark.parametrize("mode", ERAS)
async def test_the_server_lists_its_resources_templates_and_prompts(mcp_http, api_key, mode):
    async with client(mcp_http, api_key, mode) as session:
        resources = await session.list_resources()
        templates = await session.list_resource_templates()
        prompts = await session.list_prompts()

    assert [(str(r.uri), r.mime_type) for r in resources.resources] == [
        ("leroy://docs/strategy-authoring", "text/markdown")
    ]
    assert {t.uri_template for t in templates.resource_templates} == {
        "leroy://strategy/{id}",
        "leroy://report/{id}",
        "leroy://optimization/{id}",
        "leroy://optimization/{id}/results",
    }
    assert {p.name: [a.name for a in p.arguments or []] for p in prompts.prompts} == {
        "evaluate_before_deciding": ["symbol", "side"],
        "author_and_dry_run_strategy": ["idea"],
    }


@pytest.mark.parametrize("mode", ERAS)
async def test_a_report_resource_is_the_get_report_answer_for_its_owner_only(mcp_http, owner, outsider, api_key, mode):
    mine = await sync_to_async(completed_report)(owner)
    theirs = await sync_to_async(completed_report)(outsider)
    async with client(mcp_http, api_key, mode) as session:
        read = await session.read_resource(f"leroy://report/{mine.pk}")
        with pytest.raises(MCPError) as foreign:
            await session.read_resource(f"leroy://report/{theirs.pk}")

    [content] = read.contents
    assert content.mime_type == "application/json"
    direct = await sync_to_async(call_tool)(owner, "get_report", IdArgs(id=str(mine.pk)))
    assert json.loads(content.text) == direct.model_dump(mode="json")
    assert json.loads(content.text)["statistics"]["total_return"] == 0.125
    assert foreign.value.error.code == (-32602 if mode == "2026-07-28" else -32002)  # SEP-2164 from 2026-07-28
    assert foreign.value.error.data["code"] == "not_found"
    assert str(theirs.pk) in foreign.value.error.message


async def test_an_anonymous_caller_reads_no_account_resource(mcp_http, owner):
    report = await sync_to_async(completed_report)(owner)
    async with client(mcp_http, None, "2026-07-28") as session:
        with pytest.raises(MCPError) as refused:
            await session.read_resource(f"leroy://report/{report.pk}")

    assert refused.value.error.code == -32001
    assert "API key or OAuth" in refused.value.error.message


async def test_the_documentation_resource_is_the_strategy_documentation(mcp_http, api_key):
    async with client(mcp_http, api_key, "2026-07-28") as session:
        read = await session.read_resource("leroy://docs/strategy-authoring")

    [content] = read.contents
    assert (content.mime_type, content.text) == ("text/markdown", DOCUMENTATION.read_text())


@pytest.mark.parametrize("mode", ERAS)
async def test_prompts_name_the_tools_of_their_flow(mcp_http, api_key, mode):
    async with client(mcp_http, api_key, mode) as session:
        evaluate = await session.get_prompt("evaluate_before_deciding", {"symbol": "SPY", "side": "buy"})
        author = await session.get_prompt("author_and_dry_run_strategy", {"idea": "buy the 20-day breakout"})

    [message] = evaluate.messages
    assert "evaluate_current_setup with symbol='SPY', side='buy'" in message.content.text
    assert "record_research_hypothesis" in message.content.text
    steps, documentation = author.messages
    assert "buy the 20-day breakout" in steps.content.text
    assert "run_dry_run_backtest" in steps.content.text and "max_credits" in steps.content.text
    assert documentation.content.text == DOCUMENTATION.read_text()
