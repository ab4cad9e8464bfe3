"""The parent side of the sandbox: one fresh, isolated child process per job.

Each worker process keeps a warm template (`sandbox_child.py`): started as `python -s -P` with an environment of its own
and no fds but its control socket, inside bubblewrap where it is installed (the filesystem reduced to the
interpreter, the venv and this package, read-only), with backtrader imported once. Every job is a fork of it
with only fds 0-2 (pipes of its own), its own pid/net/ipc/uts/mount namespaces under bubblewrap, hardened before
agent code runs. The parent learns the job's pid from the kernel, enforces the wall clock by killing the job's
process group and caps what it may print. JSON in (the bars' columns as raw arrays after it), plain JSON out.
Every outcome names the layers that were in force.
"""

import array
import contextlib
import fcntl
import functools
import json
import math
import os
import re
import selectors
import shutil
import signal
import socket
import stat
import struct
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
from django.utils.crypto import salted_hmac

import backtests
from backtests import probing, series
from backtests.policy import (
    IN_PROCESS_LAYERS,
    LAYERS_MARK,
    MAX_PRINT_BYTES,
    RETURNS_MARK,
    clean_error,
    clean_strings,
    clip,
)

CHILD_LAYERS = ("netns", "mountns", "rlimits", "uid_drop", "no_new_privs", "seccomp")
ALL_LAYERS = frozenset(IN_PROCESS_LAYERS + CHILD_LAYERS + ("bubblewrap",))
CHILD_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    # One string hash for every job on every worker: a strategy iterating a set of strings decides in the same
    # order on any worker and on a rerun (each interpreter otherwise draws its own, and the probe's reruns share
    # the job's, so it could not tell).
    "PYTHONHASHSEED": "0",
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
    returns: bytes | None = None  # a run's daily returns as `series.pack` lays them out (its result has them too)


class Job:
    """A job forked by the sandbox template: its pipes, its pid (told by the kernel, from the status socket's
    credentials, so it is right behind a pid namespace too) and, once it ends, its exit status."""

    def __init__(self, pipes: tuple[int | None, int, int], status: socket.socket, pid: int) -> None:
        self.stdin = None if pipes[0] is None else open(pipes[0], "wb")  # noqa: SIM115 - closed by the writer
        self.stdout = open(pipes[1], "rb")  # noqa: SIM115
        self.stderr = open(pipes[2], "rb")  # noqa: SIM115
        self.status = status
        self.pid = pid
        self.returncode: int | None = None
        self.fed = 0  # bytes of its input already in its stdin pipe
        try:
            self.pidfd: int | None = os.pidfd_open(pid)  # signals reach this process, never a reused pid
        except OSError:
            self.pidfd = None

    def kill(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # and whatever it started (it leads its own process group)

    def wait(self, timeout: float | None = None) -> int:
        """The exit status its supervisor reports (Popen's convention: -N for signal N); a supervisor that
        vanished without one counts as killed."""
        if self.returncode is None:
            self.status.settimeout(timeout)
            try:
                data = self.status.recv(16)
            except OSError:
                data = b""
            self.returncode = (
                os.waitstatus_to_exitcode(struct.unpack("i", data)[0]) if len(data) == 4 else -signal.SIGKILL
            )
            self.status.close()
            if self.pidfd is not None:
                os.close(self.pidfd)
                self.pidfd = None
        return self.returncode


@dataclass
class Running:
    """A started job, so a caller (a worker shutting down, a test) can kill it mid-run."""

    process: Job
    scratch: str
    killed_by: str | None = None

    def kill(self, reason: str) -> None:
        if self.killed_by is None:
            self.killed_by = reason
        self.process.kill()


class SandboxUnavailable(Exception):
    pass


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


TEMPLATE_CPU_SECONDS = 600  # the template's own CPU budget; it retires at half and the next job starts another
STARTED = b"started"


class Template:
    """A warm sandbox process (inside bubblewrap when `wrapped`) with backtrader and the child's modules imported,
    started like a cold child was (`python -s -P`, the child environment, no fds but its control socket, tied to
    this process). It never runs agent code: every job is a fresh fork of it, isolated and hardened per job."""

    def __init__(self, wrapped: bool) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent = "0" if wrapped else str(os.getpid())
        # `-I` but for the environment (`-E`): this one is ours (CHILD_ENV), and carries the hash seed.
        argv = [sys.executable, "-s", "-P", "-m", "backtests.sandbox_child", parent, str(TEMPLATE_CPU_SECONDS)]
        argv += [str(theirs.fileno()), "1" if wrapped else "0"]
        if wrapped:
            argv = [*_bwrap_prefix(), "--remount-ro", "/dev", "--remount-ro", "/", *argv]
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=CHILD_ENV,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
            cwd="/",
        )
        theirs.close()
        self.control = ours
        self.owner = os.getpid()

    def usable(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None

    def close(self) -> None:
        self.control.close()
        if self.owner == os.getpid():  # a forked worker leaves its parent's template alone
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


_TEMPLATES: dict[bool, Template] = {}
_TEMPLATES_LOCK = threading.Lock()


def _template(wrapped: bool, *, fresh: bool = False) -> Template:
    with _TEMPLATES_LOCK:
        current = _TEMPLATES.get(wrapped)
        if current is not None and (fresh or not current.usable()):
            current.close()
            current = None
        if current is None:
            current = _TEMPLATES[wrapped] = Template(wrapped)
        return current


def warm() -> None:
    """Start this process's template for the full layer set ahead of its first job (it imports in the background),
    and remove what processes that died mid-job left behind."""
    _template(bubblewrap_usable())
    scratch_sweep()


def _prefill(pipe: int, payload: bytes) -> int:
    """Write the job into its stdin pipe before the job exists, when the pipe can be made to hold all of it (the
    job then reads it at once, with no writer thread to wake between 64 KiB pipe-fuls); how much was written."""
    if len(payload) > PREFILL_BYTES:
        return 0
    try:
        if fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, len(payload)) < len(payload):
            return 0
    except OSError:  # over the host's pipe-max-size
        return 0
    return os.write(pipe, payload)  # an empty pipe with room for all of it takes all of it


