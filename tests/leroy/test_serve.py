"""`manage.py serve` (what `make demo` runs) takes its uvicorn, Celery worker and beat with it however it ends: on
SIGTERM and on SIGHUP (the terminal closed) it stops them, and killed outright they are tied to it. A worker or
beat that stops on its own is started again while the web server goes on serving."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from leroy.management.commands import serve as serve_command
from tests.processes import free_port, killed, wait_until_up
from tests.reaper import descendants

ROOT = Path(__file__).resolve().parents[2]

# The worker's main and pool processes and beat: all three children have started.
CELERY_UP = ("-A leroy", 3)


@pytest.mark.parametrize(("signal_name", "code"), [("TERM", 0), ("HUP", 0), ("KILL", -9)])
def test_serve_leaves_no_process_and_no_temporary_file_however_it_is_stopped(tmp_path, signal_name, code):
    scratch = tmp_path / "tmp"
    scratch.mkdir()

    report = killed(
        *CELERY_UP,
        [sys.executable, "manage.py", "serve", "--port", str(free_port()), "--concurrency", "1"],
        signal_name=signal_name,
        DJANGO_SETTINGS_MODULE="leroy.settings",
        LEROY_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=f"sqlite:///{tmp_path}/serve.sqlite3",
        SECRET_KEY="serve-test-" + "x" * 40,
        TMPDIR=str(scratch),
    )

    assert report == {"seen": True, "code": code, "left": []}
    assert list(scratch.iterdir()) == []


def test_a_worker_or_beat_that_stops_is_started_again_while_the_web_goes_on_serving(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL"))}
    env |= {"DJANGO_SETTINGS_MODULE": "leroy.settings", "LEROY_VAR_DIR": str(tmp_path / "var"),
            "DATABASE_URL": f"sqlite:///{tmp_path}/serve.sqlite3", "SECRET_KEY": "serve-test-" + "x" * 40}  # fmt: skip
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--concurrency", "1"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, serve)
        first = {name: main_process(serve.pid, name) for name in ("worker", "beat")}
        for pid in first.values():
            os.kill(pid, signal.SIGKILL)

        again = {name: main_process(serve.pid, name, other_than=first[name]) for name in ("worker", "beat")}
        answered = httpx2.get(url + "/healthz", timeout=5).status_code
        running = serve.poll()
    finally:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        log.close()

    assert answered == 200
    assert running is None
    assert all(pid != first[name] for name, pid in again.items())
    output = (tmp_path / "serve.log").read_text(errors="replace")
    assert "leroy: the celery worker stopped (exit -9); starting it again in 1 s" in output
    assert "leroy: the celery beat stopped (exit -9); starting it again in 1 s" in output


def main_process(serve: int, kind: str, other_than: int | None = None, seconds: float = 60) -> int:
    """The pid of `manage.py serve`'s child running Celery's `kind` (worker or beat), once there is one other than
    `other_than`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pid, command in descendants(serve).items():
            if f"-A leroy {kind}" in command and pid != other_than and parent_of(pid) == serve:
                return pid
        time.sleep(0.2)
    raise TimeoutError(f"no celery {kind} under {serve} in {seconds} s")


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_restarts_back_off_while_a_process_keeps_stopping_and_start_over_once_it_ran_a_minute(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(serve_command.time, "monotonic", lambda: clock[0])
    restarts = serve_command.Restarts()
    delays = []
    for _ in range(8):
        clock[0] += 5
        restarts.stopped()
        delays.append(restarts.delay)
        clock[0] += restarts.delay
        restarts.started()

    clock[0] += 61
    restarts.stopped()

    assert delays == [1, 2, 4, 8, 16, 32, 60, 60]
    assert restarts.delay == 1
