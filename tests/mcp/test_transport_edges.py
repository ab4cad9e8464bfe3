import json

import pytest

from billing.models import UsageEvent
from tests.mcp.test_transport import MODERN, modern_call, modern_headers, sse_or_json

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

LEGACY = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def legacy_call(name: str, request_id: object = 1) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": {}}}


async def test_the_endpoint_with_a_trailing_slash_is_served_not_redirected(mcp_http):
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, headers=LEGACY
        )

    assert response.status_code == 200
    assert "probe_echo" in {tool["name"] for tool in sse_or_json(response)["result"]["tools"]}


@pytest.mark.parametrize("request_id", [{"a": 1}, [1], True])
@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_an_id_that_is_not_a_string_or_number_is_an_invalid_request_in_both_eras(mcp_http, request_id, era):
    if era == MODERN:
        body, headers = modern_call("probe_echo", {"text": "x"}), modern_headers("tools/call", "probe_echo")
        body["id"] = request_id
    else:
        body, headers = legacy_call("probe_echo", request_id), LEGACY
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=body, headers=headers)

    assert response.status_code == 400
    assert sse_or_json(response)["error"]["code"] == -32600


async def test_legacy_anonymous_call_whose_mcp_name_names_another_tool_is_400(mcp_http):
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp", json=legacy_call("probe_whoami"), headers=LEGACY | {"Mcp-Name": "probe_echo"}
        )

    assert response.status_code == 400
    error = sse_or_json(response)["error"]
    assert error["code"] == -32020
    assert "result" not in sse_or_json(response)


async def test_legacy_call_whose_mcp_name_matches_still_runs(mcp_http):
    body = legacy_call("probe_echo") | {"params": {"name": "probe_echo", "arguments": {"text": "hi"}}}
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=body, headers=LEGACY | {"Mcp-Name": "probe_echo"})

    assert response.status_code == 200
    assert sse_or_json(response)["result"]["structuredContent"]["text"] == "hi"


@pytest.mark.parametrize("arguments", [[], "text", 5, True])
@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_arguments_that_are_not_an_object_are_refused_in_band_by_the_tools_parser(mcp_http, arguments, era):
    if era == MODERN:
        body, headers = modern_call("probe_echo", {}), modern_headers("tools/call", "probe_echo")
        body["params"]["arguments"] = arguments
    else:
        body, headers = legacy_call("probe_echo") | {"params": {"name": "probe_echo", "arguments": arguments}}, LEGACY
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=body, headers=headers)

    result = sse_or_json(response)["result"]
    assert (response.status_code, result["isError"]) == (200, True)
    assert result["structuredContent"] == {
        "error": {
            "code": "invalid_arguments",
            "message": "Invalid arguments: arguments: Input should be an object",
            "problems": [{"field": "arguments", "problem": "Input should be an object"}],
        }
    }


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_arguments_giving_a_name_twice_are_refused_in_band_by_the_tools_parser_and_charge_nothing(
    mcp_http, api_key, era
):
    from billing.models import UsageEvent

    if era == MODERN:
        body, headers = modern_call("probe_metered", {"side": "buy"}), modern_headers("tools/call", "probe_metered")
    else:
        body = legacy_call("probe_metered") | {"params": {"name": "probe_metered", "arguments": {"side": "buy"}}}
        headers = LEGACY
    raw = json.dumps(body).replace('"side": "buy"', '"side": "buy", "side": "sell"')
    async with mcp_http(api_key) as http:
        response = await http.post("/api/mcp", content=raw, headers=headers | {"Content-Type": "application/json"})

    result = sse_or_json(response)["result"]
    problem = "Given more than once (a name may appear once in a JSON object)"
    assert (response.status_code, result["isError"]) == (200, True)
    assert result["structuredContent"] == {
        "error": {
            "code": "invalid_arguments",
            "message": f"Invalid arguments: side: {problem}",
            "problems": [{"field": "side", "problem": problem}],
        }
    }
    assert await UsageEvent.objects.aexists() is False


# A metered call wrapped in each envelope: refused before it runs, so nothing is charged.
METERED = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "probe_metered", "arguments": {"side": "buy"}},
}
NOT_ONE_MESSAGE = [
    ([METERED], "a batch (an array of messages) is not accepted: send one message per request"),
    ([], "a batch (an array of messages) is not accepted: send one message per request"),
    (5, "a message is a JSON object"),
    ("hi", "a message is a JSON object"),
    (METERED | {"jsonrpc": "1.0"}, 'jsonrpc must be "2.0"'),
    ({k: v for k, v in METERED.items() if k != "jsonrpc"}, 'jsonrpc must be "2.0"'),
    (METERED | {"method": ["tools/call"]}, "method must be a string"),
    (METERED | {"method": 5}, "method must be a string"),
    (METERED | {"id": None}, "id must not be null (a notification has no id)"),
    ({"jsonrpc": "2.0", "id": 1}, "a message without a method is a response: an id and either a result or an error"),
    (
        {"jsonrpc": "2.0", "result": {}},
        "a message without a method is a response: an id and either a result or an error",
    ),
]


