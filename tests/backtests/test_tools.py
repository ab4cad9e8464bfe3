import asyncio
from datetime import UTC, date, datetime

import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from backtests.models import Report, Status, Strategy
from leroy.asgi import LeroyASGI
from leroy.mcp.registry import load_tools
from tests.backtests.conftest import SMA_CROSS, import_walk, optimization_args
from tests.conftest import MCP_URL

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

MODERN = "2026-07-28"
TOOLS = {
    "get_strategy_documentation": "mcp:read", "list_strategies": "mcp:read", "get_strategy": "mcp:read",
    "create_strategy": "mcp:write", "update_strategy": "mcp:write", "run_dry_run_backtest": "mcp:write",
    "list_symbols": "mcp:read", "search_symbols_by_name": "mcp:read", "get_symbol": "mcp:read",
    "get_market_data_sample": "mcp:read", "download_market_data": "mcp:write", "run_backtest": "mcp:write",
    "list_reports": "mcp:read", "get_report": "mcp:read", "list_report_trades": "mcp:read",
    "wait_for_reports": "mcp:read", "run_optimization": "mcp:write", "list_optimizations": "mcp:read",
    "get_optimization": "mcp:read", "get_latest_optimization_by_strategy": "mcp:read",
    "wait_for_optimization": "mcp:read", "list_optimization_results": "mcp:read", "cancel_optimization": "mcp:write",
}  # fmt: skip


def client(mcp_http, key):
    return Client(streamable_http_client(MCP_URL, http_client=mcp_http(key)), mode=MODERN)


async def ok(session, name, arguments):
    result = await session.call_tool(name, arguments)
    assert result.is_error is False, result.content[0].text
    return result.structured_content


async def refused(session, name, arguments):
    result = await session.call_tool(name, arguments)
    assert result.is_error is True
    return result.content[0].text, result.structured_content


def test_the_contract_tools_are_registered_for_subscribers_with_their_scopes():
    specs = {name: spec for name, spec in load_tools().items() if name in TOOLS}

    assert {name: spec.scope for name, spec in specs.items()} == TOOLS
    assert {spec.access for spec in specs.values()} == {"subscriber"}
    assert {n for n, s in specs.items() if s.metering == "credits"} == {
        "run_backtest", "run_optimization", "cancel_optimization"
    }  # fmt: skip


async def test_agent_authors_dry_runs_saves_versions_and_backtests(mcp_http, owner, write_key):
    coin = await sync_to_async(import_walk)("TSTUSD")
    async with client(mcp_http, write_key) as session:
        docs = await ok(session, "get_strategy_documentation", {})
        assert "No imports" in docs["documentation"]
        _, payload = await refused(session, "create_strategy", {"name": "SMA", "code": SMA_CROSS})
        assert payload["error"]["code"] == "dry_run_required"

        dry = await ok(session, "run_dry_run_backtest", {"code": SMA_CROSS})
        assert dry["success"] is True
        assert dry["result"]["bars"] == {"DRYA": 260, "DRYB": 260}
        created = await ok(session, "create_strategy", {"name": "SMA", "code": SMA_CROSS, "description": "cross"})
        updated = await ok(session, "update_strategy", {"id": created["id"], "name": "SMA 2"})
        listing = await ok(session, "list_strategies", {})
        fetched = await ok(session, "get_strategy", {"id": created["id"]})

        assert [s["id"] for s in listing["items"]] == [updated["id"]]
        assert "code" not in listing["items"][0]
        assert (fetched["code"], fetched["is_current"]) == (SMA_CROSS, False)
        assert [v["id"] for v in fetched["versions"]] == [created["id"], updated["id"]]

        submitted = await ok(session, "run_backtest", {
            "strategy_id": updated["id"], "data_ids": [str(coin.pk)], "frequency": "1d",
            "start_date": "2024-01-01", "end_date": "2024-12-31", "parameters": [{"name": "fast", "value": 4}],
        })  # fmt: skip
        waited = await ok(session, "wait_for_reports", {"report_ids": [submitted["report_id"]]})
        report = await ok(session, "get_report", {"id": submitted["report_id"]})
        page = await ok(session, "list_report_trades", {"id": submitted["report_id"], "limit": 1})
        reports = await ok(session, "list_reports", {"strategy_id": updated["id"]})

    assert (submitted["credits_reserved"], submitted["usage"]["credits_remaining"]) == (15, 985)  # with the probe
    assert report["lookahead_check"]["status"] == "passed"
    verdict = report["verdict"]
    assert (verdict["lookahead_check"], verdict["pbo"], verdict["deflated_sharpe"]["trials"]) == ("passed", None, 1)
    assert verdict["status"] in ("robust", "fragile", "overfit", "insufficient_evidence")
    assert set(verdict["deflated_sharpe"]) == {
        "value",
        "probabilistic_sharpe",
        "sharpe",
        "trials",
        "trial_sharpe_variance",
        "skewness",
        "kurtosis",
        "observations",
    }
    assert waited["results"] == [{"report_id": submitted["report_id"], "status": "COMPLETED"}]
    assert report["status"] == "COMPLETED"
    assert report["parameters"] == [{"name": "fast", "value": 4}]
    assert set(report["statistics"]) >= {"annualized_sharpe_ratio", "profit_factor", "avg_bars_held"}
    assert report["per_symbol"][0]["symbol"] == "TSTUSD"
    assert report["determinism"]["strategy_version_id"] == updated["id"]
    assert len(report["chart_data"]["equity_curve"]) == 120
    assert page["total"] == report["trade_count"] and page["has_next"] is (report["trade_count"] > 1)
    assert page["items"] == report["recent_trades"][:1] or report["trade_count"] > 20
    assert [r["id"] for r in reports["items"]] == [submitted["report_id"]]


