"""The process commands of one Leroy: the web server and the Celery worker and beat, as `manage.py serve`,
`make demo` and deploy/ run them (one definition, so the documented flags are the ones that run)."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def uvicorn_command(
    *, port: int, host: str = "127.0.0.1", workers: int = 1, forwarded_allow_ips: str | None = None
) -> list[str]:
    """uvicorn for leroy.asgi. Proxy headers are trusted only from the addresses named in `forwarded_allow_ips`
    (a proxy in front); without it they are ignored, so a caller cannot pick its own rate-limited address."""
    command = [
        _bin("uvicorn"),
        "leroy.asgi:application",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--lifespan",
        "on",
        "--timeout-graceful-shutdown",
        "20",
    ]
    if forwarded_allow_ips:
        command += ["--proxy-headers", "--forwarded-allow-ips", forwarded_allow_ips]
    else:
        command += ["--no-proxy-headers"]
    return command


def celery_worker_command(*, queues: list[str], concurrency: int, name: str = "worker") -> list[str]:
    return [
        _bin("celery"),
        "-A",
        "leroy",
        "worker",
        "--hostname",
        f"{name}@%h",
        "--queues",
        ",".join(queues),
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "INFO",
    ]


def celery_beat_command() -> list[str]:
    return [
        _bin("celery"),
        "-A",
        "leroy",
        "beat",
        "--loglevel",
        "INFO",
        "--schedule",
        str(Path(settings.LEROY_VAR_DIR, "celery", "beat-schedule")),
    ]


# Run by `tied_to_parent`: PR_SET_PDEATHSIG (1) survives the exec; a parent already gone (this process reparented
# before the setting took) means no start at all.
_TIE = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def tied_to_parent(command: list[str]) -> list[str]:
    """`command` (an absolute path first) so that it gets SIGTERM when this process dies, however it dies: a
    SIGKILL or a closed terminal included, which no handler here can turn into a stop. Uvicorn and Celery stop
    their own workers on SIGTERM. Start it from the thread that lives as long as this process (the kernel sends
    the signal when the starting thread exits)."""
    return [sys.executable, "-c", _TIE, str(os.getpid()), *command]


def stop_group(process: subprocess.Popen[bytes], *, grace: float) -> None:
    """SIGTERM the process group `process` leads (started with `start_new_session`), so its pool and children go
    too; SIGKILL what is left of the group once its leader has exited or `grace` seconds have passed (a warm
    shutdown waiting on a task that never ends, a child the leader left behind)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
