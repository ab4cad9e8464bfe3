"""What a strategy prints or raises leaves the sandbox as valid, capped UTF-8, and the official MCP client
reads the dry run and the report."""

import json

import pytest
from asgiref.sync import sync_to_async

from backtests import sandbox
from backtests.dryrun import walk
from backtests.models import Strategy
from backtests.policy import clean_error, escape_text
from backtests.sandbox import ALL_LAYERS, Limits
from tests.backtests.conftest import import_walk
from tests.backtests.test_tools import client, ok, refused

DATA = [walk("TEST", bars=60)]
SIM = {"initial_cash": 10_000, "commission": 0, "leverage": 1, "buy_on_close": False}
LIMITS = Limits(cpu_seconds=10, wall_seconds=30, memory_bytes=768 * 1024 * 1024, output_bytes=1024 * 1024, uid=61000)
KIB = 1024


def run(source, layers=ALL_LAYERS):
    return sandbox.run_job(source=source, datas=DATA, simulation=SIM, parameters={}, layers=layers, limits=LIMITS)


def printing(body: str) -> str:
    return f"class Talk(bt.Strategy):\n    def next(self):\n        if len(self) == 1:\n            {body}\n"


def test_lone_surrogates_and_control_characters_are_escaped():
    outcome = run(printing("print('a' + chr(0xD800) + chr(0) + chr(27) + '\\tb' + chr(0x1F600))"))

    assert outcome.ok is True
    assert outcome.prints == "a\\ud800\\x00\\x1b\tb\U0001f600\n"
    assert outcome.prints_truncated is False
    outcome.prints.encode("utf-8")  # strict: raises on a surrogate


def test_ten_megabytes_of_prints_come_back_as_the_documented_64_kib():
    outcome = run(printing("print('é' * 5_000_000)"))

    assert outcome.ok is True
    assert len(outcome.prints.encode()) == 64 * KIB
    assert outcome.prints == "é" * (32 * KIB)
    assert outcome.prints_truncated is True


def test_a_four_megabyte_error_is_cut_at_4_kib_and_marked():
    outcome = run(printing("x = {}['k' * 4_000_000]"))

    assert outcome.ok is False
    assert outcome.error["code"] == "execution_error"
    assert outcome.error["message"].startswith("KeyError: 'kkk")
    assert len(outcome.error["message"].encode()) == 4 * KIB
    assert outcome.error["truncated"] is True
    assert outcome.error["line"] == 4


def test_an_error_message_with_surrogates_and_nul_is_escaped():
    outcome = run(printing("raise ValueError(chr(0xDC80) + chr(0) + 'x')"), layers=frozenset({"restricted_python"}))

    assert outcome.error["message"] == "ValueError: \\udc80\\x00x"
    assert "truncated" not in outcome.error


def test_clean_error_and_escape_text_keep_text_valid():
    assert escape_text("ok\nline\u2028") == "ok\nline\u2028"
    assert escape_text("\x7f\x85") == "\\x7f\\x85"
    assert clean_error({"code": "x", "message": "m", "line": "7"}) == {"code": "x", "message": "m", "line": None}


