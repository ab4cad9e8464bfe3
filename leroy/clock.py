"""The only source of "now" in Leroy.

`LEROY_CLOCK=replay:<ISO instant>` pins a replay clock: it reads that instant when the process starts and advances
in real time, so a demo has an open market at any hour of the day. `replay:<ISO instant>@<ISO real instant>` anchors
it instead to the real instant at which it read the replay instant: every process given the same value (a web
server, a worker, beat) then reads the same time, where each process's own start moved its clock by the seconds it
started after the others (a backtest's worker recorded it started before the web process created it).
"""

from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

_started_at = datetime.now(UTC)


@dataclass(frozen=True)
class Replay:
    origin: datetime
    anchor: datetime | None  # the real instant the replay read `origin` at; None: when this process started


def _instant(text: str, what: str) -> datetime:
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"LEROY_CLOCK {what} must carry a time zone, e.g. 2026-07-01T14:30:00Z")
    return parsed.astimezone(UTC)


def parse_replay(value: str) -> Replay | None:
    """The replay clock a `LEROY_CLOCK` value names, or None for the real clock."""
    if not value:
        return None
    kind, _, rest = value.partition(":")
    instant, at, anchor = rest.partition("@")
    if kind != "replay" or not instant or (at and not anchor):
        raise ValueError(f"LEROY_CLOCK must be empty or 'replay:<ISO instant>[@<ISO real instant>]', not {value!r}")
    return Replay(_instant(instant, "replay instant"), _instant(anchor, "anchor") if anchor else None)


def anchored(value: str, at: datetime) -> str:
    """`value` (a replay clock) anchored at the real instant `at`: the same time in every process given it. An
    anchored clock, or the real one, is returned as it is."""
    replay = parse_replay(value)
    if replay is None or replay.anchor is not None:
        return value
    return f"replay:{replay.origin.isoformat()}@{at.astimezone(UTC).isoformat()}"


def wall() -> datetime:
    """The real instant, whatever LEROY_CLOCK says: for times a library stamps with the real clock (the OAuth
    tokens' expiry and issue times, which django-oauth-toolkit writes), judged by that clock. A replayed demo clock
    months behind would otherwise keep a one-hour token for months."""
    return datetime.now(UTC)


def now() -> datetime:
    """The current aware UTC instant (replayed when LEROY_CLOCK says so)."""
    real = datetime.now(UTC)
    replay = parse_replay(settings.LEROY_CLOCK)
    if replay is None:
        return real
    return replay.origin + (real - (replay.anchor or _started_at))
