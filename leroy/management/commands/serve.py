"""`manage.py serve`: one machine's whole Leroy (Procfile-style): uvicorn, one Celery worker on every queue, beat."""

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from leroy import serving


class Command(BaseCommand):
    help = "Serve the web app, a Celery worker on every queue and one beat until Ctrl-C/SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
        parser.add_argument("--concurrency", type=int, default=2, help="Celery worker processes")
        parser.add_argument(
            "--forwarded-allow-ips",
            default=None,
            help="trust X-Forwarded-For/-Proto only from these proxy addresses (default: trust no proxy header)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        code = serve(
            host=options["host"],
            port=options["port"],
            workers=options["workers"],
            concurrency=options["concurrency"],
            forwarded_allow_ips=options["forwarded_allow_ips"],
            env=dict(os.environ),
        )
        raise SystemExit(code)


def serve(
    *,
    port: int,
    env: dict[str, str],
    host: str = "127.0.0.1",
    workers: int = 1,
    concurrency: int = 2,
    forwarded_allow_ips: str | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Run the processes side by side until Ctrl-C, SIGTERM or SIGHUP, or until the web server stops; a worker or
    beat that stops is started again; `on_ready` is called once the landing page answers. Returns the exit code."""
    Path(settings.LEROY_VAR_DIR, "celery").mkdir(parents=True, exist_ok=True)
    if workers > 1:
        # Each worker writes its metrics here and /metrics sums them (leroy/metrics.py); emptied at every start.
        multiproc = Path(settings.LEROY_VAR_DIR, "prometheus")
        shutil.rmtree(multiproc, ignore_errors=True)
        multiproc.mkdir(parents=True)
        env = {**env, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}
    web = serving.uvicorn_command(port=port, host=host, workers=workers, forwarded_allow_ips=forwarded_allow_ips)
    background = {
        "celery worker": serving.celery_worker_command(queues=settings.LEROY_CELERY_QUEUES, concurrency=concurrency),
        "celery beat": serving.celery_beat_command(),
    }

    def start(command: list[str]) -> subprocess.Popen[bytes]:
        # In its own session (a Ctrl-C reaches only this process, which stops them in order), and tied to this
        # process, so that it stops too when this one is killed outright.
        return subprocess.Popen(serving.tied_to_parent(command), env=env, start_new_session=True)

    children = {"web": start(web)} | {name: start(command) for name, command in background.items()}
    restarts = {name: Restarts() for name in background}
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGHUP: the terminal closed
        signal.signal(each, stop)
    # The web server is the service: when it stops, everything stops. A worker or beat that stops (a crash, a
    # full disk) is started again after a pause that grows while it keeps stopping, and the pages and the MCP
    # endpoint go on answering meanwhile.
    while not stopping and children["web"].poll() is None:
        if on_ready is not None and _answers(f"http://{host}:{port}/"):
            on_ready()
            on_ready = None
        for name, command in background.items():
            child, restart = children[name], restarts[name]
            if child.poll() is not None and restart.due is None:
                restart.stopped()
                serving.stop_group(child, grace=0)  # what it left of its group (a pool process)
                print(f"leroy: the {name} stopped (exit {child.returncode}); starting it again in "
                      f"{restart.delay:g} s, the web server goes on serving", file=sys.stderr, flush=True)  # fmt: skip
            if restart.due is not None and time.monotonic() >= restart.due:
                children[name] = start(command)
                restart.started()
        time.sleep(0.2)
    for child in children.values():
        if child.poll() is None:
            child.terminate()  # uvicorn and celery shut their own workers down gracefully
    deadline = time.monotonic() + 25
    for child in children.values():
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return 0 if stopping else 1


def _answers(url: str) -> bool:
    """Whether `url` answers 200 now (the web server is up and serving pages)."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - our own http://host:port
            return bool(response.status == 200)
    except OSError:
        return False


class Restarts:
    """When a background process that stopped starts again: 1 s after it stops, doubling (to a minute) each time
    it stops again within a minute of its start."""

    FIRST, LONGEST, STEADY = 1.0, 60.0, 60.0

    def __init__(self) -> None:
        self.quick = 0  # stops in a row, each within STEADY seconds of its start
        self.delay = self.FIRST
        self.due: float | None = None
        self.since = time.monotonic()

    def stopped(self) -> None:
        self.quick = self.quick + 1 if time.monotonic() - self.since < self.STEADY else 1
        self.delay = min(self.FIRST * 2 ** (self.quick - 1), self.LONGEST)
        self.due = time.monotonic() + self.delay

    def started(self) -> None:
        self.due, self.since = None, time.monotonic()
