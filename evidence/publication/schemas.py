"""The publication log's contract: the receipt every metered answer carries, and the log tools' arguments and
results. Hashes inside entries are hex; proof hashes and root hashes are base64, as in RFC 9162 / C2SP."""

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from leroy.schemas import ToolArgs


class Receipt(BaseModel):
    answer_id: str = Field(description="Pass this to get_answer_proof (equal to evaluation_id for evaluations).")
    answer_sha256: str = Field(
        description="SHA-256 (hex) of the RFC 8785 canonical JSON of this answer without its `receipt` field."
    )
    day: date = Field(description="UTC day whose answers tree this hash joins.")
    log_index: int | None = Field(
        None,
        description="Index of the daily_answers_root log entry committing this hash; null until the day is "
        "committed (after the close). get_answer_proof returns it and the proofs.",
    )


class CheckpointTimestamp(BaseModel):
    tree_size: int
    status: Literal["granted", "failed", "not_requested"] = Field(
        description="granted: a checked RFC 3161 token is stored; failed: the last request failed (detail); "
        "not_requested: no request yet (just appended, or the empty tree)."
    )
    gen_time: datetime | None = Field(None, description="The TSA's genTime: the checkpoint existed no later.")
    detail: str = ""
    token_url: str | None = Field(None, description="Path of the DER TimeStampResp (application/timestamp-reply).")


class TimestampAuthority(BaseModel):
    kind: Literal["none", "rfc3161"]
    url: str | None = None
    tsa_subject: str | None = Field(None, description="Subject of the certificate that signed the latest token.")
    chain_verified_by_leroy: bool = Field(
        False,
        description="Leroy checked each token's signature chain against configured roots (else only status, "
        "imprint and nonce; verify the chain yourself with leroy-verify --tsa-roots).",
    )
    latest_checkpoint: CheckpointTimestamp | None = None
    latest_stamped_checkpoint: CheckpointTimestamp | None = None


class Guarantees(BaseModel):
    """What the log proves and what it does not, stated plainly (built by selectors.guarantees)."""

    verifiable: list[str]
    not_guaranteed: list[str]
    timestamp_authority: Literal["not_configured", "rfc3161"]
    timestamp: TimestampAuthority
    witnesses: list[str] = []


class LogEntryOut(BaseModel):
    index: int
    entry: dict[str, Any] = Field(description="The entry object; its RFC 8785 bytes are the leaf input.")
    leaf_hash: str = Field(description="hex SHA-256(0x00 ‖ RFC 8785 bytes of entry)")


class InclusionProof(BaseModel):
    index: int
    tree_size: int
    root_hash: str = Field(description="base64 root of the tree of tree_size")
    hashes: list[str] = Field(description="base64 RFC 9162 audit path, leaf to root")


class ConsistencyProof(BaseModel):
    first: int
    second: int
    hashes: list[str] = Field(description="base64 RFC 9162 consistency proof")


class CheckpointArgs(ToolArgs):
    pass


class CheckpointOut(BaseModel):
    checkpoint: str = Field(description="The latest C2SP signed checkpoint note, as served at /log/checkpoint.")
    origin: str
    tree_size: int
    root_hash: str = Field(description="base64")
    verifier_key: str = Field(description="<name>+<key hash>+<base64(0x01 ‖ Ed25519 public key)>")
    timestamp_token: str | None = Field(
        None, description="base64 DER RFC 3161 TimeStampResp over this checkpoint note's bytes, when one is stored."
    )
    guarantees: Guarantees


class ConsistencyArgs(ToolArgs):
    first: int = Field(ge=0, description="The earlier tree size (e.g. of a checkpoint you kept).")
    second: int | None = Field(None, ge=0, description="The later tree size; default: the latest checkpoint's.")


class InclusionArgs(ToolArgs):
    index: int = Field(ge=0, description="The entry's index.")
    tree_size: int | None = Field(None, ge=1, description="Tree size to prove against; default: the latest.")


class InclusionOut(BaseModel):
    entry: LogEntryOut
    proof: InclusionProof
    checkpoint: str = Field(description="The latest signed checkpoint note.")


class AnswerProofArgs(ToolArgs):
    evaluation_id: str = Field(
        min_length=1, max_length=64, description="An evaluation_id, or any metered answer's receipt.answer_id."
    )


class DayTreeProof(BaseModel):
    index: int = Field(description="Position of the answer's hash among the committed hashes.")
    size: int
    root_sha256: str = Field(description="hex root of the day tree (leaf = SHA-256(0x00 ‖ answer hash bytes))")
    hashes: list[str] = Field(description="base64 audit path in the day tree, leaf to root")


class AnswerProofOut(BaseModel):
    answer_id: str
    tool: str
    answer_sha256: str
    day: date
    status: Literal["committed", "not_committed"]
    day_tree: DayTreeProof | None = None
    log_entry: LogEntryOut | None = None
    log_inclusion: InclusionProof | None = None
    checkpoint: str | None = Field(None, description="The signed checkpoint log_inclusion is against.")
    verifier_key: str
    guarantees: Guarantees
