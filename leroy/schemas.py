"""Schema pieces every app's tool arguments share; the ground floor: imports no app and nothing of leroy.mcp."""

import json
from dataclasses import dataclass
from typing import Any, Self

from pydantic import BaseModel, ConfigDict


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown fields are refused, never ignored."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def from_arguments(cls, arguments: dict[str, Any]) -> Self:
        """Validate a call's JSON arguments strictly: a boolean must be true/false and a number a JSON number
        (`"yes"`, `"1"` or `1` for a boolean and `"5"` for a number are refused, not coerced); strings that
        carry dates are still parsed, as JSON has no date type. Raises pydantic's ValidationError."""
        return cls.model_validate_json(json.dumps(arguments), strict=True)


@dataclass(frozen=True)
class Answer:
    """A computed answer without its `usage` block, and how many Market Memory lookups computing it consumed.

    Cores return this and know no price; the tool edge meters it (billing.metering) into the output model.
    `lookups == 0` means nothing was looked up (no usable frame or snapshot), which is never charged.
    """

    fields: dict[str, Any]
    lookups: int
