import pytest
from django.test import override_settings
from django.urls import reverse

from leroy.mcp.registry import load_tools
from leroy.mcp.server import build_server


@pytest.mark.parametrize("name", ["mcp-json", "mcp-server-card"])
def test_discovery_documents_describe_the_endpoint_and_tools(client, name):
    response = client.get(reverse(name))

    assert response.status_code == 200
    card = response.json()
    assert card["endpoint"] == "http://127.0.0.1:8000/api/mcp"
    assert card["protocolVersions"] == ["2025-11-25", "2026-07-28"]
    assert card["transport"] == {"type": "streamable-http", "stateless": True}
    assert card["authentication"]["oauth"] == {
        "protected_resource_metadata": "http://127.0.0.1:8000/.well-known/oauth-protected-resource/api/mcp",
        "authorization_server_metadata": "http://127.0.0.1:8000/.well-known/oauth-authorization-server",
        "scopes": ["mcp:read", "mcp:write"],
    }
    assert card["rateLimits"] == {"per_credential_per_minute": 120, "anonymous_per_address_per_minute": 40}
    tools = {tool["name"]: tool for tool in card["tools"]}
    assert tools["probe_echo"] == {
        "name": "probe_echo",
        "title": "Echo",
        "access": "public",
        "scope": "mcp:read",
        "metering": "free",
    }
    assert tools["probe_write"]["scope"] == "mcp:write"


def test_both_discovery_paths_serve_the_same_document(client):
    assert client.get("/.well-known/mcp.json").json() == client.get("/.well-known/mcp/server-card.json").json()


async def _tool_names(fixtures: bool) -> set[str]:
    with override_settings(MCP_CONFORMANCE_FIXTURES=fixtures):
        server = build_server()
    return {tool.name for tool in await server.list_tools()}


@pytest.mark.anyio
async def test_conformance_fixtures_register_only_when_enabled():
    without = await _tool_names(False)
    with_fixtures = await _tool_names(True)

    assert without == set(load_tools())  # only registered tools (an app tool may be named test_*)
    assert {"test_simple_text", "test_tool_with_progress", "test_error_handling"} <= with_fixtures