async def test_read_only_key_cannot_save_or_spend(mcp_http, owner, api_key):
    async with mcp_http(api_key) as http:
        response = await http.post(
            "/api/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "run_backtest", "arguments": {}}},
            headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"},
        )  # fmt: skip

    assert response.status_code == 403
    assert await Report.objects.aexists() is False


async def test_contract_validation_is_refused_in_band(mcp_http, owner, write_key):
    async with client(mcp_http, write_key) as session:
        text, _ = await refused(session, "search_symbols_by_name", {"symbol_name": "AAPL"})

    assert "symbolName" in text


async def test_a_page_beyond_every_item_is_empty_and_one_beyond_exact_integers_is_refused(mcp_http, owner, api_key):
    # A skip past 2**63 once reached the database as an OFFSET it could not take (a bare tool error on SQLite).
    async with client(mcp_http, api_key) as session:
        last = await ok(session, "list_strategies", {"skip": 2**53 - 1})
        _, beyond = await refused(session, "list_strategies", {"skip": 2**63})

    assert last["items"] == []
    assert beyond["error"]["code"] == "invalid_arguments"
    assert beyond["error"]["problems"][0]["field"] == "skip"


async def test_agent_optimizes_reads_results_and_cannot_cancel_a_finished_grid(mcp_http, owner, write_key):
    coin = await sync_to_async(import_walk)("TSTUSD")
    async with client(mcp_http, write_key) as session:
        await ok(session, "run_dry_run_backtest", {"code": SMA_CROSS})
        strategy = await ok(session, "create_strategy", {"name": "SMA", "code": SMA_CROSS})
        started = await ok(session, "run_optimization", optimization_args(strategy["id"], str(coin.pk)))
        waited = await ok(session, "wait_for_optimization", {"id": started["optimization_id"]})
        detail = await ok(session, "get_optimization", {"id": started["optimization_id"]})
        latest = await ok(session, "get_latest_optimization_by_strategy", {"strategy_id": strategy["id"]})
        ranked = await ok(session, "list_optimization_results", {"id": started["optimization_id"], "limit": 3})
        by_iteration = await ok(
            session, "list_optimization_results", {"id": started["optimization_id"], "sort_by": "iteration", "skip": 3}
        )
        listing = await ok(session, "list_optimizations", {})
        _, cancel = await refused(session, "cancel_optimization", {"id": started["optimization_id"]})

    assert (started["success"], started["total_iterations"], started["credits_reserved"]) == (True, 4, 26)
    assert detail["lookahead_check"]["status"] == "passed"
    pbo = detail["verdict"]["pbo"]
    assert (detail["verdict"]["deflated_sharpe"]["trials"], pbo["blocks"], pbo["combinations"]) == (4, 16, 12870)
    assert detail["verdict"]["lookahead_check"] == "passed" and len(detail["report_hash"]) == 64
    assert (waited["status"], waited["completed_iterations"], waited["failed_iterations"]) == ("COMPLETED", 4, 0)
    assert "best" not in str(sorted(detail)) and "top" not in detail
    assert detail["simulation_parameters"] == {
        "initial_cash": 100000, "commission_schema": {"commission": 0, "leverage": 1}, "buy_on_close": False
    }  # fmt: skip
    assert latest["optimization"]["id"] == started["optimization_id"]
    pnl = [item["statistics"]["realized_pnl"] for item in ranked["items"]]
    assert pnl == sorted(pnl, reverse=True)
    assert (ranked["sort_by"], ranked["descending"], ranked["has_next"]) == ("realized_pnl", True, True)
    assert [item["iteration"] for item in by_iteration["items"]] == [4]
    assert by_iteration["has_next"] is False
    assert listing["items"][0]["progress"] == 1.0
    assert cancel["error"]["code"] == "not_cancellable"


