import pytest

from tests.mcp.test_transport import modern_call, modern_headers

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

ALLOWED = "https://agent.example"


def preflight_headers(origin: str) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version, mcp-method, mcp-name",
    }


async def test_preflight_from_allowed_origin_echoes_it_and_allows_mcp_headers(mcp_http):
    async with mcp_http() as http:
        response = await http.options("/api/mcp", headers=preflight_headers(ALLOWED))

    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert response.headers["access-control-allow-methods"] == "POST, OPTIONS"
    allowed = {h.strip().lower() for h in response.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "mcp-protocol-version", "mcp-method", "mcp-name"} <= allowed
    assert response.headers["vary"] == "Origin"
    assert "access-control-allow-credentials" not in response.headers


async def test_preflight_from_other_origin_is_refused_without_cors_headers(mcp_http):
    async with mcp_http() as http:
        response = await http.options("/api/mcp", headers=preflight_headers("https://evil.example"))

    assert response.status_code == 403
    assert not any(name.startswith("access-control-") for name in response.headers)


async def test_request_from_allowed_origin_gets_cors_headers_and_never_credentials(mcp_http):
    async with mcp_http(Origin=ALLOWED) as http:
        response = await http.post(
            "/api/mcp",
            json=modern_call("probe_echo", {"text": "x"}),
            headers=modern_headers("tools/call", "probe_echo"),
        )

    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert "www-authenticate" in response.headers["access-control-expose-headers"].lower()
    assert "access-control-allow-credentials" not in response.headers


async def test_401_to_allowed_origin_is_readable_by_the_browser(mcp_http):
    async with mcp_http(Origin=ALLOWED) as http:
        response = await http.post(
            "/api/mcp", json=modern_call("probe_whoami", {}), headers=modern_headers("tools/call", "probe_whoami")
        )

    assert response.status_code == 401
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert "access-control-allow-credentials" not in response.headers


async def test_request_from_other_origin_is_refused_without_cors_headers(mcp_http):
    async with mcp_http(Origin="https://evil.example") as http:
        response = await http.post(
            "/api/mcp",
            json=modern_call("probe_echo", {"text": "x"}),
            headers=modern_headers("tools/call", "probe_echo"),
        )

    assert response.status_code == 403
    assert not any(name.startswith("access-control-") for name in response.headers)
