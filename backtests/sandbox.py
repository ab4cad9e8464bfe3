"""The parent side of the sandbox: one fresh, isolated child process per job.

The child (`sandbox_child.py`) starts as `python -I` with a cleared environment and only fds 0-2, inside
bubblewrap where it is installed (the filesystem reduced to the interpreter, the venv and this package; new
pid/ipc/uts/net namespaces). The parent enforces the wall clock by killing the child's whole process group and
caps what the child may print. Plain JSON in, plain JSON out. Every outcome names the layers that were in force.
"""

import contextlib
import fcntl
import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

import backtests
from backtests.policy import MAX_PRINT_BYTES, clean_error, clean_strings, clip

IN_PROCESS_LAYERS = ("ast", "restricted_python")
CHILD_LAYERS = ("netns", "mountns", "rlimits", "uid_drop", "no_new_privs", "seccomp")
ALL_LAYERS = frozenset(IN_PROCESS_LAYERS + CHILD_LAYERS + ("bubblewrap",))
CHILD_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


@dataclass
class Limits:
    cpu_seconds: int = field(default_factory=lambda: settings.LEROY_SANDBOX_CPU_SECONDS)
    wall_seconds: float = field(default_factory=lambda: settings.LEROY_SANDBOX_WALL_SECONDS)
    memory_bytes: int = field(default_factory=lambda: settings.LEROY_SANDBOX_MEMORY_MB * 1024 * 1024)
    output_bytes: int = field(default_factory=lambda: settings.LEROY_SANDBOX_OUTPUT_BYTES)
    uid: int = field(default_factory=lambda: settings.LEROY_SANDBOX_UID)


@dataclass
class Outcome:
    ok: bool
    layers: list[str]
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    prints: str = ""
    prints_truncated: bool = False
    seconds: float = 0.0


@dataclass
class Running:
    """A started child, so a caller (a worker shutting down, a test) can kill it mid-run."""

    process: subprocess.Popen[bytes]
    scratch: str
    killed_by: str | None = None

    def kill(self, reason: str) -> None:
        if self.killed_by is None:
            self.killed_by = reason
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@functools.cache
def bubblewrap_usable() -> bool:
    """Whether bwrap exists and can create its namespaces here (containers often forbid it)."""
    if settings.LEROY_SANDBOX_BWRAP == "off" or shutil.which("bwrap") is None:
        return False
    probe = subprocess.run([*_bwrap_prefix(), "/bin/true"], capture_output=True, env=CHILD_ENV, timeout=10, check=False)
    return probe.returncode == 0


def _bwrap_prefix() -> list[str]:
    package_dir = str(Path(backtests.__file__).resolve().parent)
    args = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--die-with-parent", "--ro-bind", "/usr", "/usr", "--dev", "/dev", "--proc", "/proc"]
    args += ["--tmpfs", "/tmp", "--chdir", "/tmp"]  # noqa: S108 - a private tmpfs inside the sandbox
    for link in ("bin", "lib", "lib64", "sbin"):
        target = Path("/") / link
        if target.is_symlink():
            args += ["--symlink", os.readlink(target), str(target)]
        elif target.is_dir():
            args += ["--ro-bind", str(target), str(target)]
    if Path("/etc/ld.so.cache").exists():
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for path in sorted({sys.base_prefix, sys.prefix, package_dir}):
        args += ["--ro-bind", path, path]
    return args


def command(layers: frozenset[str], cpu_seconds: int) -> tuple[list[str], bool]:
    """The child's argv: it ties itself to this process (its parent pid; 0 inside bubblewrap's pid namespace,
    where `--die-with-parent` ties it) and takes its CPU limit before it imports anything."""
    child = [sys.executable, "-I", "-m", "backtests.sandbox_child"]
    if "bubblewrap" in layers and bubblewrap_usable():
        return [*_bwrap_prefix(), *child, "0", str(cpu_seconds)], True
    return [*child, str(os.getpid()), str(cpu_seconds)], False


