"""Evidence MCP tools: thin edges over evidence.research; lookup-metered answers are charged here, at the edge."""

from collections.abc import Callable

from asgiref.sync import sync_to_async
from pydantic import BaseModel

from billing.metering import metered_answer
from evidence.publication.services import receipt_attach
from evidence.research import analysis as research
from evidence.research import evaluation, journal
from evidence.schemas import (
    AnaloguesOut,
    BenchmarkOut,
    EvaluateArgs,
    EvaluationOut,
    ExecutionArgs,
    ExecutionOut,
    ExitPolicyArgs,
    ExitPolicyOut,
    FailureOut,
    HypothesisOut,
    LeadersArgs,
    LeadersOut,
    LineageArgs,
    LineageOut,
    RecordHypothesisArgs,
    RegimeArgs,
    RegimeOut,
    ReviewHypothesisArgs,
    ReviewOut,
    SearchArgs,
    SearchOut,
    SetupArgs,
)
from leroy.mcp.registry import ToolCall, tool
from leroy.schemas import Answer


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
    identical request on the same frame is served from cache for 0; no usable frame (none, or stale), or only horizons
    past today's close, costs nothing. Research only: nothing here places an order.
    """

    def evaluate() -> EvaluationOut:
        situation, user = evaluation.situation(args.symbol), call.user()
        return metered_answer(
            user=user,
            tool=call.tool,
            args=args,
            output=EvaluationOut,
            compute=lambda: evaluation.evaluation_answer(args, situation),
            cache_scope=evaluation.cache_scope(situation),
            finish=lambda result: receipt_attach(user=user, tool=call.tool, answer=evaluation.finish(result)),
        )

    return await _run(evaluate)


async def _run[T: BaseModel](work: Callable[[], T]) -> T:
    """Run sync core work off the event loop; refusals surface in band through the MCP bridge."""
    return await sync_to_async(work)()


async def _metered[T: BaseModel](call: ToolCall, args: BaseModel, output: type[T], compute: Callable[[], Answer]) -> T:
    """A lookup-metered research answer: the core computes it, billing.metering charges it for the caller, and its
    receipt (the answer's hash, committed to the publication log) is recorded inside the same transaction."""

    def run() -> T:
        user = call.user()
        return metered_answer(
            user=user,
            tool=call.tool,
            args=args,
            output=output,
            compute=compute,
            finish=lambda result: receipt_attach(user=user, tool=call.tool, answer=result),
        )

    return await _run(run)


@tool(name="get_current_confluence_leaders", title="Current confluence leaders", args=LeadersArgs,
      output=LeadersOut, access="subscriber", scope="mcp:read", metering="lookup")  # fmt: skip
async def get_current_confluence_leaders(call: ToolCall, args: LeadersArgs) -> LeadersOut:
    """Rank the open session's fresh, warmed-up frames by how many registered strategies are active for `side`.

    One current-snapshot lookup whether it returns one or five leaders (nothing when the snapshot is empty).
    Descriptive research, not a recommendation or an order list; follow with evaluate_current_setup for evidence.
    """
    return await _metered(call, args, LeadersOut, lambda: research.confluence_leaders(args=args))


@tool(name="search_market_memory", title="Search Market Memory", args=SearchArgs, output=SearchOut,
      access="subscriber", scope="mcp:read", metering="lookup")  # fmt: skip
async def search_market_memory(call: ToolCall, args: SearchArgs) -> SearchOut:
    """Served Market Memory keys for a side and horizon, filtered by tier, minimum sample, required active
    signals and symbol, most distinct sessions first. Keys below the minimum sample do not exist here; the forward
    overlay is served only when current. An unknown symbol or impossible filter is refused. Costs 1 lookup."""
    return await _metered(call, args, SearchOut, lambda: research.market_memory_search(args=args))


@tool(name="compare_historical_analogues", title="Compare historical analogues", args=SetupArgs,
      output=AnaloguesOut, access="subscriber", scope="mcp:read", metering="lookup")  # fmt: skip
async def compare_historical_analogues(call: ToolCall, args: SetupArgs) -> AnaloguesOut:
    """The stored rows of the Market Memory key matched by the symbol's current frame (strongest tier with the
    minimum sample), nearest first, with their outcomes at every horizon (null where a label crossed the close).
    Costs 1 lookup; no usable frame (none, or stale) or a horizon past today's close costs nothing."""
    return await _metered(call, args, AnaloguesOut, lambda: research.historical_analogues(args=args))


@tool(name="get_market_regime", title="Market regime", args=RegimeArgs, output=RegimeOut,
      access="subscriber", scope="mcp:read", metering="free")  # fmt: skip
async def get_market_regime(call: ToolCall, args: RegimeArgs) -> RegimeOut:
    """The current market regime (trend, volatility, time of day) from the benchmark's verified frame, the last
    verified session's buckets, and per-regime historical statistics for a side and horizon. Free."""
    return await _run(lambda: research.market_regime(args=args))


@tool(name="explain_setup_failure", title="Explain setup failure", args=SetupArgs, output=FailureOut,
      access="subscriber", scope="mcp:read", metering="lookup")  # fmt: skip
async def explain_setup_failure(call: ToolCall, args: SetupArgs) -> FailureOut:
    """How the losing rows of the current frame's matched setup differed from its winners: excursions, time of
    day and regime, from the artifact's stored rows only (the sample is stated). Costs 1 lookup;
    free as compare_historical_analogues is."""
    return await _metered(call, args, FailureOut, lambda: research.setup_failure(args=args))


@tool(name="compare_against_benchmark", title="Compare against benchmark", args=SetupArgs, output=BenchmarkOut,
      access="subscriber", scope="mcp:read", metering="lookup")  # fmt: skip
async def compare_against_benchmark(call: ToolCall, args: SetupArgs) -> BenchmarkOut:
    """The current frame's matched setup next to the benchmark's direction baseline (same side and horizon, over
    all its ready minutes: not the setup's sessions), both from the artifact. Costs 1 lookup;
    free as compare_historical_analogues is."""
    return await _metered(call, args, BenchmarkOut, lambda: research.benchmark_comparison(args=args))


@tool(name="simulate_exit_policy", title="Simulate exit policy", args=ExitPolicyArgs, output=ExitPolicyOut,
      access="subscriber", scope="mcp:read", metering="lookup")  # fmt: skip
async def simulate_exit_policy(call: ToolCall, args: ExitPolicyArgs) -> ExitPolicyOut:
    """Replay a stop / target / time exit over the matched setup's stored excursions. Rows that touched both
    levels are reported as unresolved: the artifact does not store which came first. Costs 1 lookup;
    free as compare_historical_analogues is."""
    return await _metered(call, args, ExitPolicyOut, lambda: research.exit_policy_simulation(args=args))


@tool(name="estimate_execution_conditions", title="Execution conditions", args=ExecutionArgs,
      output=ExecutionOut, access="subscriber", scope="mcp:read", metering="free")  # fmt: skip
async def estimate_execution_conditions(call: ToolCall, args: ExecutionArgs) -> ExecutionOut:
    """Historical volume by half hour of the session for a symbol. Spread is not_available (the data has no
    quotes) and no fill or market impact is ever inferred. Free."""
    return await _run(lambda: research.execution_conditions(args=args))


@tool(name="get_data_lineage", title="Data lineage", args=LineageArgs, output=LineageOut, access="public",
      scope="mcp:read", metering="free")  # fmt: skip
async def get_data_lineage(call: ToolCall, args: LineageArgs) -> LineageOut:
    """The active Market Memory artifact: version, SHA-256, inputs and code hashes, strategy registry, calendar,
    coverage (historical and forward overlay) and every file's hash; with your evaluation_id, each served row's
    source and recomputing SQL. Free and public."""

    def lineage() -> LineageOut:
        return research.data_lineage(args=args, user=call.user() if call.principal is not None else None)

    return await _run(lineage)


@tool(name="record_research_hypothesis", title="Record research hypothesis", args=RecordHypothesisArgs,
      output=HypothesisOut, access="subscriber", scope="mcp:write", metering="free", read_only=False,
      idempotent=False, rest=True)  # fmt: skip
async def record_research_hypothesis(call: ToolCall, args: RecordHypothesisArgs) -> HypothesisOut:
    """Write a research note to your own journal, anchored at the last closed minute of the open session. It
    cannot trade or change any permission. Idempotent by client_request_id."""
    return await _run(lambda: journal.hypothesis_record(user=call.user(), args=args))


@tool(name="review_hypothesis_outcome", title="Review hypothesis outcome", args=ReviewHypothesisArgs,
      output=ReviewOut, access="subscriber", scope="mcp:write", metering="free", read_only=False,
      idempotent=True, rest=True)  # fmt: skip
async def review_hypothesis_outcome(call: ToolCall, args: ReviewHypothesisArgs) -> ReviewOut:
    """Review one of your hypotheses against verified bars after its decision minute: the realized outcome where
    verified data covers the horizon, else not_mature (session not yet verified) or not_available."""
    return await _run(lambda: journal.hypothesis_review(user=call.user(), hypothesis_id=args.hypothesis_id))


from evidence.eod import tools as _eod_tools  # noqa: E402, F401
from evidence.publication import tools as _publication_tools  # noqa: E402, F401
