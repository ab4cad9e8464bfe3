import json

import pytest

from leroy.mcp.server import compact_schema
from tests.mcp.test_transport import sse_or_json

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

# What an agent pays to learn the tools, in tokens, measured as the tools/list result's bytes / 4 (a tokenizer-free
# proxy). It was 42,236 for 37 tools before schemas lost their generated field titles (34,853 after); the nine alert
# and four publication-log tools brought it to 48,816, the tier fields and probe cost 49,131, output schemas that admit
# the in-band refusal 49,568; the nine end-of-day tools (fixed texts kept out of their schemas; the subscriber three
# carry usage and receipt) and the two walk-forward tools with the mode, fold and out_of_sample fields took it to
# 57,602 for 61 tools; the execution conditions' basis field and four descriptions naming refusals, 57,939;
# annotations no longer repeating each tool's title, 57,478 (the budget followed it down); the end-of-day
# commitments' evidence hashes and the replay's per-symbol proof, 57,653; download_market_data's gaps and capped split
# warnings (what a file import reports), 57,956; the data source (vendor or synthetic) in every evidence provenance,
# 58,121; the bars' source in the symbol and market-data answers, 58,246; the look-ahead probe's method and the
# decisions its streamed run compared, 58,882; the setup tools' free cases (a stale frame, a horizon past the
# close), 58,936; the one-symbol walk-forward's symbol and proof and the commitments' walk-forward root, 59,106.
# X-Leroy-Toolsets lets an agent take only the apps it needs. Raise it only for a new tool or
# contract field, not for prose.
TOOLS_LIST_TOKEN_BUDGET = 59_150
LEGACY = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


async def tools_list(mcp_http, **headers):
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=LIST, headers=LEGACY | headers)
    assert response.status_code == 200
    return sse_or_json(response)["result"]["tools"]


async def test_tools_list_fits_the_written_token_budget(mcp_http):
    tools = [t for t in await tools_list(mcp_http) if not t["name"].startswith("probe_")]  # not the test fixtures

    size = len(json.dumps({"tools": tools}, separators=(",", ":")).encode())
    assert len(tools) == 61
    assert size / 4 <= TOOLS_LIST_TOKEN_BUDGET, f"tools/list is {size / 4:.0f} tokens"


async def test_each_tool_names_its_title_once_not_again_in_its_annotations(mcp_http):
    tools = await tools_list(mcp_http)

    assert [t["name"] for t in tools if not t.get("title")] == []
    assert [t["name"] for t in tools if "title" in t["annotations"]] == []


def test_compact_schema_drops_generated_titles_but_not_a_property_named_title():
    schema = {
        "title": "Args",
        "properties": {"title": {"title": "Title", "type": "string", "description": "d"}},
        "$defs": {"X": {"title": "X", "anyOf": [{"title": "A", "type": "integer"}]}},
        "items": {"title": "I", "type": "string"},
    }

    assert compact_schema(schema) == {
        "properties": {"title": {"type": "string", "description": "d"}},
        "$defs": {"X": {"anyOf": [{"type": "integer"}]}},
        "items": {"type": "string"},
    }


async def test_toolsets_header_keeps_only_the_named_apps_tools(mcp_http):
    names = {t["name"] for t in await tools_list(mcp_http, **{"X-Leroy-Toolsets": "billing, evidence"})}

    assert {"get_usage", "get_credit_usage", "evaluate_current_setup", "get_data_lineage"} <= names
    assert "run_backtest" not in names and "probe_echo" not in names


async def test_readonly_header_hides_every_tool_that_needs_write(mcp_http):
    every = await tools_list(mcp_http)
    shown = await tools_list(mcp_http, **{"X-Leroy-Readonly": "1"})

    writes = {t["name"] for t in every if t["_meta"]["leroy/scope"] == "mcp:write"}
    assert {"run_backtest", "cancel_optimization", "create_strategy"} <= writes
    assert {t["name"] for t in shown} == {t["name"] for t in every} - writes


async def test_the_end_of_day_layer_is_its_own_toolset(mcp_http):
    eod = {t["name"] for t in await tools_list(mcp_http, **{"X-Leroy-Toolsets": "eod"})}
    evidence = {t["name"] for t in await tools_list(mcp_http, **{"X-Leroy-Toolsets": "evidence"})}

    assert {"get_signal", "get_historical_replay", "get_provenance"} <= eod
    assert "evaluate_current_setup" not in eod and eod.isdisjoint(evidence)


async def test_both_headers_combine(mcp_http):
    shown = await tools_list(mcp_http, **{"X-Leroy-Toolsets": "backtests", "X-Leroy-Readonly": "1"})

    names = {t["name"] for t in shown}
    assert "get_report" in names
    assert "run_backtest" not in names and "get_usage" not in names


async def test_every_output_schema_admits_the_in_band_refusal_and_nothing_shapeless(mcp_http):
    import jsonschema

    refusal = {"error": {"code": "invalid_arguments", "message": "m", "problems": [{"field": "x", "problem": "p"}]}}
    for tool in await tools_list(mcp_http):
        if "outputSchema" not in tool:
            continue
        validator = jsonschema.Draft202012Validator(tool["outputSchema"])
        assert tool["outputSchema"]["type"] == "object", tool["name"]
        assert validator.is_valid(refusal), tool["name"]  # the JavaScript SDK validates isError results too
        assert not validator.is_valid({}), tool["name"]  # neither a result nor a refusal