def _fork_job(
    template: Template,
    env: dict[str, str],
    cwd: str,
    cpu_seconds: int,
    deadline: float,
    payload: bytes,
    keep_stdin: bool = False,
) -> Job:
    """Ask the template for one job; returns once the job's process exists (its pid known), with as much of its
    input written as its stdin pipe could hold (`Job.fed` bytes; all of it, stdin closed, when it fitted, unless
    `keep_stdin`: a streamed run's bars follow it)."""
    stdin_r, stdin_w = os.pipe()
    written = _prefill(stdin_w, payload)
    fed = written == len(payload) and not keep_stdin
    if fed:
        os.close(stdin_w)
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    request = json.dumps({"env": env, "cwd": cwd, "cpu_seconds": cpu_seconds}).encode()
    try:
        socket.send_fds(template.control, [request], [stdin_r, stdout_w, stderr_w, theirs.fileno()])
    except OSError:
        for fd in (stdin_r, stdout_r, stdout_w, stderr_r, stderr_w) + (() if fed else (stdin_w,)):
            os.close(fd)
        ours.close()
        raise SandboxUnavailable("the sandbox template is gone") from None
    finally:
        theirs.close()
    for fd in (stdin_r, stdout_w, stderr_w):
        os.close(fd)
    ours.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        message, ancillary, _, _ = ours.recvmsg(16, socket.CMSG_SPACE(struct.calcsize("3i")))
    except OSError:
        message, ancillary = b"", []
    credentials = [
        data for level, kind, data in ancillary if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS)
    ]
    if message != STARTED or not credentials:
        for fd in (stdout_r, stderr_r) + (() if fed else (stdin_w,)):
            os.close(fd)
        ours.close()
        raise SandboxUnavailable("the sandbox could not start the job")
    pid = struct.unpack("3i", credentials[0][: struct.calcsize("3i")])[0]
    job = Job((None if fed else stdin_w, stdout_r, stderr_r), ours, pid)
    job.fed = written
    return job


PREFILL_BYTES = 1024 * 1024  # the default pipe-max-size for an unprivileged process


