"""The truncation probe's plain side, no engine: where it cuts the bars and how it judges a cut run's decisions
against the full run's. Each run of the agent's code is a sandbox job of its own (`sandbox.run_job`), so no run can
hand another what it saw; the judging is done here, by the worker, on what each job reported."""

import bisect
import hashlib
import hmac
import json
import struct
from datetime import date
from typing import Any

EPOCH_ORDINAL = 719163.0  # bt.date2num(1970-01-01): the day number Backtrader's date numbers count from
PROBE_CUTS = 3
PROBE_MIN_BARS = 40  # below this many common bars the probe is not run
# The streamed run's channel: the job asks for a step with STEP_NEXT on its stdout; the worker answers on its stdin
# with STEP_NEXT and one STEP_ROW per data (ts_us, open, high, low, close, volume), or STEP_END.
STEP_ROW = struct.Struct("=q5d")
STEP_NEXT, STEP_END = b"\x01", b"\x00"


def aligned(datas: list[dict[str, Any]]) -> bool:
    """Whether every data has the same bar times. runonce computes an operation between two datas (`self.data0.close
    - self.data1.close`, `bt.If(..., self.data1.close, ...)`) over their arrays position by position, not by time:
    with a data listed later, or with bars another lacks, it paired one's bar with the other's later one, which the
    strategy then read as the current value (found from outside). Such runs are bar by bar, where an operation reads
    each operand's current bar. Only such datas are streamed to the probe (a step is one bar of each)."""
    first = datas[0]["ts_us"]
    return all(data["ts_us"] == first for data in datas[1:])


def probe_cuts(
    datas: list[dict[str, Any]], decisions: list[dict[str, Any]], k: int = PROBE_CUTS, *, key: bytes
) -> list[int] | str:
    """k cut timestamps (µs) inside the bars every data has, or the reason there are none.

    A strategy that peeks n bars ahead decides differently only where the cut hides those n bars, that is when
    it decides within n bars of the cut: so the cuts fall on bars where the full run decided: its last decision
    (so every decision is compared) and k - 1 others drawn by a hash of its decisions keyed with `key`, a secret
    of the server's. The worker draws the same cuts for the same run; the strategy cannot know them, where cuts at
    fixed shares of its decisions let it decide honestly on those bars and peek on every other (found from
    outside). Topped up with evenly spaced bars when it decided on fewer than k."""
    first, last = max(d["ts_us"][0] for d in datas), min(d["ts_us"][-1] for d in datas)
    timeline = sorted({ts for d in datas for ts in d["ts_us"] if first <= ts <= last})
    if len(timeline) < PROBE_MIN_BARS:
        return f"the data have {len(timeline)} common bars; the probe needs at least {PROBE_MIN_BARS}"
    if not any(d["bar"] is not None for d in decisions):
        return "the full run took no order decisions, so there are none a cut could change"
    near = (_nearest(timeline, d["bar"]) for d in decisions if d["bar"] is not None)
    decided = sorted({ts for ts in near if ts is not None})
    cuts = decided
    if len(decided) >= k:
        seed = hmac.new(key, json.dumps(decisions, sort_keys=True).encode(), hashlib.sha256).digest()
        drawn = sorted(decided[:-1], key=lambda ts: hmac.new(seed, str(ts).encode(), hashlib.sha256).digest())
        cuts = [*sorted(drawn[: k - 1]), decided[-1]]
    spaced = (timeline[len(timeline) * i // (k + 1)] for i in range(1, k + 1))
    return sorted(set(cuts) | set(list(dict.fromkeys(t for t in spaced if t not in cuts))[: k - len(set(cuts))]))


def _nearest(timeline: list[int], bar: float) -> int | None:
    """The timeline's timestamp of a bar's date number (which does not round-trip to the microsecond)."""
    us = round((bar - EPOCH_ORDINAL) * 86_400_000_000)
    at = bisect.bisect_left(timeline, us)
    near = [ts for ts in timeline[max(0, at - 1) : at + 1] if abs(ts - us) < 1000]
    return near[0] if near else None


def cut(data: dict[str, Any], until_us: int) -> dict[str, Any]:
    """One data's bars up to and including `until_us`."""
    keep = sum(1 for ts in data["ts_us"] if ts <= until_us)
    return {key: (value[:keep] if isinstance(value, list) else value) for key, value in data.items()}


def cuts_check(checked: list[str], k: int = PROBE_CUTS, difference: dict[str, Any] | None = None) -> dict[str, Any]:
    """A probe's check from cut runs: passed over the `checked` cuts, or failed at `difference`."""
    if difference is None:
        return {"status": "passed", "method": "cuts", "k": k, "cuts": checked}
    return {"status": "failed", "method": "cuts", "k": k, "cuts": checked, "first_difference": difference}


def not_run(reason: str, k: int = PROBE_CUTS) -> dict[str, Any]:
    """A probe's check when it could not run, saying why."""
    return {"status": "not_run", "k": k, "cuts": [], "reason": reason}


def judged(
    decisions: list[dict[str, Any]], until_us: int, got: list[dict[str, Any]], crash: str | None, *, streamed: bool
) -> dict[str, Any] | None:
    """The first difference between the full run's decisions up to `until_us` and a cut or streamed run's (both as
    the sandbox records them), or None when they are the same: a strategy that reads only past bars decides the
    same. A streamed run's difference names no cut (`cut` null): it ran over every bar."""
    until = until_us / 86_400_000_000.0 + EPOCH_ORDINAL
    at = None if streamed else iso(until)
    if crash is not None:
        run = "the streamed run" if streamed else f"the run on data cut at {at}"
        return {"cut": at, "bar": None, "full_run": None, "cut_run": None,
                "reason": f"{run} failed before its end: {crash}"}  # fmt: skip
    expected = [d for d in decisions if d["bar"] is not None and d["bar"] <= until]
    got = [d for d in got if d["bar"] is not None]
    for index in range(max(len(expected), len(got))):
        full = expected[index] if index < len(expected) else None
        short = got[index] if index < len(got) else None
        if full != short:
            bar = min(d["bar"] for d in (full, short) if d is not None)
            return {"cut": at, "bar": iso(bar), "full_run": _shown(full), "cut_run": _shown(short), "reason": None}
    return None


def _shown(decision: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if decision is None else {**decision, "bar": iso(decision["bar"])}


# A run formats every equity point's time (2,000 for a daily run: 4 ms through datetime and timedelta, 1.4 ms so).
_CLOCK = [f"T{minute // 60:02d}:{minute % 60:02d}:" for minute in range(1440)]
_SECONDS = [f"{second:02d}Z" for second in range(60)]


def iso(num: float) -> str:
    """A Backtrader date number as RFC 3339 UTC, to the nearest second (`2024-01-02T15:30:00Z`)."""
    days, second = divmod(round((num - EPOCH_ORDINAL) * 86400), 86400)
    return date.fromordinal(int(EPOCH_ORDINAL) + days).isoformat() + _CLOCK[second // 60] + _SECONDS[second % 60]
