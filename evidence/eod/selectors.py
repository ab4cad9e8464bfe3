"""Reads of the end-of-day layer: completed snapshots only (a snapshot exists only once its run committed), so no
read ever computes anything. Each answer's fields include the trust contract."""

import json
from typing import Any

from django.db.models import Max, Min

from evidence.eod.engine import canonical_sha256
from evidence.eod.heldout import EVIDENCE_CLASS, REUSE_ADMISSION
from evidence.eod.replay import LABEL
from evidence.eod.schemas import DISCLAIMER, DataType
from evidence.eod.walkforward import METHOD
from evidence.models import EodRow, EodSnapshot, LogEntry
from evidence.publication import selectors as publication
from leroy.errors import DomainError

# The eod_snapshot entry's evidence hashes each commitment shows (see evidence/eod/documentation.md).
EVIDENCE_COMMITMENTS = ("replay_sha256", "heldout_sha256", "walk_forward_sha256", "replay_symbols_root_sha256",
                        "walk_forward_symbols_root_sha256")  # fmt: skip


class EodUnavailable(DomainError):
    """Nothing to serve yet (no completed snapshot), or an unknown publication id or symbol."""


def latest() -> EodSnapshot:
    snapshot = EodSnapshot.objects.order_by("-log_index").first()
    if snapshot is None:
        raise EodUnavailable("snapshot_not_found", "No end-of-day snapshot has been completed yet.")
    return snapshot


def by_publication(publication_id: int | None) -> EodSnapshot:
    if publication_id is None:
        return latest()
    snapshot = EodSnapshot.objects.filter(log_index=publication_id).first()
    if snapshot is None:
        raise EodUnavailable("snapshot_not_found", f"No end-of-day snapshot has publication id {publication_id}.")
    return snapshot


def trust(snapshot: EodSnapshot, data_type: DataType, calculation_sha256: str) -> dict[str, Any]:
    return {
        "as_of": snapshot.session,
        "last_updated": snapshot.created_at,
        "data_type": data_type,
        "disclaimer": DISCLAIMER,
        "snapshot_sha256": snapshot.snapshot_sha256,
        "calculation_sha256": calculation_sha256,
        "source": snapshot.components["data"]["source"],
    }


def replay(*, symbol: str | None, offset: int, limit: int) -> dict[str, Any]:
    snapshot = latest()
    # A snapshot keeps what its answers state (and its entry commits it); older ones get it as it was then.
    statement = snapshot.replay.get("statement") or {
        "label": LABEL, "symbols": list(snapshot.rows.filter(available=True).values_list("symbol", flat=True))
    }  # fmt: skip
    base = {**trust(snapshot, "historical_replay", snapshot.replay["sha256"]), **statement}
    if symbol is None:
        return {**base, "symbol": None, "summary": snapshot.replay["summary"], "legs": [], "total_legs": 0,
                "symbol_proof": None}  # fmt: skip
    row = snapshot.rows.filter(symbol=symbol).first()
    if row is None or row.replay is None:
        raise EodUnavailable("symbol_not_found", f"{symbol} has no replay in the snapshot of {snapshot.session}.")
    legs = row.replay["legs"]
    # Snapshots made before per-symbol roots have no proof: their replay is held to the log by its stated hash.
    return {**base, "symbol": symbol, "summary": row.replay["summary"], "legs": legs[offset : offset + limit],
            "total_legs": len(legs), "symbol_proof": row.replay.get("proof")}  # fmt: skip


def heldout() -> dict[str, Any]:
    snapshot = latest()
    block = snapshot.heldout
    return {
        **trust(snapshot, "validation", block["sha256"]),
        **(block.get("statement") or {"evidence_class": EVIDENCE_CLASS, "reuse_admission": REUSE_ADMISSION}),
        "first": block["first"],
        "last": block["last"],
        "row_count": len(block["rows"]),
        "rows": block["rows"],
    }


def walk_forward(*, symbol: str | None) -> dict[str, Any]:
    snapshot = latest()
    if symbol is not None and not snapshot.rows.filter(symbol=symbol).exists():
        raise EodUnavailable("symbol_not_in_universe", f"{symbol} is not in the end-of-day universe.")
    rows = [row for row in snapshot.walk_forward["rows"] if symbol is None or row["symbol"] == symbol]
    statement = snapshot.walk_forward.get("statement") or {"method": METHOD, "inputs_rehashed": True}
    # calculation_sha256 stays the universe's (what the entry commits); one symbol's answer is bound to the entry's
    # per-symbol root by its proof instead. Snapshots made before those roots have none: the stated hash alone.
    proof = None if symbol is None else snapshot.walk_forward.get("proofs", {}).get(symbol)
    return {**trust(snapshot, "walk_forward", snapshot.walk_forward["sha256"]), "components": snapshot.components,
            **statement, "symbol": symbol, "rows": rows, "symbol_proof": proof}  # fmt: skip


