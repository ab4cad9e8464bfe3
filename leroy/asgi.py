"""ASGI entry point: lifespan, /api/mcp to the MCP bridge, everything else to Django."""

import asyncio
import contextlib
import contextvars
import os
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")

from django.core.asgi import get_asgi_application

_django_app = get_asgi_application()  # sets Django up before the bridge imports models

from asgiref.sync import ThreadSensitiveContext  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core import signals  # noqa: E402
from django.core.exceptions import SuspiciousOperation  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.db import connections  # noqa: E402
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBase  # noqa: E402
from django.middleware.clickjacking import XFrameOptionsMiddleware  # noqa: E402
from django.middleware.csp import ContentSecurityPolicyMiddleware  # noqa: E402
from django.middleware.security import SecurityMiddleware  # noqa: E402
from starlette.types import Receive, Scope, Send  # noqa: E402

from evidence.marketdata import calendar  # noqa: E402
from leroy.admission import Admission  # noqa: E402
from leroy.mcp.server import build_mcp_asgi  # noqa: E402

T = TypeVar("T")
# Liveness, readiness and scrapes must answer even when every slot is taken.
ADMISSION_EXEMPT = frozenset({"/healthz", "/readyz", "/metrics"})


class _RequestThread(ThreadPoolExecutor):
    """One persistent thread; knows whether a request gave it work since it was last released."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="leroy-request")
        self.used = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        self.used = True
        return super().submit(fn, *args, **kwargs)


class RequestThreads:
    """Persistent sync threads, each leased to one request at a time for all of that request's sync work.

    Django's ASGI handler gives every request a new thread of its own (asgiref's ThreadSensitiveContext), started and
    joined per request: about 0.3 ms of CPU, and every per-thread cache (the Market Memory reader's SQLite connection
    and its page cache) rebuilt by each request that reads it. A leased thread keeps the same affinity (one thread runs
    a request's sync calls in order) and the same connection hygiene: the request signals open and close its database
    connection, and a thread that ran anything closes whatever connection is still open before its next request (a
    thread that died with its request took such a connection with it)."""

    def __init__(self, max_idle: int) -> None:
        self._idle: list[_RequestThread] = []
        self.max_idle = max_idle

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[None]:
        try:
            executor = self._idle.pop()  # the most recently returned thread: its caches are the warmest
        except IndexError:
            executor = _RequestThread()
        try:
            # Django's handler enters a ThreadSensitiveContext of its own: inside this one it uses this thread.
            async with ThreadSensitiveContext(executor=executor):
                yield
        finally:
            if executor.used:
                executor.used = False
                ThreadPoolExecutor.submit(executor, connections.close_all)  # queued ahead of any later request's work
            if len(self._idle) < self.max_idle:
                self._idle.append(executor)
            else:  # a burst past what admission lets through (exempt paths) does not leave its threads behind
                executor.shutdown(wait=False)

    @property
    def idle(self) -> int:
        return len(self._idle)


# One pool per process: every app instance (tests build many) shares its idle threads. Admission bounds the requests
# in flight but for the exempt paths (probes, metrics, static files), so as many threads as it admits are kept.
REQUEST_THREADS = RequestThreads(max_idle=settings.LEROY_ADMISSION_MAX_INFLIGHT)


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static file handler, answering as a page does. It runs outside the middleware, so the headers every
    page gets (CSP, frame refusal, nosniff, referrer policy) are added here by those middleware's own
    `process_response`; and a path its finders refuse as a traversal (SuspiciousFileOperation, a 500 with three
    tracebacks in the log) is Leroy's 404, as any other file it does not have."""

    def __init__(self, application: Any) -> None:
        super().__init__(application)
        unused = _no_response  # only their process_response is used
        security, csp, frames = (
            SecurityMiddleware(unused),
            ContentSecurityPolicyMiddleware(unused),
            XFrameOptionsMiddleware(unused),
        )
        self.headers = [security.process_response, csp.process_response, frames.process_response]

    def serve(self, request: HttpRequest) -> HttpResponse | FileResponse:
        try:
            return super().serve(request)
        except SuspiciousOperation:
            raise Http404("no such static file") from None

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response = await super().get_response_async(request)
        for headed in self.headers:
            response = headed(request, response)  # type: ignore[arg-type]  # any response, a file's too
        return response


def _no_response(request: HttpRequest) -> HttpResponseBase:
    raise AssertionError("the static handler calls no view through these middleware")


class LeroyASGI:
    """Owns the lifespan (Django's handler refuses it) that the SDK session manager needs."""

    def __init__(self) -> None:
        self.django_app = StaticFiles(_django_app)
        self.mcp_app, self.session_manager = build_mcp_asgi()
        self.mcp_paths = frozenset({settings.LEROY_MCP_PATH, settings.LEROY_MCP_PATH + "/"})
        self.admission = Admission(
            self._dispatch,
            max_inflight=settings.LEROY_ADMISSION_MAX_INFLIGHT,
            per_principal=settings.LEROY_ADMISSION_PER_PRINCIPAL,
            wait_seconds=settings.LEROY_ADMISSION_WAIT_SECONDS,
            exempt_paths=ADMISSION_EXEMPT,
            exempt_prefixes=("/" + settings.STATIC_URL.lstrip("/"),),
            rpc_paths=self.mcp_paths,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        # Each request runs in an empty context. On asyncio a request's task can start in a copy of an earlier
        # request's context on the same connection (CPython gh-140947: after a large body uvicorn resumes reading
        # from inside that request's task, and creates the next request's task from that callback), and whatever the
        # earlier request had set would be seen: an anonymous MCP request was served as the earlier caller.
        serve = self.admission(scope, receive, send)
        await asyncio.get_running_loop().create_task(serve, context=contextvars.Context())

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with REQUEST_THREADS.lease():
            if scope["type"] == "http" and scope["path"] in self.mcp_paths:
                await self._mcp(scope, receive, send)
            else:
                await self.django_app(scope, receive, send)  # type: ignore[arg-type]  # Starlette vs Django ASGI types

    async def _mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The signals give the MCP branch the same connection hygiene as a Django request.
        if scope["path"] != settings.LEROY_MCP_PATH:  # "/api/mcp/" is served as itself, not redirected (307)
            scope = {**scope, "path": settings.LEROY_MCP_PATH, "raw_path": settings.LEROY_MCP_PATH.encode()}
        await signals.request_started.asend(sender=ASGIHandler, scope=scope)
        try:
            await self.mcp_app(scope, receive, send)
        finally:
            await signals.request_finished.asend(sender=ASGIHandler)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        started = False
        try:
            # Built before the first request rather than by it: the minute lookups' index takes about 1 s.
            await asyncio.to_thread(calendar.warm)
            async with self.session_manager.run():
                await send({"type": "lifespan.startup.complete"})
                started = True
                await receive()  # lifespan.shutdown
        except BaseException as exc:
            failed = "lifespan.shutdown.failed" if started else "lifespan.startup.failed"
            await send({"type": failed, "message": repr(exc)})
            raise
        await send({"type": "lifespan.shutdown.complete"})


application = LeroyASGI()
