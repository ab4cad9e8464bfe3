"""The MCP tool registry that apps contribute to from their own `tools.py`.

A tool declares its argument and result models, whether anonymous callers may use it (`public`) or it needs a
principal (`subscriber`), the scope it needs and its metering class. The bridge in `server.py` turns each spec
into an SDK tool; the transport uses the same specs to answer 401/403 before the SDK is reached.
"""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings
from django.utils.module_loading import autodiscover_modules
from pydantic import BaseModel

from leroy import admission
from leroy.errors import DomainError
from leroy.schemas import ToolArgs

if TYPE_CHECKING:
    from accounts.models import User

Access = Literal["public", "subscriber"]
Scope = Literal["mcp:read", "mcp:write"]
Metering = Literal["free", "lookup", "credits"]


@dataclass(frozen=True)
class Principal:
    """Who is calling: an API key or an OAuth client acting for a user."""

    user_id: int
    client_id: str  # "apikey:<id>" or "oauth:<client_id>"
    scopes: frozenset[str]
    # The account as the authentication read it for this request (active), when it did: not read again per call.
    account: "User | None" = field(default=None, compare=False, repr=False)
    # Whether the request's credential still authenticates (read again: a key revoked, a client disconnected, the
    # account suspended), for a call that waits; None where there is no credential to read again (direct calls).
    authenticates: Callable[[], bool] | None = field(default=None, compare=False, repr=False)


# How often a waiting call reads its credential again: a revoked key stops a long poll within about this long.
RECHECK_SECONDS = 1.0


@dataclass(frozen=True)
class ToolCall:
    """What a handler knows about the call besides its arguments."""

    tool: str  # the registered tool's name
    principal: Principal | None
    protocol_version: str | None
    report_progress: Callable[[float, float | None, str | None], Awaitable[None]]
    rechecked: list[float] = field(default_factory=lambda: [0.0], compare=False, repr=False)  # event-loop time

    def user(self) -> "User":
        """The calling account: the one this request's authentication read, else read from the database (sync:
        call it inside sync_to_async).

        Subscriber tools always have a principal: the bridge refuses anonymous calls before they run."""
        from accounts.models import User

        assert self.principal is not None
        if self.principal.account is not None:
            return self.principal.account
        return User.objects.get(pk=self.principal.user_id)

    async def idle(self, seconds: float) -> None:
        """Sleep between a long poll's reads (holding no connection): the request's admission slot serves others.
        Then, at most once every RECHECK_SECONDS, read the call's credential again: a key revoked while the call
        waits ends the wait with `invalid_token`, as a new call with it would be ("agents using it stop working at
        once")."""
        async with admission.lent():
            await asyncio.sleep(seconds)
        check = self.principal.authenticates if self.principal is not None else None
        loop = asyncio.get_running_loop()
        if check is None or loop.time() - self.rechecked[0] < RECHECK_SECONDS:
            return
        self.rechecked[0] = loop.time()
        from asgiref.sync import sync_to_async

        if not await sync_to_async(check)():
            raise DomainError(
                "invalid_token", "The credential this call was made with was revoked or expired while it waited."
            )


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


def direct_call(*, tool: str, user_id: int | None, client_id: str) -> ToolCall:
    """A call that does not come through the MCP transport (the REST mirror, tests): the signed-in account itself
    with every scope (None: anonymous, for public tools), and nowhere to report progress to."""
    principal = (
        None
        if user_id is None
        else Principal(user_id=user_id, client_id=client_id, scopes=frozenset({"mcp:read", "mcp:write"}))
    )
    return ToolCall(tool=tool, principal=principal, protocol_version=None, report_progress=_no_progress)


def call_for(*, user_id: int, tool: str, args: BaseModel) -> BaseModel:
    """Run a registered tool for an account from sync code (management commands, tests), metered like any call;
    a refusal is raised as its DomainError."""
    from asgiref.sync import async_to_sync

    return async_to_sync(load_tools()[tool].handler)(direct_call(tool=tool, user_id=user_id, client_id="direct"), args)


class ToolFailure(DomainError):
    """An in-band tool error raised by a tool's own edge (any DomainError is reported the same way)."""


Handler = Callable[[ToolCall, Any], Awaitable[BaseModel]]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    args: type[ToolArgs]
    output: type[BaseModel]
    handler: Handler
    access: Access
    scope: Scope
    metering: Metering
    read_only: bool = True
    idempotent: bool = True
    destructive: bool = False  # deletes, overwrites or cancels something the caller had (MCP destructiveHint)
    open_world: bool = False  # reaches outside Leroy's own data, e.g. an external market-data provider
    rest: bool = True  # the REST mirror (leroy.api) has a route for it
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def toolset(self) -> str:
        """What X-Leroy-Toolsets names: the app that contributes the tool (evidence, backtests, billing, alerts), or
        `eod` for the public end-of-day layer, a toolset of its own though it lives in evidence."""
        module = self.handler.__module__
        return "eod" if module.startswith("evidence.eod.") else module.split(".")[0]


REGISTRY: dict[str, ToolSpec] = {}


def tool(
    *,
    name: str,
    title: str,
    args: type[ToolArgs],
    output: type[BaseModel],
    access: Access,
    scope: Scope,
    metering: Metering,
    read_only: bool = True,
    idempotent: bool = True,
    destructive: bool = False,
    open_world: bool = False,
    rest: bool | None = None,
) -> Callable[[Handler], Handler]:
    """Register `handler` as MCP tool `name`; its docstring is the tool's description.

    `rest` (default: `read_only`) gives the tool its twin in the REST mirror."""
    if access == "public" and scope != "mcp:read":
        raise ValueError(f"public tool {name} cannot require {scope}")
    if read_only and destructive:
        raise ValueError(f"read-only tool {name} cannot be destructive")

    def register(handler: Handler) -> Handler:
        if name in REGISTRY and REGISTRY[name].handler is not handler:
            raise ValueError(f"MCP tool {name} is registered twice")
        REGISTRY[name] = ToolSpec(
            name=name,
            title=title,
            description=(handler.__doc__ or "").strip(),
            args=args,
            output=output,
            handler=handler,
            access=access,
            scope=scope,
            metering=metering,
            read_only=read_only,
            idempotent=idempotent,
            destructive=destructive,
            open_world=open_world,
            rest=read_only if rest is None else rest,
        )
        return handler

    return register


def load_tools() -> dict[str, ToolSpec]:
    """Import every installed app's `tools.py` plus the modules named by LEROY_MCP_TOOL_MODULES."""
    autodiscover_modules("tools")
    for module in settings.LEROY_MCP_TOOL_MODULES:
        __import__(module)
    return REGISTRY
