"""The sandbox side: `python -I -m backtests.sandbox_child PARENT_PID CPU_SECONDS CONTROL_FD WRAPPED`, a warm
template (a zygote) that forks one fresh child per job.

Order matters. First, before any import: die with the parent (PR_SET_PDEATHSIG, then check the parent is still
the one that started us, since it may have died already) and take a CPU limit, so no template outlives its worker
or spins without a limit. Then import everything once, while still privileged (backtrader's import is most of a
cold job's cost). Ahead of each job the template forks a supervisor that, inside bubblewrap (WRAPPED 1), enters
fresh pid/net/ipc/uts/mount namespaces with an empty /tmp and /dev/shm (so every job gets what one bubblewrap per
job gave it) and forks the job's init, which mounts the namespace's own /proc and forks the job; the job waits.
When the parent sends a job's stdin/stdout/stderr pipes and status socket over CONTROL_FD, the template hands them
to that waiting job (which takes the job's CPU limit and environment) and makes the next job's processes. The job
reads the job, hardens itself (network namespace, rlimits, uid drop, no_new_privs, seccomp), and only then
compiles and runs the agent's code. A job's writes to memory (module globals, a monkeypatched backtrader) die
with its process; the template never runs agent code. No Django.
"""

import contextlib
import ctypes
import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _tie_to_parent(parent: int) -> None:
    """Get SIGKILL when the parent dies; `parent` 0 means a pid namespace hides it (bubblewrap ties us then)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent and os.getppid() != parent:
        os._exit(1)


if __name__ == "__main__":
    _tie_to_parent(int(sys.argv[1]))
    # The template's own CPU budget (its children reset the count and take their job's limit first thing).
    resource.setrlimit(resource.RLIMIT_CPU, (int(sys.argv[2]), resource.getrlimit(resource.RLIMIT_CPU)[1]))

import array  # noqa: E402
import errno  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import traceback  # noqa: E402
from datetime import date  # noqa: E402
from typing import Any  # noqa: E402

from backtests import engine  # noqa: E402 - imports backtrader before any privilege is dropped
from backtests.policy import (  # noqa: E402
    IN_PROCESS_LAYERS,
    LAYERS_MARK,
    MAX_PRINT_BYTES,
    RETURNS_MARK,
    PolicyViolation,
    PrintBuffer,
    Refused,
    clean_error,
)

try:  # loaded now: after the uid drop, libseccomp could no longer be located
    import pyseccomp as seccomp
except (ImportError, OSError):  # pragma: no cover - reported as an inactive layer
    seccomp = None

PR_SET_NO_NEW_PRIVS = 38
CLONE_THREAD = 0x00010000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")  # noqa: S108 - each gets its own private tmpfs


def _netns() -> bool:
    try:
        os.unshare(os.CLONE_NEWNET)
    except OSError:
        return False
    return True


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> bool:
    encoded = [None if value is None else value.encode() for value in (source, target, fstype, data)]
    return _LIBC.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) == 0


def _mountns(hide: list[str]) -> bool:
    """A private mount namespace: a fresh, small tmpfs on each scratch directory (the child's writable temp
    space, gone with it) and the server's runtime paths covered, so even a child that kept root finds nothing."""
    try:
        os.unshare(os.CLONE_NEWNS)
    except OSError:
        return False
    if not _mount("none", "/", None, MS_REC | MS_PRIVATE):
        return False
    scratch = [path for path in SCRATCH if os.path.isdir(path)]
    if not all(_mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=1777") for path in scratch):
        return False
    for path in hide:
        if os.path.isdir(path):
            covered = _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0")
        else:
            covered = not os.path.exists(path) or _mount("/dev/null", path, None, MS_BIND)
        if not covered:
            return False
    # The private tmpfs just mounted; the scratch path the parent named would tell the job the worker's pid.
    os.environ["TMPDIR"] = os.environ["HOME"] = "/tmp"  # noqa: S108
    os.chdir("/tmp")  # noqa: S108
    return True


def _rlimits(limits: dict[str, int]) -> bool:
    pairs = {
        resource.RLIMIT_CPU: (limits["cpu_seconds"], limits["cpu_seconds"] + 1),
        resource.RLIMIT_AS: (limits["memory_bytes"], limits["memory_bytes"]),
        resource.RLIMIT_FSIZE: (0, 0),
        resource.RLIMIT_NOFILE: (16, 16),
        resource.RLIMIT_CORE: (0, 0),
    }
    for which, value in pairs.items():
        resource.setrlimit(which, value)
    return True


def _drop_uid(uid: int) -> bool:
    if os.geteuid() != 0:
        return False
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    # After the switch: the sandbox uid may own no second process (no fork bombs, even without seccomp).
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    return os.getuid() == uid and os.geteuid() == uid


def _no_new_privs() -> bool:
    return _LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0


def _syscall_filter() -> Any:
    """The job's seccomp filter, not loaded: built once when the template imports this module, so libseccomp's
    functions are looked up there (1 ms a job when each job built its own); every job loads its own copy."""
    if seccomp is None:
        return None
    refused = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in ("socket", "socketpair", "fork", "vfork", "execve", "execveat", "ptrace", "unshare", "setns", "mount",
                 "umount2", "pivot_root", "chroot"):  # fmt: skip
        rules.add_rule(refused, name)
    # clone without CLONE_THREAD is a new process; threads stay possible. clone3 hides its flags in memory,
    # so it answers ENOSYS and libc falls back to clone.
    rules.add_rule(refused, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return rules


SYSCALL_FILTER = _syscall_filter()


def _seccomp() -> bool:
    if SYSCALL_FILTER is None:
        return False
    SYSCALL_FILTER.load()
    return True


def harden(requested: set[str], limits: dict[str, int], parent: int, hide: list[str]) -> list[str]:
    """Apply the requested OS layers; return those actually in force."""
    active = []
    steps = [
        ("netns", lambda: _netns()),
        ("mountns", lambda: _mountns(hide)),
        ("rlimits", lambda: _rlimits(limits)),
        ("uid_drop", lambda: _drop_uid(limits["uid"])),
        ("no_new_privs", _no_new_privs),
        ("seccomp", _seccomp),
    ]
    for name, step in steps:
        if name in requested and step():
            active.append(name)
    # A uid change clears the parent-death signal: set it again now (and recheck that the parent lives).
    _tie_to_parent(parent)
    return active


def _error_line(error: BaseException) -> int | None:
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == "<strategy>"]
    return frames[-1].lineno if frames else None


def execute(job: dict[str, Any], active: list[str]) -> dict[str, Any]:
    prints = PrintBuffer(MAX_PRINT_BYTES)
    in_process = set(IN_PROCESS_LAYERS) & set(job["layers"])
    outcome: dict[str, Any] = {"layers": active + sorted(in_process)}
    try:
        run = {"datas": job["datas"], "simulation": job["simulation"], "parameters": job["parameters"]}
        # A probe's run reads `printed` as the full run does (a strategy may keep state there), and returns no prints.
        if job.get("cut_run"):  # one cut run of the probe, on the bars up to its cut: its decisions, for the worker
            strategy = engine.load_strategy(job["source"], prints=prints, layers=in_process)
            decisions, crash = engine.cut_decisions(strategy, **run)
            outcome.update(ok=True, result={"decisions": decisions, "crash": crash})
            return _finished(outcome, PrintBuffer(0))
        if job.get("streamed_run"):  # the probe's streamed run: its bars come on stdin, a step when it asks on stdout
            strategy = engine.load_strategy(job["source"], prints=prints, layers=in_process)
            stream = engine.Stream(0, 1, len(job["datas"]))
            decisions, crash = engine.streamed_decisions(strategy, **run, stream=stream)
            outcome.update(ok=True, result={"decisions": decisions, "crash": crash})
            return _finished(outcome, PrintBuffer(0))
        strategy = engine.load_strategy(job["source"], prints=prints, layers=in_process)
        result = engine.run(strategy, **run, summary=bool(job.get("summary")))
        decisions = result.pop("decisions")
        if job.get("decisions"):
            result["decisions"] = engine.as_recorded(decisions)
        outcome.update(ok=True, result=result)
    except Refused as refusal:
        lines = job["source"].splitlines()
        where = f"line {refusal.line} (`{lines[refusal.line - 1].strip()}`): " if refusal.line else ""
        outcome.update(ok=False, error={**refusal.payload(), "message": where + refusal.message})
    except PolicyViolation as violation:
        outcome.update(ok=False, error=violation.payload())
    except engine.EngineError as error:
        outcome.update(ok=False, error={"code": error.code, "message": error.message, "line": None})
    except MemoryError:
        outcome.update(ok=False, error={"code": "memory_limit", "message": "the strategy exceeded its memory limit"})
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
        outcome.update(ok=False, error={"code": "execution_error", "message": message, "line": _error_line(error)})
    return _finished(outcome, prints)


def _finished(outcome: dict[str, Any], prints: PrintBuffer) -> dict[str, Any]:
    if outcome.get("error") is not None:
        outcome["error"] = clean_error(outcome["error"])
    outcome["prints"] = prints.text()
    outcome["prints_truncated"] = prints.truncated
    return outcome


def packed_returns(outcome: dict[str, Any]) -> bytes | None:
    """A run's daily returns taken out of its result (null in their place; `packed_days` says how many) and packed
    as `backtests.series` lays them out: little-endian int32 day ordinals, then float64 returns (the parent checks
    and unpacks them). As JSON, 2,516 days cost this process ~6.5 ms of its run; packed, ~1 ms. A non-finite return
    is refused, as the JSON encoder refused it."""
    result = outcome.get("result")
    if not isinstance(result, dict) or "daily_returns" not in result:
        return None
    series, result["daily_returns"] = result["daily_returns"], None
    ordinals = array.array("i", [date.fromisoformat(day).toordinal() for day, _ in series])
    values = array.array("d", [value for _, value in series])
    if not all(map(math.isfinite, values)):
        raise ValueError("Out of range float values are not JSON compliant")
    if sys.byteorder == "big":
        ordinals.byteswap()
        values.byteswap()
    outcome["packed_days"] = len(series)
    return ordinals.tobytes() + values.tobytes()


def _read_exactly(fd: int, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = os.read(fd, min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ValueError("the job's input ended early")
        chunks.extend(chunk)
    return bytes(chunks)


def read_job(fd: int) -> dict[str, Any]:
    """The job as `sandbox.pack_job` wrote it on `fd`: its JSON, with the packed bar columns put back as lists. Read
    to the job's own end, not to the end of the stream: a streamed run's bars follow on the same pipe."""
    (length,) = struct.unpack("=I", _read_exactly(fd, 4))
    job = json.loads(_read_exactly(fd, length))
    for index, key, code, count in job.pop("packed"):
        column = array.array(code)
        column.frombytes(_read_exactly(fd, count * column.itemsize))
        job["datas"][index][key] = column.tolist()
    return job


def main(parent: int) -> None:
    job = read_job(0)
    if not job.get("streamed_run"):
        sys.stdin.close()
    active = harden(set(job["layers"]), job["limits"], parent, job.get("hide", []))
    in_force = active + sorted(set(IN_PROCESS_LAYERS) & set(job["layers"]))
    os.write(2, LAYERS_MARK + json.dumps(in_force).encode() + b"\n")
    outcome = execute(job, active)
    returns = packed_returns(outcome)
    # Not escaped here: the parent escapes every string it reads from a child (this one included).
    sys.stdout.write(json.dumps(engine.plain(outcome), allow_nan=False, default=str))
    sys.stdout.flush()
    if returns is not None:
        sys.stdout.buffer.write(RETURNS_MARK + returns)
        sys.stdout.buffer.flush()
    # Done: the parent's read ends here, so it decodes the result while this process and its supervisors exit.
    os.close(1)
    os.close(2)


# --- the template ---------------------------------------------------------------------------------------------
CLONE_NEWCGROUP = 0x02000000
JOB_NAMESPACES = os.CLONE_NEWNS | os.CLONE_NEWPID | os.CLONE_NEWNET | os.CLONE_NEWIPC | os.CLONE_NEWUTS
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")  # as bubblewrap's --proc leaves them
SETUP_FAILED = 71  # the supervisor could not isolate the job: it never started
STARTED = b"started"


def _fresh_namespaces() -> bool:
    """What a new bubblewrap gave each job, made per job inside the template's: new pid, net, ipc, uts and mount
    namespaces (and cgroup where allowed), and an empty tmpfs on /tmp and /dev/shm (the view's only writable
    places: its root and /dev are read-only)."""
    try:
        os.unshare(JOB_NAMESPACES)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.unshare(CLONE_NEWCGROUP)
    if not _mount("none", "/", None, MS_REC | MS_PRIVATE):
        return False
    for path in ("/tmp", "/dev/shm"):  # noqa: S108 - private tmpfs inside the sandbox
        if os.path.isdir(path) and not _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755"):
            return False
    os.chdir("/tmp")  # noqa: S108
    return True


def _own_proc() -> bool:
    """The job's /proc shows its own pid namespace only (never the template or a concurrent job)."""
    if not _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC):
        return False
    for name in PROC_READ_ONLY:
        path = f"/proc/{name}"
        if os.path.exists(path) and not (
            _mount(path, path, None, MS_BIND | MS_REC) and _mount("none", path, None, MS_BIND | 32 | MS_RDONLY)
        ):  # 32 = MS_REMOUNT
            return False
    return True


def _start_job(handoff: socket.socket, parent: int, *, own_cwd: bool) -> None:
    """The job itself, forked ahead of its request: its own process group, tied to its parent; then, once the
    template hands it the request and its pipes, the job's CPU limit and environment, told to the parent, and the
    old child's life."""
    os.setsid()  # its own process group: the parent's kill takes whatever it started
    _tie_to_parent(parent)
    message, fds = _handed(handoff, 4)
    handoff.close()
    request = json.loads(message)
    cpu = int(request["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    os.environ.clear()
    os.environ.update(request["env"])
    if not own_cwd:  # inside bubblewrap the job's cwd is its private /tmp, from _fresh_namespaces
        os.chdir(request["cwd"])
    status = socket.socket(fileno=fds[3])
    status.sendmsg([STARTED])  # the parent learns this process's pid from the kernel (SO_PASSCRED)
    status.close()
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.closerange(3, 1 << 16)
    main(parent)


def _handed(handoff: socket.socket, count: int) -> tuple[bytes, list[int]]:
    """What the template hands this process of its job: the request and `count` fds (exits if there is none: the
    template retired or died first)."""
    try:
        message, fds, _, _ = socket.recv_fds(handoff, 65536, count)
    except OSError:
        message, fds = b"", []
    if not message or len(fds) != count:
        os._exit(SETUP_FAILED)
    return message, fds


def _forked(run: Any) -> int:
    """Fork; the child runs `run` and exits (1 with the traceback on stderr if it raised, as a process would)."""
    child = os.fork()
    if child == 0:
        try:
            run()
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    return child


def _init(handoff: socket.socket) -> None:
    """Pid 1 of the job's pid namespace, as bubblewrap's own init was (the kernel drops the signals pid 1 has no
    handler for, SIGXCPU included, so the job is pid 2): mount the namespace's /proc, fork the job, exit as it did
    (128 + the signal that killed it, bubblewrap's convention)."""
    _tie_to_parent(0)
    if not _own_proc():
        os._exit(SETUP_FAILED)
    job = _forked(lambda: _start_job(handoff, 1, own_cwd=True))
    handoff.close()
    _, wait_status = os.waitpid(job, 0)
    os._exit(128 + os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else os.WEXITSTATUS(wait_status))


def _supervisor(status_handoff: socket.socket, job_handoff: socket.socket, template: int, wrapped: bool) -> None:
    """The supervisor (forked from the template ahead of its job's request): isolate, fork the job, take the
    job's status socket when the request comes, report the job's exit status on it, exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _tie_to_parent(template)
    if wrapped and not _fresh_namespaces():
        os._exit(SETUP_FAILED)
    supervisor = os.getpid()

    def below() -> None:
        status_handoff.close()  # the supervisor's alone
        if wrapped:
            _init(job_handoff)
        else:
            _start_job(job_handoff, supervisor, own_cwd=False)

    child = _forked(below)
    job_handoff.close()
    _, fds = _handed(status_handoff, 1)
    status_handoff.close()
    status = socket.socket(fileno=fds[0])
    _, wait_status = os.waitpid(child, 0)
    status.sendmsg([struct.pack("i", wait_status)])
    os._exit(0)


class Ready:
    """The next job's processes, forked and isolated before its request arrives (so a job's start costs its
    request only, not three forks and its namespaces): a supervisor, inside bubblewrap a fresh set of namespaces
    with its init and /proc, and the job waiting for its request. They are made for one job and never reused; the
    agent's code runs only after the request, once the job has hardened itself."""

    def __init__(self, control: socket.socket, template: int, wrapped: bool) -> None:
        self.status_handoff, status_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.job_handoff, job_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if os.fork() == 0:
            try:
                for ours in (control, self.status_handoff, self.job_handoff):
                    ours.close()
                _supervisor(status_theirs, job_theirs, template, wrapped)
            finally:
                os._exit(SETUP_FAILED)
        status_theirs.close()
        job_theirs.close()

    def hand(self, message: bytes, fds: list[int]) -> bool:
        """Give the job its request and pipes, then the supervisor the status socket; False if the job is gone (then
        nothing was handed). Should the supervisor be gone instead, the job dies with it and the parent is told so
        by its status socket closing."""
        try:
            socket.send_fds(self.job_handoff, [message], fds)
        except OSError:
            return False
        else:
            with contextlib.suppress(OSError):
                socket.send_fds(self.status_handoff, [b"status"], fds[3:])
            return True
        finally:
            self.status_handoff.close()
            self.job_handoff.close()


def serve(control_fd: int, wrapped: bool) -> None:
    """Hand each job request to the processes made ready for it, then make the next job's, until the parent
    closes the socket or the CPU budget is half spent (the parent then starts a new template)."""
    control = socket.socket(fileno=control_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    budget = resource.getrlimit(resource.RLIMIT_CPU)[0] / 2
    engine.prepare()
    gc.freeze()  # the imported objects stay shared with every fork (no copy-on-write from the collector)
    template = os.getpid()
    ready = Ready(control, template, wrapped)
    while sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) < budget:
        try:
            message, fds, _, _ = socket.recv_fds(control, 65536, 4)
        except OSError:
            return
        if not message:
            return
        if len(fds) == 4 and not ready.hand(message, fds):  # they died waiting: a new set, once
            Ready(control, template, wrapped).hand(message, fds)
        for fd in fds:
            os.close(fd)
        ready = Ready(control, template, wrapped)


if __name__ == "__main__":
    serve(int(sys.argv[3]), sys.argv[4] == "1")
