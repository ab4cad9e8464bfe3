import json
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from accounts import services
from accounts.models import ApiKey, User
from leroy.mcp.registry import load_tools
from tests.conftest import MCP_URL

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

MODERN = "2026-07-28"


def modern_meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "pytest", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name:
        headers["Mcp-Name"] = name
    return headers


def modern_call(name: str, arguments: dict[str, Any], request_id: int = 7) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": modern_meta()},
    }


def sse_or_json(response: httpx2.Response) -> dict[str, Any]:
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_keyed_call_reaches_the_tool_in_both_eras(mcp_http, api_key, mode):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=mode) as client:
        result = await client.call_tool("probe_whoami", {})

    assert result.is_error is False
    assert result.structured_content["email"] == "alice@example.com"
    assert result.structured_content["scopes"] == ["mcp:read"]
    assert result.structured_content["client_id"].startswith("apikey:")


@pytest.mark.parametrize(("mode", "version"), [("legacy", "2025-11-25"), (MODERN, MODERN)])
async def test_public_tool_answers_anonymous_callers_in_both_eras(mcp_http, mode, version):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=mode) as client:
        result = await client.call_tool("probe_echo", {"text": "hello"})

    assert result.is_error is False
    assert result.structured_content == {"text": "hello", "protocol_version": version}


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_tools_list_publishes_strict_input_and_output_schemas(mcp_http, mode):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert {"probe_echo", "probe_whoami", "probe_write"} <= set(tools)
    echo = tools["probe_echo"]
    assert echo.input_schema["additionalProperties"] is False
    assert echo.input_schema["required"] == ["text"]
    assert echo.input_schema["properties"]["text"]["maxLength"] == 200
    result, refusal = echo.output_schema["anyOf"]  # the answer, or the in-band refusal an isError result carries
    assert (result["properties"]["text"], result["required"]) == ({"type": "string"}, ["text", "protocol_version"])
    assert refusal == {"required": ["error"]}
    assert echo.meta == {"leroy/access": "public", "leroy/scope": "mcp:read", "leroy/metering": "free"}
    assert tools["probe_write"].meta["leroy/scope"] == "mcp:write"


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_unknown_arguments_are_refused_in_band(mcp_http, mode):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=mode) as client:
        result = await client.call_tool("probe_echo", {"text": "hi", "extra": 1})

    assert result.is_error is True
    assert "extra" in result.content[0].text
    assert result.structured_content["error"]["code"] == "invalid_arguments"
    assert result.structured_content["error"]["problems"] == [
        {"field": "extra", "problem": "Extra inputs are not permitted"}
    ]


async def test_tool_failure_is_an_in_band_error_with_a_code(mcp_http):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=MODERN) as client:
        result = await client.call_tool("probe_echo", {"text": "fail"})

    assert result.is_error is True
    assert result.structured_content == {
        "error": {"code": "probe_failed", "message": "The probe was asked to fail.", "hint": "send other text"}
    }


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_anonymous_subscriber_call_is_refused_by_the_sdk_client(mcp_http, mode):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=mode) as client:
        with pytest.raises(MCPError):
            await client.call_tool("probe_whoami", {})


@pytest.mark.parametrize("version", ["2025-11-25", MODERN])
async def test_anonymous_subscriber_call_gets_401_with_subscription_payload(mcp_http, version):
    async with mcp_http() as http:
        if version == MODERN:
            response = await http.post(
                "/api/mcp", json=modern_call("probe_whoami", {}), headers=modern_headers("tools/call", "probe_whoami")
            )
        else:
            body = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "probe_whoami", "arguments": {}},
            }
            response = await http.post(
                "/api/mcp",
                json=body,
                headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": version},
            )

    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge == (
        'Bearer realm="leroy", error_description="probe_whoami requires a Leroy API key or OAuth access token", '
        'resource_metadata="http://127.0.0.1:8000/.well-known/oauth-protected-resource/api/mcp", scope="mcp:read"'
    )
    body = response.json()
    assert body["id"] == 7
    result = body["result"]
    assert result["isError"] is True
    assert result["_meta"] == {"mcp/www_authenticate": [challenge]}
    error = result["structuredContent"]["error"]
    assert error["code"] == "subscription_required"
    assert error["sign_up_url"] == "http://127.0.0.1:8000/account/signup/"
    assert error["pricing"] == {
        "free_plan_usd_per_month": 0,
        "free_included_lookups_per_month": 100,
        "paid_overage_usd_per_lookup": 0.01,
    }
    assert error["free_alternatives"] == [
        "get_data_lineage", "get_heldout_evidence", "get_historical_replay", "get_log_checkpoint",
        "get_log_consistency_proof", "get_log_inclusion_proof", "get_provenance", "get_publication_maturity",
        "get_walk_forward_evidence", "list_publication_commitments", "probe_echo",
    ]  # fmt: skip
    assert ("resultType" in result) is (version == MODERN)


async def test_read_only_key_calling_a_write_tool_gets_403_insufficient_scope(mcp_http, api_key):
    async with mcp_http(api_key) as http:
        response = await http.post(
            "/api/mcp", json=modern_call("probe_write", {}), headers=modern_headers("tools/call", "probe_write")
        )

    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    assert response.json()["result"]["structuredContent"]["error"]["required_scope"] == "mcp:write"


async def test_write_key_may_call_a_write_tool(mcp_http, write_key):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(write_key)), mode=MODERN) as client:
        result = await client.call_tool("probe_write", {})

    assert result.is_error is False
    assert result.structured_content["scopes"] == ["mcp:read", "mcp:write"]


