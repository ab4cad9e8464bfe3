"""Proxy headers: trusted only from a configured proxy, so a local caller cannot pick its rate-limited address."""

import httpx2
import pytest

from leroy import serving
from tests.mcp.test_transport import modern_call, modern_headers
from tests.processes import uvicorn_server

pytestmark = pytest.mark.django_db(transaction=True)


def spoofed_calls(url: str) -> list[int]:
    statuses = []
    with httpx2.Client(base_url=url, timeout=10) as http:
        for n in range(4):
            response = http.post(
                "/api/mcp",
                json=modern_call("probe_echo", {"text": "x"}),
                headers={**modern_headers("tools/call", "probe_echo"), "X-Forwarded-For": f"198.51.100.{n + 1}"},
            )
            statuses.append(response.status_code)
    return statuses


def test_the_demo_command_trusts_no_proxy_headers():
    command = serving.uvicorn_command(port=8000)

    assert "--no-proxy-headers" in command
    assert "--forwarded-allow-ips" not in command


def test_spoofed_forwarded_for_does_not_change_the_limited_address_without_a_proxy():
    with uvicorn_server(LEROY_RATE_LIMIT_ANONYMOUS_PER_MINUTE="3") as server:
        assert spoofed_calls(server.url) == [200, 200, 200, 429]


def test_a_configured_proxy_passes_the_client_address_on():
    # The production shape: uvicorn trusts the proxy's X-Forwarded-For, so each client has its own budget.
    with uvicorn_server(forwarded_allow_ips="127.0.0.1", LEROY_RATE_LIMIT_ANONYMOUS_PER_MINUTE="3") as server:
        assert spoofed_calls(server.url) == [200, 200, 200, 200]
