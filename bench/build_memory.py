"""Market Memory build throughput, forced (never a cache lookup), against a same-run polars baseline.

Builds a throwaway Leroy in a temporary var dir (SQLite), loads the synthetic universe (`--symbols`, `--sessions`),
then times, in this one process:
- the baseline: per symbol, read its stored bars and compute the point-in-time feature and label columns alone
  (`features.symbol_frame`: dense grid, features, daily context, regime, labels; no states, partials or writes);
- the whole build, forced: features, states, labels, partials, feature-store files, reduce, artifact.
Both are timed warm (an untimed one-symbol pass first). Prints wall, CPU (all threads of this process) and bar
rows for both, bar-rows per CPU-second, the build's CPU cost as a multiple of the baseline's and the process's peak
RSS. The temporary directory is removed on any exit.

`--celery` instead times the production fan-out (`market_memory_build_start`: one Celery task per symbol
partition on the `builds` queue, the last one queueing the reduce task) on a real worker with `--concurrency 1`,
then with 2, from queueing until the build row is done; the map ends as the reduce task starts (the worker process
that takes it records the time and its process group's CPU then, in `task_prerun`), so the map's wall and CPU
include the reduce's queueing and nothing of the reduce. The load and the worker's start-up are untimed. Workers
(the embedded filesystem broker polled every 50 ms) run in their own process group, which is killed on any exit. Prints
one line: both walls, map and reduce, the 2-vs-1 ratio, the per-worker map rate (bar rows per second of one worker
process) and the largest peak RSS of a worker process.

`--min-sessions` is the serving minimum (default: production's 30). Below it a key is counted but never served, so
no median, reservoir or serving row is built for it; a low minimum (the small universes' 3) serves nearly every key
and makes the reduce several times heavier.

    .venv/bin/python bench/build_memory.py [--symbols 20] [--sessions 180] [--min-sessions 30] [--profile OUT.txt]
        [--celery]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from cleanup import check_tree, exit_on_signals, scratch_directory  # bench/ is the script's directory
from procfs import group_cpu, group_peak_rss_mb  # bench/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION_MIN_SESSIONS = 30  # leroy.settings' LEROY_MM_MIN_SESSIONS default
parser = argparse.ArgumentParser()
parser.add_argument("--symbols", type=int, help="default: the demo universe's")
parser.add_argument("--sessions", type=int, help="default: the demo universe's")
parser.add_argument("--min-sessions", type=int, default=PRODUCTION_MIN_SESSIONS)
parser.add_argument("--profile", help="write a pyinstrument profile of the build to this file")
parser.add_argument("--celery", action="store_true", help="time the Celery fan-out on 1 worker process, then 2")
ARGS = parser.parse_args()
exit_on_signals()
VAR = scratch_directory("leroy-bench-build-")
for name in [k for k in os.environ if k.startswith("LEROY_") or k in ("DATABASE_URL", "REDIS_URL")]:
    del os.environ[name]
os.environ.update(
    DJANGO_SETTINGS_MODULE="leroy.settings",
    LEROY_VAR_DIR=VAR,
    DATABASE_URL=f"sqlite:///{VAR}/bench.sqlite3",
    SECRET_KEY="bench-only-secret-key-" + "x" * 40,
    LEROY_MM_MIN_SESSIONS=str(ARGS.min_sessions),
)
sys.path.insert(0, str(ROOT))

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from evidence.marketdata import demo  # noqa: E402
from evidence.marketdata.selectors import bars_read  # noqa: E402
from evidence.memory import build, features  # noqa: E402
from evidence.memory.services import market_memory_build_run  # noqa: E402
from evidence.models import Symbol  # noqa: E402
from leroy import clock, serving  # noqa: E402


def timed(work):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def baseline(limit: int | None = None) -> int:
    """Read + features + labels for every symbol (or the first `limit`), as the build computes them; returns the bar
    rows read."""
    plan = build.build_plan()
    through = date.fromisoformat(plan.through)
    benchmark = bars_read(symbol=Symbol.objects.get(ticker=plan.benchmark), frequency="1m")
    regimes = features.benchmark_regimes(benchmark, through=through)  # once, as the build computes them
    rows = 0
    for ticker in plan.tickers[:limit]:
        bars = bars_read(symbol=Symbol.objects.get(ticker=ticker), frequency="1m")
        features.symbol_frame_in(bars, regimes, through=through)
        rows += len(bars)
    return rows


# A Celery worker on the builds queue; it touches the file named by argv[2] once its pool is up, and writes the
# wall time and its process group's CPU seconds to the file named by argv[3] as the reduce task starts.
WORKER = """
import json, os, sys, time
from pathlib import Path
import django
django.setup()
sys.path.insert(0, "bench")
from procfs import group_cpu
from celery.signals import task_prerun, worker_ready
from django.conf import settings
from leroy.celery import app
app.conf.broker_transport_options = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "polling_interval": 0.05}
worker_ready.connect(lambda **_: Path(sys.argv[2]).touch(), weak=False)


