"""Evidence MCP tools: thin edges over evidence.evaluation and the Market Memory selectors."""

from asgiref.sync import sync_to_async

from accounts.models import User
from billing.services import BillingError
from evidence import evaluation
from evidence.geometry import InvalidSetup
from evidence.schemas import EvaluateArgs, EvaluationOut
from evidence.selectors import MemoryUnavailable
from leroy.mcp.registry import ToolCall, ToolFailure, tool

EVIDENCE_UNAVAILABLE = "No verified Market Memory artifact is active on this server yet; nothing was charged."


@tool(
    name="evaluate_current_setup",
    title="Evaluate current setup",
    args=EvaluateArgs,
    output=EvaluationOut,
    access="subscriber",
    scope="mcp:read",
    metering="lookup",
)
async def evaluate_current_setup(call: ToolCall, args: EvaluateArgs) -> EvaluationOut:
    """Historical evidence for a setup on the current verified market frame of a US equity.

    Resolves the latest verified frame for `symbol`, the live states of the registered strategies, the regime, and
    the strongest Market Memory tier with the minimum sample per side and horizon (lower tiers are never pooled).
    A missing comparison is a valid answer: nulls are not estimates. Costs 1 lookup (`side: "both"` = 2); an
    identical request on the same frame is served from cache for 0; no usable frame costs nothing. Research only:
    nothing here places an order.
    """
    assert call.principal is not None
    user_id = call.principal.user_id

    def run() -> EvaluationOut:
        return evaluation.evaluate_current_setup(user=User.objects.get(pk=user_id), args=args)

    try:
        return await sync_to_async(run)()
    except InvalidSetup as error:
        raise ToolFailure("invalid_setup", str(error)) from None
    except MemoryUnavailable:
        raise ToolFailure("evidence_unavailable", EVIDENCE_UNAVAILABLE) from None
    except BillingError as error:
        raise ToolFailure(error.code, error.message, **error.details) from None
