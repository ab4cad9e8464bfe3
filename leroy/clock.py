"""The only source of "now" in Leroy.

`LEROY_CLOCK=replay:<ISO instant>` pins a replay clock: it starts at that instant when the process
starts and advances in real time, so a demo has an open market at any hour of the day.
"""

from datetime import UTC, datetime

from django.conf import settings

_started_at = datetime.now(UTC)


def parse_replay_origin(value: str) -> datetime | None:
    """The replay instant of a `LEROY_CLOCK` value, or None for the real clock."""
    if not value:
        return None
    kind, _, instant = value.partition(":")
    if kind != "replay" or not instant:
        raise ValueError(f"LEROY_CLOCK must be empty or 'replay:<ISO instant>', not {value!r}")
    origin = datetime.fromisoformat(instant.replace("Z", "+00:00"))
    if origin.tzinfo is None:
        raise ValueError("LEROY_CLOCK replay instant must carry a time zone, e.g. 2026-07-01T14:30:00Z")
    return origin.astimezone(UTC)


def now() -> datetime:
    """The current aware UTC instant (replayed when LEROY_CLOCK says so)."""
    real = datetime.now(UTC)
    origin = parse_replay_origin(settings.LEROY_CLOCK)
    if origin is None:
        return real
    return origin + (real - _started_at)
