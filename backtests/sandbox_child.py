"""The sandbox child: `python -I -m backtests.sandbox_child`, one job on stdin, one JSON result on stdout.

Order matters: read the job and import everything while still privileged, then harden the process (network
namespace, rlimits, uid drop, no_new_privs, seccomp), and only then compile and run the agent's code. No Django.
"""

import ctypes
import errno
import json
import os
import resource
import signal
import sys
import traceback
from typing import Any

from backtests import engine  # imports backtrader before any privilege is dropped
from backtests.policy import PolicyViolation, PrintBuffer

try:  # loaded now: after the uid drop, libseccomp could no longer be located
    import pyseccomp as seccomp
except (ImportError, OSError):  # pragma: no cover - reported as an inactive layer
    seccomp = None

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
CLONE_THREAD = 0x00010000


def _netns() -> bool:
    try:
        os.unshare(os.CLONE_NEWNET)
    except OSError:
        return False
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
    for name in ("socket", "socketpair", "fork", "vfork", "execve", "execveat", "ptrace", "unshare", "setns"):
        rules.add_rule(refused, name)
    # clone without CLONE_THREAD is a new process; threads stay possible. clone3 hides its flags in memory,
    # so it answers ENOSYS and libc falls back to clone.
    rules.add_rule(refused, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    rules.load()
    return True


def harden(requested: set[str], limits: dict[str, int]) -> list[str]:
    """Apply the requested OS layers; return those actually in force."""
    parent = os.getppid()
    active = []
    steps = [
        ("netns", lambda: _netns()),
        ("rlimits", lambda: _rlimits(limits)),
        ("uid_drop", lambda: _drop_uid(limits["uid"])),
        ("no_new_privs", _no_new_privs),
        ("seccomp", _seccomp),
    ]
    for name, step in steps:
        if name in requested and step():
            active.append(name)
    # Die with the worker that started us (a uid change clears this setting, so it is set last).
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
    return active


def _error_line(error: BaseException) -> int | None:
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == "<strategy>"]
    return frames[-1].lineno if frames else None


def execute(job: dict[str, Any], active: list[str]) -> dict[str, Any]:
    prints = PrintBuffer()
    in_process = {"ast", "restricted_python"} & set(job["layers"])
    outcome: dict[str, Any] = {"layers": active + sorted(in_process)}
    try:
        strategy = engine.load_strategy(job["source"], prints=prints, layers=in_process)
        outcome["result"] = engine.run(
            strategy, datas=job["datas"], simulation=job["simulation"], parameters=job["parameters"]
        )
        outcome["ok"] = True
    except PolicyViolation as violation:
        outcome.update(ok=False, error=violation.payload())
    except engine.EngineError as error:
        outcome.update(ok=False, error={"code": error.code, "message": error.message, "line": None})
    except MemoryError:
        outcome.update(ok=False, error={"code": "memory_limit", "message": "the strategy exceeded its memory limit"})
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
        outcome.update(ok=False, error={"code": "execution_error", "message": message, "line": _error_line(error)})
    outcome["prints"] = prints.text()
    outcome["prints_truncated"] = prints.truncated
    return outcome


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    active = harden(set(job["layers"]), job["limits"])
    outcome = execute(job, active)
    sys.stdout.write(json.dumps(engine.plain(outcome), allow_nan=False, default=str))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
