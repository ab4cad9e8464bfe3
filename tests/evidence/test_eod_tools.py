"""The end-of-day tools over MCP: public tools answer anonymous callers in both protocol eras, subscriber tools
answer an anonymous call with the subscription payload and OAuth challenge, and every successful answer carries
the trust contract. Subscriber tools cost one lookup, repeated on the same snapshot for free."""

import hashlib
from datetime import date

import pytest
import rfc8785
from asgiref.sync import sync_to_async
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.test import override_settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from billing.models import UsageEvent
from evidence.eod.services import eod_run
from evidence.models import EodSnapshot, LogCheckpoint
from evidence.publication.services import entry_append
from evidence.publication.signing import format_private_key
from tests.conftest import MCP_URL
from tests.evidence.eod_world import LAST, eod_world, universe_settings
from tests.evidence.test_publication_views import MOVED, NOT_THE_LOGS_KEY
from tests.mcp.test_transport import MODERN, modern_call, modern_headers, sse_or_json

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

PUBLIC = {
    "get_historical_replay": ({}, "historical_replay"),
    "get_heldout_evidence": ({}, "validation"),
    "get_walk_forward_evidence": ({"symbol": "alfa"}, "walk_forward"),
    "list_publication_commitments": ({"limit": 5}, "forward_commitment"),
    "get_publication_maturity": ({}, "forward_commitment"),
    "get_provenance": ({}, "provenance"),
}
SUBSCRIBER = {
    "get_signal": ({"symbol": "ALFA"}, "end_of_day_signal"),
    "get_frozen_forward_rows": ({}, "forward_commitment"),
    "get_forward_changes_since": ({"publication_id": 0}, "forward_commitment"),
}
TRUST = {"as_of", "last_updated", "data_type", "disclaimer", "snapshot_sha256", "calculation_sha256", "source"}


@pytest.fixture
def published(tmp_path):
    def build() -> EodSnapshot:
        world = eod_world(tmp_path)
        with universe_settings(world):
            return eod_run(session=LAST)

    return build


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_public_tools_answer_anonymous_callers_with_the_trust_contract(mcp_http, published, mode):
    snapshot = await sync_to_async(published)()
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=mode) as client:
        answers = {name: await client.call_tool(name, args) for name, (args, _) in PUBLIC.items()}
        legs = await client.call_tool("get_historical_replay", {"symbol": "BRVO", "offset": 1, "limit": 2})

    for name, answer in answers.items():
        content = answer.structured_content
        assert answer.is_error is False, (name, content)
        assert set(content) >= TRUST, name
        assert (content["data_type"], content["as_of"]) == (PUBLIC[name][1], "2023-02-28"), name
        assert content["snapshot_sha256"] == snapshot.snapshot_sha256 and content["source"] == "synthetic"
        assert "not personalised advice" in content["disclaimer"]
    assert answers["get_heldout_evidence"].structured_content["evidence_class"] == "validation"
    assert answers["get_heldout_evidence"].structured_content["row_count"] == 2
    walk = answers["get_walk_forward_evidence"].structured_content
    assert {r["symbol"] for r in walk["rows"]} == {"ALFA"}
    assert (walk["symbol"], walk["symbol_proof"]) == ("ALFA", snapshot.walk_forward["proofs"]["ALFA"])
    assert walk["calculation_sha256"] == snapshot.walk_forward["sha256"]  # the universe's, as the entry commits it
    maturity = answers["get_publication_maturity"].structured_content
    assert (maturity["total_snapshots"], maturity["instrument_count"], maturity["latest_revision"]) == (1, 3, 1)
    assert maturity["performance_status"] == "not_calculated_from_commitments"
    provenance = answers["get_provenance"].structured_content
    assert provenance["guarantees"]["timestamp_authority"] == "not_configured"
    assert provenance["guarantees"]["timestamp"]["kind"] == "none"
    assert provenance["guarantees"]["not_guaranteed"][0].startswith("No independent timestamp")
    assert provenance["checkpoint"].splitlines()[1] == "1"  # the tree holds the one commitment
    commitments = answers["get_publication_maturity"].structured_content
    assert answers["list_publication_commitments"].structured_content["total"] == 1
    assert commitments["first_date"] == commitments["latest_date"] == "2023-02-28"
    page = legs.structured_content
    assert page["label"] == "retrospective_replay" and len(page["legs"]) == 2 and page["total_legs"] >= 3
    assert len(page["symbol_proof"]) == 1  # BRVO's sibling in the two-symbol tree
    assert answers["get_historical_replay"].structured_content["symbol_proof"] is None  # the universe summary
    assert set(page["legs"][0]) == {"entry_date", "entry_price", "exit_date", "exit_price", "return",
                                    "holding_days", "open"}  # fmt: skip


