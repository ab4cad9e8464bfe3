"""Publication-log MCP tools: thin edges over evidence.publication.selectors (all free; proofs are public, an
answer's proof only to its owner)."""

from asgiref.sync import sync_to_async

from evidence.publication import selectors
from evidence.publication.schemas import (
    AnswerProofArgs,
    AnswerProofOut,
    CheckpointArgs,
    CheckpointOut,
    ConsistencyArgs,
    ConsistencyProof,
    InclusionArgs,
    InclusionOut,
)
from leroy.mcp.registry import ToolCall, tool


@tool(name="get_log_checkpoint", title="Publication log checkpoint", args=CheckpointArgs, output=CheckpointOut,
      access="public", scope="mcp:read", metering="free")  # fmt: skip
async def get_log_checkpoint(call: ToolCall, args: CheckpointArgs) -> CheckpointOut:
    """The latest signed checkpoint of Leroy's publication log (RFC 9162 tree, C2SP signed note, Ed25519), its
    verifier key, its RFC 3161 time-stamp token when a time-stamp authority is configured, and exactly what the log
    guarantees and what it does not (which timestamp is in force, if any; no witness). Keep the checkpoint: a later
    consistency proof shows the log only grew. Free and public."""
    return await sync_to_async(selectors.checkpoint)()


@tool(name="get_log_consistency_proof", title="Publication log consistency proof", args=ConsistencyArgs,
      output=ConsistencyProof, access="public", scope="mcp:read", metering="free")  # fmt: skip
async def get_log_consistency_proof(call: ToolCall, args: ConsistencyArgs) -> ConsistencyProof:
    """RFC 9162 consistency proof that the tree of size `first` is a prefix of the tree of size `second` (default:
    the latest). Verify it offline with `leroy-verify`. Free and public."""

    def run() -> ConsistencyProof:
        second = args.second if args.second is not None else selectors.log_size()
        return selectors.consistency_proof(first=args.first, second=second)

    return await sync_to_async(run)()


@tool(name="get_log_inclusion_proof", title="Publication log inclusion proof", args=InclusionArgs,
      output=InclusionOut, access="public", scope="mcp:read", metering="free")  # fmt: skip
async def get_log_inclusion_proof(call: ToolCall, args: InclusionArgs) -> InclusionOut:
    """A log entry (artifact publication, forward overlay, end-of-day snapshot, daily answers root) with its
    RFC 9162 inclusion proof and the latest signed checkpoint. Free and public."""
    return await sync_to_async(selectors.entry_inclusion)(index=args.index, tree_size=args.tree_size)


@tool(name="get_answer_proof", title="Answer proof", args=AnswerProofArgs, output=AnswerProofOut,
      access="subscriber", scope="mcp:read", metering="free")  # fmt: skip
async def get_answer_proof(call: ToolCall, args: AnswerProofArgs) -> AnswerProofOut:
    """Proof that Leroy gave one of your metered answers exactly as received, no later than a signed checkpoint:
    the answer's SHA-256 (RFC 8785 JSON without its receipt), its inclusion in that day's answers tree, the day
    root's inclusion in the log, and the checkpoint. `not_committed` until the day is committed after the close.
    Only your own answers; other accounts' answers are never revealed (the tree holds hashes only). Free."""

    def run() -> AnswerProofOut:
        return selectors.answer_proof(user=call.user(), answer_id=args.evaluation_id)

    return await sync_to_async(run)()
