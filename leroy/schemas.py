"""Schema pieces every app's tool arguments share; the ground floor: imports no app and nothing of leroy.mcp."""

import json
import re
from dataclasses import dataclass
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from leroy.errors import DomainError

# NUL cannot be stored in PostgreSQL text and a lone surrogate is not UTF-8: neither is a valid argument. Nor is an
# integer JSON does not carry exactly everywhere (I-JSON, RFC 7493: beyond 2^53 - 1 a double rounds it): an answer
# echoing it could not be hashed for its receipt (RFC 8785), and past 2^63 no database column or OFFSET takes it.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_EXACT_INTEGERS = range(-(2**53 - 1), 2**53)


def _storable(value: Any) -> Any:
    if isinstance(value, str) and _UNSTORABLE.search(value):
        raise ValueError("text must not contain NUL characters or lone surrogates")
    if isinstance(value, int) and value not in _EXACT_INTEGERS:
        raise ValueError(f"integers must lie between {_EXACT_INTEGERS.start} and {_EXACT_INTEGERS.stop - 1}")
    # An object is a nested argument model's (no tool argument is a free-form object): that model checks its own
    # fields, so a refusal names the field inside it ("grids.0.min"), not the argument holding it.
    if isinstance(value, (list, tuple)):
        for item in value:
            _storable(item)
    return value


_UNION_TAGS = {"str", "int", "float", "bool", "none", "list", "dict", "literal", "date", "datetime"}


def _union_member(part: object) -> bool:
    return isinstance(part, str) and (part in _UNION_TAGS or "[" in part)


def invalid_arguments(error: ValidationError) -> DomainError:
    """One in-band refusal for arguments that do not fit the contract: a problem per field, in its own name."""
    by_field: dict[str, list[str]] = {}
    for item in error.errors(include_url=False):
        # pydantic names the union member that failed ("min.int", "min.float"); the contract knows only "min"
        field = ".".join(str(part) for part in item["loc"] if not _union_member(part)) or "arguments"
        if item["msg"] not in by_field.setdefault(field, []):
            by_field[field].append(item["msg"])
    problems = [{"field": field, "problem": " or ".join(messages)} for field, messages in by_field.items()]
    summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
    return DomainError("invalid_arguments", f"Invalid arguments: {summary}", problems=problems)


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown fields are refused, never ignored; so are text no database keeps, an
    integer JSON does not carry exactly and a number that is not finite (JSON's 1e999 reads as infinity, and NaN is
    a literal some parsers take)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _is_storable(cls, value: Any) -> Any:
        return _storable(value)

    @classmethod
    def from_arguments(cls, arguments: Any) -> Self:
        """Validate a call's JSON arguments strictly: a boolean must be true/false and a number a JSON number
        (`"yes"`, `"1"` or `1` for a boolean and `"5"` for a number are refused, not coerced); strings that
        carry dates are still parsed, as JSON has no date type. Both edges (MCP and REST) parse with this;
        a misfit raises the `invalid_arguments` DomainError."""
        try:
            return cls.model_validate_json(json.dumps(arguments), strict=True)
        except ValidationError as error:
            raise invalid_arguments(error) from None


@dataclass(frozen=True)
class Answer:
    """A computed answer without its `usage` block, and how many Market Memory lookups computing it consumed.

    Cores return this and know no price; the tool edge meters it (billing.metering) into the output model.
    `lookups == 0` means nothing was looked up (no usable frame or snapshot), which is never charged.
    """

    fields: dict[str, Any]
    lookups: int
