"""The end-of-day tools' contract. Every successful answer carries the trust contract (`Trust`: as_of, last_updated,
data_type, disclaimer, snapshot and calculation hashes, data source); none carries raw price history (legs name
entry and exit closes, the engine's own derived output). Fixed texts are set by the selectors, not as schema
defaults, to keep the tool list small."""

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from billing.schemas import LookupUsage
from evidence.publication.schemas import Receipt
from evidence.vocabulary import Ticker
from leroy.schemas import ToolArgs

# What each answer is, in its trust contract's `data_type`.
DataType = Literal[
    "end_of_day_signal", "historical_replay", "validation", "walk_forward", "forward_commitment", "provenance"
]
DISCLAIMER = (
    "Impersonal end-of-day publication from Leroy's trend engine, not personalised advice: it knows nothing of your "
    "portfolio, taxes, horizon or risk tolerance. Past or replayed results do not predict future results. Relay this."
)


class Trust(BaseModel):
    as_of: date
    last_updated: datetime
    data_type: str
    disclaimer: str
    snapshot_sha256: str
    calculation_sha256: str
    source: str


class EodPage(ToolArgs):
    offset: int = Field(0, ge=0)
    limit: int = Field(50, ge=1, le=200)


class ReplayArgs(EodPage):
    symbol: Ticker | None = Field(None, description="Omit for the universe summary.")


class ReplayOut(Trust):
    label: str
    symbol: str | None
    summary: dict[str, Any]
    legs: list[dict[str, Any]]
    total_legs: int
    symbols: list[str]
    symbol_proof: list[str] | None


class HeldoutOut(Trust):
    evidence_class: str
    reuse_admission: str
    first: date
    last: date
    row_count: int
    rows: list[dict[str, Any]]


class WalkForwardArgs(ToolArgs):
    symbol: Ticker | None = Field(None, description="Omit for every symbol.")


class SymbolProof(BaseModel):
    index: int
    tree_size: int
    hashes: list[str]


class WalkForwardOut(Trust):
    method: str
    inputs_rehashed: bool
    components: dict[str, Any]
    symbol: str | None
    rows: list[dict[str, Any]]
    symbol_proof: SymbolProof | None


class Commitment(BaseModel):
    publication_id: int
    session: date
    revision: int
    snapshot_sha256: str
    row_count: int
    leaf_hash: str
    logged_at: datetime
    replay_sha256: str | None
    heldout_sha256: str | None
    walk_forward_sha256: str | None
    replay_symbols_root_sha256: str | None
    walk_forward_symbols_root_sha256: str | None


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
    performance_status: str


class ProvenanceOut(Trust):
    components: dict[str, Any]
    publication_id: int
    checkpoint: str
    verifier_key: str
    guarantees: dict[str, Any]


class SignalArgs(ToolArgs):
    symbol: Ticker


class SignalOut(Trust):
    symbol: str
    status: str
    state: str | None
    action: str | None
    recommended_state: str | None
    suggested_position: float | None
    lines_applied: dict[str, float | None] | None
    lines_next_session: dict[str, float | None] | None
    current_leg: dict[str, Any] | None
    first_entry: dict[str, Any] | None
    history_gaps: dict[str, Any] | None  # status incomplete_history: the XNYS sessions its daily bars miss
    usage: LookupUsage
    receipt: Receipt | None = None


class FrozenRowsArgs(ToolArgs):
    publication_id: int | None = Field(None, ge=0, description="Default: the latest snapshot.")


class FrozenRowsOut(Trust):
    publication_id: int
    revision: int
    components: dict[str, Any]
    rows: list[dict[str, Any]]
    usage: LookupUsage
    receipt: Receipt | None = None


class ChangesArgs(ToolArgs):
    publication_id: int = Field(ge=0, description="Changes in snapshots published after this snapshot publication id.")


class ChangesOut(Trust):
    after: int
    snapshots: list[dict[str, Any]]
    usage: LookupUsage
    receipt: Receipt | None = None
