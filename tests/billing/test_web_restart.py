"""uvicorn killed mid-request: the client sees a connection error and the ledger holds no charge without an answer;
the retry after the restart is charged once and replayed thereafter."""

import json
import tempfile
import threading
import time
from pathlib import Path

import httpx2
import pytest

from accounts import services as accounts
from billing import selectors, services
from billing.models import Plan, Transfer, UsageEvent
from tests.mcp.test_transport import modern_call, modern_headers
from tests.processes import uvicorn_server

pytestmark = pytest.mark.django_db(transaction=True)


def call(url: str, key: str, arguments: dict) -> httpx2.Response:
    return httpx2.post(
        url + "/api/mcp",
        json=modern_call("probe_metered", arguments),
        headers={**modern_headers("tools/call", "probe_metered"), "Authorization": f"Bearer {key}"},
        timeout=30,
    )


def result_of(response: httpx2.Response) -> dict:
    data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    return json.loads(data[-1] if data else response.text)["result"]


def test_a_killed_web_server_leaves_no_charge_without_a_stored_answer():
    services.plans_ensure()
    user = accounts.user_create(email="restart@example.com", password="correct horse battery staple")
    accounts.mcp_activate(user=user)
    services.plan_assign(user=user, plan=Plan.objects.get(code="pro"))
    key = accounts.api_key_create(user=user, name="agent").plaintext
    request_id = f"restart-{time.time_ns()}"
    marker = Path(tempfile.gettempdir(), f"leroy-hold-{request_id}")
    outcome: dict = {}

    with uvicorn_server() as server:

        def in_flight() -> None:
            try:
                outcome["response"] = call(
                    server.url, key, {"side": "buy", "client_request_id": request_id, "hold_seconds": 30}
                )
            except httpx2.TransportError as error:
                outcome["error"] = type(error).__name__

        caller = threading.Thread(target=in_flight)
        caller.start()
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists()  # charged inside the request's transaction, answer not yet stored
        server.kill()
        caller.join(timeout=10)
    marker.unlink()

    assert "response" not in outcome
    assert outcome["error"] in {"RemoteProtocolError", "ReadError", "ConnectError"}
    assert UsageEvent.objects.filter(user=user).count() == 0
    assert Transfer.objects.filter(usage_event__user=user).count() == 0

    with uvicorn_server() as restarted:
        retried = result_of(call(restarted.url, key, {"side": "buy", "client_request_id": request_id}))
        replayed = result_of(call(restarted.url, key, {"side": "buy", "client_request_id": request_id}))

    assert retried["isError"] is False
    assert replayed["structuredContent"] == retried["structuredContent"]
    event = UsageEvent.objects.get(user=user)
    assert event.response == retried["structuredContent"]
    assert event.units_charged == 1
    assert Transfer.objects.filter(usage_event=event).count() == 1
    assert selectors.ledger_drift() == []
