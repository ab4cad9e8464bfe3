"""End-of-day evidence MCP tools: thin edges over evidence.eod.selectors. Public tools are free; subscriber tools
cost one lookup each (repeats on the same snapshot are free) and carry an answer receipt."""

from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from pydantic import BaseModel

from billing.metering import metered_answer
from billing.schemas import NoArgs
from evidence.eod import selectors
from evidence.eod.schemas import (
    ChangesArgs,
    ChangesOut,
    CommitmentsOut,
    EodPage,
    FrozenRowsArgs,
    FrozenRowsOut,
    HeldoutOut,
    MaturityOut,
    ProvenanceOut,
    ReplayArgs,
    ReplayOut,
    SignalArgs,
    SignalOut,
    WalkForwardArgs,
    WalkForwardOut,
)
from evidence.publication.services import receipt_attach
from leroy.mcp.registry import ToolCall, tool
from leroy.schemas import Answer

# Row statuses without a signal: the symbol had no bar for the session, or its daily history misses sessions.
UNSIGNALLED = ("absent_from_snapshot", "incomplete_history")


async def _public[T: BaseModel](output: type[T], read: Callable[[], dict[str, Any]]) -> T:
    return await sync_to_async(lambda: output.model_validate(read()))()


async def _subscriber[T: BaseModel](call: ToolCall, args: BaseModel, output: type[T],
                                    read: Callable[[], dict[str, Any]],
                                    resolved: Callable[[dict[str, Any]], BaseModel] | None = None) -> T:  # fmt: skip
    """One lookup of a completed snapshot, cached per snapshot; a refusal (nothing to serve) or a symbol the snapshot
    has no signal for (absent, or its history incomplete) costs 0. `resolved` gives the arguments naming the answer
    once defaults are resolved, so one snapshot is one cache entry however it was named."""

    def run() -> T:
        user = call.user()
        fields = read()
        return metered_answer(
            user=user,
            tool=call.tool,
            args=args,
            output=output,
            compute=lambda: Answer(fields, 0 if fields.get("status") in UNSIGNALLED else 1),
            cache_scope=fields["snapshot_sha256"],
            cache_args=resolved(fields) if resolved is not None else None,
            finish=lambda result: receipt_attach(user=user, tool=call.tool, answer=result),
        )

    return await sync_to_async(run)()


@tool(name="get_historical_replay", title="Historical replay", args=ReplayArgs, output=ReplayOut,
      access="public", scope="mcp:read", metering="free")  # fmt: skip
async def get_historical_replay(call: ToolCall, args: ReplayArgs) -> ReplayOut:
    """Today's end-of-day engine replayed over up to five years: the universe summary, or one symbol's summary and
    paged legs (winners, losers, open legs). A retrospective replay, not validation. symbol_proof binds one symbol's
    summary and all its legs to the root its snapshot's log entry commits (leroy-verify --eod). Free and public."""
    return await _public(ReplayOut, lambda: selectors.replay(symbol=args.symbol, offset=args.offset, limit=args.limit))


@tool(name="get_heldout_evidence", title="Held-out tail evidence", args=NoArgs, output=HeldoutOut,
      access="public", scope="mcp:read", metering="free")  # fmt: skip
async def get_heldout_evidence(call: ToolCall, args: NoArgs) -> HeldoutOut:
    """Every row of the fixed held-out tail (engine vs holding per symbol). Later research reused the tail, so
    its class is validation, not test. Free and public."""
    return await _public(HeldoutOut, selectors.heldout)


@tool(name="get_walk_forward_evidence", title="Walk-forward evidence", args=WalkForwardArgs, output=WalkForwardOut,
      access="public", scope="mcp:read", metering="free")  # fmt: skip