async def test_symbols_are_found_by_pair_forms_and_names(mcp_http, owner, api_key):
    gold = await sync_to_async(import_walk)("XAUUSD")
    await sync_to_async(import_walk)("TSTUSD")
    async with client(mcp_http, api_key) as session:
        found = {
            q: await ok(session, "search_symbols_by_name", {"symbolName": q})
            for q in ("XAU/USD", "XAUUSD", "gold", "xau")
        }
        listed = await ok(session, "list_symbols", {"limit": 1})
        own = await ok(session, "list_symbols", {"is_global": False})
        symbol = await ok(session, "get_symbol", {"id": str(gold.pk)})
        sample = await ok(
            session,
            "get_market_data_sample",
            {"id": str(gold.pk), "frequency": "1d", "limit": 3, "end_date": "2024-01-05"},
        )
        _, missing = await refused(session, "get_symbol", {"id": "999999"})

    for query, result in found.items():
        assert [item["symbol"] for item in result["items"]] == ["XAUUSD"], query
    assert (listed["total"], listed["has_next"], len(listed["items"])) == (2, True, 1)
    assert own["items"] == []
    assert (symbol["name"], symbol["asset_class"], symbol["data_availability"]) == ("XAU/USD", "crypto", {"1d": True})
    assert [p["timestamp"] for p in sample["points"]] == [
        "2024-01-03T00:00:00Z",
        "2024-01-04T00:00:00Z",
        "2024-01-05T00:00:00Z",
    ]
    assert sample["csv_resource"]["text"].splitlines()[0] == "timestamp,open,high,low,close,volume"
    assert len(sample["csv_resource"]["text"].splitlines()) == 4
    assert missing["error"]["code"] == "not_found"
    assert (symbol["source"], sample["source"], listed["items"][0]["source"]) == ("vendor", "vendor", "vendor")


async def test_symbols_and_samples_of_generated_bars_say_their_source_is_synthetic(mcp_http, owner, api_key):
    from backtests.dryrun import walk
    from evidence.marketdata.importers import bars_import
    from evidence.models import Symbol
    from tests.backtests.conftest import frame_of

    await sync_to_async(bars_import)(
        ticker="GENX", frequency="1d", frame=frame_of(walk("GENX", bars=30)), asset_class="crypto", source="synthetic"
    )
    generated = await Symbol.objects.aget(ticker="GENX")
    async with client(mcp_http, api_key) as session:
        symbol = await ok(session, "get_symbol", {"id": str(generated.pk)})
        found = await ok(session, "search_symbols_by_name", {"symbolName": "GENX"})
        sample = await ok(session, "get_market_data_sample", {"id": str(generated.pk), "frequency": "1d", "limit": 1})

    assert (symbol["source"], found["items"][0]["source"], sample["source"]) == ("synthetic", "synthetic", "synthetic")


