"""Real Leroy processes for fault and load tests: uvicorn (and Celery) against the test database."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from django.db import connection

from leroy import serving

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url() -> str:
    """The URL of the database this test runs on (the test database, not the configured one)."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("postgresql"):
        return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}"


def process_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "REDIS_URL", "PROMETHEUS"))}
    env.update(DJANGO_SETTINGS_MODULE="tests.settings", DATABASE_URL=database_url(), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole server (its workers too): a crash, not a shutdown."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def wait_until_up(url: str, process: subprocess.Popen[bytes], seconds: float = 40) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx2.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not come up in {seconds} s")


@contextmanager
def uvicorn_server(
    *, workers: int = 1, forwarded_allow_ips: str | None = None, port: int | None = None, **env: str
) -> Iterator[Server]:
    port = port or free_port()
    log = Path(tempfile.mkstemp(prefix="leroy-uvicorn-", suffix=".log")[1])
    command = serving.tied_to_parent(
        serving.uvicorn_command(port=port, workers=workers, forwarded_allow_ips=forwarded_allow_ips)
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=process_env(**env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Server(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        wait_until_up(server.url, process)
        yield server
    finally:
        if process.poll() is None:
            serving.stop_group(process, grace=15)
        log.unlink(missing_ok=True)  # read it with `output()` inside the block


def killed(mark: str, count: int, command: list[str], *, signal_name: str = "TERM", **env: str) -> dict[str, Any]:
    """Run `command` under tests/reaper.py, which sends it SIG`signal_name` once `count` of its descendants'
    command lines contain `mark`; the reaper's report (`seen`, `code`, `left`). The command gets this environment
    without its Leroy settings, `env` on top."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL"))}
    reaper = [sys.executable, "tests/reaper.py", "--signal", signal_name, mark, str(count), "240", *command]
    done = subprocess.run(reaper, cwd=ROOT, env=base | env, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
