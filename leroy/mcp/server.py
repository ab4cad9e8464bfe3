"""The MCP server: every registered tool becomes an SDK tool behind Leroy's transport."""

import json
from importlib.metadata import version
from typing import Annotated, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict, ValidationError
from starlette.types import ASGIApp

from leroy.errors import DomainError
from leroy.mcp import transport
from leroy.mcp.registry import ToolCall, ToolSpec, load_tools

INSTRUCTIONS = (
    "Leroy is a research-only evidence and backtesting service. Public tools need no credential; subscriber "
    "tools need 'Authorization: Bearer lr_live_...' (created after activating MCP on the account page) or an "
    "OAuth access token. Nothing here places orders, manages portfolios or gives investment advice. "
    "A missing comparison is a valid answer: never turn a null into a forecast."
)


def _result(payload: dict[str, Any], *, is_error: bool, meta: dict[str, Any] | None = None) -> CallToolResult:
    text = payload["error"]["message"] if is_error else json.dumps(payload, separators=(",", ":"))
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=payload,
        is_error=is_error,
        _meta=meta,
    )


class _RawArguments(ArgModelBase):
    """The SDK's argument model for every Leroy tool: it hands the caller's arguments through untouched, so they
    are validated exactly once, by the tool's own Args model (extra="forbid"), in `_sdk_tool`."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def invalid_arguments(error: ValidationError) -> DomainError:
    """One in-band refusal for arguments that do not fit the contract: a problem per field, in its own name."""
    problems = [
        {"field": ".".join(str(part) for part in item["loc"]) or "arguments", "problem": item["msg"]}
        for item in error.errors(include_url=False)
    ]
    summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
    return DomainError("invalid_arguments", f"Invalid arguments: {summary}", problems=problems)


def _sdk_tool(spec: ToolSpec) -> Tool:
    async def call(ctx: Context, arguments: dict[str, Any]) -> Annotated[CallToolResult, spec.output]:
        principal = transport.principal_of(get_access_token())
        # The transport already refused these over HTTP; this guards in-process callers too.
        if spec.access == "subscriber" and principal is None:
            payload, challenge = await sync_to_async(transport.subscription_required)(spec)
            return _result(payload, is_error=True, meta={"mcp/www_authenticate": [challenge]})
        if principal is not None and spec.scope not in principal.scopes:
            payload, challenge = transport.insufficient_scope(spec)
            return _result(payload, is_error=True, meta={"mcp/www_authenticate": [challenge]})

        async def report_progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.report_progress(progress, total, message)

        call_info = ToolCall(
            tool=spec.name, principal=principal, protocol_version=ctx.protocol_version, report_progress=report_progress
        )
        try:
            args = spec.args.model_validate(arguments)
        except ValidationError as error:  # nothing ran, nothing was charged
            return _result(invalid_arguments(error).payload(), is_error=True)
        try:
            output = await spec.handler(call_info, args)
        except DomainError as refusal:  # every app's refusal, and ToolFailure, become one in-band error shape
            return _result(refusal.payload(), is_error=True)
        return _result(output.model_dump(mode="json"), is_error=False)

    sdk_tool = Tool.from_function(
        call,
        name=spec.name,
        title=spec.title,
        description=spec.description,
        annotations=ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            idempotent_hint=spec.idempotent,
            destructive_hint=spec.destructive,
            open_world_hint=spec.open_world,
        ),
        meta={"leroy/access": spec.access, "leroy/scope": spec.scope, "leroy/metering": spec.metering},
    )
    # The SDK documents these fields as read live: the published schema is the Args model's, and the arguments
    # reach `call` unvalidated (see _RawArguments).
    sdk_tool.fn_metadata.arg_model = _RawArguments
    sdk_tool.parameters = spec.args.model_json_schema(by_alias=True)
    return sdk_tool


def build_server() -> MCPServer:
    mcp = MCPServer(
        "leroy",
        tools=[_sdk_tool(spec) for spec in load_tools().values()],
        title="Leroy",
        version=version("leroy"),
        instructions=INSTRUCTIONS,
        website_url=settings.LEROY_PUBLIC_ORIGIN,
        subscriptions=False,  # the per-process bus cannot fan out across workers; the tool list is static
    )
    if settings.MCP_CONFORMANCE_FIXTURES:
        from leroy.mcp import conformance

        conformance.register(mcp)
    return mcp


def transport_security() -> TransportSecuritySettings:
    hosts = list(settings.ALLOWED_HOSTS)
    origins = [settings.LEROY_PUBLIC_ORIGIN, *settings.LEROY_CORS_ORIGINS]
    for host in hosts:
        origins += [f"http://{host}", f"https://{host}", f"http://{host}:*", f"https://{host}:*"]
    return TransportSecuritySettings(allowed_hosts=hosts + [f"{h}:*" for h in hosts], allowed_origins=origins)


def build_mcp_asgi() -> tuple[ASGIApp, StreamableHTTPSessionManager]:
    """The /api/mcp ASGI app and the session manager whose `run()` must span the process lifetime."""
    mcp = build_server()
    sdk_app = mcp.streamable_http_app(
        streamable_http_path=settings.LEROY_MCP_PATH,
        stateless_http=True,
        json_response=False,  # SSE when a tool reports progress or logs; plain JSON otherwise
        transport_security=transport_security(),
    )
    return transport.McpTransport(sdk_app), mcp.session_manager