def start(layers: frozenset[str], cpu_seconds: int, scratch: str) -> tuple[Running, bool]:
    argv, wrapped = command(layers, cpu_seconds)
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**CHILD_ENV, "TMPDIR": scratch, "HOME": scratch},
        close_fds=True,
        start_new_session=True,  # its own process group, so the wall clock can kill everything it started
        cwd=scratch,
    )
    return Running(process, scratch), wrapped


def runtime_paths() -> list[str]:
    """What the child must never see of the server: the runtime directory, a local data directory and a SQLite
    database kept elsewhere (the `mountns` layer covers them; their 0700/0600 modes hold without it). Never a
    path the child's interpreter or this package lives under."""
    database = settings.DATABASES["default"]
    paths = [str(settings.LEROY_VAR_DIR), str(settings.LEROY_DATA_DIR)]
    if database["ENGINE"].endswith("sqlite3"):
        paths += [f"{database['NAME']}{suffix}" for suffix in ("", "-wal", "-shm", "-journal")]
    needed = [Path(p).resolve() for p in (sys.prefix, sys.base_prefix, Path(backtests.__file__).parent)]
    keep = []
    for path in paths:
        if "://" in path or path in ("", ":memory:"):
            continue
        resolved = Path(path).resolve()
        if resolved != Path("/") and not any(n == resolved or resolved in n.parents for n in needed):
            keep.append(str(resolved))
    return keep


def _scratch(uid: int) -> str:
    """The child's private temp space outside its own mount namespace: 0700, owned by the sandbox uid."""
    path = tempfile.mkdtemp(prefix="leroy-sandbox-")
    if os.geteuid() == 0 and uid:
        os.chown(path, uid, uid)
    return path


def _signal_of(returncode: int) -> int | None:
    if returncode < 0:
        return -returncode
    if returncode > 128:  # bubblewrap reports a signalled child as 128 + signal
        return returncode - 128
    return None


def run_job(
    *,
    source: str,
    datas: list[dict[str, Any]],
    simulation: dict[str, Any],
    parameters: dict[str, Any],
    layers: frozenset[str] = ALL_LAYERS,
    limits: Limits | None = None,
    on_start: Any = None,
    probe: int = 0,
) -> Outcome:
    """Run one backtest of `source` in a fresh sandbox child and return what it produced; `probe` > 0 adds the
    truncation probe with that many cuts (`result["lookahead_check"]`)."""
    limits = limits or Limits()
    job = {
        "source": source,
        "datas": datas,
        "simulation": simulation,
        "parameters": parameters,
        "probe": probe,
        "hide": runtime_paths(),
        "layers": sorted(layers),
        "limits": {"cpu_seconds": limits.cpu_seconds, "memory_bytes": limits.memory_bytes, "uid": limits.uid},
    }
    payload = json.dumps(job, allow_nan=False).encode()
    began = time.monotonic()
    scratch = _scratch(limits.uid)
    try:
        return _supervise(payload, layers, limits, scratch, on_start, began)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _supervise(
    payload: bytes, layers: frozenset[str], limits: Limits, scratch: str, on_start: Any, began: float
) -> Outcome:
    running, wrapped = start(layers, limits.cpu_seconds, scratch)
    if on_start is not None:
        on_start(running)
    process = running.process
    process_layers = ["process"] + (["bubblewrap"] if wrapped else [])

    def feed() -> None:
        assert process.stdin is not None
        try:
            process.stdin.write(payload)
            process.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    stdout, stderr = bytearray(), bytearray()
    selector = selectors.DefaultSelector()
    assert process.stdout is not None and process.stderr is not None
    selector.register(process.stdout, selectors.EVENT_READ, stdout)
    selector.register(process.stderr, selectors.EVENT_READ, stderr)
    deadline = began + limits.wall_seconds
    open_streams = 2
    while open_streams:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            running.kill("timeout")
            break
        for key, _ in selector.select(timeout=min(remaining, 1.0)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            key.data.extend(chunk)
            if len(stdout) + len(stderr) > limits.output_bytes:
                running.kill("output_limit")
                open_streams = 0
                break
    selector.close()
    process.wait()
    writer.join(timeout=1)
    for stream in (process.stdout, process.stderr):
        stream.close()
    seconds = time.monotonic() - began
    layers_seen = sorted(process_layers)
    if running.killed_by is None and process.returncode == 0:
        try:
            # The child's words are untrusted too: every string is escaped and capped again here.
            outcome = clean_strings(json.loads(stdout))
        except ValueError:
            return Outcome(False, layers_seen, error=_error("sandbox_error", "the sandbox returned no result"))
        prints, cut = clip(str(outcome.get("prints", "")), MAX_PRINT_BYTES)
        error = outcome.get("error")
        return Outcome(
            ok=bool(outcome["ok"]),
            layers=sorted(layers_seen + [str(layer) for layer in outcome["layers"] if layer in ALL_LAYERS]),
            result=outcome.get("result") if outcome["ok"] else None,
            error=clean_error(error) if isinstance(error, dict) else None,
            prints=prints,
            prints_truncated=cut or outcome.get("prints_truncated") is True,
            seconds=seconds,
        )
    return Outcome(False, layers_seen, error=_failure(running, process.returncode, bytes(stderr)), seconds=seconds)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "line": None}


