"""The MCP server: every registered tool becomes an SDK tool behind Leroy's transport."""

import json
from collections.abc import Mapping
from importlib.metadata import version
from typing import Annotated, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, ListToolsResult, TextContent, ToolAnnotations
from pydantic import ConfigDict
from starlette.types import ASGIApp

from leroy.errors import DomainError, database_unavailable
from leroy.mcp import resources, transport
from leroy.mcp.registry import REGISTRY, ToolCall, ToolSpec, load_tools

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


_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "patternProperties")
_SUBSCHEMAS = ("items", "additionalProperties", "not")


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without pydantic's generated `title`s (each a field name restated): they are a large share of
    tools/list and say nothing the property names do not. Types, constraints and descriptions stay."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            value = {name: compact_schema(sub) if isinstance(sub, dict) else sub for name, sub in value.items()}
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            value = [compact_schema(sub) if isinstance(sub, dict) else sub for sub in value]
        elif key in _SUBSCHEMAS and isinstance(value, dict):
            value = compact_schema(value)
        out[key] = value
    return out


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
            args = spec.args.from_arguments(arguments)  # invalid_arguments: nothing ran, nothing was charged
            output = await spec.handler(call_info, args)
        except DomainError as refusal:  # every app's refusal, and ToolFailure, become one in-band error shape
            return _result(refusal.payload(), is_error=True)
        except DatabaseError as error:
            # Mid-call (before one the transport answers a 503): in band, where the SDK would say only "Error
            # executing tool" and log a traceback.
            return _result(database_unavailable(error, f"tool {spec.name}").payload(), is_error=True)
        return _result(output.model_dump(mode="json"), is_error=False)

    sdk_tool = Tool.from_function(
        call,
        name=spec.name,
        title=spec.title,
        description=spec.description,
        # No annotations title: it would repeat `title` on every tool (the spec reads title first), at ~480 tokens of
        # tools/list; a client older than Tool.title (2025-03-26) shows the name instead.
        annotations=ToolAnnotations(
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
    sdk_tool.parameters = compact_schema(spec.args.model_json_schema(by_alias=True))
    published = sdk_tool.fn_metadata.output_schema
    if published is not None:  # only published: results are checked against the model itself
        sdk_tool.fn_metadata.output_schema = output_schema(published)
    return sdk_tool


def output_schema(published: dict[str, Any]) -> dict[str, Any]:
    """The published result schema: the model's, or the in-band refusal `{"error": {...}}` that an isError result
    carries as structuredContent. Clients that validate every structuredContent against the schema (the
    JavaScript SDK does, for each tool it has listed) must accept the refusal too, or they throw on it."""
    schema = compact_schema(published)
    defs = schema.pop("$defs", None)
    schema.pop("type", None)
    # The root title stays: it names the result model, which the contract and its docs refer to.
    out: dict[str, Any] = {"title": published["title"], "type": "object", "anyOf": [schema, {"required": ["error"]}]}
    if defs is not None:
        out["$defs"] = defs
    return out


def _visible(spec: ToolSpec | None, headers: Mapping[str, str]) -> bool:
    """Whether tools/list shows a tool to a client that narrowed it (as the GitHub MCP server does):
    `X-Leroy-Toolsets: evidence,backtests` keeps those apps' tools, `X-Leroy-Readonly: 1` drops every tool that
    needs mcp:write. Listing only: a call is still judged by its credential's scopes."""
    if spec is None:
        return True  # conformance fixtures
    toolsets = headers.get("x-leroy-toolsets")
    if toolsets is not None and spec.toolset not in {t.strip().lower() for t in toolsets.split(",")}:
        return False
    return not (headers.get("x-leroy-readonly", "").strip() in {"1", "true"} and spec.scope == "mcp:write")


async def _narrow_tools_list(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    result = await call_next(ctx)
    headers: Mapping[str, str] | None = getattr(ctx.request, "headers", None)  # the Starlette request's
    if ctx.method != "tools/list" or not headers or not ({"x-leroy-toolsets", "x-leroy-readonly"} & set(headers)):
        return result
    if isinstance(result, ListToolsResult):
        return result.model_copy(update={"tools": [t for t in result.tools if _visible(REGISTRY.get(t.name), headers)]})
    if isinstance(result, dict) and isinstance(result.get("tools"), list):  # the runner hands the wire dict here
        return {**result, "tools": [t for t in result["tools"] if _visible(REGISTRY.get(t.get("name")), headers)]}
    return result


def build_server() -> MCPServer:
    mcp = MCPServer(
        "leroy",
        tools=[_sdk_tool(spec) for spec in load_tools().values()],
        title="Leroy",
        version=version("leroy"),
        instructions=INSTRUCTIONS,
        website_url=settings.LEROY_PUBLIC_ORIGIN,
        subscriptions=False,  # the per-process bus cannot fan out across workers; the tool list is static
        middleware=[_narrow_tools_list],
    )
    if settings.MCP_CONFORMANCE_FIXTURES:
        from leroy.mcp import conformance

        # First, so resources/list starts with a public fixture: the caching scenario reads the first listed
        # resource anonymously, and Leroy's own resources are read through tools that may need a credential.
        conformance.register(mcp)
        # The fixtures' tools first too: header-validation scenarios call the first listed tool anonymously, and
        # judge the header handling, not Leroy's credentials.
        tools = mcp._tool_manager._tools
        mcp._tool_manager._tools = {n: t for n, t in tools.items() if n not in REGISTRY} | {
            n: t for n, t in tools.items() if n in REGISTRY
        }
    resources.register(mcp)
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
    return transport.McpTransport(sdk_app, list_prompts=mcp.list_prompts), mcp.session_manager
