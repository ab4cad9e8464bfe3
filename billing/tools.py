"""MCP tools of the billing app: read-only views of the caller's ledger."""

from asgiref.sync import sync_to_async

from billing import selectors
from billing.schemas import CreditUsage, NoArgs, UsageReport
from leroy.mcp.registry import ToolCall, tool


@tool(
    name="get_usage",
    title="Lookup usage",
    args=NoArgs,
    output=UsageReport,
    access="subscriber",
    scope="mcp:read",
    metering="free",
)
async def get_usage(call: ToolCall, args: NoArgs) -> UsageReport:
    """This UTC month's MCP lookups: included, used, remaining, overage and its amount. Calling it is free."""
    report = await sync_to_async(lambda: selectors.usage_report(user=call.user()))()
    return UsageReport.model_validate(report)


@tool(
    name="get_credit_usage",
    title="Credit usage",
    args=NoArgs,
    output=CreditUsage,
    access="subscriber",
    scope="mcp:read",
    metering="free",
)
async def get_credit_usage(call: ToolCall, args: NoArgs) -> CreditUsage:
    """The account's monthly credit limit, credits consumed, reserved and remaining, and free optimizations left."""
    usage = await sync_to_async(lambda: selectors.credit_usage(user=call.user()))()
    return CreditUsage.model_validate(usage)