def start(
    layers: frozenset[str], cpu_seconds: int, scratch: str, deadline: float, payload: bytes, keep_stdin: bool = False
) -> tuple[Running, bool]:
    """A fresh job forked from this process's warm template (started on first use, or again when it is gone), its
    `payload` (`pack_job`'s) written ahead into its stdin as far as the pipe holds it."""
    wrapped = "bubblewrap" in layers and bubblewrap_usable()
    env = {**CHILD_ENV, "TMPDIR": scratch, "HOME": scratch}
    try:
        job = _fork_job(_template(wrapped), env, scratch, cpu_seconds, deadline, payload, keep_stdin)
    except SandboxUnavailable:  # a template that retired or died meanwhile: one more try with a new one
        job = _fork_job(_template(wrapped, fresh=True), env, scratch, cpu_seconds, deadline, payload, keep_stdin)
    return Running(job, scratch), wrapped


def runtime_paths() -> list[str]:
    """What the child must never see of the server: the runtime directory, a local data directory and a SQLite
    database kept elsewhere (the `mountns` layer covers them; their 0700/0600 modes hold without it). Never a
    path the child's interpreter or this package lives under."""
    database = settings.DATABASES["default"]
    var_dir, data_dir = str(settings.LEROY_VAR_DIR), str(settings.LEROY_DATA_DIR)
    return list(_runtime_paths(var_dir, data_dir, database["ENGINE"], str(database["NAME"])))


@functools.lru_cache(maxsize=8)  # resolving them walked the file system again for every job (2 ms)
def _runtime_paths(var_dir: str, data_dir: str, engine: str, name: str) -> tuple[str, ...]:
    paths = [var_dir, data_dir]
    if engine.endswith("sqlite3"):
        paths += [f"{name}{suffix}" for suffix in ("", "-wal", "-shm", "-journal")]
    needed = [Path(p).resolve() for p in (sys.prefix, sys.base_prefix, Path(backtests.__file__).parent)]
    keep = []
    for path in paths:
        if "://" in path or path in ("", ":memory:"):
            continue
        resolved = Path(path).resolve()
        if resolved != Path("/") and not any(n == resolved or resolved in n.parents for n in needed):
            keep.append(str(resolved))
    return tuple(keep)


SCRATCH_PREFIX = "leroy-sandbox-"


def _scratch(uid: int) -> str:
    """The child's private temp space outside its own mount namespace: 0700, owned by the sandbox uid, and named
    for this process, so that `scratch_sweep` can remove it if this process is killed before it does."""
    path = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    if os.geteuid() == 0 and uid:
        os.chown(path, uid, uid)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def scratch_sweep() -> int:
    """Remove the scratch directories whose process is gone: a worker killed mid-job (SIGKILL, out of memory)
    runs no `finally`, and its job's directory would stay in the temp directory for good. Only real directories
    owned by this user or the sandbox uid are touched, and a directory whose pid is alive again (reused) stays.
    Returns how many were removed."""
    owners = {os.geteuid(), settings.LEROY_SANDBOX_UID}
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        try:
            status = path.lstat()
        except FileNotFoundError:  # another process swept it meanwhile
            continue
        if not pid.isdigit() or _alive(int(pid)) or not stat.S_ISDIR(status.st_mode) or status.st_uid not in owners:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += not path.exists()
    return removed


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
    decisions: bool = False,
    summary: bool = False,
    expected: list[dict[str, Any]] | None = None,
    cuts: list[int] | None = None,
) -> Outcome:
    """Run one backtest of `source` in a fresh sandbox child and return what it produced; `probe` > 0 adds the
    look-ahead probe (`result["lookahead_check"]`: a streamed rerun, or `probe` cut runs for datas with different
    bar times), `decisions` the run's order decisions (`result["decisions"]`), `summary` a result without the run's
    records (`engine.run`'s). With `expected` (the decisions a full run of this same job recorded) and `probe`, only
    the probe's runs are run and `result` is just its `lookahead_check`; `cuts` (some of the probe's cut
    timestamps) runs only those cuts.

    Every run of the agent's code is a job of its own, forked from a template that ran none: the full run and
    each probe run share no memory, so no run can leave another what it saw (a run that stores its decisions in
    any object it can reach, and a later run that replays them, would pass the probe). A probe run gets no bar
    before its strategy has decided on the one before (streamed) or only the bars up to its cut, and the worker
    judges its decisions. Every job of one call shares its wall clock."""
    limits = limits or Limits()
    started = time.monotonic()
    deadline = started + limits.wall_seconds
    base = {"source": source, "simulation": simulation, "parameters": parameters, "hide": runtime_paths(),
            "layers": sorted(layers), "limits": {"cpu_seconds": limits.cpu_seconds,
                                                 "memory_bytes": limits.memory_bytes, "uid": limits.uid}}  # fmt: skip

    def job(stream: list[dict[str, Any]] | None = None, **given: Any) -> Outcome:
        return _run_one(base | given, layers, limits, on_start, deadline, stream)

    if not probe:
        return job(datas=datas, decisions=decisions, summary=summary)
    if expected is not None:
        check, last = _probe(job, datas, expected, probe, cuts)
        if isinstance(check, Outcome):
            return check
        seconds = time.monotonic() - started
        return Outcome(True, last.layers if last else [], result={"lookahead_check": check}, seconds=seconds)
    full = job(datas=datas, decisions=True, summary=summary)
    if not full.ok or full.result is None:
        return full
    recorded = full.result.pop("decisions")
    check, last = _probe(job, datas, recorded, probe, cuts)
    if isinstance(check, Outcome):
        return check
    full.result["lookahead_check"] = check
    if decisions:
        full.result["decisions"] = recorded
    full.seconds = time.monotonic() - started
    return full


