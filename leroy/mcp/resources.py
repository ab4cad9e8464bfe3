"""MCP resources and prompts: results an agent can read by URI instead of through large tool outputs, the
strategy documentation, and prompts for the common research flows.

Each resource is read through the registered tool that answers the same question, so its scoping (the caller's
account only), metering and refusals are that tool's; a refusal is a JSON-RPC error carrying the tool's code.
"""

import json
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.prompts.base import Message, UserMessage
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from leroy.errors import DomainError
from leroy.mcp import transport
from leroy.mcp.registry import REGISTRY, ToolCall, direct_call

# An unknown resource: -32002 until 2025-11-25; invalid params (-32602) from 2026-07-28 (SEP-2164).
RESOURCE_NOT_FOUND = {"2026-07-28": -32602}
LEGACY_RESOURCE_NOT_FOUND = -32002
AUTHENTICATION_REQUIRED = -32001


@dataclass(frozen=True)
class ToolResource:
    uri: str  # an RFC 6570 template; its variables are the tool's arguments
    tool: str
    name: str
    description: str


TOOL_RESOURCES = (
    ToolResource(
        "leroy://docs/strategy-authoring",
        "get_strategy_documentation",
        "strategy-authoring",
        "How to write a Leroy Backtrader strategy: the sandbox, the bt API, orders, parameters. Read before authoring.",
    ),
    ToolResource("leroy://strategy/{id}", "get_strategy", "strategy", "One saved strategy version with its source."),
    ToolResource(
        "leroy://report/{id}", "get_report", "report", "One backtest report: statistics, trades, equity curve, verdict."
    ),
    ToolResource(
        "leroy://optimization/{id}", "get_optimization", "optimization", "One optimization: status, grids, credits."
    ),
    ToolResource(
        "leroy://optimization/{id}/results",
        "list_optimization_results",
        "optimization-results",
        "The first page of an optimization's runs, best first by its target metric.",
    ),
)


async def read_through_tool(tool: str, arguments: dict[str, Any]) -> str:
    """The tool's answer for the current caller as JSON text, or an MCPError with the tool's refusal."""
    spec = REGISTRY[tool]
    principal = transport.principal_of(get_access_token())
    if spec.access == "subscriber" and principal is None:
        raise MCPError(AUTHENTICATION_REQUIRED, f"{spec.name} needs a Leroy API key or OAuth access token")
    if principal is not None and spec.scope not in principal.scopes:
        raise MCPError(AUTHENTICATION_REQUIRED, f"{spec.name} requires the {spec.scope} scope")
    if principal is None:
        call = direct_call(tool=tool, user_id=None, client_id="anonymous")
    else:
        call = ToolCall(tool=tool, principal=principal, protocol_version=None, report_progress=_no_progress)
    try:
        output = await spec.handler(call, spec.args.from_arguments(arguments))
    except DomainError as refusal:
        not_found = RESOURCE_NOT_FOUND.get(transport.PROTOCOL_VERSION.get() or "", LEGACY_RESOURCE_NOT_FOUND)
        code = not_found if refusal.code.endswith("not_found") else -32602
        raise MCPError(code, refusal.message, data=refusal.payload()["error"]) from None
    return json.dumps(output.model_dump(mode="json"), separators=(",", ":"))


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


def _reader(tool: str) -> Any:
    async def read(id: str) -> str:  # the URI template's variable
        return await read_through_tool(tool, {"id": id})

    return read


async def _documentation_text() -> str:
    return str(json.loads(await read_through_tool("get_strategy_documentation", {}))["documentation"])


def evaluate_before_deciding(symbol: str, side: str = "both") -> list[Message]:
    """Gather Leroy's evidence on a setup before any decision, and keep the research journal honest."""
    text = (
        f"Research {symbol} ({side}) with Leroy before deciding anything. Leroy is research-only: it places no "
        "orders and gives no advice.\n"
        f"1. Call evaluate_current_setup with symbol={symbol!r}, side={side!r}. Note the evidence tier, the "
        "distinct sessions behind it, the artifact version, SHA-256 and source (synthetic is generated demo data, "
        "not market history).\n"
        "2. If a tier is weak or null, call explain_setup_failure and compare_against_benchmark for the same "
        "setup; a null comparison is a valid answer, never turn it into a forecast.\n"
        "3. Call estimate_execution_conditions to see whether the setup could be acted on at all.\n"
        "4. Record what you expect with record_research_hypothesis (symbol, side, horizon, a one-line note), and "
        "later review it with review_hypothesis_outcome.\n"
        "Report the numbers with their sample sizes, the artifact hash and its source; say plainly what is unknown."
    )
    return [UserMessage(content=TextContent(type="text", text=text))]


async def author_and_dry_run_strategy(idea: str) -> list[Message]:
    """Write a Backtrader strategy for an idea, check it with a free dry run, then backtest within a budget."""
    steps = (
        f"Turn this idea into a Leroy strategy: {idea}\n"
        "1. Follow the strategy documentation below exactly (no imports; the curated bt object only).\n"
        "2. Save it with create_strategy, then call run_dry_run_backtest on it and fix every error it reports.\n"
        "3. Only then call run_backtest with max_credits set to what you are willing to spend; read the report "
        "with get_report (or the leroy://report/{id} resource) and check its lookahead_check verdict before "
        "trusting any statistic."
    )
    return [
        UserMessage(content=TextContent(type="text", text=steps)),
        UserMessage(content=TextContent(type="text", text=await _documentation_text())),
    ]


def register(mcp: MCPServer) -> None:
    """Add the resources and prompts to the server (after its tools: they read through the registry)."""
    for resource in TOOL_RESOURCES:
        mime = "text/markdown" if resource.tool == "get_strategy_documentation" else "application/json"
        reader = _documentation_text if mime == "text/markdown" else _reader(resource.tool)
        mcp.resource(resource.uri, name=resource.name, description=resource.description, mime_type=mime)(reader)
    mcp.prompt(name="evaluate_before_deciding", title="Evaluate before deciding")(evaluate_before_deciding)
    mcp.prompt(name="author_and_dry_run_strategy", title="Author and dry-run a strategy")(author_and_dry_run_strategy)