@pytest.mark.parametrize(("body", "problem"), NOT_ONE_MESSAGE)
@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_a_body_that_is_not_one_json_rpc_message_is_an_invalid_request_saying_why_and_charges_nothing(
    mcp_http, api_key, body, problem, era
):
    from billing.models import Transfer, UsageEvent

    headers = LEGACY if era != MODERN else modern_headers("tools/call", "probe_metered")
    async with mcp_http(api_key) as http:
        response = await http.post("/api/mcp", json=body, headers=headers)

    assert response.status_code == 400
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": f"Invalid Request: {problem}"},
    }
    assert (await UsageEvent.objects.aexists(), await Transfer.objects.aexists()) == (False, False)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_are_not_json_and_get_a_parse_error(mcp_http, api_key, literal):
    body = json.dumps(legacy_call("probe_echo")).replace('"arguments": {}', f'"arguments": {{"text": {literal}}}')
    async with mcp_http(api_key) as http:
        response = await http.post("/api/mcp", content=body, headers=LEGACY | {"Content-Type": "application/json"})

    assert response.status_code == 400
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error: the body is not JSON"},
    }


@pytest.mark.parametrize("key", ["read_only", None])
async def test_a_tool_call_sent_as_a_notification_is_not_answered_and_runs_nothing(mcp_http, api_key, key):
    from backtests.models import Strategy

    notification = {k: v for k, v in legacy_call("create_strategy").items() if k != "id"}
    async with mcp_http(api_key if key else None) as http:
        response = await http.post("/api/mcp", json=notification, headers=LEGACY)

    assert (response.status_code, response.content) == (202, b"")
    assert await Strategy.objects.aexists() is False


PROMPT_REFUSALS = [
    ("evaluate_before_deciding", {}, "missing symbol"),
    ("evaluate_before_deciding", {"symbol": "SPY", "colour": "red"}, "evaluate_before_deciding takes no colour"),
    ("evaluate_before_deciding", {"colour": "red"}, "missing symbol; evaluate_before_deciding takes no colour"),
    ("evaluate_before_deciding", {"symbol": 5}, "arguments must be an object of strings"),
    ("nope", {}, "no prompt is named 'nope'"),
]


@pytest.mark.parametrize(("name", "arguments", "problem"), PROMPT_REFUSALS)
@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_a_prompt_asked_for_with_a_wrong_name_or_arguments_is_invalid_params_not_an_internal_error(
    mcp_http, api_key, name, arguments, problem, era
):
    from tests.mcp.test_transport import modern_meta

    params = {"name": name, "arguments": arguments} | ({"_meta": modern_meta()} if era == MODERN else {})
    body = {"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": params}
    headers = LEGACY if era != MODERN else modern_headers("prompts/get", name)
    async with mcp_http(api_key) as http:
        response = await http.post("/api/mcp", json=body, headers=headers)

    assert response.status_code == (400 if era == MODERN else 200)
    assert sse_or_json(response) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32602, "message": f"Invalid params: {problem}"},
    }


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_a_prompt_asked_for_rightly_is_rendered(mcp_http, api_key, era):
    from tests.mcp.test_transport import modern_meta

    params = {"name": "evaluate_before_deciding", "arguments": {"symbol": "SPY"}}
    params |= {"_meta": modern_meta()} if era == MODERN else {}
    body = {"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": params}
    headers = LEGACY if era != MODERN else modern_headers("prompts/get", "evaluate_before_deciding")
    async with mcp_http(api_key) as http:
        response = await http.post("/api/mcp", json=body, headers=headers)

    assert response.status_code == 200
    assert "Research SPY (both) with Leroy" in sse_or_json(response)["result"]["messages"][0]["content"]["text"]


async def test_media_types_are_read_whatever_their_case(mcp_http):
    headers = {"Content-Type": "APPLICATION/JSON", "Accept": "Application/Json, Text/Event-Stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=body, headers=LEGACY | headers)

    assert response.status_code == 200
    assert "probe_echo" in {tool["name"] for tool in sse_or_json(response)["result"]["tools"]}


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "json"])
@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_a_body_that_is_not_declared_json_is_a_json_rpc_415_and_charges_nothing(
    mcp_http, api_key, content_type, era
):
    # The SDK answered a text/plain 400 "Invalid Content-Type header", no JSON-RPC error (found from outside).
    from billing.models import Transfer, UsageEvent

    headers = LEGACY if era != MODERN else modern_headers("tools/call", "probe_metered")
    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    async with mcp_http(api_key) as http:
        response = await http.post("/api/mcp", content=json.dumps(METERED), headers=headers)

    assert (response.status_code, response.headers["content-type"]) == (415, "application/json")
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Unsupported Media Type: Content-Type must be application/json"},
    }
    assert (await UsageEvent.objects.aexists(), await Transfer.objects.aexists()) == (False, False)


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_a_tool_call_naming_no_tool_is_invalid_params_naming_the_missing_field(mcp_http, api_key, era):
    # The SDK answered it with a bare -32602 whose data was "".
    body = modern_call("probe_echo", {"text": "x"}, request_id=3)
    del body["params"]["name"]
    headers = modern_headers("tools/call") if era == MODERN else LEGACY
    if era != MODERN:
        del body["params"]["_meta"]
    async with mcp_http(api_key) as http:
        response = await http.post("/api/mcp", json=body, headers=headers)

    message = "Invalid arguments: params.name: Field required"
    assert response.status_code == (400 if era == MODERN else 200)
    assert sse_or_json(response) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {
            "code": -32602,
            "message": message,
            "data": {
                "code": "invalid_arguments",
                "message": message,
                "problems": [{"field": "params.name", "problem": "Field required"}],
            },
        },
    }
    assert await UsageEvent.objects.aexists() is False
