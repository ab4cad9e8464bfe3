"""Schema pieces every app's tool arguments share; the ground floor: imports no app and nothing of leroy.mcp."""

import json
import re
from dataclasses import dataclass
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, field_validator

# NUL cannot be stored in PostgreSQL text and a lone surrogate is not UTF-8: neither is a valid argument.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(value: Any) -> Any:
    if isinstance(value, str) and _UNSTORABLE.search(value):
        raise ValueError("text must not contain NUL characters or lone surrogates")
    if isinstance(value, (list, tuple)):
        for item in value:
            _storable(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _storable(key)
            _storable(item)
    return value


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown fields are refused, never ignored; so is text no database keeps."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _text_is_storable(cls, value: Any) -> Any:
        return _storable(value)

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