def _probe(
    job: Any, datas: list[dict[str, Any]], recorded: list[dict[str, Any]], k: int, cuts: list[int] | None
) -> tuple[dict[str, Any] | Outcome, Outcome | None]:
    """The look-ahead probe of a full run that took the `recorded` decisions. Datas with the same bar times are
    streamed to one run (`_streamed`): every decision is compared. Otherwise each cut run is a job of its own, on
    the bars up to its cut, judged here in cut order (the first difference fails the probe). A probe job that
    fails (a refusal, a limit) is the answer instead, as it would have failed the full run."""
    if cuts is None and streamable(datas):
        return _streamed(job, datas, recorded)
    if cuts is None:
        chosen = probing.probe_cuts(datas, recorded, k, key=probe_key())
        if isinstance(chosen, str):
            return probing.not_run(chosen, k), None
        cuts = chosen
    checked: list[str] = []
    last = None
    for until in cuts:
        last = job(datas=[probing.cut(data, until) for data in datas], cut_run=True)
        if not last.ok and last.error and last.error["code"] in OVER_LIMITS:
            return _over_limit(last.error, k), last
        if not last.ok or last.result is None:
            return last, last
        checked.append(probing.iso(until / 86_400_000_000.0 + probing.EPOCH_ORDINAL))
        difference = probing.judged(recorded, until, last.result["decisions"], last.result["crash"], streamed=False)
        if difference is not None:
            return probing.cuts_check(checked, k, difference), last
    return probing.cuts_check(checked, k), last


# A probe's rerun that ran out of time or memory leaves the full run as it was: the probe is not run, saying why
# (the rerun, bar by bar, costs a few full runs; a strategy whose full run fits its limits failed as a whole).
OVER_LIMITS = frozenset({"timeout", "cpu_limit", "memory_limit"})


def _over_limit(error: dict[str, Any], k: int) -> dict[str, Any]:
    return probing.not_run(f"the probe's rerun did not finish within the run's limits: {error['message']}", k)


