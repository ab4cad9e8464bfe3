"""Every bench cleans up on any exit. Killed mid-run as a timeout kills it (SIGTERM to the bench alone, once the
part that needs cleaning up is running), it leaves no process, no temporary file and no database behind; killed
outright (SIGKILL, which runs none of its cleanup), it still leaves no process."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.processes import ROOT, killed

SIGTERM_EXIT = 143

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(
    settings.LEROY_TEST_DATABASE != "PostgreSQL", reason="the benches that hold databases need PostgreSQL"
)


def databases() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database")
        return {name for (name,) in cursor.fetchall()}


def killed_mid_run(tmp_path: Path, mark: str, count: int, *bench: str, signal_name: str = "TERM") -> dict:
    """Run `bench` with its own TMPDIR and kill it (tests/reaper.py) once `count` of its processes show `mark`;
    the reaper's report and what is left in that TMPDIR."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    db = connection.settings_dict
    env = {
        "TMPDIR": str(scratch),
        # A name of its own: a bench's throwaway `test_<name>` must never be this suite's database.
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/leroy_bench_cleanup_{os.getpid()}",
        "LEROY_TEST_REDIS_URL": "redis://127.0.0.1:6379/13",  # what mcp_throughput empties, not this suite's
    }
    report = killed(mark, count, [sys.executable, *bench], signal_name=signal_name, **env)
    report["tmp"] = sorted(p.name for p in scratch.iterdir())
    return report


@postgres_only
def test_overload_bench_killed_while_serving_stops_its_server_and_drops_its_database(tmp_path):
    before = databases()

    report = killed_mid_run(tmp_path, "leroy.asgi:application", 1, "bench/overload.py")

    assert report == {"seen": True, "code": SIGTERM_EXIT, "left": [], "tmp": []}
    assert databases() == before


@postgres_only
def test_optimization_bench_killed_while_its_worker_runs_stops_the_worker_and_removes_its_directory(tmp_path):
    before = databases()

    # The worker's main process and its pool process: the sandbox templates start with the pool.
    report = killed_mid_run(tmp_path, "worker_main", 2, "bench/optimize_scaling.py", "--bars", "300")

    assert report == {"seen": True, "code": SIGTERM_EXIT, "left": [], "tmp": []}
    assert databases() == before
    assert broker_keys("leroy-bench-opt-*") == []  # its Redis broker's queues and bindings, under its prefix


def broker_keys(pattern: str) -> list[bytes]:
    """The keys matching `pattern` in Redis's database 0, where the optimization bench puts its broker (none when
    Redis does not answer: the bench then used the filesystem broker, under its removed directory)."""
    import redis

    try:
        return list(redis.Redis.from_url("redis://127.0.0.1:6379/0").scan_iter(match=pattern))
    except redis.ConnectionError:
        return []


@postgres_only
def test_build_bench_killed_outright_while_its_celery_workers_run_takes_them_with_it(tmp_path):
    # SIGKILL runs no cleanup of the bench's own: its directory stays, but the workers are tied to it.
    report = killed_mid_run(
        tmp_path, "worker_main", 2, "bench/build_memory.py", "--celery", "--symbols", "2", "--sessions", "90",
        signal_name="KILL",
    )  # fmt: skip

    assert {key: report[key] for key in ("seen", "code", "left")} == {"seen": True, "code": -9, "left": []}