async def get_walk_forward_evidence(call: ToolCall, args: WalkForwardArgs) -> WalkForwardOut:
    """Rolling walk-forward per symbol and year: the variant fit through the prior year, its score, holding and
    the base engine, lagging years kept; complete false: a part year (year to date). For one symbol,
    calculation_sha256 stays every symbol's and symbol_proof binds its rows to the root its snapshot's log entry
    commits (leroy-verify --eod). Free and public."""
    return await _public(WalkForwardOut, lambda: selectors.walk_forward(symbol=args.symbol))


@tool(name="list_publication_commitments", title="Publication commitments", args=EodPage, output=CommitmentsOut,
      access="public", scope="mcp:read", metering="free")  # fmt: skip
async def list_publication_commitments(call: ToolCall, args: EodPage) -> CommitmentsOut:
    """The forward ledger's daily snapshot commitments in the publication log, oldest first, paged, each with the
    replay, held-out and walk-forward hashes and per-symbol replay and walk-forward roots it commits (null if
    logged before them). Prove one with get_log_inclusion_proof(index=publication_id). Free and public."""
    return await _public(CommitmentsOut, lambda: selectors.commitments(offset=args.offset, limit=args.limit))


@tool(name="get_publication_maturity", title="Forward ledger maturity", args=NoArgs, output=MaturityOut,
      access="public", scope="mcp:read", metering="free")  # fmt: skip
async def get_publication_maturity(call: ToolCall, args: NoArgs) -> MaturityOut:
    """How mature the forward ledger is: snapshots, market dates, first/latest date and revision, instruments,
    changes. Performance is not calculated from commitments. Free and public."""
    return await _public(MaturityOut, selectors.maturity)


@tool(name="get_provenance", title="End-of-day provenance", args=NoArgs, output=ProvenanceOut,
      access="public", scope="mcp:read", metering="free")  # fmt: skip
async def get_provenance(call: ToolCall, args: NoArgs) -> ProvenanceOut:
    """Engine, universe and data versions and component hashes of the latest snapshot, the log's signed
    checkpoint, and what is not guaranteed (no timestamp authority or third-party signer). Free and public."""
    return await _public(ProvenanceOut, selectors.provenance)


@tool(name="get_signal", title="End-of-day signal", args=SignalArgs, output=SignalOut,
      access="subscriber", scope="mcp:read", metering="lookup")  # fmt: skip
async def get_signal(call: ToolCall, args: SignalArgs) -> SignalOut:
    """One symbol's signal in the latest end-of-day snapshot. Treat action and suggested_position as authoritative:
    state (the recorded closing transition) may still read LONG when action is EXIT. Impersonal, not advice.
    Costs 1 lookup (0 repeated on the same snapshot)."""
    return await _subscriber(call, args, SignalOut, lambda: selectors.signal(symbol=args.symbol))


@tool(name="get_frozen_forward_rows", title="Frozen forward rows", args=FrozenRowsArgs, output=FrozenRowsOut,
      access="subscriber", scope="mcp:read", metering="lookup")  # fmt: skip
async def get_frozen_forward_rows(call: ToolCall, args: FrozenRowsArgs) -> FrozenRowsOut:
    """One snapshot's exact frozen rows and components; SHA-256 of RFC 8785 {session, revision, components, rows}
    is its snapshot_sha256. Costs 1 lookup."""
    return await _subscriber(
        call,
        args,
        FrozenRowsOut,
        lambda: selectors.frozen_rows(publication_id=args.publication_id),
        resolved=lambda fields: args.model_copy(update={"publication_id": fields["publication_id"]}),
    )


@tool(name="get_forward_changes_since", title="Forward changes since", args=ChangesArgs, output=ChangesOut,
      access="subscriber", scope="mcp:read", metering="lookup")  # fmt: skip
async def get_forward_changes_since(call: ToolCall, args: ChangesArgs) -> ChangesOut:
    """Status, action and recommended-state changes in every snapshot published after `publication_id`.
    Costs 1 lookup."""
    return await _subscriber(
        call, args, ChangesOut, lambda: selectors.changes_since(publication_id=args.publication_id)
    )