NOISY = """
class Noisy(bt.Strategy):
    def __init__(self):
        self.cross = bt.ind.CrossOver(bt.ind.SMA(period=3), bt.ind.SMA(period=8))

    def next(self):
        print("bar", len(self), chr(0xD800), chr(0), "é" * 2000)
        if not self.position and self.cross[0] > 0:
            self.buy(size=1)
        elif self.position and self.cross[0] < 0:
            self.close()
"""
FAILING = printing("print(chr(0xDFFF) * 10)\n            x = {}['k' * 4_000_000]")


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_the_official_client_reads_dry_runs_and_reports_of_hostile_prints(mcp_http, owner, write_key):
    coin = await sync_to_async(import_walk)("TSTUSD")
    async with client(mcp_http, write_key) as session:
        dry = await ok(session, "run_dry_run_backtest", {"code": NOISY})
        saved = await ok(session, "create_strategy", {"name": "noisy", "code": NOISY})
        failing = await ok(session, "run_dry_run_backtest", {"code": FAILING})
        submitted = await ok(session, "run_backtest", {
            "strategy_id": saved["id"], "data_ids": [str(coin.pk)], "frequency": "1d",
            "start_date": "2024-01-01", "end_date": "2024-12-31",
        })  # fmt: skip
        await ok(session, "wait_for_reports", {"report_ids": [submitted["report_id"]]})
        report = await ok(session, "get_report", {"id": submitted["report_id"]})
        listing = await ok(session, "list_reports", {})

    assert (dry["success"], dry["prints_truncated"]) == (True, True)
    assert len(dry["prints"].encode()) == 64 * KIB
    assert dry["prints"].startswith("bar 9 \\ud800 \\x00 éé")
    assert failing["success"] is False
    assert failing["prints"] == "\\udfff" * 10 + "\n"
    assert (failing["error"]["truncated"], len(failing["error"]["message"].encode())) == (True, 4 * KIB)
    assert report["status"] == "COMPLETED"
    assert report["diagnostics"]["prints"] == dry["prints"].replace("DRYA", "TSTUSD")
    assert report["diagnostics"]["prints_truncated"] is True
    assert listing["items"][0]["id"] == submitted["report_id"]
    stored = json.dumps(report).encode("utf-8")
    assert b"\\u0000" not in stored


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_arguments_no_database_can_store_are_refused_in_band(mcp_http, owner, write_key):
    async with client(mcp_http, write_key) as session:
        nul, _ = await refused(session, "create_strategy", {"name": "a\x00b", "code": NOISY})
    async with mcp_http(write_key) as http:  # the SDK cannot send a lone surrogate: raw JSON
        response = await http.post(
            "/api/mcp",
            content=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "create_strategy",'
            b' "arguments": {"name": "x\\ud800", "code": "class A(bt.Strategy):\\n    pass\\n"}}}',
            headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25",
                     "Content-Type": "application/json"},
        )  # fmt: skip

    assert "NUL characters or lone surrogates" in nul
    assert response.status_code == 400  # the transport's JSON parser refuses a lone surrogate outright
    assert response.json()["error"]["code"] == -32700
    assert await Strategy.objects.aexists() is False


FLOOD_THEN_FAIL = printing("print(chr(0xD800) + 'x' * 10_000_000)\n            x = {}['k' * 4_000_000]")


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_the_official_client_reads_a_failed_report_with_a_flood_and_a_huge_error(mcp_http, owner, write_key):
    from backtests.models import DryRunPass
    from backtests.services import code_sha256
    from leroy.clock import now

    coin = await sync_to_async(import_walk)("TSTUSD")
    # Saving needs a passing dry run; this code never passes one, so its pass is recorded by hand.
    await DryRunPass.objects.acreate(user=owner, code_sha256=code_sha256(FLOOD_THEN_FAIL), created_at=now())
    async with client(mcp_http, write_key) as session:
        saved = await ok(session, "create_strategy", {"name": "flood", "code": FLOOD_THEN_FAIL})
        submitted = await ok(session, "run_backtest", {
            "strategy_id": saved["id"], "data_ids": [str(coin.pk)], "frequency": "1d",
            "start_date": "2024-01-01", "end_date": "2024-12-31",
        })  # fmt: skip
        await ok(session, "wait_for_reports", {"report_ids": [submitted["report_id"]]})
        report = await ok(session, "get_report", {"id": submitted["report_id"]})

    assert report["status"] == "FAILED"
    assert (report["error"]["code"], report["error"]["truncated"]) == ("execution_error", True)
    assert len(report["error"]["message"].encode()) == 4 * KIB
    assert report["diagnostics"]["prints"].startswith("\\ud800xxx")
    assert (len(report["diagnostics"]["prints"].encode()), report["diagnostics"]["prints_truncated"]) == (
        64 * KIB,
        True,
    )
    assert report["credits_charged"] == 0