async def test_each_commitment_shows_the_evidence_hashes_its_entry_commits(mcp_http, published):
    # The first entry as logged before the evidence hashes were committed; the second by a run now.
    older = {"kind": "eod_snapshot", "session": "2023-02-27", "revision": 1, "snapshot_sha256": "ab" * 32,
             "row_count": 3}  # fmt: skip
    await sync_to_async(entry_append)(older)
    snapshot = await sync_to_async(published)()
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=MODERN) as client:
        answer = await client.call_tool("list_publication_commitments", {})

    first, second = answer.structured_content["commitments"]
    hashes = ("replay_sha256", "heldout_sha256", "walk_forward_sha256", "replay_symbols_root_sha256",
              "walk_forward_symbols_root_sha256")  # fmt: skip
    assert answer.is_error is False
    assert [first[name] for name in hashes] == [None, None, None, None, None]
    assert (first["session"], first["snapshot_sha256"], second["publication_id"]) == ("2023-02-27", "ab" * 32, 1)
    assert [second[name] for name in hashes] == [
        snapshot.replay["sha256"], snapshot.heldout["sha256"], snapshot.walk_forward["sha256"],
        snapshot.replay["symbols_root_sha256"], snapshot.walk_forward["symbols_root_sha256"],
    ]  # fmt: skip


@pytest.mark.parametrize("version", ["2025-11-25", MODERN])
async def test_an_anonymous_subscriber_call_gets_the_subscription_payload_and_challenge(mcp_http, version):
    headers = (
        modern_headers("tools/call", "get_signal")
        if version == MODERN
        else {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": version}
    )
    body = modern_call("get_signal", {"symbol": "ALFA"})
    if version != MODERN:
        del body["params"]["_meta"]
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=body, headers=headers)

    result = sse_or_json(response)["result"]
    assert response.status_code == 401
    assert result["_meta"] == {"mcp/www_authenticate": [response.headers["www-authenticate"]]}
    error = result["structuredContent"]["error"]
    assert error["code"] == "subscription_required"
    assert {"get_historical_replay", "get_provenance", "get_heldout_evidence"} <= set(error["free_alternatives"])
    assert await sync_to_async(UsageEvent.objects.count)() == 0


async def test_subscriber_tools_cost_one_lookup_and_repeat_free_on_the_same_snapshot(mcp_http, published, api_key):
    snapshot = await sync_to_async(published)()
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        answers = {name: await client.call_tool(name, args) for name, (args, _) in SUBSCRIBER.items()}
        repeat = await client.call_tool("get_signal", {"symbol": "alfa"})
        absent = await client.call_tool("get_signal", {"symbol": "CHRL"})
        unknown = await client.call_tool("get_signal", {"symbol": "ZZZZ"})

    for name, answer in answers.items():
        content = answer.structured_content
        assert answer.is_error is False, (name, content)
        assert set(content) >= TRUST and content["data_type"] == SUBSCRIBER[name][1], name
        assert content["usage"]["lookup_cost"] == 1, name
        assert content["receipt"]["answer_sha256"], name
    signal = answers["get_signal"].structured_content
    assert signal["status"] == "available" and signal["action"] in {"ENTER", "HOLD", "EXIT", "STAY_FLAT"}
    assert signal["suggested_position"] == (1.0 if signal["recommended_state"] == "LONG" else 0.0)
    assert repeat.structured_content["usage"]["lookup_cost"] == 0
    assert repeat.structured_content["usage"]["cache"] == "hit"
    assert absent.structured_content["status"] == "absent_from_snapshot" and absent.structured_content["action"] is None
    assert absent.structured_content["usage"]["lookup_cost"] == 0  # nothing of the symbol was in the snapshot
    assert unknown.is_error is True and unknown.structured_content["error"]["code"] == "symbol_not_in_universe"
    frozen = answers["get_frozen_forward_rows"].structured_content
    hashed = {"session": frozen["as_of"], "revision": frozen["revision"], "components": frozen["components"],
              "rows": frozen["rows"]}  # fmt: skip
    assert hashlib.sha256(rfc8785.dumps(hashed)).hexdigest() == snapshot.snapshot_sha256
    assert answers["get_forward_changes_since"].structured_content["snapshots"] == []


async def test_the_latest_snapshot_asked_by_default_then_by_its_id_is_one_cached_answer(mcp_http, published, api_key):
    snapshot = await sync_to_async(published)()
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        latest = (await client.call_tool("get_frozen_forward_rows", {})).structured_content
        named = (
            await client.call_tool("get_frozen_forward_rows", {"publication_id": snapshot.log_index})
        ).structured_content

    events = await sync_to_async(list)(UsageEvent.objects.order_by("pk"))
    charged = [(event.units_charged, event.cache_hit) for event in events]
    assert (latest["usage"]["lookup_cost"], latest["usage"]["cache"]) == (1, "miss")
    assert (named["usage"]["lookup_cost"], named["usage"]["cache"]) == (0, "hit")
    assert named["publication_id"] == latest["publication_id"] == snapshot.log_index
    assert named["rows"] == latest["rows"]
    assert charged == [(1, False), (0, True)]


