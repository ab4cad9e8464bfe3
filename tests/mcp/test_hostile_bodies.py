"""Bodies no handler should see: answered with a JSON-RPC error and HTTP 400, before auth work or rate limits."""

import json
import logging

import pytest

from leroy.schemas import MAX_JSON_DEPTH
from tests.mcp.test_transport import MODERN, modern_call, modern_headers

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

DEEP = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + b"[" * 10_000 + b"]" * 10_000 + b"}"


async def post_raw(http, body: bytes):
    return await http.post("/api/mcp", content=body, headers=modern_headers("tools/call", "probe_echo"))


async def test_ten_thousand_levels_of_nesting_get_400_and_no_traceback(mcp_http, caplog):
    assert 20_000 < len(DEEP) < 21_000
    with caplog.at_level(logging.DEBUG):
        async with mcp_http() as http:
            response = await post_raw(http, DEEP)

    assert response.status_code == 400
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": f"Invalid Request: JSON nested deeper than {MAX_JSON_DEPTH} levels"},
    }
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


async def test_nesting_just_past_the_limit_is_refused_and_at_the_limit_reaches_the_sdk(mcp_http):
    def nested(levels: int) -> dict:
        arguments: dict = {"text": "x"}
        message = modern_call("probe_echo", arguments)
        value: object = "leaf"
        for _ in range(levels - 3):  # message > params > arguments > [[...]]: one level per list
            value = [value]
        arguments["extra"] = value
        return message

    async with mcp_http() as http:
        too_deep = await http.post(
            "/api/mcp", json=nested(MAX_JSON_DEPTH + 1), headers=modern_headers("tools/call", "probe_echo")
        )
        at_limit = await http.post(
            "/api/mcp", json=nested(MAX_JSON_DEPTH), headers=modern_headers("tools/call", "probe_echo")
        )

    assert too_deep.status_code == 400
    assert too_deep.json()["error"]["code"] == -32600
    assert at_limit.status_code == 200  # the SDK answered (the probe refuses the unknown argument in-band)


async def test_malformed_json_gets_parse_error_400(mcp_http):
    async with mcp_http() as http:
        response = await post_raw(http, b'{"jsonrpc": "2.0", "id": 1, "method": ')

    assert response.status_code == 400
    assert response.json()["error"] == {"code": -32700, "message": "Parse error: the body is not JSON"}


async def test_refused_bodies_do_not_spend_the_rate_limit(mcp_http):
    async with mcp_http() as http:
        refused = [(await post_raw(http, DEEP)).status_code for _ in range(45)]
        served = await http.post(
            "/api/mcp",
            json=modern_call("probe_echo", {"text": "x"}),
            headers=modern_headers("tools/call", "probe_echo"),
        )

    assert refused == [400] * 45
    assert served.status_code == 200  # 45 > the anonymous limit of 40: none of them was counted


GIVEN_TWICE = {  # each the fragment of a tools/call of probe_metered that a body gives twice, last what it asks
    "method": ('"method": "tools/call"', '"method": "tools/list", "method": "tools/call"'),
    "params": ('"params": {', '"params": {"name": "probe_echo", "arguments": {"text": "x"}}, "params": {'),
    "params.name": ('"name": "probe_metered"', '"name": "probe_echo", "name": "probe_metered"'),
    "params.arguments": ('"arguments": {', '"arguments": {"side": "sell"}, "arguments": {'),
    "id": ('"id": 7', '"id": 1, "id": 7'),
}


@pytest.mark.parametrize("name", GIVEN_TWICE)
@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_a_message_giving_a_name_twice_outside_the_arguments_is_an_invalid_request_and_calls_nothing(
    mcp_http, api_key, name, era
):
    from billing.models import Transfer, UsageEvent

    body, headers = modern_call("probe_metered", {"side": "buy"}), modern_headers("tools/call", "probe_metered")
    if era != MODERN:
        del body["params"]["_meta"]
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": era}  # fmt: skip
    once, twice = GIVEN_TWICE[name]
    raw = json.dumps(body)
    assert raw.count(once) == 1
    async with mcp_http(api_key) as http:
        response = await http.post("/api/mcp", content=raw.replace(once, twice), headers=headers)

    assert response.status_code == 400
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": f"Invalid Request: {name} given more than once (a name may appear once in a JSON object)",
        },
    }
    assert await UsageEvent.objects.aexists() is False
    assert await Transfer.objects.aexists() is False
