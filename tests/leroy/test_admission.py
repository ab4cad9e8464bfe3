"""The ASGI admission limits: per principal, per process, a bounded wait, then 503 with Retry-After."""

import asyncio
import time

import httpx2
import pytest

from leroy.admission import Admission

pytestmark = pytest.mark.anyio


class Held:
    """An app whose requests stay in flight until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.inside = 0

    async def __call__(self, scope, receive, send) -> None:
        self.inside += 1
        await self.release.wait()
        self.inside -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})


def client(app) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1")


def admission(app, **limits) -> Admission:
    defaults = {"max_inflight": 4, "per_principal": 2, "wait_seconds": 0.3, "exempt_paths": frozenset({"/healthz"})}
    return Admission(app, **{**defaults, **limits}, rpc_paths=frozenset({"/api/mcp"}))


async def post(http, key: str):
    return await http.post("/api/mcp", headers={"Authorization": f"Bearer {key}"}, content=b"{}")


async def test_a_principal_past_its_limit_gets_503_after_the_bounded_wait_while_others_pass():
    held = Held()
    app = admission(held)
    async with client(app) as http:
        first = [asyncio.create_task(post(http, "hot")) for _ in range(2)]
        await asyncio.sleep(0.05)
        started = time.monotonic()
        refused = await post(http, "hot")
        waited = time.monotonic() - started
        other = asyncio.create_task(post(http, "other"))
        await asyncio.sleep(0.05)
        assert held.inside == 3  # the other principal was admitted at once
        held.release.set()
        statuses = [r.status_code for r in await asyncio.gather(*first, other)]

    assert statuses == [200, 200, 200]
    assert refused.status_code == 503
    assert 0.25 <= waited < 1.0
    assert refused.headers["retry-after"] == "1"
    assert refused.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32000,
            "message": "Too many requests of this principal are in flight; retry shortly",
            "data": {"code": "overloaded", "reason": "principal", "retry_after_seconds": 1},
        },
    }
    assert app.principals == {}  # idle principals are forgotten


async def test_the_process_limit_refuses_any_principal_once_full():
    held = Held()
    app = admission(held, max_inflight=2)
    async with client(app) as http:
        first = [asyncio.create_task(post(http, key)) for key in ("a", "b")]
        await asyncio.sleep(0.05)
        refused = await post(http, "c")
        page = await http.get("/account/")
        held.release.set()
        await asyncio.gather(*first)

    assert refused.status_code == 503
    assert refused.json()["error"]["data"]["reason"] == "process"
    assert page.status_code == 503
    assert page.json()["error"] == "overloaded"


async def test_exempt_paths_answer_even_when_full():
    held = Held()
    app = admission(held, max_inflight=1)

    async def health_app(scope, receive, send):
        if scope["path"] == "/healthz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
        else:
            await held(scope, receive, send)

    app.app = health_app
    async with client(app) as http:
        busy = asyncio.create_task(post(http, "a"))
        await asyncio.sleep(0.05)
        health = await http.get("/healthz")
        held.release.set()
        await busy

    assert health.status_code == 200


async def test_a_waiter_is_admitted_when_a_slot_frees_within_the_wait():
    held = Held()
    app = admission(held, per_principal=1, wait_seconds=2.0)
    async with client(app) as http:
        first = asyncio.create_task(post(http, "hot"))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(post(http, "hot"))
        await asyncio.sleep(0.1)
        assert held.inside == 1
        held.release.set()
        statuses = [r.status_code for r in await asyncio.gather(first, second)]

    assert statuses == [200, 200]
    assert app.in_flight == 0


async def test_a_long_poll_lends_its_process_slot_while_it_waits_and_takes_it_back_after():
    from leroy.admission import lent

    polling, served = asyncio.Event(), []

    async def app(scope, receive, send):
        if scope["path"] == "/poll":
            async with lent():
                await polling.wait()
        served.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    gate = admission(app, max_inflight=1)
    async with client(gate) as http:
        poll = asyncio.create_task(http.post("/poll", headers={"Authorization": "Bearer a"}))
        await asyncio.sleep(0.05)
        others = [await post(http, key) for key in ("b", "c")]  # the one process slot is free while "a" waits
        in_flight_while_waiting = gate.in_flight
        polling.set()
        polled = await poll

    assert [r.status_code for r in others] == [200, 200]
    assert in_flight_while_waiting == 0
    assert polled.status_code == 200
    assert served == ["/api/mcp", "/api/mcp", "/poll"]
    assert (gate.in_flight, gate.principals) == (0, {})


async def test_a_handler_that_outlives_its_request_gives_back_the_slot_it_takes_again():
    from leroy.admission import lent

    resume, stray = asyncio.Event(), []

    async def app(scope, receive, send):
        async def handler():  # runs on after the response, as a handler whose client went away may
            async with lent():
                await resume.wait()

        stray.append(asyncio.create_task(handler()))
        await asyncio.sleep(0.01)  # the handler is inside lent: the slot is lent out
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    gate = admission(app, max_inflight=1)
    async with client(gate) as http:
        answered = await post(http, "a")
        resume.set()
        await stray[0]
        after = await post(http, "b")

    assert (answered.status_code, after.status_code) == (200, 200)
    assert (gate.in_flight, gate.process.used) == (0, 0)
