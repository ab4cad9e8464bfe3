"""`manage.py serve`: one machine's whole Leroy (Procfile-style): uvicorn, one Celery worker on every queue, beat."""

import os
import shutil
import signal
import subprocess
import time
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
) -> int:
    """Run the processes side by side; stop all when one stops, on Ctrl-C, SIGTERM or SIGHUP. Returns the exit
    code."""
    Path(settings.LEROY_VAR_DIR, "celery").mkdir(parents=True, exist_ok=True)
    if workers > 1:
        # Each worker writes its metrics here and /metrics sums them (leroy/metrics.py); emptied at every start.
        multiproc = Path(settings.LEROY_VAR_DIR, "prometheus")
        shutil.rmtree(multiproc, ignore_errors=True)
        multiproc.mkdir(parents=True)
        env = {**env, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}
    commands = [
        serving.uvicorn_command(port=port, host=host, workers=workers, forwarded_allow_ips=forwarded_allow_ips),
        serving.celery_worker_command(queues=settings.LEROY_CELERY_QUEUES, concurrency=concurrency),
        serving.celery_beat_command(),
    ]
    # Each in its own session (a Ctrl-C reaches only this process, which stops them in order), and tied to this
    # process, so that they stop too when it is killed outright.
    children = [
        subprocess.Popen(serving.tied_to_parent(command), env=env, start_new_session=True) for command in commands
    ]
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGHUP: the terminal closed
        signal.signal(each, stop)
    while not stopping and all(child.poll() is None for child in children):
        time.sleep(0.2)
    for child in children:
        if child.poll() is None:
            child.terminate()  # uvicorn and celery shut their own workers down gracefully
    deadline = time.monotonic() + 25
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return 0 if stopping else 1
