"""Tier-lookup latency on an active Market Memory artifact, against a baseline measured in the same run.

A request is one setup across 4 horizons x 5 tiers plus the symbol's baseline per horizon (24 keys), resolved in one
VALUES-CTE query and reduced to the strongest tier per horizon. Requests reuse real served keys weighted as stored,
plus 10 % unseen active sets. Prints one line: p50/p99 of the whole request, of its one-query fetch alone, and of
the baseline, the same keys fetched as separate point queries (compare the fetch with it: the request also derives
each tier's statistics).

By default the bench builds its own throwaway Leroy in a temporary var dir (SQLite): it loads a synthetic universe
(`--symbols`, `--sessions`; 10 x 250 has cross-ticker setup keys with production's 30 distinct sessions, 10 x 120
does not), builds and activates Market Memory, and removes the directory on any exit. `--existing` times the
active artifact of the configured Leroy instead (after `make demo` or `build_market_memory`).

    .venv/bin/python bench/lookup.py [--requests 5000] [--symbols 10] [--sessions 250] [--existing]
"""

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cleanup import check_tree, exit_on_signals, scratch_directory  # bench/ is the script's directory

parser = argparse.ArgumentParser()
parser.add_argument("--requests", type=int, default=5000)
parser.add_argument("--symbols", type=int, default=10)
parser.add_argument("--sessions", type=int, default=250)
parser.add_argument("--existing", action="store_true", help="time the configured Leroy's active artifact")
ARGS = parser.parse_args()
exit_on_signals()
if not ARGS.existing:
    VAR = scratch_directory("leroy-bench-lookup-")
    for name in [k for k in os.environ if k.startswith("LEROY_") or k in ("DATABASE_URL", "REDIS_URL")]:
        del os.environ[name]
    os.environ.update(
        LEROY_VAR_DIR=VAR,
        DATABASE_URL=f"sqlite:///{VAR}/bench.sqlite3",
        SECRET_KEY="bench-only-secret-key-" + "x" * 40,
    )
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import DatabaseError  # noqa: E402

from evidence.memory.artifact import KEY_COLUMNS  # noqa: E402
from evidence.memory.selectors import MemoryUnavailable, memory_reader  # noqa: E402
from evidence.vocabulary import SIDES  # noqa: E402


def prepare() -> None:
    """A throwaway universe with an active artifact (untimed)."""
    quiet = open(os.devnull, "w")  # noqa: SIM115
    call_command("migrate", verbosity=0)
    call_command("load_demo_data", symbols=ARGS.symbols, sessions=ARGS.sessions, stdout=quiet)
    call_command("build_market_memory", stdout=quiet, stderr=quiet)


def percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1]


def main() -> None:
    check_tree()
    args = ARGS
    if not args.existing:
        prepare()
    try:
        reader = memory_reader(refresh=True)
    except (MemoryUnavailable, DatabaseError):  # no artifact, or a database never migrated
        sys.exit("no active Market Memory artifact: run `make demo` or `manage.py build_market_memory` first")
    db = reader._db()
    seeds = db.execute("SELECT symbol, side, mask, regime FROM stats WHERE tier = 4 AND period = 0").fetchall()
    symbols = [row[0] for row in db.execute("SELECT DISTINCT symbol FROM stats WHERE tier = 6")]
    if not seeds:
        # Exact session counts keep a cross-ticker key only with the minimum distinct market dates, which a short
        # universe never reaches (10 symbols x 120 sessions leave under 60 dates after the warm-up, split by regime).
        sys.exit(
            f"no cross-ticker setup key with {reader.min_sessions} distinct sessions in {reader.version}: build a "
            "longer universe, e.g. `--symbols 10 --sessions 250`"
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

    def keys_of(item: tuple) -> list[tuple]:
        """The 24 keys a request resolves (4 horizons x 5 tiers and the symbol's own baseline)."""
        symbol, side, mask, regime = item
        return reader.resolve_keys(symbol=symbol, side=side, mask=mask, regime=regime)

    def fetch(item: tuple) -> None:
        reader._fetch(keys_of(item))

    # Built from the artifact's fixed key column names, never from input; values go through ? parameters.
    placeholders = " AND ".join(f"{c} = ?" for c in KEY_COLUMNS)

    def point_queries(item: tuple) -> None:
        for key in keys_of(item):
            db.execute(f"SELECT * FROM stats WHERE {placeholders}", key).fetchone()  # noqa: S608

    results = {}
    for name, work in (("request", request), ("fetch", fetch), ("point", point_queries)):
        for item in requests[:200]:  # warm-up: page cache and statement cache
            work(item)
        samples = []
        for item in requests:
            started = time.perf_counter()
            work(item)
            samples.append((time.perf_counter() - started) * 1e6)
        results[name] = (percentile(samples, 50), percentile(samples, 99))
    (p50, p99), (f50, f99), (b50, b99) = results["request"], results["fetch"], results["point"]
    print(
        f"lookup: 24-key tier request p50 {p50:.0f} us / p99 {p99:.0f} us over {args.requests} requests, of which "
        f"its one-query fetch p50 {f50:.0f} us / p99 {f99:.0f} us (baseline, the same 24 keys as separate point "
        f"queries: p50 {b50:.0f} us / p99 {b99:.0f} us, {b50 / f50:.1f}x the fetch); artifact {reader.version}"
    )


if __name__ == "__main__":
    main()
