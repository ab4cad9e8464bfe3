"""The end-of-day tools' contract. Every successful answer carries the trust contract (`Trust`); none carries
raw price history (legs name entry and exit closes, which are the engine's own derived output)."""

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from billing.schemas import LookupUsage
from evidence.publication.schemas import Guarantees, Receipt
from evidence.vocabulary import Ticker
from leroy.schemas import ToolArgs

DataType = Literal[
    "end_of_day_signal", "historical_replay", "validation", "walk_forward", "forward_commitment", "provenance"
]
DISCLAIMER = (
    "Impersonal end-of-day publication from Leroy's trend engine, not personalised advice: it knows nothing of your "
    "portfolio, taxes, horizon or risk tolerance. Past or replayed results do not predict future results. Relay this."
)


class Trust(BaseModel):
    """The trust contract: read it before presenting a number."""

    as_of: date = Field(description="The market session the snapshot is computed through.")
    last_updated: datetime = Field(description="When the snapshot was completed (UTC).")
    data_type: DataType
    disclaimer: str = DISCLAIMER
    snapshot_sha256: str = Field(description="The snapshot committed to the publication log.")
    calculation_sha256: str = Field(description="Hash of this answer's calculation (components and result).")
    source: Literal["vendor", "synthetic", "mixed"] = Field(description="Where the daily bars came from.")


class Page(ToolArgs):
    offset: int = Field(0, ge=0)
    limit: int = Field(50, ge=1, le=200)


class ReplayArgs(Page):
    symbol: Ticker | None = Field(None, description="Omit for the universe summary.")


class ReplayOut(Trust):
    label: Literal["retrospective_replay"] = "retrospective_replay"
    note: str = (
        "Today's engine rules applied retrospectively over up to five years; separate from validation and from the "
        "forward ledger. Open legs are marked to the last close."
    )
    symbol: str | None
    summary: dict[str, Any] = Field(
        description="count, winners/losers, win rate, average/median return and profit factor of closed legs; "
        "max drawdown of the replay equity; exposure."
    )
    legs: list[dict[str, Any]] = Field(description="This page of the symbol's legs, oldest first (none for universe).")
    total_legs: int
    symbols: list[str] = Field(description="Universe symbols with a replay in this snapshot.")


class NoArgs(ToolArgs):
    pass


class HeldoutOut(Trust):
    evidence_class: Literal["validation"] = "validation"
    reuse_admission: str
    first: date
    last: date
    row_count: int
    rows: list[dict[str, Any]]


class WalkForwardArgs(ToolArgs):
    symbol: Ticker | None = Field(None, description="Omit for every symbol.")


class WalkForwardOut(Trust):
    method: str = (
        "Each calendar year's variant is chosen only on closes through the preceding year, then scored on that "
        "year; years where it lagged holding or the champion-free base are kept."
    )
    inputs_rehashed: Literal[True] = Field(True, description="Frozen input files re-hashed before publication.")
    components: dict[str, Any] = Field(description="Data, engine, variant set and calculation version hashes.")
    rows: list[dict[str, Any]]


class Commitment(BaseModel):
    publication_id: int = Field(description="The log index of the commitment (stable).")
    session: date
    revision: int
    snapshot_sha256: str
    row_count: int
    leaf_hash: str
    logged_at: datetime


class CommitmentsOut(Trust):
    total: int
    commitments: list[Commitment]


class MaturityOut(Trust):
    total_snapshots: int
    distinct_market_dates: int
    first_date: date
    latest_date: date
    latest_revision: int
    instrument_count: int
    change_count: int
    snapshots_with_changes: int
    performance_status: Literal["not_calculated_from_commitments"] = "not_calculated_from_commitments"


class ProvenanceOut(Trust):
    components: dict[str, Any]
    publication_id: int
    checkpoint: str = Field(description="The publication log's latest signed checkpoint.")
    verifier_key: str
    guarantees: Guarantees = Guarantees()


class SignalArgs(ToolArgs):
    symbol: Ticker


class SignalOut(Trust):
    symbol: str
    status: Literal["available", "absent_from_snapshot"]
    authoritative: str = "Treat action and suggested_position as authoritative; state may lag by one closing bar."
    state: Literal["LONG", "FLAT"] | None = Field(description="Confirmed state (last recorded closing transition).")
    action: Literal["ENTER", "HOLD", "EXIT", "STAY_FLAT"] | None
    recommended_state: Literal["LONG", "FLAT"] | None
    suggested_position: float | None = Field(description="Target weight: 1 long, 0 flat.")
    lines_applied: dict[str, float | None] | None = Field(description="Buy/sell lines this close was judged on.")
    lines_next_session: dict[str, float | None] | None = Field(description="Lines published for the next session.")
    current_leg: dict[str, Any] | None = Field(description="Entry of the open leg in the replay window.")
    first_entry: dict[str, Any] | None = Field(description="Entry of the longer active trend (full history).")
    usage: LookupUsage
    receipt: Receipt | None = None


class FrozenRowsArgs(ToolArgs):
    publication_id: int | None = Field(None, ge=0, description="Default: the latest snapshot.")


class FrozenRowsOut(Trust):
    publication_id: int
    revision: int
    components: dict[str, Any]
    rows: list[dict[str, Any]] = Field(description="Exactly as hashed into snapshot_sha256 (RFC 8785).")
    usage: LookupUsage
    receipt: Receipt | None = None


class ChangesArgs(ToolArgs):
    publication_id: int = Field(ge=0, description="Changes in snapshots published after this id.")


class ChangesOut(Trust):
    after: int
    snapshots: list[dict[str, Any]] = Field(description="{publication_id, session, revision, changes} each.")
    usage: LookupUsage
    receipt: Receipt | None = None