async def test_outsider_sees_none_of_the_owners_strategies(mcp_http, owner, outsider):
    from accounts import services as accounts

    strategy = await Strategy.objects.acreate(
        user=owner, name="mine", code=SMA_CROSS, code_sha256="x", created_at="2026-01-01T00:00:00Z"
    )
    key = (await sync_to_async(accounts.api_key_create)(user=outsider, name="o")).plaintext
    async with client(mcp_http, key) as session:
        _, payload = await refused(session, "get_strategy", {"id": str(strategy.pk)})
        listing = await ok(session, "list_strategies", {})

    assert payload["error"]["code"] == "not_found"
    assert listing["items"] == []


BOOM = """
class Boom(bt.Strategy):
    params = (("boom", 0),)

    def next(self):
        self.broken = 1 // (1 - self.p.boom)
"""


async def test_every_tool_publishes_a_closed_input_and_its_own_output_schema(mcp_http, owner, api_key):
    specs = load_tools()
    async with client(mcp_http, api_key) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools if t.name in TOOLS}

    assert set(listed) == set(TOOLS)
    for name, published in listed.items():
        assert published.input_schema["additionalProperties"] is False, name
        assert published.output_schema["title"] == specs[name].output.__name__, name
        result, refusal = published.output_schema["anyOf"]  # the answer, or the in-band refusal
        assert result["additionalProperties"] is False, name
        assert result["properties"], name
        assert refusal == {"required": ["error"]}, name


async def test_every_tool_answers_in_its_output_model_while_jobs_are_pending_failed_or_cancelled(
    mcp_http, owner, write_key, monkeypatch
):
    from backtests import services, tasks

    monkeypatch.setattr(tasks.backtest_run, "delay", lambda report_id: None)
    monkeypatch.setattr(tasks.optimization_points, "delay", lambda run_ids: None)
    coin = await sync_to_async(import_walk)("TSTUSD")
    calls = []
    async with client(mcp_http, write_key) as session:

        async def call(name, arguments):
            calls.append((name, await ok(session, name, arguments)))
            return calls[-1][1]

        await call("get_strategy_documentation", {})
        refused_code = await call("run_dry_run_backtest", {"code": "import os\n" + BOOM})
        await call("run_dry_run_backtest", {"code": BOOM})
        created = await call("create_strategy", {"name": "Boom", "code": BOOM})
        strategy = (await call("update_strategy", {"id": created["id"], "description": "fails on demand"}))["id"]
        await call("list_strategies", {})
        await call("get_strategy", {"id": strategy})
        await call("list_symbols", {})
        await call("search_symbols_by_name", {"symbolName": "TST/USD"})
        await call("get_symbol", {"id": str(coin.pk)})
        await call("get_market_data_sample", {"id": str(coin.pk), "frequency": "1d", "limit": 2})
        reused = await call("download_market_data", {"symbol": "TST/USD", "frequency": "1d", "asset_class": "crypto"})
        no_optimization = await call("get_latest_optimization_by_strategy", {"strategy_id": strategy})
        run = {"strategy_id": strategy, "data_ids": [str(coin.pk)], "frequency": "1d",
               "start_date": "2024-01-01", "end_date": "2024-12-31"}  # fmt: skip
        pending_id = (await call("run_backtest", run))["report_id"]
        failing_id = (await call("run_backtest", run | {"parameters": [{"name": "boom", "value": 1}]}))["report_id"]
        await sync_to_async(services.backtest_execute)(report_id=failing_id)
        pending = await call("get_report", {"id": pending_id})
        failed = await call("get_report", {"id": failing_id})
        trades = await call("list_report_trades", {"id": pending_id})
        await call("list_reports", {})
        waited = await call("wait_for_reports", {"report_ids": [failing_id]})
        grid = optimization_args(strategy, str(coin.pk), grids=[{"name": "boom", "min": 0, "max": 1, "step": 1}],
                                 parameters=[])  # fmt: skip
        optimization_id = (await call("run_optimization", grid))["optimization_id"]
        await call("get_optimization", {"id": optimization_id})
        await call("get_latest_optimization_by_strategy", {"strategy_id": strategy})
        await call("list_optimizations", {})
        runs = await call("list_optimization_results", {"id": optimization_id})
        cancelled = await call("cancel_optimization", {"id": optimization_id})
        stopped = await call("wait_for_optimization", {"id": optimization_id})

    specs = load_tools()
    assert {name for name, _ in calls} == set(TOOLS)
    for name, result in calls:
        assert specs[name].output.model_validate(result).model_dump(mode="json") == result, name
    assert (refused_code["success"], refused_code["result"], refused_code["error"]["code"]) == (
        False, None, "validation_error"
    )  # fmt: skip
    assert (refused_code["error"]["line"], refused_code["error"]["column"]) == (1, 1)
    assert {k: reused[k] for k in ("reused", "frequency", "rows", "first_timestamp")} == {
        "reused": True, "frequency": None, "rows": None, "first_timestamp": None
    }  # fmt: skip
    assert no_optimization == {"optimization": None}
    assert (pending["status"], pending["statistics"], pending["recent_trades"], pending["diagnostics"]) == (
        "PENDING", None, None, None
    )  # fmt: skip
    assert (trades["items"], trades["total"], trades["has_next"]) == ([], 0, False)
    assert (failed["status"], failed["error"]["code"], failed["statistics"], failed["per_symbol"]) == (
        "FAILED", "execution_error", None, None
    )  # fmt: skip
    diagnostics = failed["diagnostics"]
    assert (diagnostics["bars"], diagnostics["final_value"], failed["trade_count"]) == (None, None, 0)
    assert waited == {"results": [{"report_id": failing_id, "status": "FAILED"}], "timed_out": False}
    assert [(r["iteration"], r["status"], r["statistics"]) for r in runs["items"]] == [
        (1, "PENDING", None), (2, "PENDING", None)
    ]  # fmt: skip
    assert (cancelled["status"], cancelled["credits_refunded"]) == ("CANCELLED", cancelled["credits_reserved"])
    assert (stopped["status"], stopped["completed_iterations"], stopped["timed_out"]) == ("CANCELLED", 0, False)


