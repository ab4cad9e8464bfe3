"""Optimization scaling: one grid of 20 points (`--points`; LEROY_OPTIMIZATION_POINTS_PER_TASK points per Celery
task) with 1 worker process and with 2, and the one-worker time per grid point against one plain in-process
Backtrader run of the same strategy on the same bars (bench/backtest_overhead.py's baseline, timed in this run).

Builds a throwaway Leroy in a temporary var dir (SQLite, or with `--database URL` a throwaway `test_<name>`
PostgreSQL database of that URL, dropped on exit; production's broker, Redis, when 127.0.0.1:6379 answers,
its keys under a prefix of this run's own, deleted on exit; else the embedded filesystem broker polled every 50 ms;
`--broker` chooses), imports a daily random walk, saves an SMA-cross strategy, then for each worker count starts a
Celery worker with `--concurrency N`, submits the grid and waits until the optimization is COMPLETED. Each time
includes the whole optimization, from the submit to the close it records: the points, the best run's look-ahead
probe and the close.

Like against like, and in an order that a drift of the machine's speed (1.5x within a minute here, and one plain
run 0.21-0.36 s within a minute) meets on both sides of each ratio: the grid on 1 worker, on 2, on 2, on 1. Each
1-worker grid has its own baseline right beside it: 5 plain runs just before its submit and 5 just after its
close, with its worker up and idle. The speedup is the mean 1-worker time over the mean 2-worker time; the
per-point ratio is the mean over the two 1-worker grids of the grid's time per point over the mean of its own 10
plain runs (the best plain run's ratio is printed too: a best-of-N against a mean overstates it by the run-to-run
spread). The machine's own ceiling, `plain_two_process_speedup`, is plain Backtrader in one process
and in two at once (short blocks in the order 1, 2, 2, 1, three times): Leroy's 2-worker speedup cannot exceed
it.

It also prints a SIMULATED 8-worker run, computed (not run: the machine may have 2 cores) from the first 1-worker
run's recorded timestamps: each point's duration (a task's first point includes the task's start-up), the mean
gap between one point's end and the next one's start, the dispatch before the first point and the tail after the
last (probe and close). The chunk tasks go in submission order to whichever of 8 workers is free first; each runs its
own points no task has started, then, once every task has started, takes the rest one at a time from the end of
the grid, as the workers do;
then the probe: one streamed run (the bench's one symbol), in the measured serial tail; for datas with different bar
times its cuts, each a task of its own: the last point's worker runs one, the others go to the least-loaded workers;
the makespan plus the first dispatch and the close is the simulated time (`simulated`).
Prints three lines (the third: the first 2-worker run's mean point, first dispatch and tail, measured).

    .venv/bin/python bench/optimize_scaling.py [--bars 2516] [--points 20] [--points-per-task N]
                                               [--broker redis|filesystem] [--database postgres://...]
"""

import argparse
import atexit
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cleanup import check_tree, exit_on_signals, scratch_directory  # bench/ is the script's directory
from mcp_throughput import answers  # whether a local service answers on a port: that bench's probe
from procfs import tree_cpu  # bench/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
exit_on_signals()
VAR = scratch_directory("leroy-bench-opt-")
PARSER = argparse.ArgumentParser()
PARSER.add_argument("--bars", type=int, default=2516)
PARSER.add_argument("--points", type=int, default=20, help="grid points, a multiple of 5 (5 fast x points/5 slow)")
PARSER.add_argument("--database", default=None, metavar="URL",
                    help="PostgreSQL: run on a throwaway test_<name> database of it (default: SQLite)")  # fmt: skip
PARSER.add_argument("--points-per-task", type=int, default=None, help="default: the setting's default")
PARSER.add_argument("--broker", choices=("auto", "redis", "filesystem"), default="auto",
                    help="auto: Redis when 127.0.0.1:6379 answers, else the filesystem broker")  # fmt: skip
ARGS = PARSER.parse_args()
if ARGS.points < 5 or ARGS.points % 5:
    PARSER.error("--points must be a positive multiple of 5")
REDIS = "redis://127.0.0.1:6379/0"
KEY_PREFIX = f"leroy-bench-opt-{os.getpid()}:"  # every broker key of this run, so none meets another's


