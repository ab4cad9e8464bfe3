"""Writes to the publication log: appends (serialised, dense, each batch checkpointed), the artifact entry on
activation, answer receipts, and the daily commitment of answer hashes."""

import base64
import hashlib
import json
import logging
import math
import uuid
from collections.abc import Mapping
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

import rfc8785
import urllib3
from cryptography import x509
from django.conf import settings
from django.db import connection, transaction
from pydantic import BaseModel

from accounts.models import User
from evidence.models import LOG_KINDS, AnswerReceipt, LogCheckpoint, LogEntry, LogTimestamp, MarketMemoryArtifact
from evidence.publication.schemas import Receipt
from evidence.publication.signing import Signer, signer
from leroy.clock import now
from leroy.errors import DomainError
from leroy_verify.merkle import Tree, frontier_append, frontier_root, leaf_hash
from leroy_verify.timestamp import TimestampError, check, load_certificates, request_for

logger = logging.getLogger(__name__)

TSA_REPLY_BYTES = 64 * 1024  # a TimeStampResp with its certificates is a few kilobytes

# Any constant unique to this lock; PostgreSQL holds it until the appending transaction ends.
APPEND_LOCK = 0x6C65726F79_6C6F67  # "leroy" "log"


class LogError(DomainError):
    """An entry was refused; nothing was appended."""


