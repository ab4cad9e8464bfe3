"""Where the truncation probe cuts the bars: plain data, no engine, so the worker that splits a probe into one task
per cut picks the same cuts the sandbox child would."""

import bisect
from typing import Any

EPOCH_ORDINAL = 719163.0  # bt.date2num(1970-01-01): the day number Backtrader's date numbers count from
PROBE_CUTS = 3
PROBE_MIN_BARS = 40  # below this many common bars the probe is not run


def probe_cuts(datas: list[dict[str, Any]], decisions: list[dict[str, Any]], k: int = PROBE_CUTS) -> list[int] | str:
    """k deterministic cut timestamps (µs) inside the bars every data has, or the reason there are none.

    A strategy that peeks n bars ahead decides differently only where the cut hides those n bars, that is when
    it decides within n bars of the cut: so the cuts fall on bars where the full run decided (spread evenly
    over its decisions), topped up with evenly spaced bars when it decided on fewer than k."""
    first, last = max(d["ts_us"][0] for d in datas), min(d["ts_us"][-1] for d in datas)
    timeline = sorted({ts for d in datas for ts in d["ts_us"] if first <= ts <= last})
    if len(timeline) < PROBE_MIN_BARS:
        return f"the data have {len(timeline)} common bars; the probe needs at least {PROBE_MIN_BARS}"
    near = (_nearest(timeline, d["bar"]) for d in decisions if d["bar"] is not None)
    decided = sorted({ts for ts in near if ts is not None})
    cuts = [decided[len(decided) * i // (k + 1)] for i in range(1, k + 1)] if len(decided) >= k else decided
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