BROKER = "redis" if ARGS.broker == "redis" or (ARGS.broker == "auto" and answers(6379)) else "filesystem"
for name in [k for k in os.environ if k.startswith("LEROY_") or k in ("DATABASE_URL", "REDIS_URL")]:
    del os.environ[name]
if ARGS.database is not None:
    os.environ["DATABASE_URL"] = ARGS.database
if ARGS.points_per_task is not None:
    os.environ["LEROY_OPTIMIZATION_POINTS_PER_TASK"] = str(ARGS.points_per_task)
os.environ.update(
    DJANGO_SETTINGS_MODULE="leroy.settings",
    LEROY_VAR_DIR=VAR,
    SECRET_KEY="bench-only-secret-key-" + "x" * 40,
    LEROY_OPTIMIZATION_POINT_CREDITS="1",
)
if BROKER == "redis":
    os.environ.update(LEROY_BENCH_BROKER=REDIS, LEROY_BENCH_KEY_PREFIX=KEY_PREFIX)
sys.path.insert(0, str(ROOT))

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from sma_cross import SMA_CROSS  # noqa: E402  (bench/ is the script's directory)

from leroy import serving  # noqa: E402

# The broker, in this process (which submits) and in the worker: Redis under this run's key prefix, or the embedded
# filesystem broker polled every 50 ms (its 1 s default would dominate 20 short tasks).
BROKER_SETUP = """
import os
from django.conf import settings
from leroy.celery import app
if os.environ.get("LEROY_BENCH_BROKER"):
    app.conf.broker_url = os.environ["LEROY_BENCH_BROKER"]
    app.conf.broker_transport_options = {"global_keyprefix": os.environ["LEROY_BENCH_KEY_PREFIX"],
                                         "visibility_timeout": 900}
else:
    app.conf.broker_transport_options = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "polling_interval": 0.05}
"""
exec(BROKER_SETUP)  # noqa: S102 - the bench's own source


def _broker_keys_delete() -> None:
    import redis

    client = redis.Redis.from_url(REDIS)
    keys = list(client.scan_iter(match=f"{KEY_PREFIX}*"))
    if keys:
        client.delete(*keys)


if BROKER == "redis":
    atexit.register(_broker_keys_delete)

