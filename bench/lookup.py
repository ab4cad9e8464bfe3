"""Tier-lookup latency on the active Market Memory artifact (run `make demo` or build_market_memory first).

A request is one setup across 4 horizons x 5 tiers (plus the symbol baselines used for lift), resolved in one
VALUES-CTE query and reduced to the strongest tier per horizon. Requests reuse real served keys weighted as stored,
plus 10 % unseen active sets. Prints one line: p50/p99 of the request against a baseline measured in the same run,
the same keys fetched as separate point queries.

    .venv/bin/python bench/lookup.py [--requests 5000]

The artifact needs cross-ticker setup keys (tier 4) with the minimum distinct sessions: a demo universe of 10
symbols x 250 sessions has them, 10 x 120 does not.
"""

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cleanup import check_tree  # bench/ is the script's directory

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")

import django

django.setup()

from evidence.memory.artifact import KEY_COLUMNS  # noqa: E402
from evidence.memory.selectors import MemoryUnavailable, memory_reader  # noqa: E402
from evidence.vocabulary import SIDES  # noqa: E402


def percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1]


def main() -> None:
    check_tree()
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    args = parser.parse_args()
    try:
        reader = memory_reader(refresh=True)
    except MemoryUnavailable:
        sys.exit("no active Market Memory artifact: run `manage.py build_market_memory` first")
    db = reader._db()
    seeds = db.execute("SELECT symbol, side, mask, regime FROM stats WHERE tier = 4 AND period = 0").fetchall()
    symbols = [row[0] for row in db.execute("SELECT DISTINCT symbol FROM stats WHERE tier = 6")]
    if not seeds:
        # Exact session counts keep a cross-ticker key only with the minimum distinct market dates, which a short
        # universe never reaches (10 symbols x 120 sessions leave under 60 dates after the warm-up, split by regime).
        sys.exit(
            f"no cross-ticker setup key with {reader.min_sessions} distinct sessions in {reader.version}: build a "
            "longer universe, e.g. `load_demo_data --symbols 10 --sessions 250`"
        )
    rng = random.Random(7)
    requests = []
    for _ in range(args.requests):
        _, side, mask, regime = rng.choice(seeds)
        if rng.random() < 0.1:
            mask = rng.getrandbits(41)
        requests.append((rng.choice(symbols), SIDES[side], mask, regime))

    def request(item: tuple) -> None:
        symbol, side, mask, regime = item
        reader.lookup(symbol=symbol, side=side, mask=mask, regime=regime)

    # Built from the artifact's fixed key column names, never from input; values go through ? parameters.
    placeholders = " AND ".join(f"{c} = ?" for c in KEY_COLUMNS)

    def point_queries(item: tuple) -> None:
        symbol, side, mask, regime = item
        s, band, c = SIDES.index(side), min(mask.bit_count(), 4), reader.pool(symbol)
        for h in (5, 15, 30, 60):
            for key in ((0, 5, s, h, c, symbol, mask, regime, -1), (0, 4, s, h, c, "", mask, regime, -1),
                        (0, 3, s, h, c, "", mask, -1, -1), (0, 2, s, h, c, "", -1, regime, band),
                        (0, 1, s, h, c, "", -1, -1, -1), (0, 6, s, h, c, symbol, -1, -1, -1)):  # fmt: skip
                db.execute(f"SELECT * FROM stats WHERE {placeholders}", key).fetchone()  # noqa: S608

    results = {}
    for name, work in (("request", request), ("point", point_queries)):
        for item in requests[:200]:  # warm-up: page cache and statement cache
            work(item)
        samples = []
        for item in requests:
            started = time.perf_counter()
            work(item)
            samples.append((time.perf_counter() - started) * 1e6)
        results[name] = (percentile(samples, 50), percentile(samples, 99))
    (p50, p99), (b50, b99) = results["request"], results["point"]
    print(
        f"lookup: 20-key tier request p50 {p50:.0f} us / p99 {p99:.0f} us over {args.requests} requests "
        f"(baseline, separate point queries: p50 {b50:.0f} us / p99 {b99:.0f} us, {b50 / p50:.1f}x); "
        f"artifact {reader.version}"
    )


if __name__ == "__main__":
    main()
