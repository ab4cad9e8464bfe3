"""The sandbox child: `python -I -m backtests.sandbox_child PARENT_PID CPU_SECONDS`, one job on stdin, one JSON
result on stdout.

Order matters. First, before any import: die with the parent (PR_SET_PDEATHSIG, then check the parent is still
the one that started us, since it may have died already) and take the CPU limit, in every layer combination, so
no child outlives its worker or spins without a limit. Then read the job and import everything while still
privileged, harden the process (network namespace, rlimits, uid drop, no_new_privs, seccomp), and only then
compile and run the agent's code. No Django.
"""

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
    _cpu = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_CPU, (_cpu, _cpu + 1))

import errno  # noqa: E402
import json  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

from backtests import engine  # noqa: E402 - imports backtrader before any privilege is dropped
from backtests.policy import (  # noqa: E402
    MAX_PRINT_BYTES,
    PolicyViolation,
    PrintBuffer,
    Refused,
    clean_error,
    clean_strings,
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
    os.environ["TMPDIR"] = "/tmp"  # noqa: S108 - the private tmpfs just mounted
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
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0


def _seccomp() -> bool:
    if seccomp is None:
        return False
    refused = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in ("socket", "socketpair", "fork", "vfork", "execve", "execveat", "ptrace", "unshare", "setns", "mount",
                 "umount2", "pivot_root", "chroot"):  # fmt: skip
        rules.add_rule(refused, name)
    # clone without CLONE_THREAD is a new process; threads stay possible. clone3 hides its flags in memory,
    # so it answers ENOSYS and libc falls back to clone.
    rules.add_rule(refused, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    rules.load()
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
    in_process = {"ast", "restricted_python"} & set(job["layers"])
    outcome: dict[str, Any] = {"layers": active + sorted(in_process)}
    try:
        strategy = engine.load_strategy(job["source"], prints=prints, layers=in_process)
        run = {"datas": job["datas"], "simulation": job["simulation"], "parameters": job["parameters"]}
        result = engine.run(strategy, **run)
        decisions = result.pop("decisions")
        if job.get("probe"):
            result["lookahead_check"] = engine.lookahead_probe(
                lambda: engine.load_strategy(job["source"], prints=PrintBuffer(0), layers=in_process),
                decisions=decisions,
                k=int(job["probe"]),
                **run,
            )
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
    if outcome.get("error") is not None:
        outcome["error"] = clean_error(outcome["error"])
    outcome["prints"] = prints.text()
    outcome["prints_truncated"] = prints.truncated
    return outcome


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    active = harden(set(job["layers"]), job["limits"], int(sys.argv[1]), job.get("hide", []))
    outcome = execute(job, active)
    sys.stdout.write(json.dumps(clean_strings(engine.plain(outcome)), allow_nan=False, default=str))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