WORKER = (
    """
import sys
import django
django.setup()
"""
    + BROKER_SETUP
    + """
app.worker_main(["worker", "--concurrency", sys.argv[1], "--pool", "prefork", "-Q", "celery,backtests,optimizations",
                 "--loglevel", "WARNING",
                 "--without-heartbeat", "--without-gossip", "--without-mingle"])
"""
)
GRIDS = [{"name": "fast", "min": 5, "max": 25, "step": 5},
         {"name": "slow", "min": 30, "max": 30 + 10 * (ARGS.points // 5 - 1), "step": 10}]  # fmt: skip


def setup(bars: int):
    import polars as pl

    from accounts.services import user_create
    from backtests import services
    from backtests.dryrun import walk
    from evidence.marketdata.importers import bars_import
    from leroy.celery import app

    call_command("migrate", verbosity=0)
    user = user_create(email="bench@example.com", password="bench password 123")  # noqa: S106 - a throwaway bench account
    data = walk("BENCHUSD", bars=bars)
    frame = pl.DataFrame(
        {
            "ts": pl.Series(data["ts_us"], dtype=pl.Int64).cast(pl.Datetime("us", "UTC")),
            **{k: data[k] for k in ("open", "high", "low", "close", "volume")},
        }
    )
    bars_import(ticker="BENCHUSD", frequency="1d", frame=frame, asset_class="crypto")
    assert services._dry_run_outcome(user, SMA_CROSS)["success"]  # what a dry-run worker runs: records the pass
    # This process's broker connection, made before any clock starts: the first submit made it and timed it
    # (about 80 ms of the 1-worker run's first dispatch; a server's web process holds one already).
    with app.producer_or_acquire() as producer:
        producer.connection.ensure_connection(max_retries=3)
    return user, services.strategy_create(user=user, name="bench", code=SMA_CROSS)


def run_grid(user, strategy, workers: int, plain: dict | None = None) -> tuple[float, dict[str, Any], list[float]]:
    """The grid on a worker of `workers` processes: its time from the submit to the recorded close, its phases, and
    (given `plain`'s bars) 5 plain runs just before the submit and 5 just after the close, beside the worker."""
    from backtest_overhead import direct, timed
    from django.utils.dateparse import parse_datetime

    from backtests import services
    from backtests.models import Optimization, Status
    from evidence.models import Symbol

    worker = subprocess.Popen(
        serving.tied_to_parent([sys.executable, "-c", WORKER, str(workers)]),
        cwd=ROOT, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_idle(worker.pid)  # the pool, its templates and their imports are up before the clock starts
        baseline = [timed(direct, plain)[0] for _ in range(5)] if plain is not None else []
        began, submitted = time.perf_counter(), time.time()
        optimization = services.optimization_submit(
            user=user, strategy_id=str(strategy.pk), name=f"{workers} workers",
            data_ids=[str(Symbol.objects.get(ticker="BENCHUSD").pk)], frequency="1d",
            start=parse_datetime("2000-01-01T00:00:00Z"), end=parse_datetime("2100-01-01T00:00:00Z"), grids=GRIDS,
            parameters={}, simulation_parameters={"initial_cash": 1_000_000, "buy_on_close": False,
                                                  "commission_schema": {"commission": 0, "leverage": 1}},
            target_metric="realized_pnl", target_direction="maximize", additional_metrics=[],
            use_free_optimization=False,
        )  # fmt: skip
        while True:
            optimization.refresh_from_db()
            if optimization.status in (Status.COMPLETED, Status.FAILED, Status.CANCELLED):
                break
            if time.perf_counter() - began > 900:
                raise SystemExit("the grid did not finish within 15 minutes")
            time.sleep(0.2)
        # From the recorded close, not from when this loop saw it: the 0.2 s poll added 0.1 s to a run on average.
        elapsed = optimization.finished_at.timestamp() - submitted
        points = ARGS.points
        done = optimization.status == Status.COMPLETED and optimization.completed_iterations == points
        assert done, optimization.error
        assert Optimization.objects.filter(pk=optimization.pk, total_iterations=points).exists()
        baseline += [timed(direct, plain)[0] for _ in range(5)] if plain is not None else []
        return elapsed, phases(optimization), baseline
    finally:  # any exit, a timeout or Ctrl-C included: the worker's whole process group goes
        serving.stop_group(worker, grace=30)


def wait_idle(root: int, *, window: float = 1.0, timeout: float = 120.0) -> None:
    """Wait until the worker's whole process tree used under 5 % of a core over `window` seconds, at least 2 s
    after it started: a fixed sleep started the clock while a cold pool was still importing (on a cold file cache
    the 1-worker run, always first, then timed ~0.9 s of start-up as the first point's dispatch)."""
    time.sleep(2.0)
    deadline = time.monotonic() + timeout
    used = tree_cpu(root)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = tree_cpu(root)
        if now - used < 0.05 * window:
            return
        used = now
    raise SystemExit(f"the worker was still busy {timeout:.0f} s after it started")


def phases(optimization) -> dict[str, Any]:
    """From the recorded timestamps (one clock, this machine's): each point's duration (by run id), the mean gap
    between one point's end and the next one's start on a worker, the dispatch before the first point and the
    serial tail after the last; and the tail's parts when the probe ran as one task per cut: from the last point to
    the last point's own cut run (`prep`), that run, the queued cuts' runs (each a task of its own, with its gap
    after the task before it on this one worker) and the close after the last cut."""
    from django.conf import settings

    from backtests.models import OptimizationRun, ProbeCut

    runs = sorted(OptimizationRun.objects.filter(optimization=optimization), key=lambda run: run.started_at)
    spans = {run.pk: (run.started_at.timestamp(), run.finished_at.timestamp()) for run in runs}
    durations = {pk: end - start for pk, (start, end) in spans.items()}
    ordered = sorted(spans.values())
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(ordered) if b[0] >= a[1]]  # one worker's consecutive points
    first, last = ordered[0][0], max(end for _, end in ordered)
    submitted = optimization.created_at.timestamp()
    measured: dict[str, Any] = {
        "durations": durations,
        "size": settings.LEROY_OPTIMIZATION_POINTS_PER_TASK,
        "gap": max(0.0, sum(gaps) / len(gaps)) if gaps else 0.0,
        "dispatch": first - submitted,
        "tail": optimization.finished_at.timestamp() - last,
        "cuts": None,
    }
    cuts = sorted(ProbeCut.objects.filter(optimization=optimization), key=lambda cut: cut.started_at)
    if cuts:  # the first to start is the last point's own; the others ran one after another on the same worker
        here, *queued = [(cut.started_at.timestamp(), cut.finished_at.timestamp()) for cut in cuts]
        measured["cuts"] = {
            "prep": here[0] - last,
            "here": here[1] - here[0],
            "queued": [(b[0] - a[1], b[1] - b[0]) for a, b in itertools.pairwise([here, *queued])],
            "close": optimization.finished_at.timestamp() - max(end for _, end in [here, *queued]),
        }
    return measured


def simulated(measured: dict, workers: int) -> float:
    """The grid as `workers` workers would run it, from the measured points (a simulation, not a run): the chunk
    tasks are taken in submission order by whichever worker is free first; a task runs its own points that no
    task has started, then, once every task has started, takes the others one at a time from the end of the grid
    (as optimization_points_execute does). Each point takes its measured time (a task's first point includes the
    task's start-up: its bars) and the mean gap after it. Claims are made in time order: the worker free first
    claims first. Then the probe as one task per cut: the last point's worker runs one cut after `prep`, the
    queued cuts (each with its measured gap) go to the least-loaded workers once queued, and the close follows the
    last; otherwise the measured tail, serial. Plus the first dispatch."""
    from collections import deque

    from backtests.services import point_chunks

    durations, gap = measured["durations"], measured["gap"]
    pending = sorted(durations)  # run ids in iteration order (created in one bulk insert)
    queue = deque(point_chunks(list(pending), measured["size"]))
    free = [0.0] * workers
    active: list[list[int] | None] = [None] * workers  # each worker's task: its own points not yet reached
    done = [False] * workers
    while not all(done):
        worker = min((i for i in range(workers) if not done[i]), key=free.__getitem__)
        task = active[worker]
        if task is None:
            if not queue:
                done[worker] = True
                continue
            active[worker] = list(queue.popleft())
            continue
        while task and task[0] not in pending:  # taken by another task meanwhile
            task.pop(0)
        if not task and (queue or not pending):  # others' points only once every task has started
            active[worker] = None
            continue
        pk = task.pop(0) if task else pending[-1]
        pending.remove(pk)
        free[worker] += durations[pk] + gap
    cuts = measured["cuts"]
    if cuts is None:
        return measured["dispatch"] + max(free) + measured["tail"]
    finished = max(free)
    queued_at = finished + cuts["prep"]
    free[free.index(finished)] = queued_at + cuts["here"]
    for cut_gap, duration in cuts["queued"]:
        idle = free.index(min(free))
        free[idle] = max(free[idle], queued_at) + cut_gap + duration
    return measured["dispatch"] + max(free) + cuts["close"]


def _plain_runs(data: dict, runs: int, ready: Any, go: Any) -> None:
    from backtest_overhead import direct

    direct(data)  # warm, before the clock
    ready.set()
    go.wait()
    for _ in range(runs):
        direct(data)


def plain_parallel_speedup(data: dict, runs: int = 2, rounds: int = 3) -> float:
    """What this machine gives two processes of plain Backtrader, in this run: `runs` plain runs in one process,
    and `runs` in each of two at once, in the order 1, 2, 2, 1, `rounds` times (short blocks, so that a drift of
    the machine's speed, which here moves one block's time by 1.5x from one second to the next, meets both alike);
    the speedup is twice the one-process time over the two-process time. Leroy's two-worker speedup cannot exceed
    it (shared caches, the host's other guests), so it is printed beside it."""
    import multiprocessing

    from django.db import connections

    connections.close_all()  # the forks must not share this process's database connection
    context = multiprocessing.get_context("fork")
    times = {1: 0.0, 2: 0.0}
    for processes in (1, 2, 2, 1) * rounds:
        go = context.Event()
        ready = [context.Event() for _ in range(processes)]
        started = [context.Process(target=_plain_runs, args=(data, runs, r, go)) for r in ready]
        for process in started:
            process.start()
        for event in ready:
            event.wait()
        began = time.perf_counter()
        go.set()
        for process in started:
            process.join()
            assert process.exitcode == 0, process.exitcode
        times[processes] += time.perf_counter() - began
    return 2 * times[1] / times[2]


def main() -> None:
    check_tree()
    from django.db import connection

    if connection.vendor == "sqlite":
        return measure()
    from cleanup import throwaway_database

    with throwaway_database():
        db = connection.settings_dict  # the workers' database: the throwaway one
        os.environ["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        return measure()


def measure() -> None:
    args = ARGS
    from backtest_overhead import direct
    from django.conf import settings
    from django.db import connections

    from backtests.dryrun import walk

    user, strategy = setup(args.bars)
    data = walk("BENCHUSD", bars=args.bars)
    direct(data)  # warm
    # The order 1, 2, 2, 1 worker(s): a drift of the machine's speed meets both sides of the speedup alike; each
    # 1-worker grid is set against the plain runs just before and after it.
    one_first, measured, plain_first = run_grid(user, strategy, 1, plain=data)
    two_first, measured_two, _ = run_grid(user, strategy, 2)
    two = (two_first + run_grid(user, strategy, 2)[0]) / 2
    one_last, _, plain_last = run_grid(user, strategy, 1, plain=data)
    one = (one_first + one_last) / 2
    plain_runs = plain_first + plain_last
    plain, plain_best = sum(plain_runs) / len(plain_runs), min(plain_runs)
    points = ARGS.points
    # Each 1-worker grid's time per point over the mean of its own plain runs; the two grids' ratios averaged.
    ratios = [
        grid / points / (sum(runs) / len(runs)) for grid, runs in [(one_first, plain_first), (one_last, plain_last)]
    ]
    ratio = sum(ratios) / len(ratios)
    ceiling = plain_parallel_speedup(data)
    per_task = getattr(settings, "LEROY_OPTIMIZATION_POINTS_PER_TASK", 1)  # 1: before points were chunked
    print(f"optimize_scaling points={points} bars={args.bars} points_per_task={per_task} broker={BROKER} "
          f"database={connections['default'].vendor} "
          f"one_worker={one:.2f}s two_workers={two:.2f}s speedup={one / two:.2f}x "
          f"plain_two_process_speedup={ceiling:.2f}x plain_run_mean={plain:.3f}s plain_run_best={plain_best:.3f}s "
          f"per_point_one_worker={one / points:.3f}s per_point_ratio={ratio:.2f}x "
          f"per_point_ratio_vs_best={one / points / plain_best:.2f}x "
          f"cpus={os.cpu_count()}")  # fmt: skip
    one_model, eight = simulated(measured, 1), simulated(measured, 8)
    point_mean = sum(measured["durations"].values()) / len(measured["durations"])
    print(f"SIMULATED from the 1-worker run's measured points (not an 8-worker run): "
          f"points={len(measured['durations'])} point_mean={point_mean:.3f}s "
          f"gap={measured['gap']:.3f}s dispatch={measured['dispatch']:.3f}s tail={measured['tail']:.3f}s "
          f"simulated_one={one_model:.2f}s (that run measured {one_first:.2f}s) simulated_eight={eight:.2f}s "
          f"simulated_speedup_8={one_model / eight:.2f}x "
          f"probe_cuts={_cuts_shown(measured['cuts'])}")  # fmt: skip
    two_point_mean = sum(measured_two["durations"].values()) / len(measured_two["durations"])
    print(f"the first 2-worker run measured: point_mean={two_point_mean:.3f}s "
          f"dispatch={measured_two['dispatch']:.3f}s tail={measured_two['tail']:.3f}s "
          f"probe_cuts={_cuts_shown(measured_two['cuts'])}")  # fmt: skip


def _cuts_shown(cuts: dict | None) -> str:
    if cuts is None:
        return "one_job"
    queued = ",".join(f"{gap:.3f}+{duration:.3f}" for gap, duration in cuts["queued"])
    return f"prep={cuts['prep']:.3f}s,here={cuts['here']:.3f}s,queued=[{queued}]s,close={cuts['close']:.3f}s"


if __name__ == "__main__":
    main()