async def test_a_wait_holds_no_admission_slot_so_the_process_serves_other_calls_meanwhile(owner, api_key):
    at = datetime(2026, 3, 2, 15, 0, tzinfo=UTC)
    strategy = await Strategy.objects.acreate(user=owner, name="S", code="x", code_sha256="a" * 64, created_at=at)
    report = await Report.objects.acreate(
        user=owner, strategy=strategy, status=Status.EXECUTING, data_ids=["1"], tickers=["SPY"], frequency="1d",
        start_date=date(2026, 1, 2), end_date=date(2026, 2, 27), simulation={"initial_cash": 10_000},
        created_at=at, started_at=at,
    )  # fmt: skip
    with override_settings(LEROY_ADMISSION_MAX_INFLIGHT=1):
        app = LeroyASGI()  # one request at a time in this process

    def http() -> httpx2.AsyncClient:
        transport = httpx2.ASGITransport(app=app, client=("203.0.113.7", 50000))
        return httpx2.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers={"Authorization": f"Bearer {api_key}"}
        )

    async with (
        app.session_manager.run(),
        Client(streamable_http_client(MCP_URL, http_client=http()), mode=MODERN) as waiting,
        Client(streamable_http_client(MCP_URL, http_client=http()), mode=MODERN) as other,
    ):
        wait = asyncio.create_task(waiting.call_tool("wait_for_reports", {"report_ids": [str(report.pk)]}))
        await asyncio.sleep(1.5)  # the wait has read the report at least once and sleeps between reads
        usage = await other.call_tool("get_usage", {})
        done = wait.done()
        await Report.objects.filter(pk=report.pk).aupdate(status=Status.COMPLETED, finished_at=at)
        waited = await wait

    assert (usage.is_error, done) == (False, False)
    assert waited.structured_content["results"] == [{"report_id": str(report.pk), "status": "COMPLETED"}]
