"""The log's MCP tools, and the whole path: real metered answers over MCP carry receipts, `commit_answers` commits
the day, `get_answer_proof` returns the proof and `leroy-verify` checks it against the running server's endpoints."""

import hashlib
import json

import pytest
import rfc8785
import time_machine
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.test import override_settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from billing.models import Transfer, UsageEvent
from evidence.models import AnswerReceipt, LogCheckpoint, LogEntry
from evidence.publication import services
from tests.conftest import MCP_URL
from tests.evidence.test_publication_verify import verify
from tests.evidence.test_publication_views import KEY_ELSEWHERE, MOVED
from tests.mcp.test_transport import MODERN, modern_call, modern_headers

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


def snapshot(n: int) -> dict[str, object]:
    return {"kind": "eod_snapshot", "session": f"2026-06-{n + 1:02d}", "snapshot_sha256": f"{n:064x}", "row_count": n}


async def test_public_log_tools_answer_anonymous_callers(mcp_http):
    await sync_to_async(services.entries_append)([snapshot(n) for n in range(3)])
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode="2026-07-28") as client:
        checkpoint = await client.call_tool("get_log_checkpoint", {})
        inclusion = await client.call_tool("get_log_inclusion_proof", {"index": 1})
        consistency = await client.call_tool("get_log_consistency_proof", {"first": 1})
        beyond = await client.call_tool("get_log_inclusion_proof", {"index": 3})

    content = checkpoint.structured_content
    assert (content["origin"], content["tree_size"]) == ("test.leroy.invalid/log", 3)
    assert content["verifier_key"].startswith("test.leroy.invalid/log+775b8874+")
    assert content["guarantees"]["timestamp_authority"] == "not_configured"
    assert any("No independent timestamp" in line for line in content["guarantees"]["not_guaranteed"])
    assert inclusion.structured_content["entry"]["entry"]["row_count"] == 1
    assert inclusion.structured_content["proof"]["tree_size"] == 3
    assert (consistency.structured_content["first"], consistency.structured_content["second"]) == (1, 3)
    assert beyond.is_error is True and beyond.structured_content["error"]["code"] == "invalid_range"


async def test_answer_proofs_need_a_subscriber_and_are_the_owners_only(mcp_http, api_key, outsider):
    from tests.evidence.test_publication_log import Answer

    answer = await sync_to_async(services.receipt_attach)(user=outsider, tool="t", answer=Answer(value=1, words="x"))
    async with mcp_http() as http:
        anonymous = await http.post(
            "/api/mcp",
            json=modern_call("get_answer_proof", {"evaluation_id": answer.receipt.answer_id}),
            headers=modern_headers("tools/call", "get_answer_proof"),
        )
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode="2026-07-28") as client:
        theirs = await client.call_tool("get_answer_proof", {"evaluation_id": answer.receipt.answer_id})

    assert anonymous.status_code == 401
    assert theirs.is_error is True and theirs.structured_content["error"]["code"] == "not_found"


async def test_a_real_answer_is_committed_proved_and_verified_from_the_servers_endpoints(
    fed_world, mcp_http, api_key, live_server, tmp_path
):
    with time_machine.travel(fed_world.replay, tick=False):
        async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode="2026-07-28") as c:
            evaluation = await c.call_tool("evaluate_current_setup", {"symbol": "alfa", "side": "buy"})
            search = await c.call_tool("search_market_memory", {"side": "buy", "horizon_minutes": 15})
            await sync_to_async(call_command)("commit_answers", "--date", fed_world.replay.date().isoformat())
            proof = await c.call_tool(
                "get_answer_proof", {"evaluation_id": evaluation.structured_content["evaluation_id"]}
            )

    received = evaluation.structured_content
    receipt = received["receipt"]
    unsigned = {key: value for key, value in received.items() if key != "receipt"}
    assert receipt["answer_id"] == received["evaluation_id"] and receipt["log_index"] is None
    assert receipt["answer_sha256"] == hashlib.sha256(rfc8785.dumps(unsigned)).hexdigest()
    assert search.structured_content["receipt"]["answer_id"].startswith("ans_")
    assert await AnswerReceipt.objects.acount() == 2
    body = proof.structured_content
    assert (body["status"], body["day_tree"]["size"], body["log_entry"]["entry"]["answer_count"]) == ("committed", 2, 2)
    kinds = [kind async for kind in LogEntry.objects.values_list("kind", flat=True)]
    assert kinds == ["market_memory_artifact", "forward_overlay", "daily_answers_root"]  # the world's build, then
    (tmp_path / "answer.json").write_text(json.dumps(received))
    (tmp_path / "proof.json").write_text(json.dumps(body))

    code, lines = await sync_to_async(verify)(
        "--log", live_server.url, "--key", body["verifier_key"], "--answer", tmp_path / "answer.json", "--proof",
        tmp_path / "proof.json", "--entries", "--entry", "0", cwd=tmp_path,
    )  # fmt: skip

    assert code == 0, lines
    assert [line.split(":")[0] for line in lines] == [
        "ok    answer hash", "ok    day tree", "ok    proof checkpoint signature", "ok    log inclusion",
        "ok    checkpoint signature", "ok    consistency", "ok    entries", "ok    inclusion",
    ]  # fmt: skip
    assert lines[-1] == "ok    inclusion: entry 0 (market_memory_artifact) is in the tree of size 3"


async def test_log_tools_serve_the_stored_log_under_a_key_named_for_another_origin(mcp_http):
    await sync_to_async(services.entries_append)([snapshot(n) for n in range(3)])
    with override_settings(LEROY_LOG_ORIGIN=MOVED):
        async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=MODERN) as client:
            checkpoint = await client.call_tool("get_log_checkpoint", {})
            inclusion = await client.call_tool("get_log_inclusion_proof", {"index": 1})

    content = checkpoint.structured_content
    assert (checkpoint.is_error, inclusion.is_error) == (False, False)
    assert (content["origin"], content["tree_size"]) == ("test.leroy.invalid/log", 3)
    assert content["verifier_key"].startswith("test.leroy.invalid/log+775b8874+")
    assert inclusion.structured_content["checkpoint"] == content["checkpoint"]


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_log_tools_refuse_in_band_and_charge_nothing_while_the_empty_logs_key_is_named_for_another_origin(
    mcp_http, api_key, owner, mode
):
    from tests.evidence.test_publication_log import Answer

    answer = await sync_to_async(services.receipt_attach)(user=owner, tool="t", answer=Answer(value=1, words="x"))
    with override_settings(LEROY_LOG_ORIGIN=MOVED):
        async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=mode) as client:
            checkpoint = await client.call_tool("get_log_checkpoint", {})
            proof = await client.call_tool("get_answer_proof", {"evaluation_id": answer.receipt.answer_id})

    refusal = {"error": {"code": "log_unavailable", "message": KEY_ELSEWHERE}}
    assert (checkpoint.is_error, checkpoint.structured_content) == (True, refusal)
    assert (proof.is_error, proof.structured_content) == (True, refusal)
    assert await UsageEvent.objects.aexists() is False
    assert await Transfer.objects.aexists() is False
    assert await LogCheckpoint.objects.aexists() is False
