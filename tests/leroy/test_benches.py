"""Every bench cleans up on any exit: killed mid-run as a timeout kills it (SIGTERM to the bench alone, once the
part that needs cleaning up is running), it leaves no process, no temporary file and no database behind."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
SIGTERM_EXIT = 143

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        settings.LEROY_TEST_DATABASE != "PostgreSQL", reason="the benches that hold databases need PostgreSQL"
    ),
]


def databases() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database")
        return {name for (name,) in cursor.fetchall()}


def killed_mid_run(tmp_path: Path, mark: str, count: int, *bench: str) -> dict:
    """Run `bench` under tests/reaper.py with its own TMPDIR; SIGTERM it once `count` of its processes show
    `mark`; return the reaper's report."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL"))}
    db = connection.settings_dict
    env.update(
        TMPDIR=str(scratch),
        # A name of its own: a bench's throwaway `test_<name>` must never be this suite's database.
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/leroy_bench_cleanup_{os.getpid()}",
        LEROY_TEST_REDIS_URL="redis://127.0.0.1:6379/13",  # what mcp_throughput empties, not this suite's
    )
    command = [sys.executable, "tests/reaper.py", mark, str(count), "240", sys.executable, *bench]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["tmp"] = sorted(p.name for p in scratch.iterdir())
    return report


def test_overload_bench_killed_while_serving_stops_its_server_and_drops_its_database(tmp_path):
    before = databases()

    report = killed_mid_run(tmp_path, "leroy.asgi:application", 1, "bench/overload.py")

    assert report == {"seen": True, "code": SIGTERM_EXIT, "left": [], "tmp": []}
    assert databases() == before


def test_optimization_bench_killed_while_its_worker_runs_stops_the_worker_and_removes_its_directory(tmp_path):
    before = databases()

    # The worker's main process and its pool process: the sandbox templates start with the pool.
    report = killed_mid_run(tmp_path, "worker_main", 2, "bench/optimize_scaling.py", "--bars", "300")

    assert report == {"seen": True, "code": SIGTERM_EXIT, "left": [], "tmp": []}
    assert databases() == before


def test_build_bench_killed_while_its_celery_workers_run_stops_them_and_removes_its_directory(tmp_path):
    before = databases()

    report = killed_mid_run(
        tmp_path, "worker_main", 2, "bench/build_memory.py", "--celery", "--symbols", "2", "--sessions", "90"
    )

    assert report == {"seen": True, "code": SIGTERM_EXIT, "left": [], "tmp": []}
    assert databases() == before


def test_mcp_throughput_bench_killed_while_serving_stops_its_server_and_drops_its_database(tmp_path):
    before = databases()

    report = killed_mid_run(
        tmp_path, "leroy.asgi:application", 1, "bench/mcp_throughput.py", "--requests", "10", "--symbols", "2"
    )

    assert report == {"seen": True, "code": SIGTERM_EXIT, "left": [], "tmp": []}
    assert databases() == before
