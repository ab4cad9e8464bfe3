"""Admission limits in front of every request that may use the database (the roof: wraps the whole ASGI app).

Each process serves at most `LEROY_ADMISSION_MAX_INFLIGHT` requests at once, fewer than its database pool holds
(`LEROY_DB_POOL_MAX`), so a request that is admitted always gets a connection and a flood can never turn into pool
timeouts. Each principal (a bearer credential, else the client address) has at most `LEROY_ADMISSION_PER_PRINCIPAL`
of those slots, so one account cannot occupy the pool (or queue a pile of connections on its own period row lock)
while others wait. A request that cannot get both slots within `LEROY_ADMISSION_WAIT_SECONDS` is answered 503 with
`Retry-After`; it never waits longer and never becomes a 500. The principal slot is taken first, so a principal
waiting on its own limit holds no process slot. A long poll lends its process slot back while it sleeps between
reads (`lent`: it holds no connection then), so waits held open by any number of callers never fill the process.
"""

import asyncio
import contextlib
import hashlib
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from leroy import metrics

RETRY_AFTER_SECONDS = 1


class Slots:
    """A counting limit whose waiters are served first come, first served, with a deadline (no loop binding)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.waiters: deque[asyncio.Future[None]] = deque()

    @property
    def idle(self) -> bool:
        return self.used == 0 and not self.waiters

    async def acquire(self, timeout: float | None) -> bool:
        """A slot within `timeout` seconds (None: however long it takes, in turn)."""
        if self.used < self.capacity and not self.waiters:
            self.used += 1
            return True
        if timeout is not None and timeout <= 0:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            if waiter.done():  # handed a slot just as the deadline passed: keep it
                return True
            waiter.cancel()
            self.waiters.remove(waiter)
            return False
        except BaseException:  # the client went away while waiting
            if waiter.done():
                self.release()
            else:
                waiter.cancel()
                self.waiters.remove(waiter)
            raise
        return True

    def release(self) -> None:
        """Hand the slot to the oldest live waiter, or free it."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.used -= 1


@dataclass
class _Holding:
    process: Slots
    held: bool = True
    done: bool = False  # the request has ended: a slot taken back after it would never be released


_holding: ContextVar[_Holding | None] = ContextVar("leroy_admission_holding", default=None)


@contextlib.asynccontextmanager
async def lent() -> AsyncIterator[None]:
    """Around a wait that holds no database connection (a long poll's sleep between reads): this request's process
    slot serves other requests meanwhile, and is taken again, in turn with them, before the request goes on."""
    holding = _holding.get()
    if holding is None or not holding.held:  # not admitted here (tests, the REST mirror's own calls): nothing to lend
        yield
        return
    holding.held = False
    holding.process.release()
    try:
        yield
    finally:
        await holding.process.acquire(None)
        if holding.done:  # a handler that outlived its request (the client went away): give it back at once
            holding.process.release()
        else:
            holding.held = True


def principal_of(scope: Scope) -> str:
    """The admission identity: a digest of the bearer credential (checked later; a wrong one only limits
    itself), else the client address."""
    for key, value in scope["headers"]:
        if key == b"authorization":
            return "bearer:" + hashlib.sha256(value).hexdigest()[:32]
    client = scope.get("client") or ("unknown", 0)
    return f"ip:{client[0]}"


class Admission:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_inflight: int,
        per_principal: int,
        wait_seconds: float,
        exempt_paths: frozenset[str],
        exempt_prefixes: tuple[str, ...] = (),
        rpc_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.process = Slots(max_inflight)
        self.per_principal = per_principal
        self.principals: dict[str, Slots] = {}
        self.wait_seconds = wait_seconds
        self.exempt_paths = exempt_paths
        self.exempt_prefixes = exempt_prefixes
        self.rpc_paths = rpc_paths

    @property
    def in_flight(self) -> int:
        return self.process.used

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self.exempt_paths or path.startswith(self.exempt_prefixes):
            await self.app(scope, receive, send)
            return
        deadline = time.monotonic() + self.wait_seconds
        identity = principal_of(scope)
        slots = self.principals.get(identity)
        if slots is None:
            slots = self.principals[identity] = Slots(self.per_principal)
        try:
            if not await slots.acquire(deadline - time.monotonic()):
                await self._refuse(scope, send, "principal")
                return
            try:
                if not await self.process.acquire(deadline - time.monotonic()):
                    await self._refuse(scope, send, "process")
                    return
                holding = _Holding(self.process)
                token = _holding.set(holding)
                try:
                    await self.app(scope, receive, send)
                finally:
                    _holding.reset(token)
                    holding.done = True
                    if holding.held:  # a request cancelled while taking its lent slot back holds none
                        self.process.release()
            finally:
                slots.release()
        finally:
            if slots.idle:
                self.principals.pop(identity, None)

    async def _refuse(self, scope: Scope, send: Send, reason: str) -> None:
        metrics.ADMISSION_REFUSALS.labels(reason).inc()
        message = (
            "Too many requests of this principal are in flight; retry shortly"
            if reason == "principal"
            else "The server is at capacity; retry shortly"
        )
        data: dict[str, Any] = {"code": "overloaded", "reason": reason, "retry_after_seconds": RETRY_AFTER_SECONDS}
        body: dict[str, Any]
        if scope.get("path") in self.rpc_paths:
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message, "data": data}}
        else:
            body = {"error": "overloaded", "error_description": message, **data}
        raw = json.dumps(body).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
            (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": raw})