def _streamed(
    job: Any, datas: list[dict[str, Any]], recorded: list[dict[str, Any]]
) -> tuple[dict[str, Any] | Outcome, Outcome | None]:
    """The probe as one streamed run (`Streamer`): the job gets the datas' names, then their bars a step at a time,
    each only once the strategy's step on the one before has returned, so no decision can rest on a later bar. Its
    decisions, every one, are judged against the full run's."""
    if not any(d["bar"] is not None for d in recorded):
        return probing.not_run("the full run took no order decisions, so there are none a rerun could change", 0), None
    names = [{"name": data["name"], "ts_us": [], "open": [], "high": [], "low": [], "close": [], "volume": []}
             for data in datas]  # fmt: skip
    last = job(stream=datas, datas=names, streamed_run=True)
    if not last.ok and last.error and last.error["code"] in OVER_LIMITS:
        return _over_limit(last.error, 0), last
    if not last.ok or last.result is None:
        return last, last
    until = datas[0]["ts_us"][-1]
    checked = sum(1 for d in recorded if d["bar"] is not None)
    shown = {"method": "streamed", "k": 0, "cuts": [], "decisions_checked": checked}
    difference = probing.judged(recorded, until, last.result["decisions"], last.result["crash"], streamed=True)
    if difference is not None:
        return {"status": "failed", **shown, "first_difference": difference}, last
    return {"status": "passed", **shown}, last


def probe_key() -> bytes:
    """The secret the probe's cuts are drawn with (derived from SECRET_KEY): the same cuts for the same run on every
    worker, none a strategy can know."""
    return salted_hmac("leroy.backtests.probe_cuts", "cuts", algorithm="sha256").digest()


def _run_one(
    job: dict[str, Any],
    layers: frozenset[str],
    limits: Limits,
    on_start: Any,
    deadline: float,
    stream: list[dict[str, Any]] | None = None,
) -> Outcome:
    """One job in a fresh sandbox child, killed at `deadline` (monotonic); with `stream` (the datas, whose bars
    the job does not carry), the bars are written to it one step at a time as it asks (`Streamer`)."""
    payload = pack_job(job)
    began = time.monotonic()
    scratch = _scratch(limits.uid)
    try:
        return _supervise(payload, layers, limits, scratch, on_start, began, deadline, stream)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class Streamer:
    """The worker's end of a streamed run: for each step the job asks for (one `STEP_NEXT` byte on its stdout),
    the next bar of every data written to its stdin, then `STEP_END` once there is none. The job never holds a bar
    before its engine asks for it, which it does after the strategy's step on the bar before."""

    def __init__(self, datas: list[dict[str, Any]], stdin: int) -> None:
        self.stdin = stdin
        self.columns = [[data[key] for key in STEP_COLUMNS] for data in datas]
        self.count = len(datas[0]["ts_us"])
        self.sent = 0

    def answer(self) -> bool:
        """Write the next step (or the end); False when the job's stdin cannot take it now (non-blocking: a job
        that left earlier steps unread) or is gone."""
        frame = probing.STEP_END
        if self.sent < self.count:
            i = self.sent
            rows = (probing.STEP_ROW.pack(*(column[i] for column in data)) for data in self.columns)
            frame = probing.STEP_NEXT + b"".join(rows)
        try:
            written = os.write(self.stdin, frame)
        except OSError:  # full (BlockingIOError) or closed: either way this job gets no more
            return False
        if written != len(frame):
            return False
        self.sent = min(self.sent + 1, self.count)
        return True


def streamable(datas: list[dict[str, Any]]) -> bool:
    """Whether the probe can stream these datas: the same bar times for every data (a step is one bar of each) and
    every column a number, as a step carries them."""
    if not datas or not probing.aligned(datas):
        return False
    prices = STEP_COLUMNS[1:]
    return all(type(ts) is int and -(2**63) <= ts < 2**63 for ts in datas[0]["ts_us"]) and all(
        type(value) in (int, float) for data in datas for key in prices for value in data[key]
    )


# Bar columns sent as raw machine arrays after the job's JSON (encoding and parsing 2,516 bars' lists as JSON took
# ~3.5 ms a job): the timestamps as int64, the prices and volumes as float64. A column is packed only when every
# value already is exactly that type (and a float finite, as JSON would insist), so the child gets equal lists.
PACKED_COLUMNS = {"ts_us": ("q", int), "open": ("d", float), "high": ("d", float), "low": ("d", float),
                  "close": ("d", float), "volume": ("d", float)}  # fmt: skip
STEP_COLUMNS = tuple(PACKED_COLUMNS)  # a streamed step's columns, in probing.STEP_ROW's order