def recomputed(answer: dict, *, without: set[str]) -> str:
    """The calculation hash as the documentation tells a user to recompute it from the answer's own fields."""
    return hashlib.sha256(rfc8785.dumps({k: v for k, v in answer.items() if k not in without})).hexdigest()


async def test_the_maturity_hash_is_recomputed_from_the_answers_own_fields(mcp_http, published):
    await sync_to_async(published)()
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=MODERN) as client:
        answer = (await client.call_tool("get_publication_maturity", {})).structured_content

    assert answer["total_snapshots"] == 1  # an int, hashed as the int it is published as
    assert recomputed(answer, without=TRUST) == answer["calculation_sha256"]


async def test_the_signal_hash_is_recomputed_from_the_answers_own_fields(mcp_http, published, api_key):
    await sync_to_async(published)()
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        answer = (await client.call_tool("get_signal", {"symbol": "ALFA"})).structured_content

    assert "session" not in answer  # as_of names it
    assert recomputed(answer, without=TRUST | {"usage", "receipt"}) == answer["calculation_sha256"]


async def test_a_signal_of_a_symbol_whose_history_misses_a_session_names_the_gap_and_costs_nothing(
    mcp_http, tmp_path, api_key
):
    def build() -> None:
        world = eod_world(tmp_path, missing={"ALFA": date(2022, 3, 15)})
        with universe_settings(world):
            eod_run(session=LAST)

    await sync_to_async(build)()
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        answer = (await client.call_tool("get_signal", {"symbol": "ALFA"})).structured_content

    assert (answer["status"], answer["action"], answer["suggested_position"]) == ("incomplete_history", None, None)
    assert answer["history_gaps"] == {"first_bar": "2019-01-02", "missing_sessions": ["2022-03-15"],
                                      "missing_count": 1}  # fmt: skip
    assert answer["usage"]["lookup_cost"] == 0
    assert recomputed(answer, without=TRUST | {"usage", "receipt"}) == answer["calculation_sha256"]


async def test_without_a_completed_snapshot_every_tool_refuses_and_nothing_is_charged(mcp_http, api_key):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        answers = {name: await client.call_tool(name, args) for name, (args, _) in {**PUBLIC, **SUBSCRIBER}.items()}

    for name, answer in answers.items():
        assert answer.is_error is True, name
        assert answer.structured_content["error"]["code"] == "snapshot_not_found", name
    assert await sync_to_async(UsageEvent.objects.count)() == 0


async def test_an_id_never_published_and_a_symbol_outside_the_universe_are_refused_and_charge_nothing(
    mcp_http, published, api_key
):
    await sync_to_async(published)()
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        never = await client.call_tool("get_forward_changes_since", {"publication_id": 10**15})
        outside = await client.call_tool("get_walk_forward_evidence", {"symbol": "ZZZZ"})

    assert (never.is_error, never.structured_content["error"]) == (
        True,
        {"code": "snapshot_not_found", "message": f"No end-of-day snapshot has publication id {10**15}."},
    )
    assert (outside.is_error, outside.structured_content["error"]) == (
        True,
        {"code": "symbol_not_in_universe", "message": "ZZZZ is not in the end-of-day universe."},
    )
    assert await sync_to_async(UsageEvent.objects.count)() == 0


async def test_the_ledger_tools_read_the_log_whatever_origin_the_key_is_named_for(mcp_http, published):
    await sync_to_async(published)()
    ledger = ("list_publication_commitments", "get_publication_maturity", "get_provenance")
    moved = format_private_key(MOVED, Ed25519PrivateKey.generate())
    with override_settings(LEROY_LOG_ORIGIN=MOVED):
        async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=MODERN) as client:
            renamed = {name: await client.call_tool(name, PUBLIC[name][0]) for name in ledger}
    with override_settings(LEROY_LOG_ORIGIN=MOVED, LEROY_LOG_SIGNING_KEY=moved):
        async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=MODERN) as client:
            rekeyed = {name: await client.call_tool(name, PUBLIC[name][0]) for name in ledger}

    assert {name: answer.is_error for name, answer in renamed.items()} == dict.fromkeys(ledger, False)
    provenance = renamed["get_provenance"].structured_content
    assert provenance["verifier_key"].startswith("test.leroy.invalid/log+775b8874+")
    assert provenance["checkpoint"].splitlines()[:2] == ["test.leroy.invalid/log", "1"]
    assert rekeyed["list_publication_commitments"].structured_content == (
        renamed["list_publication_commitments"].structured_content
    )
    assert rekeyed["get_publication_maturity"].structured_content == (
        renamed["get_publication_maturity"].structured_content
    )
    assert (rekeyed["get_provenance"].is_error, rekeyed["get_provenance"].structured_content) == (
        True,
        {"error": {"code": "log_unavailable", "message": NOT_THE_LOGS_KEY}},
    )
    assert await LogCheckpoint.objects.acount() == 1
    assert await UsageEvent.objects.aexists() is False
