"""Every request starts in a context of its own: nothing an earlier request on the same connection set is seen."""

import contextvars
import http.client
import json
from collections.abc import Iterator

import pytest

from accounts.models import User
from tests.live import live_server
from tests.mcp.test_resources import completed_report

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}


@pytest.fixture
def live_port(transactional_db: None) -> Iterator[int]:
    """Leroy's ASGI app under uvicorn on asyncio (where an earlier request's context could reach a later one's)."""
    from leroy.asgi import LeroyASGI

    with live_server(LeroyASGI(), loop="asyncio", http="h11") as port:
        yield port


def post(connection: http.client.HTTPConnection, message: dict, key: str | None = None) -> tuple[int, dict]:
    headers = HEADERS | ({"Authorization": f"Bearer {key}"} if key else {})
    connection.request("POST", "/api/mcp", body=json.dumps(message).encode(), headers=headers)
    response = connection.getresponse()
    [data] = [line for line in response.read().decode().splitlines() if line.startswith("data: ")]  # one SSE event
    return response.status, json.loads(data.removeprefix("data: "))


def test_an_anonymous_request_after_a_large_keyed_one_on_the_same_connection_runs_as_nobody(
    live_port: int, owner: User, api_key: str
):
    report = completed_report(owner)
    large = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
             "params": {"name": "get_usage", "arguments": {"pad": "x" * 600_000}}}  # fmt: skip
    read = {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": f"leroy://report/{report.pk}"}}
    connection = http.client.HTTPConnection("127.0.0.1", live_port, timeout=30)

    keyed_status, _ = post(connection, large, api_key)
    answers = [post(connection, read) for _ in range(3)]
    connection.close()

    assert keyed_status == 200
    for status, answer in answers:
        assert status == 200
        assert "result" not in answer
        assert answer["error"]["code"] == -32001
        assert "API key or OAuth" in answer["error"]["message"]


MARKER = contextvars.ContextVar[str | None]("marker", default=None)


@pytest.mark.anyio
async def test_a_request_runs_in_an_empty_context_whatever_context_it_was_started_in():
    from leroy.asgi import LeroyASGI

    app, seen = LeroyASGI(), []

    async def spy(scope, receive, send) -> None:
        seen.append(MARKER.get())

    app.admission = spy  # type: ignore[assignment]
    MARKER.set("set by an earlier request")

    await app({"type": "http", "path": "/healthz"}, None, None)

    assert seen == [None]
    assert MARKER.get() == "set by an earlier request"


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_the_mcp_bridge_serves_an_anonymous_request_as_nobody_whatever_principal_its_context_holds(
    owner: User, api_key: str
):
    import httpx2
    from asgiref.sync import sync_to_async
    from mcp.server.auth.middleware.auth_context import auth_context_var
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser

    from leroy.mcp.server import build_mcp_asgi
    from leroy.mcp.transport import _authenticate

    report = await sync_to_async(completed_report)(owner)
    token = await sync_to_async(_authenticate)(api_key)
    bridge, session_manager = build_mcp_asgi()
    read = {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": f"leroy://report/{report.pk}"}}
    auth_context_var.set(AuthenticatedUser(token))  # as a request before it on the connection could leave it
    async with (
        session_manager.run(),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=bridge), base_url="http://127.0.0.1") as http,
    ):
        response = await http.post("/api/mcp", json=read, headers=HEADERS)

    [data] = [line for line in response.text.splitlines() if line.startswith("data: ")]
    answer = json.loads(data.removeprefix("data: "))
    assert "result" not in answer
    assert answer["error"]["code"] == -32001
