"""A database failure while authenticating (pool timeout, server gone) answers a retryable 503, never a 500."""

import pytest
from django.db import OperationalError
from prometheus_client import REGISTRY

from accounts import services as account_services
from tests.mcp.test_transport import modern_call, modern_headers

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


async def test_database_failure_during_key_authentication_is_a_503_with_retry_after(mcp_http, monkeypatch, caplog):
    def pool_timeout(**_):
        raise OperationalError("couldn't get a connection after 5.00 sec")

    monkeypatch.setattr(account_services, "api_key_authenticate", pool_timeout)
    before = REGISTRY.get_sample_value("leroy_dependency_errors_total", {"dependency": "database"}) or 0
    async with mcp_http("lr_live_anything") as http:
        response = await http.post(
            "/api/mcp", json=modern_call("probe_whoami", {}), headers=modern_headers("tools/call", "probe_whoami")
        )

    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32000,
            "message": "Service temporarily unavailable; retry shortly",
            "data": {"code": "database_unavailable", "retry_after_seconds": 2},
        },
    }
    after = REGISTRY.get_sample_value("leroy_dependency_errors_total", {"dependency": "database"})
    assert after - before == 1
    assert not [r for r in caplog.records if r.exc_info]
