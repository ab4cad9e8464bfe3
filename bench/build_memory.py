"""Market Memory build throughput on the loaded universe (run `make demo` or load_demo_data first).

Prints one line: bar rows per CPU-second (per core) for the whole build (features, states, labels, partials, reduce,
artifact), its wall time and the artifact size, against a baseline measured in the same run: only reading the same
bars from the store. The build does not activate its artifact (identical inputs give the identical artifact).

    .venv/bin/python bench/build_memory.py
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")

import django

django.setup()

from evidence.marketdata import store  # noqa: E402
from evidence.marketdata.selectors import bars_read  # noqa: E402
from evidence.memory.services import market_memory_build_run  # noqa: E402
from evidence.models import Symbol  # noqa: E402


def timed(work):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    symbols = list(Symbol.objects.filter(partitions__frequency="1m").distinct())
    if not symbols:
        sys.exit("no minute bars stored: run `manage.py load_demo_data` first")
    rows, _, read_cpu = timed(lambda: sum(len(bars_read(symbol=s, frequency="1m")) for s in symbols))
    artifact, wall, cpu = timed(lambda: market_memory_build_run(activate=False))
    manifest_bytes = len(store.read_bytes(f"{artifact.path}/manifest.json"))
    size = manifest_bytes + sum(entry["bytes"] for entry in artifact.manifest["files"].values())
    per_core = rows / cpu
    baseline = rows / read_cpu
    print(
        f"build_memory: {rows:,} bar rows, {len(symbols)} symbols, {wall:.1f} s wall, {cpu:.1f} s CPU -> "
        f"{per_core:,.0f} bar-rows/s per core (baseline, reading the bars only: {baseline:,.0f}/s per core, "
        f"{baseline / per_core:.0f}x); artifact {size / 1e6:.1f} MB, sha256 {artifact.sha256[:16]}"
    )


if __name__ == "__main__":
    main()