def reduce_started(sender, **_):
    if sender.name.endswith(".market_memory_reduce_task"):
        Path(sys.argv[3]).write_text(json.dumps({"wall": time.time(), "cpu": group_cpu(os.getpgrp())}))


task_prerun.connect(reduce_started, weak=False)
app.worker_main(["worker", "--concurrency", sys.argv[1], "--pool", "prefork", "-Q", "builds", "--loglevel", "WARNING",
                 "--without-heartbeat", "--without-gossip", "--without-mingle"])
"""
TIMEOUT_S = 3600


def celery_build(workers: int) -> tuple[float, float, float, float, int, int]:
    """(wall, map wall, worker CPU, its map part, bar rows built, peak RSS of a worker process in MB) of one fan-out
    build on a worker with `workers`
    pool processes (the pool is never recycled, so the group's CPU before and after covers the build's tasks)."""
    from evidence.memory.services import market_memory_build_start
    from evidence.models import MarketMemoryBuild

    ready, reduced = Path(VAR) / f"worker-{workers}.ready", Path(VAR) / f"worker-{workers}.reduce"
    # The worker's temporary files go under VAR, removed on exit: a pool process stopped with its group leaves its
    # multiprocessing directory (pymp-*) behind.
    scratch = Path(VAR) / f"worker-{workers}.tmp"
    scratch.mkdir()
    worker = subprocess.Popen(
        serving.tied_to_parent([sys.executable, "-c", WORKER, str(workers), str(ready), str(reduced)]),
        cwd=ROOT, env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the {workers}-process worker did not start")
            time.sleep(0.05)
        cpu_before = group_cpu(worker.pid)
        began, began_at = time.perf_counter(), time.time()
        build = market_memory_build_start()
        while True:
            time.sleep(0.05)
            build.refresh_from_db()
            if build.status != "running":
                break
            if time.perf_counter() - began > TIMEOUT_S or worker.poll() is not None:
                raise SystemExit(f"the {workers}-process build did not finish (worker exit {worker.poll()})")
        wall = time.perf_counter() - began
        cpu = group_cpu(worker.pid) - cpu_before
        if build.status != "done":
            raise SystemExit(f"the {workers}-process build failed: {build.error}")
        reduce_start = json.loads(reduced.read_text())
        map_wall, map_cpu = reduce_start["wall"] - began_at, reduce_start["cpu"] - cpu_before
        assert MarketMemoryBuild.objects.filter(pk=build.pk, artifact__isnull=False).exists()
        rows = sum(
            len(bars_read(symbol=Symbol.objects.get(ticker=ticker), frequency="1m"))
            for ticker in build.params["tickers"]
        )
        return wall, map_wall, cpu, map_cpu, rows, group_peak_rss_mb(worker.pid)
    finally:  # any exit, a timeout or Ctrl-C included: the worker's whole process group goes
        serving.stop_group(worker, grace=30)


def celery_main(args: argparse.Namespace) -> None:
    one, one_map, one_cpu, one_map_cpu, rows, one_peak = celery_build(1)
    two, two_map, two_cpu, _, _, two_peak = celery_build(2)
    partitions = args.symbols + 1
    print(
        f"build_memory --celery symbols={partitions} sessions={args.sessions} min_sessions={args.min_sessions} "
        f"bar_rows={rows:,} "
        f"partitions={partitions} cpus={os.cpu_count()} | 1 worker: {one:.1f} s wall (map {one_map:.1f} s, "
        f"reduce {one - one_map:.1f} s) | 2 workers: {two:.1f} s wall (map {two_map:.1f} s, reduce "
        f"{two - two_map:.1f} s) | speedup 2 vs 1 = {one / two:.2f}x (map {one_map / two_map:.2f}x) | "
        f"worker CPU {one_cpu:.1f} s (1) vs {two_cpu:.1f} s (2) = {rows / one_cpu:,.0f} bar-rows/CPU-s whole build | "
        f"per-worker map rate {rows / one_map:,.0f} bar-rows/s wall, {rows / one_map_cpu:,.0f} bar-rows/CPU-s "
        f"({one_map_cpu / partitions:.2f} CPU-s per partition of {rows / partitions:,.0f} rows), reduce "
        f"{one_cpu - one_map_cpu:.1f} CPU-s | peak RSS of a worker process {one_peak:,} MB (1) and "
        f"{two_peak:,} MB (2), its map tasks and, in one of them, the reduce"
    )


def main() -> None:
    check_tree()
    args = ARGS
    args.symbols = args.symbols or demo.DEFAULT_SYMBOLS
    args.sessions = args.sessions or demo.DEFAULT_SESSIONS
    call_command("migrate", verbosity=0)
    call_command("load_demo_data", symbols=args.symbols, sessions=args.sessions, stdout=open(os.devnull, "w"))  # noqa: SIM115
    if args.celery:
        celery_main(args)
        return
    replay = clock.now()
    # One-off process costs both timings share (the exchange calendar's minute index, polars' first expression
    # builds: about 2 s CPU here) are paid by an untimed one-symbol pass, so the baseline, timed first, is not charged
    # for what the build then finds warm.
    baseline(limit=1)
    rows, base_wall, base_cpu = timed(baseline)
    profiler = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.005)
        profiler.start()
    marks: list[float] = []  # CPU clock when each symbol's partial is done: the map ends at the last one

    def mark(step: dict) -> None:
        if "reduce" not in step:  # the reduce reports its steps too: they are not the map's
            marks.append(time.process_time())

    started = time.process_time()
    artifact, wall, cpu = timed(lambda: market_memory_build_run(activate=False, force=True, progress=mark))
    map_cpu = marks[-1] - started
    if profiler is not None:
        profiler.stop()
        Path(args.profile).write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    stored = sum(entry["bytes"] for entry in artifact.manifest["files"].values())
    print(
        f"build_memory symbols={args.symbols + 1} sessions={args.sessions} min_sessions={args.min_sessions} "
        f"bar_rows={rows:,} (now={replay:%Y-%m-%d}) | "
        f"build (forced): {wall:.1f} s wall, {cpu:.1f} s CPU, {rows / cpu:,.0f} bar-rows/CPU-s | "
        f"baseline (read + polars features + labels only): {base_wall:.1f} s wall, {base_cpu:.1f} s CPU, "
        f"{rows / base_cpu:,.0f} bar-rows/CPU-s | build CPU / baseline CPU = {cpu / base_cpu:.2f}x | "
        f"map ({len(marks)} per-symbol partials) {map_cpu:.1f} s CPU = {rows / map_cpu:,.0f} bar-rows/CPU-s, "
        f"reduce {cpu - map_cpu:.1f} s CPU | "
        f"artifact {stored / 1e6:.1f} MB sha256 {artifact.sha256[:16]} | peak RSS of this process "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024:,} MB (the load, the baseline and the build)"
        + (" | PROFILED: the build's figures include pyinstrument's overhead" if profiler is not None else "")
    )


if __name__ == "__main__":
    main()
