"""What the current call charged, for its call log: noted by the metering edge where the charge is made, read by the
MCP transport once the call ends. Its answer cannot say it: a replayed answer carries the usage of the call that
was charged, and an answer the client never received is not read at all. Ground floor: imports no app."""

from contextvars import ContextVar

_LOOKUPS: ContextVar[list[int] | None] = ContextVar("leroy_lookups_charged", default=None)


def collecting() -> tuple[list[int], object]:
    """Start collecting this call's charges: (the list they are noted in, the token `stop` takes)."""
    noted: list[int] = []
    return noted, _LOOKUPS.set(noted)


def stop(token: object) -> None:
    _LOOKUPS.reset(token)  # type: ignore[arg-type]  # the token `collecting` returned


def lookups(units: int) -> None:
    """Note `units` lookups charged to the current call (0 for an answer that cost nothing); outside a collected call
    (the REST mirror, a management command) nothing is noted."""
    noted = _LOOKUPS.get()
    if noted is not None:
        noted.append(units)