def _commitment(entry: LogEntry) -> dict[str, Any]:
    body = json.loads(entry.body)
    return {
        "publication_id": entry.index,
        "session": body["session"],
        "revision": body["revision"],
        "snapshot_sha256": body["snapshot_sha256"],
        "row_count": body["row_count"],
        "leaf_hash": entry.leaf_hash,
        "logged_at": entry.logged_at,
        # The evidence hashes the entry commits; null in entries logged before each was committed.
        **{name: body.get(name) for name in EVIDENCE_COMMITMENTS},
    }


def commitments(*, offset: int, limit: int) -> dict[str, Any]:
    snapshot = latest()
    entries = LogEntry.objects.filter(kind="eod_snapshot").order_by("index")
    page = [_commitment(e) for e in entries[offset : offset + limit]]
    return {**trust(snapshot, "forward_commitment", snapshot.snapshot_sha256), "total": entries.count(),
            "commitments": page}  # fmt: skip


def maturity() -> dict[str, Any]:
    snapshot = latest()
    snapshots = EodSnapshot.objects.all()
    changes = [len(c) for c in snapshots.values_list("changes", flat=True)]
    first = snapshots.aggregate(first=Min("session"))["first"]  # `latest` exists, so there is a first
    fields = {  # as published (dates in ISO form), since the calculation hash is taken over exactly these
        "total_snapshots": len(changes),
        "distinct_market_dates": snapshots.values("session").distinct().count(),
        "first_date": first.isoformat(),
        "latest_date": snapshot.session.isoformat(),
        "latest_revision": snapshots.filter(session=snapshot.session).aggregate(r=Max("revision"))["r"],
        "instrument_count": EodRow.objects.filter(snapshot=snapshot).count(),
        "change_count": sum(changes),
        "snapshots_with_changes": sum(1 for c in changes if c),
        "performance_status": "not_calculated_from_commitments",  # a hash proves what was stored, not returns
    }
    return {**trust(snapshot, "forward_commitment", canonical_sha256(fields)), **fields}


def provenance() -> dict[str, Any]:
    snapshot = latest()
    return {
        **trust(snapshot, "provenance", canonical_sha256(snapshot.components)),
        "components": snapshot.components,
        "publication_id": snapshot.log_index,
        "checkpoint": publication.checkpoint_note(),
        "verifier_key": publication.verifier_key(),
        "guarantees": publication.guarantees().model_dump(),
    }


def signal(*, symbol: str) -> dict[str, Any]:
    snapshot = latest()
    row = snapshot.rows.filter(symbol=symbol).first()
    if row is None:
        raise EodUnavailable("symbol_not_in_universe", f"{symbol} is not in the end-of-day universe.")
    blank = dict.fromkeys(
        ("state", "action", "recommended_state", "suggested_position", "lines_applied", "lines_next_session",
         "current_leg", "first_entry", "history_gaps")
    )  # fmt: skip
    fields = {**blank, **{k: v for k, v in row.row.items() if k != "session"}}  # as_of already names the session
    return {**trust(snapshot, "end_of_day_signal", canonical_sha256(fields)), **fields}


def frozen_rows(*, publication_id: int | None) -> dict[str, Any]:
    snapshot = by_publication(publication_id)
    rows = [r.row for r in snapshot.rows.order_by("symbol")]
    return {
        **trust(snapshot, "forward_commitment", snapshot.snapshot_sha256),
        "publication_id": snapshot.log_index,
        "revision": snapshot.revision,
        "components": snapshot.components,
        "rows": rows,
    }


def changes_since(*, publication_id: int) -> dict[str, Any]:
    by_publication(publication_id)  # a snapshot's own id: an id never published is refused, not answered "no changes"
    snapshot = latest()
    later = EodSnapshot.objects.filter(log_index__gt=publication_id).order_by("log_index")
    items = [{"publication_id": s.log_index, "session": s.session.isoformat(), "revision": s.revision,
              "changes": s.changes} for s in later]  # fmt: skip
    return {**trust(snapshot, "forward_commitment", canonical_sha256(items)), "after": publication_id,
            "snapshots": items}  # fmt: skip