def test_build_bench_splits_map_and_reduce_at_the_last_symbols_partial(tmp_path):
    # The build reports each symbol, then each step of the reduce: only the former end the map's timing.
    done = subprocess.run(
        [sys.executable, "bench/build_memory.py", "--symbols", "2", "--sessions", "90", "--min-sessions", "3"],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("build_memory symbols=3 sessions=90 min_sessions=3 ")
    assert "| map (3 per-symbol partials) " in line
    assert list(tmp_path.iterdir()) == []


def test_celery_build_bench_ends_the_map_as_the_reduce_task_starts(tmp_path):
    # The worker process that takes the reduce records the moment and its group's CPU: the map is what came before.
    done = subprocess.run(
        [sys.executable, "bench/build_memory.py", "--celery", "--symbols", "2", "--sessions", "90", "--min-sessions",
         "3"],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    walls = re.findall(r"(\d+\.\d) s wall \(map (\d+\.\d) s, reduce (-?\d+\.\d) s\)", line)
    assert len(walls) == 2
    for wall, map_wall, reduce_wall in walls:
        assert 0 < float(map_wall) < float(wall) and float(reduce_wall) > 0
    reduce_cpu = re.search(r"reduce (-?\d+\.\d) CPU-s", line)
    assert reduce_cpu is not None and float(reduce_cpu.group(1)) > 0
    assert list(tmp_path.iterdir()) == []


def test_verdict_bench_times_every_function_that_does_the_verdicts_work(tmp_path):
    # Each point's trial and block sums, the grid's CSCV and the close: one moved out of what the bench wraps would
    # be counted as the optimization's own time, and shows here as called too few times.
    done = subprocess.run(
        [sys.executable, "bench/verdicts.py", "--bars", "300"],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    calls = re.findall(r"(\w+) x(\d+) ", line)
    assert calls == [
        ("trial_record", "20"), ("return_blocks", "20"), ("optimization_pbo", "1"), ("optimization_verdict", "1")
    ]  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@postgres_only
def test_mcp_throughput_bench_killed_while_serving_stops_its_server_and_drops_its_database(tmp_path):
    before = databases()

    report = killed_mid_run(
        tmp_path, "leroy.asgi:application", 1, "bench/mcp_throughput.py", "--requests", "10", "--symbols", "2"
    )

    assert report == {"seen": True, "code": SIGTERM_EXIT, "left": [], "tmp": []}
    assert databases() == before


def test_overload_bench_refuses_sqlite_and_writes_nothing(tmp_path):
    database = tmp_path / "overload.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL"))}

    done = subprocess.run(
        [sys.executable, "bench/overload.py"], cwd=ROOT, env=env | {"DATABASE_URL": f"sqlite:///{database}"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert (done.returncode, done.stdout) == (1, "overload: needs PostgreSQL (set DATABASE_URL)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


SIGNALLED_IN_A_WEAKREF_CALLBACK = """
import os, signal, sys, time, weakref
sys.path.insert(0, "bench")
from cleanup import exit_on_signals

exit_on_signals()


class Held:
    pass


def collected(_ref):
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(100_000):  # the handler runs in here, where an exception raised is printed and dropped
        pass


held = Held()
ref = weakref.ref(held, collected)
del held
time.sleep(3)
print("ran on")
"""


def test_a_bench_signalled_inside_a_weakref_callback_still_exits_with_the_signal():
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_IN_A_WEAKREF_CALLBACK], cwd=ROOT, capture_output=True, text=True, timeout=60
    )

    assert (done.returncode, done.stdout) == (SIGTERM_EXIT, "")


IMPORTS_ANOTHER_CHECKOUT = """
import sys
sys.path.insert(0, sys.argv[1])
from cleanup import check_tree

sys.path.insert(0, ".")  # as Celery's loader does: the working directory, another checkout, first
import evidence

check_tree()
print("timed")
"""


def test_a_bench_that_imported_another_checkouts_code_refuses_to_run(tmp_path):
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "__init__.py").write_text("")

    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_ANOTHER_CHECKOUT, str(ROOT / "bench")],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"-c: evidence was imported from {tmp_path.resolve() / 'evidence'}, not from {ROOT.resolve()}; "
        f"run the bench from {ROOT.resolve()}\n"
    )


def test_a_bench_that_imported_its_own_checkouts_code_runs(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_ANOTHER_CHECKOUT, str(ROOT / "bench")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert (done.returncode, done.stdout, done.stderr) == (0, "timed\n", "")


def bench_env(**env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL"))}
    return base | env


def test_lookup_bench_killed_while_it_loads_its_universe_removes_its_directory(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    bench = subprocess.Popen(
        [sys.executable, "bench/lookup.py", "--requests", "10"], cwd=ROOT, env=bench_env(TMPDIR=str(scratch)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list(scratch.glob("leroy-bench-lookup-*/bench.sqlite3")) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = bool(list(scratch.glob("leroy-bench-lookup-*/bench.sqlite3")))
        bench.send_signal(signal.SIGTERM)
        code = bench.wait(timeout=60)
    finally:
        bench.kill()
        bench.wait()

    assert (seen, code, sorted(p.name for p in scratch.iterdir())) == (True, SIGTERM_EXIT, [])


def test_lookup_bench_on_a_database_without_an_artifact_says_so_and_exits(tmp_path):
    env = bench_env(DATABASE_URL=f"sqlite:///{tmp_path / 'never-migrated.sqlite3'}", LEROY_VAR_DIR=str(tmp_path))

    done = subprocess.run(
        [sys.executable, "bench/lookup.py", "--existing"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "no active Market Memory artifact: run `make demo` or `manage.py build_market_memory` first\n"
