"""Reads of the publication log: the latest checkpoint, entries, proofs, and an owner's answer proof.

Everything is served for tree sizes up to the latest checkpoint; a response about such a size never changes."""

import base64
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from accounts.models import User
from evidence.models import AnswerReceipt, LogCheckpoint, LogEntry, LogTimestamp
from evidence.publication.schemas import (
    AnswerProofOut,
    CheckpointOut,
    CheckpointTimestamp,
    ConsistencyProof,
    DayTreeProof,
    Guarantees,
    InclusionOut,
    InclusionProof,
    LogEntryOut,
    TimestampAuthority,
)
from evidence.publication.services import LogError, checkpoint_text, day_tree_leaves
from evidence.publication.signing import Signer, local_key, signer
from leroy_verify.merkle import EMPTY_ROOT, Tree
from leroy_verify.note import NoteError, open_note, parse_checkpoint

logger = logging.getLogger(__name__)

MAX_ENTRIES = 1000
TOKEN_PATH = "/log/checkpoint/timestamp"  # noqa: S105 (a URL path, not a secret)
VERIFIABLE = [
    "Append-only: a consistency proof shows any earlier checkpoint's tree is a prefix of a later one.",
    "Inclusion: an inclusion proof shows an entry (or a committed answer's hash) is in a signed checkpoint.",
    "Signature: checkpoints are C2SP signed notes; Ed25519 key at /.well-known/leroy-log-key.",
]
NOT_GUARANTEED = [
    "No witness: no third party cosigns checkpoints, so a split view (different logs shown to different "
    "clients) is detectable only by comparing checkpoints with other clients.",
    "Nothing about performance: a commitment proves what was published, not that it was right.",
]


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _key(read: Callable[[], Signer]) -> Signer:
    """The log's key, or `log_unavailable` (a 503, in band over MCP) saying what to set: a key that is unreadable,
    or named for another origin where the key must sign, is the operator's to fix, not a server error."""
    try:
        return read()
    except ImproperlyConfigured as error:  # its message names settings and origins, never a path or the key
        raise LogError("log_unavailable", str(error)) from None


def _head_note() -> str | None:
    return LogCheckpoint.objects.order_by("-tree_size").values_list("note", flat=True).first()


def checkpoint_note() -> str:
    """The latest signed checkpoint, as stored whatever key this server holds now; before anything was appended, the
    empty tree's, signed now (which needs the key named for LEROY_LOG_ORIGIN)."""
    head = _head_note()
    return head if head is not None else _key(signer).sign(checkpoint_text(0, EMPTY_ROOT))


def log_size() -> int:
    return LogCheckpoint.objects.order_by("-tree_size").values_list("tree_size", flat=True).first() or 0


def verifier_key() -> str:
    """The key that verifies the served checkpoint: this server's key, whatever origin it is named for (a server
    moved to another LEROY_LOG_ORIGIN still serves the log its key signed), as long as it verifies the latest one."""
    head = _head_note()
    if head is None:
        return str(_key(signer).verifier)
    verifier = _key(local_key).verifier
    try:
        open_note(head, verifier)
    except NoteError:
        origin = head.partition("\n")[0]
        message = (
            f"publication log: this server's signing key (named {verifier.name}) does not verify the log's latest "
            f"checkpoint, of {origin}, so no key is served. Set LEROY_LOG_SIGNING_KEY to the key that signed the log "
            f"(named {origin}) and LEROY_LOG_ORIGIN={origin} to go on with this log."
        )
        logger.error(message)
        raise LogError("log_unavailable", message) from None
    return str(verifier)


def checkpoint() -> CheckpointOut:
    note = checkpoint_note()
    parsed = parse_checkpoint(note[: note.rfind("\n\n") + 1])
    token = timestamp_response(tree_size=parsed.size) if parsed.size else None
    return CheckpointOut(
        checkpoint=note,
        origin=parsed.origin,
        tree_size=parsed.size,
        root_hash=_b64(parsed.root),
        verifier_key=verifier_key(),
        timestamp_token=_b64(token) if token is not None else None,
        guarantees=guarantees(),
    )


def timestamp_response(*, tree_size: int) -> bytes | None:
    """The stored DER TimeStampResp over the note of the checkpoint of `tree_size`, if it was granted."""
    row = LogTimestamp.objects.filter(tree_size=tree_size, status="granted").values_list("response", flat=True)
    response = row.order_by("pk").first()
    return bytes(response) if response is not None else None


