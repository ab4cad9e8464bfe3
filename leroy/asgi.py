"""ASGI entry point: lifespan, /api/mcp to the MCP bridge, everything else to Django."""

import asyncio
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")

from django.core.asgi import get_asgi_application

_django_app = get_asgi_application()  # sets Django up before the bridge imports models

from asgiref.sync import ThreadSensitiveContext  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core import signals  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from starlette.types import Receive, Scope, Send  # noqa: E402

from evidence.marketdata import calendar  # noqa: E402
from leroy.admission import Admission  # noqa: E402
from leroy.mcp.server import build_mcp_asgi  # noqa: E402

# Liveness, readiness and scrapes must answer even when every slot is taken.
ADMISSION_EXEMPT = frozenset({"/healthz", "/readyz", "/metrics"})


class LeroyASGI:
    """Owns the lifespan (Django's handler refuses it) that the SDK session manager needs."""

    def __init__(self) -> None:
        self.django_app = ASGIStaticFilesHandler(_django_app)
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
        else:
            await self.admission(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in self.mcp_paths:
            await self._mcp(scope, receive, send)
        else:
            await self.django_app(scope, receive, send)  # type: ignore[arg-type]  # Starlette vs Django ASGI types

    async def _mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Without this context every async ORM call of every request shares one thread; the signals give the
        # MCP branch the same connection hygiene as a Django request.
        if scope["path"] != settings.LEROY_MCP_PATH:  # "/api/mcp/" is served as itself, not redirected (307)
            scope = {**scope, "path": settings.LEROY_MCP_PATH, "raw_path": settings.LEROY_MCP_PATH.encode()}
        async with ThreadSensitiveContext():
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
