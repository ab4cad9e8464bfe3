"""What the benches read of the processes they start, from /proc: each one's parent, process group and CPU seconds,
and its peak memory. A process that exits while it is read is left out."""

import os
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    pgrp: int
    cpu_s: float  # user + system so far


def processes() -> dict[int, Process]:
    """Every live process by pid."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
        except OSError:
            continue
        pid = int(stat.parent.name)
        found[pid] = Process(pid, int(fields[1]), int(fields[2]), (int(fields[11]) + int(fields[12])) / TICK)
    return found


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and its live descendants, followed by parent pid (not by session or group: a
    sandbox template runs in a session of its own)."""
    table = processes()
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [p.pid for p in table.values() if p.ppid == parent and p.pid not in tree]
        tree.update(children)
        frontier += children
    return sum(table[pid].cpu_s for pid in tree if pid in table)


def group_cpu(pgid: int) -> float:
    """CPU seconds of the live processes in a process group."""
    return sum(p.cpu_s for p in processes().values() if p.pgrp == pgid)


def group_peak_rss_mb(pgid: int) -> int:
    """The largest peak resident set (VmHWM) among the live processes of a process group, in MB."""
    peak = 0
    for p in processes().values():
        if p.pgrp != pgid:
            continue
        try:
            status = Path(f"/proc/{p.pid}/status").read_text()
        except OSError:
            continue
        line = next((row for row in status.splitlines() if row.startswith("VmHWM:")), None)
        if line is not None:
            peak = max(peak, int(line.split()[1]) // 1024)
    return peak
