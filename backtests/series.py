"""A run's daily returns as a grid point stores them (and a sandbox child sends them): packed bytes, the same
series back when unpacked.

The engine's series is `[[day, return], ...]` (ISO dates, floats). Packed, it is n little-endian int32 day
ordinals (proleptic Gregorian, as `date.toordinal`) followed by n little-endian float64 returns: 12 bytes a day, no
header; the empty series is `b""`. As JSON a 2,516-day point cost its worker ~4.5 ms to encode and PostgreSQL ~3 ms
to parse into jsonb, on every grid point; packed, ~1.2 ms and a plain bytea."""

from collections.abc import Sequence
from datetime import date
from typing import Any

import numpy as np

DAY = np.dtype("<i4")
RETURN = np.dtype("<f8")
DAY_BYTES = DAY.itemsize + RETURN.itemsize
EPOCH = date(1970, 1, 1).toordinal()  # numpy's day 0
FIRST, LAST = date.min.toordinal(), date.max.toordinal()


def pack(series: Sequence[Sequence[Any]]) -> bytes:
    """The packed form of `[[day, return], ...]` (an int return as its float); ValueError unless every day is a
    date string exactly as `date.isoformat` writes it (so unpacking gives the same string back) and every return
    an int or a float."""
    try:
        days = [day for day, _ in series]
        values = [value for _, value in series]
        parsed = np.array(days, dtype="datetime64[D]")
        returns = np.array(values, dtype=RETURN)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"not a daily return series: {error}") from None
    ordinals = parsed.astype(np.int64) + EPOCH
    # numpy reads more than ISO dates (a year alone, a time, NaT): only a day that it writes back as it was given
    # is one.
    if np.isnat(parsed).any() or np.datetime_as_string(parsed).tolist() != days:
        raise ValueError("not a daily return series: a day is not an ISO date (YYYY-MM-DD)")
    if len(days) and (ordinals.min() < FIRST or ordinals.max() > LAST):
        raise ValueError("not a daily return series: a day is out of the calendar's range")
    if set(map(type, values)) - {float, int}:
        raise ValueError("not a daily return series: a return is not a number")
    return ordinals.astype(DAY).tobytes() + returns.tobytes()


def unpack(packed: bytes | memoryview) -> list[list[Any]]:
    """`[[day, return], ...]` as it was packed (PostgreSQL gives a bytea back as a memoryview)."""
    raw = bytes(packed)
    if len(raw) % DAY_BYTES:
        raise ValueError(f"a packed series is a multiple of {DAY_BYTES} bytes, not {len(raw)}")
    count = len(raw) // DAY_BYTES
    ordinals = np.frombuffer(raw, dtype=DAY, count=count).astype(np.int64)
    if count and (ordinals.min() < FIRST or ordinals.max() > LAST):
        raise ValueError("a packed series has a day out of the calendar's range")
    ordinals -= EPOCH
    days = np.datetime_as_string(ordinals.astype("datetime64[D]")).tolist()
    values = np.frombuffer(raw, dtype=RETURN, offset=DAY.itemsize * count).tolist()
    return [[day, value] for day, value in zip(days, values, strict=True)]
