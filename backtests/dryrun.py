"""The fixed, small data set every dry run executes on: two deterministic daily random walks (no I/O)."""

import random
from datetime import UTC, datetime, timedelta
from typing import Any

DRY_RUN_SYMBOLS = ("DRYA", "DRYB")
DRY_RUN_BARS = 260
DRY_RUN_START = datetime(2024, 1, 2, tzinfo=UTC)


def walk(
    name: str, *, bars: int = DRY_RUN_BARS, seed: int = 20240102, start: datetime = DRY_RUN_START
) -> dict[str, Any]:
    """A seeded OHLCV random walk on consecutive weekdays, in the sandbox's plain-list shape."""
    rng = random.Random(f"{seed}:{name}")  # noqa: S311 - test data, not cryptography
    day, close = start, 100.0
    columns: dict[str, list[Any]] = {"ts_us": [], "open": [], "high": [], "low": [], "close": [], "volume": []}
    while len(columns["ts_us"]) < bars:
        if day.weekday() < 5:
            open_ = round(close * (1 + rng.gauss(0, 0.004)), 2)
            close = round(max(1.0, open_ * (1 + rng.gauss(0.0003, 0.015))), 2)
            high = round(max(open_, close) * (1 + abs(rng.gauss(0, 0.004))), 2)
            low = round(min(open_, close) * (1 - abs(rng.gauss(0, 0.004))), 2)
            columns["ts_us"].append(int(day.timestamp()) * 1_000_000)
            for key, value in zip(("open", "high", "low", "close"), (open_, high, low, close), strict=True):
                columns[key].append(value)
            columns["volume"].append(float(rng.randint(10_000, 90_000)))
        day += timedelta(days=1)
    return {"name": name, **columns}


def dry_run_datas() -> list[dict[str, Any]]:
    return [walk(name) for name in DRY_RUN_SYMBOLS]