def _packable(values: Any, kind: type, code: str) -> array.array | None:
    if not isinstance(values, list) or set(map(type, values)) - {kind}:
        return None
    try:
        packed = array.array(code, values)
    except OverflowError:
        return None
    # A finite sum (one C loop) means every value is finite; only a non-finite sum (a nan or inf, or finite values
    # overflowing) needs the value-by-value check.
    if code == "d" and not math.isfinite(sum(packed)) and not all(map(math.isfinite, packed)):
        return None  # left to JSON, which refuses it as before
    return packed


def pack_job(job: dict[str, Any]) -> bytes:
    """The job for the child's stdin: a 4-byte length, the JSON, then each packed column's bytes in `packed` order."""
    datas, packed, blobs = [], [], []
    for index, data in enumerate(job["datas"]):
        data = dict(data)
        for key, (code, kind) in PACKED_COLUMNS.items():
            column = _packable(data.get(key), kind, code)
            if column is not None:
                data[key] = None  # keeps the key's place; the child puts the column back
                packed.append([index, key, code, len(column)])
                blobs.append(column.tobytes())
        datas.append(data)
    head = json.dumps({**job, "datas": datas, "packed": packed}, allow_nan=False).encode()
    return struct.pack("=I", len(head)) + head + b"".join(blobs)


# Text with no backslash and only printable ASCII: every string JSON decodes from it is already as `clean_strings`
# leaves it (the escapes are how control characters, surrogates and non-ASCII text get in).
PLAIN_ASCII_JSON = re.compile(rb"[\x20-\x5b\x5d-\x7e]*")


def _supervise(
    payload: bytes,
    layers: frozenset[str],
    limits: Limits,
    scratch: str,
    on_start: Any,
    began: float,
    deadline: float,
    stream: list[dict[str, Any]] | None = None,
) -> Outcome:
    try:
        running, wrapped = start(layers, limits.cpu_seconds, scratch, deadline, payload, keep_stdin=stream is not None)
    except SandboxUnavailable as unavailable:
        return Outcome(False, ["process"], error=_error("sandbox_error", str(unavailable)))
    if on_start is not None:
        on_start(running)
    process = running.process
    process_layers = ["process"] + (["bubblewrap"] if wrapped else [])

    def feed() -> None:
        assert process.stdin is not None
        try:
            process.stdin.write(payload[process.fed :])
            if stream is None:
                process.stdin.close()
            else:
                process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    writer = threading.Thread(target=feed, daemon=True)
    if process.stdin is not None and process.fed < len(payload):  # not all written ahead into the pipe
        writer.start()
    streamer = None
    if stream is not None:
        assert process.stdin is not None
        if writer.is_alive():
            writer.join(max(0.0, deadline - time.monotonic()))
        # Never blocked by the job: a step it does not read is a step it was not owed (see the loop below).
        os.set_blocking(process.stdin.fileno(), False)
        streamer = Streamer(stream, process.stdin.fileno())
    stdout, stderr = bytearray(), bytearray()
    selector = selectors.DefaultSelector()
    assert process.stdout is not None and process.stderr is not None
    selector.register(process.stdout, selectors.EVENT_READ, stdout)
    selector.register(process.stderr, selectors.EVENT_READ, stderr)
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
            if streamer is not None and key.data is stdout and stdout[:1] == probing.STEP_NEXT:
                # Until its run ends the streamed job writes nothing else on stdout (its outcome is a JSON object).
                # Its engine asks for a step and waits for it: a second request in one read, or a step it left
                # unread until the pipe is full, is a job asking ahead of its strategy, and it is stopped.
                asked = len(stdout) - len(stdout.lstrip(probing.STEP_NEXT))
                del stdout[:asked]
                if asked > 1 or not streamer.answer():
                    running.kill("protocol")
                    open_streams = 0
                    break
            if len(stdout) + len(stderr) > limits.output_bytes:
                running.kill("output_limit")
                open_streams = 0
                break
    selector.close()
    # Decoded before the exit status arrives (the job closes its streams once it has written, then it, its init
    # and its supervisor exit): used, or what it raised raised, only where it was before, on a clean exit.
    parsed: Any = None
    returns: bytes | None = None
    if running.killed_by is None:
        try:
            parsed, returns = read_outcome(bytes(stdout))
        except Exception as raised:  # kept: raised below if the exit was clean, as it was before
            parsed = raised
    returncode = process.wait(timeout=max(1.0, deadline - time.monotonic()) if running.killed_by is None else 10)
    if writer.is_alive():
        writer.join(timeout=1)
    process.stdout.close()
    process.stderr.close()
    if streamer is not None and process.stdin is not None:
        with contextlib.suppress(OSError):  # a job killed with a step unread
            process.stdin.close()
    seconds = time.monotonic() - began
    layers_seen = sorted(process_layers)
    if running.killed_by is None and returncode == 0:
        if isinstance(parsed, ValueError):
            return Outcome(False, layers_seen, error=_error("sandbox_error", "the sandbox returned no result"))
        if isinstance(parsed, Exception):
            raise parsed
        outcome = parsed
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
            returns=returns if outcome["ok"] else None,
        )
    told, stderr_rest = told_layers(bytes(stderr))
    error = _failure(running, returncode, stderr_rest, limits)
    return Outcome(False, sorted(layers_seen + told), error=error, seconds=seconds)


