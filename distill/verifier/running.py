"""What a worker leaves running, counted from outside by the kernel's own tables (trusted, the parent).

A worker's threads are the entries of `/proc/PID/task`: a native thread (a C extension's, a
watchdog such as faulthandler's, torch's thread pools) is there as much as a Python one, which
`threading` alone would not see. Its processes are the members of its memory cgroup besides
itself (`cgroup.procs`, which a process cannot leave: the cgroup file system is outside what
Landlock lets a worker write) or, without a cgroup, its descendants in `/proc` (the worker is a
child subreaper, so a grandchild whose parent exited is re-parented to it, not to init).

The worker reports its own task count in its ready message, before any candidate code exists;
after every phase the parent counts again. A thread or process still there is the candidate's
(`forbidden`), and the processes are killed at once: nothing a job leaves running reaches the
next job (a worker with an extra thread is retired with it).

Simplifies: a thread a library starts lazily and keeps (none seen on the CPU lane over the
honest fixtures) would read as the candidate's; threads that are ending get `SETTLE_S` to go.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

SETTLE_S = 0.5  # how long a count above the baseline may take to come back down


def tasks(pid: int) -> int:
    """Threads of `pid` (0 when it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (an exited child not yet reaped holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X", "")


def _parents() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    stat = fh.read()
                out[int(entry)] = int(stat[stat.rfind(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def descendants(pid: int) -> list[int]:
    """Every process below `pid` in the process tree (one pass over /proc)."""
    parents = _parents()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return sorted(found)


def members(pid: int, cgroup: str | None) -> list[int]:
    """Live processes of the worker `pid` other than itself."""
    found: set[int] | None = None
    if cgroup:
        try:
            with open(os.path.join(cgroup, "cgroup.procs")) as fh:
                found = {int(x) for x in fh.read().split()}
        except (OSError, ValueError):
            found = None
    if found is None:  # no cgroup (or it is gone): the process tree, one pass over /proc
        found = set(descendants(pid))
    return sorted(p for p in found if p != pid and alive(p))


def kill(pids: list[int], pid: int, cgroup: str | None, seconds: float = 2.0) -> None:
    """SIGKILL `pids`, and whatever else joins the worker's cgroup or tree meanwhile (a fork
    between two passes), until none is left or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while pids and time.monotonic() < deadline:
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
        pids = members(pid, cgroup)


@dataclass
class Left:
    """What a phase left running: threads over the worker's baseline, processes besides it."""
    threads: int = 0
    processes: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.threads or self.processes)


def left_running(pid: int, baseline: int, cgroup: str | None) -> Left:
    """Count after a phase (the worker is waiting for its next command); kill the processes found.
    A count that is still falling gets SETTLE_S (a thread or child on its way out)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        left = Left(max(0, tasks(pid) - baseline) if baseline else 0, members(pid, cgroup))
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if left.processes:
        kill(left.processes, pid, cgroup)
    return left