def _failure(running: Running, returncode: int, stderr: bytes) -> dict[str, Any]:
    if running.killed_by == "timeout":
        return _error("timeout", "the strategy exceeded its wall-clock limit and was killed")
    if running.killed_by == "output_limit":
        return _error("output_limit", "the strategy produced more output than allowed and was killed")
    if running.killed_by is not None:
        return _error("killed", f"the run was stopped ({running.killed_by})")
    sig = _signal_of(returncode)
    if sig == signal.SIGXCPU:
        return _error("cpu_limit", "the strategy exceeded its CPU-time limit and was killed")
    if sig is not None:
        return _error("killed", f"the sandbox process was killed by signal {signal.Signals(sig).name}")
    tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
    return _error("sandbox_error", f"the sandbox process failed: {tail[0][:500]}")


LAYER_HELP = {
    "bubblewrap": "install the Debian package `bubblewrap` (apt-get install bubblewrap) for a filesystem reduced "
    "to the interpreter and this package",
    "mountns": "run the worker as root (a private /tmp and the runtime directory hidden)",
    "netns": "run the worker as root (no network)",
    "uid_drop": "run the worker as root (the strategy runs under LEROY_SANDBOX_UID)",
    "seccomp": "install libseccomp (no sockets, fork or exec)",
}


def startup_notice() -> str:
    """One line for start-up: the layers a backtest gets on this machine, and how to add the missing ones."""
    from backtests.dryrun import walk

    outcome = run_job(
        source="class Probe(bt.Strategy):\n    pass\n",
        datas=[walk("PROBE", bars=3)],
        simulation={"initial_cash": 1.0, "commission": 0.0, "leverage": 1.0, "buy_on_close": False},
        parameters={},
    )
    if not outcome.ok:
        return f"Backtest sandbox: NOT WORKING here ({(outcome.error or {}).get('message')})"
    missing = sorted(ALL_LAYERS - set(outcome.layers))
    line = f"Backtest sandbox layers active: {', '.join(outcome.layers)}"
    if missing:
        line += "; missing: " + "; ".join(f"{name} ({LAYER_HELP.get(name, 'unavailable here')})" for name in missing)
    return line


@contextlib.contextmanager
def worker_slot(slots: int, kind: str = "dry-run") -> Iterator[int | None]:
    """One of this host's `slots` places for a `kind` of job (advisory file locks: released if the holder dies),
    or None when all are taken."""
    directory = Path(settings.LEROY_VAR_DIR, "sandbox-slots")
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(slots):
        handle = open(directory / f"{kind}-{index}.lock", "a")  # noqa: SIM115 - held for the whole job
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        try:
            yield index
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        return
    yield None