@pytest.mark.parametrize("key", ["lr_live_" + "x" * 43, "not-a-leroy-key", ""])
async def test_unknown_or_malformed_bearer_gets_401_with_challenge(mcp_http, key):
    async with mcp_http(**{"Authorization": f"Bearer {key}"}) as http:
        response = await http.post(
            "/api/mcp",
            json=modern_call("probe_echo", {"text": "x"}),
            headers=modern_headers("tools/call", "probe_echo"),
        )

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        'Bearer realm="leroy", error="invalid_token", '
        'error_description="The bearer credential is unknown, revoked or expired", '
        'resource_metadata="http://127.0.0.1:8000/.well-known/oauth-protected-resource/api/mcp", scope="mcp:read"'
    )


async def test_revoked_key_is_refused_on_the_next_call(mcp_http, owner, api_key):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        assert (await client.call_tool("probe_whoami", {})).is_error is False
    key_row = await ApiKey.objects.aget(user=owner)
    from asgiref.sync import sync_to_async

    await sync_to_async(services.api_key_revoke)(user=owner, number=key_row.number)

    async with mcp_http(api_key) as http:
        response = await http.post(
            "/api/mcp", json=modern_call("probe_whoami", {}), headers=modern_headers("tools/call", "probe_whoami")
        )
    assert response.status_code == 401


async def test_keys_of_one_account_never_authenticate_as_another(mcp_http, owner, outsider):
    from asgiref.sync import sync_to_async

    outsider_key = (await sync_to_async(services.api_key_create)(user=outsider, name="c")).plaintext
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(outsider_key)), mode=MODERN) as client:
        result = await client.call_tool("probe_whoami", {})
    assert result.structured_content["email"] == "charlie@example.com"


async def test_key_use_records_last_used_at(mcp_http, owner, api_key):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http(api_key)), mode=MODERN) as client:
        await client.call_tool("probe_whoami", {})
    key_row = await ApiKey.objects.aget(user=owner)
    assert key_row.last_used_at is not None


async def test_server_discover_shape(mcp_http):
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta()}}
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=body, headers=modern_headers("server/discover"))

    assert response.status_code == 200
    result = sse_or_json(response)["result"]
    assert result["supportedVersions"] == [MODERN]
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["resultType"] == "complete"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "leroy"


async def test_legacy_initialize_negotiates_2025_11_25(mcp_http):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "pytest", "version": "1"},
        },
    }
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=body, headers={"Accept": "application/json, text/event-stream"})

    assert response.status_code == 200
    result = sse_or_json(response)["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"]["name"] == "leroy"
    assert "mcp-session-id" not in response.headers  # stateless: any worker answers any request


async def test_header_body_name_mismatch_is_400(mcp_http):
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp",
            json=modern_call("probe_echo", {"text": "x"}),
            headers=modern_headers("tools/call", "probe_whoami"),
        )

    assert response.status_code == 400
    assert sse_or_json(response)["error"]["code"] == -32020


async def test_missing_meta_is_400(mcp_http):
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "probe_echo", "arguments": {"text": "x"}},
    }
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=body, headers=modern_headers("tools/call", "probe_echo"))

    assert response.status_code == 400
    assert sse_or_json(response)["error"]["code"] == -32602


async def test_get_is_405(mcp_http):
    async with mcp_http() as http:
        response = await http.get("/api/mcp", headers={"Accept": "text/event-stream"})

    assert response.status_code == 405
    assert response.headers["allow"] == "POST, OPTIONS"


async def test_wrong_host_is_421(mcp_http):
    async with mcp_http(Host="evil.example.com") as http:
        response = await http.post(
            "/api/mcp",
            json=modern_call("probe_echo", {"text": "x"}),
            headers=modern_headers("tools/call", "probe_echo"),
        )

    assert response.status_code == 421


async def test_oversized_body_is_413_and_reaches_no_tool(mcp_http):
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp",
            json=modern_call("probe_echo", {"text": "x" * (1024 * 1024)}),
            headers=modern_headers("tools/call", "probe_echo"),
        )

    assert response.status_code == 413
    assert response.json() == {"error": "payload_too_large", "limit_bytes": 1048576}


async def test_conformance_fixtures_are_absent_by_default(mcp_http):
    async with Client(streamable_http_client(MCP_URL, http_client=mcp_http()), mode=MODERN) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}

    assert names == set(load_tools())  # only registered tools: no conformance fixture (test_simple_text, ...)


def test_api_key_plaintext_is_never_stored(owner):
    issued = services.api_key_create(user=owner, name="k")
    row = ApiKey.objects.values().get(pk=issued.api_key.pk)

    assert issued.plaintext not in json.dumps(row, default=str)
    assert row["prefix"] == issued.plaintext[8:16]
    assert len(row["key_hash"]) == 64
    assert User.objects.count() == 1


@pytest.mark.parametrize("version", ["2025-11-25", MODERN])
async def test_batched_calls_are_refused_so_no_call_escapes_the_gates(mcp_http, version):
    body = [modern_call("probe_whoami", {})]
    headers = (
        modern_headers("tools/call", "probe_whoami")
        if version == MODERN
        else {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": version}
    )
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=body, headers=headers)

    assert response.status_code == 400
    assert "result" not in response.json()


async def test_modern_call_without_mcp_name_is_a_400_header_mismatch_before_any_credential_check(mcp_http):
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp", json=modern_call("probe_whoami", {}), headers=modern_headers("tools/call")
        )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020
    assert "www-authenticate" not in response.headers


async def test_mcp_name_surrounding_whitespace_is_not_a_mismatch(mcp_http):
    headers = modern_headers("tools/call", "  probe_whoami  ")
    async with mcp_http() as http:
        response = await http.post("/api/mcp", json=modern_call("probe_whoami", {}), headers=headers)

    assert response.status_code == 401  # the header matched: the anonymous caller meets the credential check
    assert response.headers["www-authenticate"].startswith('Bearer realm="leroy"')
