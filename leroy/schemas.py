"""Schema pieces every app's tool arguments share; the ground floor: imports no app and nothing of leroy.mcp."""

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import partial
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetPydanticSchema,
    ValidationError,
    field_validator,
)
from pydantic_core import core_schema

from leroy.errors import DomainError

# NUL cannot be stored in PostgreSQL text and a lone surrogate is not UTF-8: neither is a valid argument. Nor is an
# integer JSON does not carry exactly everywhere (I-JSON, RFC 7493: beyond 2^53 - 1 a double rounds it): an answer
# echoing it could not be hashed for its receipt (RFC 8785), and past 2^63 no database column or OFFSET takes it.
_SURROGATES = "\ud800-\udfff"  # in a str, each one is alone (a pair is one code point): no UTF-8 encodes it
_UNSTORABLE = re.compile(f"[\x00{_SURROGATES}]")
_EXACT_INTEGERS = range(-(2**53 - 1), 2**53)
# pydantic's JSON parser refuses a lone surrogate's escape as a flaw of the whole text ("Invalid JSON" at a column of
# a text the caller never sent, naming no field). Python's parser takes it, so a REST body can carry one: it reaches
# the strict parse as a NUL instead, which the field's own check (_storable) refuses in the same words.
_LONE_SURROGATE = re.compile(f"[{_SURROGATES}]")


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


class JSONObject(dict[str, Any]):
    """A parsed JSON object that remembers the names it was given more than once. JSON leaves what a repeated name
    means open (RFC 8259 §4; I-JSON, RFC 7493 §2.3, forbids it) and Python's parser keeps the last value, so
    `{"symbol": "A", "symbol": "B"}` would be a call for B: arguments that repeat a name are refused instead."""

    repeated: tuple[str, ...] = ()


def _json_object(pairs: list[tuple[str, Any]]) -> JSONObject:
    # A name holding a lone surrogate (I-JSON, RFC 7493 §2.1, forbids one) names no field, and a refusal could not
    # even echo it as UTF-8: the body is refused as a whole, as the MCP SDK's parser refuses it.
    if any(_LONE_SURROGATE.search(name) for name, _ in pairs):
        raise ValueError("an object's name holds a lone surrogate")
    parsed = JSONObject(pairs)
    if len(parsed) < len(pairs):
        parsed.repeated = tuple(name for name, count in Counter(name for name, _ in pairs).items() if count > 1)
    return parsed


def _not_json(literal: str) -> Any:
    raise ValueError(f"{literal} is not JSON")


# Deeper JSON than any call needs is refused before anything walks it: json.loads itself raises RecursionError at
# about 1,000 levels, and the recursive checks after it (pydantic's, _storable) overflow the stack near there too.
MAX_JSON_DEPTH = 64
TOO_DEEP = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"


class NestedTooDeep(ValueError):
    """A body nested deeper than MAX_JSON_DEPTH: JSON, but refused as what it is, not as "not JSON"."""

    def __init__(self) -> None:
        super().__init__(TOO_DEEP)