def _stamp(size: int, row: LogTimestamp | None) -> CheckpointTimestamp:
    if row is None:
        return CheckpointTimestamp(tree_size=size, status="not_requested")
    granted = row.status == "granted"
    return CheckpointTimestamp(
        tree_size=size,
        status="granted" if granted else "failed",
        gen_time=row.gen_time,
        detail=row.detail,
        token_url=f"{TOKEN_PATH}?tree_size={size}" if granted else None,
    )


def timestamp_authority() -> TimestampAuthority:
    """Which timestamp guarantee is in force, and whether the latest checkpoint carries its token."""
    url = settings.LEROY_LOG_TSA_URL
    if not url:
        return TimestampAuthority(kind="none")
    size = log_size()
    attempts = LogTimestamp.objects.filter(tree_size=size).order_by("-status", "-pk")  # "granted" sorts first
    stamped = LogTimestamp.objects.filter(status="granted").order_by("-tree_size", "pk").first()
    return TimestampAuthority(
        kind="rfc3161",
        url=url,
        tsa_subject=(stamped.tsa_subject or None) if stamped is not None else None,
        chain_verified_by_leroy=bool(settings.LEROY_LOG_TSA_ROOTS),
        latest_checkpoint=_stamp(size, attempts.first()) if size else None,
        latest_stamped_checkpoint=_stamp(stamped.tree_size, stamped) if stamped is not None else None,
    )


def guarantees() -> Guarantees:
    authority = timestamp_authority()
    if authority.kind == "none":
        return Guarantees(
            verifiable=VERIFIABLE,
            not_guaranteed=[
                "No independent timestamp: logged_at is the operator's own clock; no RFC 3161 time-stamp "
                "authority is configured (LEROY_LOG_TSA_URL).",
                *NOT_GUARANTEED,
            ],
            timestamp_authority="not_configured",
            timestamp=authority,
        )
    signer_name = f" ({authority.tsa_subject})" if authority.tsa_subject else ""
    checked = (
        "Leroy checks each token's status, imprint, nonce and signature chain against its configured roots."
        if authority.chain_verified_by_leroy
        else "Leroy checks each token's status, imprint and nonce, but not its signature chain (no "
        "LEROY_LOG_TSA_ROOTS): the TSA's identity is as the token states it until you verify it."
    )
    return Guarantees(
        verifiable=[
            *VERIFIABLE,
            f"Time: each checkpoint note is time-stamped by the RFC 3161 TSA at {authority.url}{signer_name}; "
            f"its token ({TOKEN_PATH}?tree_size=N) shows that checkpoint, and so every entry in it, existed no "
            "later than the token's genTime. Verify with leroy-verify --timestamp --tsa-roots ROOTS.pem.",
        ],
        not_guaranteed=[
            "Only an upper bound on time: logged_at is the operator's own clock, and an entry is independently "
            "dated only by the first stamped checkpoint that includes it; a checkpoint whose stamping failed has "
            "no token (timestamp.latest_checkpoint says).",
            checked,
            *NOT_GUARANTEED,
        ],
        timestamp_authority="rfc3161",
        timestamp=authority,
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


TILE_WIDTH = 256  # C2SP tlog-tiles: hashes per tile, entries per bundle (tile height 8)


def tile(*, level: int, index: int, width: int | None) -> bytes:
    """C2SP tlog-tiles hash tile: the hashes of the perfect subtrees of height 8·level numbered index·256 onward,
    `width` of them (None: a full tile), over the latest checkpoint's tree. A tile never changes once served."""
    span, size = 1 << (8 * level), log_size()
    available = min(size // span - index * TILE_WIDTH, TILE_WIDTH)
    wanted = TILE_WIDTH if width is None else width
    if level > 63 or available < wanted or not 0 < wanted <= TILE_WIDTH:
        raise LogError("not_found", f"no such tile in the tree of size {size}")
    tree, first = _tree(size), index * TILE_WIDTH
    return b"".join(tree.hash((first + i) * span, (first + i + 1) * span) for i in range(wanted))


def entry_bundle(*, index: int, width: int | None) -> bytes:
    """C2SP tlog-tiles entry bundle: entries index·256 onward, each its leaf input with a big-endian uint16 length."""
    wanted, first = TILE_WIDTH if width is None else width, index * TILE_WIDTH
    if not 0 < wanted <= TILE_WIDTH or first + wanted > log_size():
        raise LogError("not_found", f"no such entry bundle in the tree of size {log_size()}")
    bodies = LogEntry.objects.filter(index__gte=first, index__lt=first + wanted).values_list("body", flat=True)
    return b"".join(len(data).to_bytes(2, "big") + data for data in (body.encode() for body in bodies))


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
        "guarantees": guarantees(),
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