def canonical(value: Any) -> bytes:
    """RFC 8785 (JCS) bytes: the one serialisation every hash in the log is taken over.

    Byte-identical to `rfc8785.dumps`, which serialises in pure Python (about 10 ms for one evaluation answer).
    For the values JCS and the C JSON encoder write alike (ASCII keys, which sort the same by code point as by
    UTF-16 unit; ints in the safe range; floats whose repr has no exponent, integral ones written as ints; escapes
    are the same table) the C encoder writes them; anything else goes to rfc8785 whole, which also raises its
    errors."""
    try:
        return json.dumps(
            _jcs_ready(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
        ).encode()
    except (_NotPlain, UnicodeEncodeError, TypeError, ValueError, RecursionError):
        return rfc8785.dumps(value)


class _NotPlain(Exception):
    """A value the C encoder would not write exactly as JCS does."""


_SAFE_INT = 2**53 - 1


def _jcs_ready(value: Any) -> Any:
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if -_SAFE_INT <= value <= _SAFE_INT:
            return value
        raise _NotPlain
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotPlain
        if value.is_integer():
            if -_SAFE_INT <= value <= _SAFE_INT:
                return int(value)  # JCS writes 2.0 as 2; below 2^53 the int is the shortest digits exactly
            raise _NotPlain
        if "e" in repr(value):
            raise _NotPlain
        return value  # shortest round-trip digits without exponent: JCS's form too
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key.isascii():
                raise _NotPlain
            out[key] = _jcs_ready(item)
        return out
    if isinstance(value, list | tuple):
        return [_jcs_ready(item) for item in value]
    raise _NotPlain


def checkpoint_text(size: int, root: bytes) -> str:
    return f"{settings.LEROY_LOG_ORIGIN}\n{size}\n{base64.b64encode(root).decode()}\n"


def log_signer(head: LogCheckpoint | None) -> Signer:
    """The key to sign the checkpoint after `head` (the latest; None for an empty log) with, once both the key and
    the log name LEROY_LOG_ORIGIN. A log keeps the origin its first checkpoint named: signing its next one under
    another would make it two logs by name, which `leroy-verify` fails."""
    key = signer()
    origin = head.note.partition("\n")[0] if head is not None else settings.LEROY_LOG_ORIGIN
    if origin != settings.LEROY_LOG_ORIGIN:
        message = (
            f"publication log: the log in this database is {origin} (its latest checkpoint's origin), not this "
            f"server's log origin {settings.LEROY_LOG_ORIGIN}; nothing is appended. Set LEROY_LOG_ORIGIN={origin} "
            "with the key that signed it, or start a new log with a fresh database (make demo: a fresh LEROY_VAR_DIR)."
        )
        logger.error(message)
        raise LogError("log_origin_changed", message)
    return key


def append_lock() -> None:
    """Serialise appends so indices are dense. SQLite needs nothing: its IMMEDIATE transactions already serialise
    writers (settings), and the primary key refuses a duplicate index in any case."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [APPEND_LOCK])


def _validated(entry: Mapping[str, Any]) -> dict[str, Any]:
    kind = entry.get("kind")
    if kind not in LOG_KINDS:
        raise LogError("unknown_kind", f"log entry kind must be one of {sorted(LOG_KINDS)}")
    missing = [name for name in LOG_KINDS[kind] if entry.get(name) in (None, "")]
    if missing or "logged_at" in entry:
        raise LogError("invalid_entry", f"{kind} entries need {list(LOG_KINDS[kind])}; logged_at is set by the log")
    try:
        canonical(entry)
    except rfc8785.CanonicalizationError as error:  # e.g. an integer beyond 2^53 has no exact JSON number
        raise LogError("invalid_entry", f"{kind} entry has no canonical JSON: {error}") from None
    return dict(entry)


@transaction.atomic
def entries_append(entries: list[Mapping[str, Any]]) -> list[LogEntry]:
    """Append one batch and sign the checkpoint of the grown tree, in one transaction."""
    bodies = [_validated(entry) for entry in entries]
    if not bodies:
        return []
    append_lock()
    head = LogCheckpoint.objects.order_by("-tree_size").first()
    key = log_signer(head)
    size = head.tree_size if head is not None else 0
    edge = [bytes.fromhex(h) for h in head.frontier] if head is not None else []
    # Never stamped before the entry it follows: processes' clocks may disagree (a skewed node, the demo's replay
    # clock beside the real one), and a log read in order must not go back in time.
    at = max(now(), head.created_at) if head is not None else now()
    rows = []
    for offset, body in enumerate(bodies):
        data = canonical({**body, "logged_at": at.isoformat().replace("+00:00", "Z")})
        leaf = leaf_hash(data)
        edge = frontier_append(edge, size + offset, leaf)
        rows.append(
            LogEntry(index=size + offset, kind=body["kind"], body=data.decode(), leaf_hash=leaf.hex(), logged_at=at)
        )
    LogEntry.objects.bulk_create(rows)
    size += len(rows)
    root = frontier_root(edge)
    LogCheckpoint.objects.create(
        tree_size=size,
        root_hash=root.hex(),
        frontier=[h.hex() for h in edge],
        note=key.sign(checkpoint_text(size, root)),
        created_at=at,
    )
    if settings.LEROY_LOG_TSA_URL:  # after the commit, outside the append lock: a slow TSA never holds appends up
        transaction.on_commit(lambda: checkpoint_timestamp(tree_size=size), robust=True)
    return rows


def entry_append(entry: Mapping[str, Any]) -> LogEntry:
    return entries_append([entry])[0]


def artifact_published(*, artifact: MarketMemoryArtifact) -> list[LogEntry]:
    """Log the artifact now being served and the forward overlay it carries, unless the log's latest artifact entry
    already names it. The overlay is committed apart so a caller can hold what was observed after the historical
    boundary to its own entry (tickers, coverage, sessions through), appended in the same checkpoint."""
    latest = LogEntry.objects.filter(kind="market_memory_artifact").order_by("-index").first()
    if latest is not None and json.loads(latest.body)["artifact_sha256"] == artifact.sha256:
        return []
    manifest = artifact.manifest
    entries: list[Mapping[str, Any]] = [
        {
            "kind": "market_memory_artifact",
            "artifact_version": artifact.version,
            "artifact_sha256": artifact.sha256,
            "sessions_through": manifest["data_as_of"],
        }
    ]
    overlay = manifest.get("coverage", {}).get("forward_overlay", {})
    if overlay.get("status") == "available":
        described = {"tickers": manifest["corpus"]["overlay_tickers"], "coverage": overlay}
        entries.append(
            {
                "kind": "forward_overlay",
                "artifact_sha256": artifact.sha256,
                "overlay_sha256": hashlib.sha256(canonical(described)).hexdigest(),
                "sessions_through": overlay["last_session"],
                "first_session": overlay["first_session"],
                "symbols": overlay["symbols"],
            }
        )
    return entries_append(entries)


def answer_sha256(answer: BaseModel) -> str:
    """SHA-256 of the answer exactly as the caller receives it (its JSON), without its receipt."""
    return hashlib.sha256(canonical(answer.model_dump(mode="json", exclude={"receipt"}))).hexdigest()


def receipt_attach[T: BaseModel](*, user: User, tool: str, answer: T) -> T:
    """Record the answer's hash for its day's commitment and return the answer carrying its receipt.

    Called inside the metering transaction, so a rolled-back answer leaves no hash behind."""
    answer_id = getattr(answer, "evaluation_id", None) or f"ans_{uuid.uuid4().hex}"
    digest, day = answer_sha256(answer), now().date()
    AnswerReceipt.objects.create(
        user=user, answer_id=answer_id, tool=tool, answer_sha256=digest, day=day, recorded_at=now()
    )
    return answer.model_copy(update={"receipt": Receipt(answer_id=answer_id, answer_sha256=digest, day=day)})


def day_tree_leaves(hashes: list[str]) -> list[bytes]:
    return [leaf_hash(bytes.fromhex(h)) for h in hashes]


@transaction.atomic
def answers_commit(*, day: date) -> LogEntry | None:
    """Commit the day's not yet committed answer hashes (in recording order) as one `daily_answers_root` entry.

    Answers recorded after a commit go into the next commit of the same day."""
    append_lock()
    rows = list(
        AnswerReceipt.objects.filter(day=day, log_index__isnull=True).order_by("pk").values_list("pk", "answer_sha256")
    )
    if not rows:
        return None
    leaves = day_tree_leaves([digest for _, digest in rows])
    entry = entry_append(
        {
            "kind": "daily_answers_root",
            "day": day.isoformat(),
            "answer_count": len(rows),
            "root_sha256": Tree(leaves).root(len(leaves)).hex(),
        }
    )
    AnswerReceipt.objects.filter(pk__in=[pk for pk, _ in rows]).update(log_index=entry.index)
    return entry


def answers_commit_due(*, through: date) -> list[LogEntry]:
    """Commit every day through `through` that has uncommitted answers (the beat task and the command's default)."""
    days = (
        AnswerReceipt.objects.filter(log_index__isnull=True, day__lte=through)
        .values_list("day", flat=True)
        .distinct()
        .order_by("day")
    )
    return [entry for day in list(days) if (entry := answers_commit(day=day)) is not None]


@cache
def tsa_roots() -> list[x509.Certificate]:
    path = settings.LEROY_LOG_TSA_ROOTS
    return load_certificates(Path(path).read_bytes()) if path else []


def _tsa_reply(url: str, query: bytes) -> bytes:
    response = urllib3.request(
        "POST",
        url,
        body=query,
        headers={"Content-Type": "application/timestamp-query", "Accept": "application/timestamp-reply"},
        timeout=urllib3.Timeout(total=settings.LEROY_LOG_TSA_TIMEOUT),
        retries=False,
        redirect=False,
        preload_content=False,
    )
    try:
        body = response.read(TSA_REPLY_BYTES + 1)
    finally:
        response.release_conn()
    if response.status != 200:
        raise TimestampError(f"the TSA answered HTTP {response.status}")
    if len(body) > TSA_REPLY_BYTES:
        raise TimestampError(f"the TSA's reply is larger than {TSA_REPLY_BYTES} bytes")
    return bytes(body)


def checkpoint_timestamp(*, tree_size: int) -> LogTimestamp:
    """Ask the TSA for a token over the checkpoint note, check it and store it; any failure is stored instead.

    Never raises for the TSA's sake: the checkpoint is already published, and a missing token is reported (the
    log's guarantees, /readyz) rather than blocking the log."""
    url = settings.LEROY_LOG_TSA_URL
    message = LogCheckpoint.objects.get(tree_size=tree_size).note.encode()
    try:
        request = request_for(message)
        stamp = check(_tsa_reply(url, request.as_bytes()), message, nonce=request.nonce, roots=tsa_roots())
    except Exception as error:  # network, HTTP, parse, rejection, mismatch, unreadable roots: all degrade the same
        detail = f"{type(error).__name__}: {error}"[:500]
        logger.warning("publication log: no time-stamp token for checkpoint %s from %s: %s", tree_size, url, detail)
        return LogTimestamp.objects.create(
            tree_size=tree_size, tsa_url=url, status="failed", detail=detail, requested_at=now()
        )
    return LogTimestamp.objects.create(
        tree_size=tree_size,
        tsa_url=url,
        status="granted",
        response=stamp.response,
        gen_time=stamp.gen_time,
        tsa_subject=stamp.tsa_subject[:500],
        chain_verified=stamp.chain_verified,
        requested_at=now(),
    )


def timestamp_due() -> LogTimestamp | None:
    """Stamp the latest checkpoint again if it has no token (a failed or lost attempt); beat runs this."""
    if not settings.LEROY_LOG_TSA_URL:
        return None
    size = LogCheckpoint.objects.order_by("-tree_size").values_list("tree_size", flat=True).first()
    if size is None or LogTimestamp.objects.filter(tree_size=size, status="granted").exists():
        return None
    return checkpoint_timestamp(tree_size=size)
