"""Run a command as a timeout would kill it, and report what of its process tree outlives it.

    python tests/reaper.py [--signal NAME] MARK COUNT SECONDS COMMAND...

This process becomes a child subreaper, so whatever the command starts stays below it even when orphaned (a
server in its own session whose parent died). Once COUNT descendants' command lines contain MARK (the part of
the command that must be cleaned up is running), or after SECONDS, the command alone gets SIGTERM (or `--signal`:
KILL, an exit no handler sees; HUP, a closed terminal); then this waits for it, gives what it stopped a few
seconds to exit, and prints one JSON line: `seen` (MARK was running), `code` (the command's exit status) and
`left` (the command lines of the descendants still alive, which are then killed, so the caller leaks nothing).
"""

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import time

PR_SET_CHILD_SUBREAPER = 36
SETTLE_SECONDS = 10.0


def descendants(root: int) -> dict[int, str]:
    """Live descendants of `root` (zombies excluded), with their command lines."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # it exited while being read
        if fields[0] != "Z":
            parents[int(entry)], commands[int(entry)] = int(fields[1]), command
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = commands[pid]
                frontier.append(pid)
    return found


def reap() -> None:
    with contextlib.suppress(ChildProcessError):  # no child left
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--signal", default="TERM")
    parser.add_argument("mark")
    parser.add_argument("count", type=int)
    parser.add_argument("seconds", type=float)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    me = os.getpid()
    command_process = subprocess.Popen(args.command)
    deadline, seen = time.monotonic() + args.seconds, False
    while time.monotonic() < deadline and command_process.poll() is None:
        if sum(args.mark in line for line in descendants(me).values()) >= args.count:
            seen = True
            break
        time.sleep(0.1)
    command_process.send_signal(signal.Signals[f"SIG{args.signal}"])
    code = command_process.wait(timeout=180)
    settle = time.monotonic() + SETTLE_SECONDS
    while True:
        reap()
        left = descendants(me)
        if not left or time.monotonic() > settle:
            break
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    print(json.dumps({"seen": seen, "code": code, "left": sorted(left.values())}))


if __name__ == "__main__":
    main()