def json_depth(value: Any) -> int:
    """How deeply `value` nests (a scalar 0, `[]` or `{}` 1), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


def json_loads(raw: bytes | str) -> Any:
    """`json.loads`, each object read as a JSONObject: what both edges parse a request body with. NaN, Infinity and
    -Infinity, which Python's parser takes, are refused as what they are: not JSON (RFC 8259 §6), as is a name
    holding a lone surrogate (a value holding one is its field's to refuse, see ToolArgs); a body nested
    deeper than MAX_JSON_DEPTH raises NestedTooDeep (a ValueError: a caller that knows only "not JSON" still
    refuses it)."""
    try:
        parsed = json.loads(raw, object_pairs_hook=_json_object, parse_constant=_not_json)
    except RecursionError:
        raise NestedTooDeep from None
    if json_depth(parsed) > MAX_JSON_DEPTH:
        raise NestedTooDeep
    return parsed


def repeated_names(value: Any) -> list[str]:
    """Each name an object in parsed `value` was given more than once, as a field path (`grids.0.min`)."""
    found: list[str] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:  # no recursion: a body may nest as deeply as the parser allows
        path, item = stack.pop()
        children: Iterable[tuple[Any, Any]]
        if isinstance(item, JSONObject):
            found += [path + name for name in item.repeated]
            children = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:  # a value, or an object no body was parsed into
            continue
        stack += [(f"{path}{key}.", child) for key, child in children if isinstance(child, dict | list)]
    return found


def invalid_arguments(error: ValidationError) -> DomainError:
    """One in-band refusal for arguments that do not fit the contract: a problem per field, in its own name."""
    by_field: dict[str, list[str]] = {}
    for item in error.errors(include_url=False):
        # pydantic names the union member that failed ("min.int", "min.float"); the contract knows only "min"
        field = ".".join(str(part) for part in item["loc"] if not _union_member(part)) or "arguments"
        if item["msg"] not in by_field.setdefault(field, []):
            by_field[field].append(item["msg"])
    return arguments_refused({field: " or ".join(messages) for field, messages in by_field.items()})


def arguments_refused(problems: dict[str, str]) -> DomainError:
    """The `invalid_arguments` refusal: a problem per field, each also named in the message."""
    summary = "; ".join(f"{field}: {problem}" for field, problem in problems.items())
    listed = [{"field": field, "problem": problem} for field, problem in problems.items()]
    return DomainError("invalid_arguments", f"Invalid arguments: {summary}", problems=listed)


# What a reader cannot see: whitespace and separators, control and format characters (a zero-width space, a bidi
# override) and combining marks with nothing to combine with. str.strip() removes only the first two.
_INVISIBLE = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Mn", "Mc", "Me"})


def visible_text(value: str) -> str:
    """`value` unchanged when a reader can see at least one of its characters; else ValueError."""
    if all(unicodedata.category(character) in _INVISIBLE for character in value):
        raise ValueError("must not be blank")
    return value


# Bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) reorder what follows them until
# the end of the line (CVE-2021-42574, "Trojan Source"): a name shown among others would not read as written.
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


def visible_name(value: str) -> str:
    """`value` unchanged when a reader sees it as written: visible_text's rule, and no bidi embedding, override or
    isolate (a note may need one around right-to-left text; a name in a list does not); else ValueError."""
    if _BIDI_CONTROLS.search(visible_text(value)):
        raise ValueError("must not contain bidirectional control characters")
    return value


Name = Annotated[str, AfterValidator(visible_name)]
"""A name shown in lists: whitespace, format or control characters and combining marks alone are refused, and so
is a bidi embedding, override or isolate anywhere in it."""
Note = Annotated[str, AfterValidator(visible_text)]
"""Free text kept for its reader (a research note): refused when nothing in it is visible, as a Name is."""


def opaque_token(value: str) -> str:
    """`value` unchanged unless it holds a control character (C0, DEL or C1), which no opaque id needs and which
    an export or a terminal showing it would act on (ESC starts a terminal sequence); else ValueError."""
    if any(unicodedata.category(character) == "Cc" for character in value):
        raise ValueError("must not contain control characters")
    return value


RequestId = Annotated[str, Field(min_length=1, max_length=100), AfterValidator(opaque_token)]
"""A caller's idempotency key (`client_request_id`): 1-100 characters, none a control character, compared exactly.
The length is checked before the characters, so a wrong length is refused in pydantic's own words."""


# --- dates and instants in tool arguments: JSON text, parsed strictly, once ------------------------------------------
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})$")


def strict_date(value: str) -> date:
    """A real `YYYY-MM-DD` calendar date; impossible dates and loose formats are refused."""
    if not ISO_DATE.match(value):
        raise ValueError(f"{value!r} is not a YYYY-MM-DD date")
    return date.fromisoformat(value)  # raises on 2025-02-30


def strict_instant(value: str, *, end: bool = False) -> datetime:
    """An ISO 8601 calendar date or a date-time with an offset, as aware UTC; a date-only end covers that day."""
    if ISO_DATE.match(value):
        day = date.fromisoformat(value)
        if end:
            return datetime(day.year, day.month, day.day, 23, 59, 59, 999999, tzinfo=UTC)
        return datetime(day.year, day.month, day.day, tzinfo=UTC)
    if not ISO_DATETIME.match(value):
        raise ValueError(f"{value!r} is not an ISO 8601 date or a date-time with an offset")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-01:00 is in year 10000 in UTC
        raise ValueError(f"{value!r} is outside the years 1 to 9999 in UTC") from None


def _parsed_once(
    parse: Callable[[str], date], parsed: Callable[[object], bool], kind: Literal["date", "datetime"]
) -> GetPydanticSchema:
    """A field given as text and parsed here, once, into a `kind`; its published schema stays the contract's plain
    string. A value already parsed passes unchanged (the MCP bridge validates the SDK's validated values again)."""

    def validate(value: object, as_text: core_schema.ValidatorFunctionWrapHandler) -> object:
        return value if parsed(value) else parse(as_text(value))

    schema = core_schema.no_info_wrap_validator_function(
        validate, core_schema.str_schema(), serialization=core_schema.simple_ser_schema(kind)
    )
    return GetPydanticSchema(lambda _source, _handler: schema)


def _is_day(value: object) -> bool:
    return type(value) is date


def _is_utc(value: object) -> bool:
    return isinstance(value, datetime) and value.utcoffset() == timedelta(0)


IsoDate = Annotated[date, _parsed_once(strict_date, _is_day, "date")]
"""A `YYYY-MM-DD` date."""
Instant = Annotated[datetime, _parsed_once(strict_instant, _is_utc, "datetime")]
"""An ISO 8601 date or date-time with an offset, as aware UTC; a date means its first instant."""
InstantEnd = Annotated[datetime, _parsed_once(partial(strict_instant, end=True), _is_utc, "datetime")]
"""An inclusive upper bound: like Instant, but a date means its last instant (the bound covers the day)."""


GIVEN_TWICE = "Given more than once (a name may appear once in a JSON object)"


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
        a misfit raises the `invalid_arguments` DomainError, as does a name given twice in a parsed body."""
        if repeated := repeated_names(arguments):
            raise arguments_refused(dict.fromkeys(repeated, GIVEN_TWICE))
        try:
            text = _LONE_SURROGATE.sub(r"\\u0000", json.dumps(arguments, ensure_ascii=False))
            return cls.model_validate_json(text, strict=True)
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