def told_layers(stderr: bytes) -> tuple[list[str], bytes]:
    """The layers a child said were in force before the agent's code ran (its stderr's first line, when that line
    is `LAYERS_MARK` and a JSON list: nothing the agent's code writes comes before it), and the rest of stderr."""
    if not stderr.startswith(LAYERS_MARK):
        return [], stderr
    line, _, rest = stderr.partition(b"\n")
    try:
        named = json.loads(line.removeprefix(LAYERS_MARK))
    except ValueError:
        return [], rest
    told = [str(layer) for layer in named if layer in ALL_LAYERS] if isinstance(named, list) else []
    return sorted(set(told)), rest


def read_outcome(stdout: bytes) -> tuple[Any, bytes | None]:
    """A child's outcome and a run's packed daily returns: the JSON before RETURNS_MARK (the child's words are
    untrusted too: every string is escaped and capped again here), and after it the `packed_days` days its result
    had, put back in their place (null until then) as `daily_returns`. ValueError for anything else: returns in
    the JSON, a count that is not the bytes', a day outside the calendar."""
    head, mark, tail = stdout.partition(RETURNS_MARK)
    decoded = json.loads(head)
    outcome = decoded if PLAIN_ASCII_JSON.fullmatch(head) else clean_strings(decoded)
    given = outcome.get("result") if isinstance(outcome, dict) else None
    result: dict[str, Any] = given if isinstance(given, dict) else {}
    days = outcome.pop("packed_days", None) if isinstance(outcome, dict) else None
    placed = "daily_returns" in result
    if not mark:
        if days is not None or placed:
            raise ValueError("daily returns that did not come packed after the outcome")
        return outcome, None
    if not placed or result["daily_returns"] is not None or type(days) is not int:
        raise ValueError("packed daily returns without their place in the outcome")
    if len(tail) != days * series.DAY_BYTES:
        raise ValueError(f"{days} packed days announced, {len(tail)} bytes sent")
    result["daily_returns"] = series.unpack(tail)
    return outcome, tail


def _error(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "line": None}


def _failure(running: Running, returncode: int, stderr: bytes, limits: Limits) -> dict[str, Any]:
    if running.killed_by == "timeout":
        wall = f"{limits.wall_seconds:g}"
        return _error("timeout", f"the strategy exceeded its wall-clock limit ({wall} s) and was killed")
    if running.killed_by == "output_limit":
        return _error("output_limit", "the strategy produced more output than allowed and was killed")
    if running.killed_by == "protocol":
        return _error("sandbox_error", "the probe's streamed run asked for bars ahead of its strategy and was stopped")
    if running.killed_by is not None:
        return _error("killed", f"the run was stopped ({running.killed_by})")
    sig = _signal_of(returncode)
    if sig == signal.SIGXCPU:
        return _error("cpu_limit", f"the strategy exceeded its CPU-time limit ({limits.cpu_seconds} s) and was killed")
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
