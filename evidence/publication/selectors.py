"""Reads of the publication log: the latest checkpoint, entries, proofs, and an owner's answer proof.

Everything is served for tree sizes up to the latest checkpoint; a response about such a size never changes."""

import base64
import json
import threading
from typing import Any

from accounts.models import User
from evidence.models import AnswerReceipt, LogCheckpoint, LogEntry
from evidence.publication.schemas import (
    AnswerProofOut,
    CheckpointOut,
    ConsistencyProof,
    DayTreeProof,
    InclusionOut,
    InclusionProof,
    LogEntryOut,
)
from evidence.publication.services import LogError, checkpoint_text, day_tree_leaves
from evidence.publication.signing import signer
from leroy_verify.merkle import EMPTY_ROOT, Tree
from leroy_verify.note import parse_checkpoint

MAX_ENTRIES = 1000


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def checkpoint_note() -> str:
    """The latest signed checkpoint (the empty tree's, signed now, before anything was appended)."""
    head = LogCheckpoint.objects.order_by("-tree_size").values_list("note", flat=True).first()
    return head if head is not None else signer().sign(checkpoint_text(0, EMPTY_ROOT))


def log_size() -> int:
    return LogCheckpoint.objects.order_by("-tree_size").values_list("tree_size", flat=True).first() or 0


def verifier_key() -> str:
    return str(signer().verifier)


def checkpoint() -> CheckpointOut:
    note = checkpoint_note()
    parsed = parse_checkpoint(note[: note.rfind("\n\n") + 1])
    return CheckpointOut(
        checkpoint=note,
        origin=parsed.origin,
        tree_size=parsed.size,
        root_hash=_b64(parsed.root),
        verifier_key=verifier_key(),
    )


# Leaf hashes never change once appended, so each process keeps the tree it has read and its memoised subtree
# hashes, and reads only newer leaves. The cache is trusted only while its root equals the stored checkpoint root
# for its size (a rolled-back or foreign prefix fails that check and is dropped).
_cache = {"tree": Tree([])}
_cache_lock = threading.Lock()


def _tree(size: int) -> Tree:
    with _cache_lock:
        tree = _cache["tree"]
        cached = len(tree.leaves)
        if cached:
            stored = LogCheckpoint.objects.filter(tree_size=cached).values_list("root_hash", flat=True).first()
            if stored != tree.root(cached).hex():
                tree = _cache["tree"] = Tree([])
        leaves = tree.leaves
        assert isinstance(leaves, list)
        if len(leaves) < size:  # read up to the latest checkpoint, so the cache always has a stored root to match
            head = max(size, log_size())
            rows = LogEntry.objects.filter(index__gte=len(leaves), index__lt=head).values_list("index", "leaf_hash")
            for index, leaf in rows:
                if index != len(leaves):  # the table is append-only and dense; anything else is never served
                    raise RuntimeError(f"the log has no leaf {len(leaves)}")
                leaves.append(bytes.fromhex(leaf))
        if len(leaves) < size:
            raise RuntimeError(f"the log holds {len(leaves)} leaves, not {size}")
        return tree


def _entry(row: LogEntry) -> LogEntryOut:
    return LogEntryOut(index=row.index, entry=json.loads(row.body), leaf_hash=row.leaf_hash)


def entries(*, start: int, end: int) -> list[LogEntryOut]:
    size = log_size()
    if not 0 <= start < end <= size or end - start > MAX_ENTRIES:
        raise LogError(
            "invalid_range", f"need 0 <= start < end <= {size} (the tree size) and at most {MAX_ENTRIES} entries"
        )
    return [_entry(row) for row in LogEntry.objects.filter(index__gte=start, index__lt=end)]


def recent_entries(*, limit: int) -> list[LogEntryOut]:
    """The newest `limit` entries up to the latest checkpoint, newest first (what the log page lists)."""
    rows = LogEntry.objects.filter(index__lt=log_size()).order_by("-index")[:limit]
    return [_entry(row) for row in rows]


def inclusion_proof(*, index: int, tree_size: int) -> InclusionProof:
    size = log_size()
    if not 0 <= index < tree_size <= size:
        raise LogError("invalid_range", f"need 0 <= index < tree_size <= {size} (the latest tree size)")
    tree = _tree(tree_size)
    return InclusionProof(
        index=index,
        tree_size=tree_size,
        root_hash=_b64(tree.root(tree_size)),
        hashes=[_b64(h) for h in tree.inclusion_proof(index, tree_size)],
    )


def consistency_proof(*, first: int, second: int) -> ConsistencyProof:
    size = log_size()
    if not 0 <= first <= second <= size:
        raise LogError("invalid_range", f"need 0 <= first <= second <= {size} (the latest tree size)")
    return ConsistencyProof(
        first=first, second=second, hashes=[_b64(h) for h in _tree(second).consistency_proof(first, second)]
    )


def entry_inclusion(*, index: int, tree_size: int | None) -> InclusionOut:
    proof = inclusion_proof(index=index, tree_size=tree_size if tree_size is not None else log_size())
    return InclusionOut(entry=_entry(LogEntry.objects.get(index=index)), proof=proof, checkpoint=checkpoint_note())


def answer_proof(*, user: User, answer_id: str) -> AnswerProofOut:
    """The owner's answer hash with its day-tree and log proofs; anyone else's answer is simply not found."""
    receipt = AnswerReceipt.objects.filter(answer_id=answer_id, user=user).first()
    if receipt is None:
        raise LogError("not_found", f"No answer {answer_id} of this account has a receipt.")
    base: dict[str, Any] = {
        "answer_id": receipt.answer_id,
        "tool": receipt.tool,
        "answer_sha256": receipt.answer_sha256,
        "day": receipt.day,
        "verifier_key": verifier_key(),
    }
    if receipt.log_index is None:
        return AnswerProofOut(status="not_committed", **base)
    batch = list(
        AnswerReceipt.objects.filter(log_index=receipt.log_index).order_by("pk").values_list("pk", "answer_sha256")
    )
    position = [pk for pk, _ in batch].index(receipt.pk)
    day = Tree(day_tree_leaves([digest for _, digest in batch]))
    note = checkpoint_note()
    size = parse_checkpoint(note[: note.rfind("\n\n") + 1]).size
    return AnswerProofOut(
        status="committed",
        day_tree=DayTreeProof(
            index=position,
            size=len(batch),
            root_sha256=day.root(len(batch)).hex(),
            hashes=[_b64(h) for h in day.inclusion_proof(position, len(batch))],
        ),
        log_entry=_entry(LogEntry.objects.get(index=receipt.log_index)),
        log_inclusion=inclusion_proof(index=receipt.log_index, tree_size=size),
        checkpoint=note,
        **base,
    )
