"""The conformance fixtures (MCP_CONFORMANCE_FIXTURES=1, never in production) as the gate's scenarios read them."""

import pytest

from leroy.mcp.conformance import JSON_SCHEMA_2020_12
from leroy.mcp.registry import load_tools
from leroy.mcp.server import build_server
from tests.mcp.test_transport import modern_call, modern_headers, sse_or_json

pytestmark = pytest.mark.anyio


async def test_json_schema_2020_12_tool_publishes_its_schema_unstripped(settings):
    settings.MCP_CONFORMANCE_FIXTURES = True
    tools = {tool.name: tool for tool in await build_server().list_tools()}

    schema = tools["json_schema_2020_12_tool"].input_schema
    assert schema == JSON_SCHEMA_2020_12
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$defs"]["address"]["$anchor"] == "addressDef"
    assert schema["additionalProperties"] is False


async def test_first_listed_resource_is_a_public_fixture_for_the_caching_scenario(settings):
    settings.MCP_CONFORMANCE_FIXTURES = True
    resources = await build_server().list_resources()

    assert str(resources[0].uri) == "test://static-text"


async def test_first_listed_tool_is_a_public_fixture_for_the_header_validation_scenario(settings):
    settings.MCP_CONFORMANCE_FIXTURES = True
    tools = await build_server().list_tools()

    assert tools[0].name == "test_simple_text"
    assert {tool.name for tool in tools[-len(load_tools()) :]} == set(load_tools())


@pytest.fixture
def fixtures_on(settings):
    settings.MCP_CONFORMANCE_FIXTURES = True  # before mcp_http builds the app


@pytest.mark.django_db(transaction=True)
async def test_missing_capability_fixture_refuses_an_undeclared_sampling_capability(fixtures_on, mcp_http):
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp",
            json=modern_call("test_missing_capability", {}),
            headers=modern_headers("tools/call", "test_missing_capability"),
        )

    assert response.status_code == 400
    error = sse_or_json(response)["error"]
    assert error["code"] == -32021
    assert error["data"] == {"requiredCapabilities": {"sampling": {}}}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("header", "status"), [("eu", 200), ("us", 400)])
async def test_custom_header_fixture_has_its_mcp_param_header_checked_against_the_body(
    fixtures_on, mcp_http, header, status
):
    headers = {**modern_headers("tools/call", "test_custom_header"), "Mcp-Param-Region": header}
    async with mcp_http() as http:
        response = await http.post(
            "/api/mcp", json=modern_call("test_custom_header", {"region": "eu"}), headers=headers
        )

    assert response.status_code == status
