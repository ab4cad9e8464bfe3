"""Schema pieces every app's tool arguments share; the ground floor: imports no app and nothing of leroy.mcp."""

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown fields are refused, never ignored."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Answer:
    """A computed answer without its `usage` block, and how many Market Memory lookups computing it consumed.

    Cores return this and know no price; the tool edge meters it (billing.metering) into the output model.
    `lookups == 0` means nothing was looked up (no usable frame or snapshot), which is never charged.
    """

    fields: dict[str, Any]
    lookups: int
