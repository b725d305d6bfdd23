"""Host-memory caps for worker processes without RLIMIT_AS (which breaks CUDA's address reservations).

Two mechanisms, both measured at start-up and reported:
* a cgroup per worker with a hard `memory.max` (cgroup v2) or `memory.limit_in_bytes` (v1), when
  this process may create one — the kernel then kills the worker at the cap;
* always, a watchdog thread in the parent that polls each worker's resident set (its process group
  included) every 50 ms and kills the group past the cap.

A cgroup is named `tritonforge-<parent pid>-<worker pid>` and removed once its worker is dead (the
kernel refuses to remove an occupied one). Those of a parent that died before removing them are
removed by the next pool's start (`leftovers.sweep`).
"""
from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass

from distill.verifier import running

_V2 = "/sys/fs/cgroup"
_V1 = "/sys/fs/cgroup/memory"
CGROUP_ROOTS = (_V2, _V1)
CGROUP_PREFIX = "tritonforge-"


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _groups_rss(pgids: set[int]) -> dict[int, int]:
    """Resident bytes per process group, for the groups asked about (one pass over /proc)."""
    total = dict.fromkeys(pgids, 0)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                g = os.getpgid(int(entry))
            except OSError:
                continue
            if g in total:
                total[g] += _rss_bytes(int(entry))
    return total


@dataclass
class _Capped:
    pid: int
    limit: int
    cgroup: str | None
    tripped: bool = False
    seen: int = 0  # resident bytes of the group at the watchdog's last sample (at the kill: what it held)


class MemoryGuard:
    """Caps registered process groups; `tripped(pid)` says whether a death was the memory cap."""

    def __init__(self, poll_s: float = 0.05) -> None:
        self._procs: dict[int, _Capped] = {}
        self._lock = threading.Lock()
        self._poll = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._probed = self._probe()
        self.cgroups = {"made": 0, "failed": 0, "error": ""}

    @property
    def mode(self) -> str:
        """What actually capped the workers so far (the probe, corrected by what creation did)."""
        made, failed = self.cgroups["made"], self.cgroups["failed"]
        if self._probed.startswith("cgroup") and failed and not made:
            return f"RSS watchdog (50 ms polling; cgroup creation failed: {self.cgroups['error']})"
        return self._probed

    def _probe(self) -> str:
        root = f"{_V2}/cgroup.subtree_control"
        if os.path.exists(root) and "memory" in open(root).read() and os.access(_V2, os.W_OK):
            return "cgroup v2 memory.max + RSS watchdog"
        if os.path.isdir(_V1) and os.access(_V1, os.W_OK):
            return "cgroup v1 memory.limit_in_bytes + RSS watchdog"
        return "RSS watchdog (50 ms polling; no writable memory cgroup)"

    def add(self, pid: int, limit_mb: int | None) -> None:
        if not limit_mb:
            return
        limit = int(limit_mb) << 20
        cg = self._cgroup(pid, limit)
        with self._lock:
            self._procs[pid] = _Capped(pid, limit, cg)
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="tritonforge-memory", daemon=True)
            self._thread.start()

    def _cgroup(self, pid: int, limit: int) -> str | None:
        try:
            if self.mode.startswith("cgroup v2"):
                path = f"{_V2}/{CGROUP_PREFIX}{os.getpid()}-{pid}"
                os.makedirs(path, exist_ok=True)
                _write(f"{path}/memory.max", str(limit))
                _write(f"{path}/memory.swap.max", "0", missing_ok=True)
            elif self.mode.startswith("cgroup v1"):
                path = f"{_V1}/{CGROUP_PREFIX}{os.getpid()}-{pid}"
                os.makedirs(path, exist_ok=True)
                _write(f"{path}/memory.limit_in_bytes", str(limit))
            else:
                return None
            _write(f"{path}/cgroup.procs", str(pid))
            self.cgroups["made"] += 1
            return path
        except OSError as exc:
            self.cgroups["failed"] += 1
            self.cgroups["error"] = str(exc)[:120]
            return None

    def limit_bytes(self, pid: int) -> int | None:
        """The cap of `pid` now, in bytes (None: not capped)."""
        with self._lock:
            cap = self._procs.get(pid)
        return cap.limit if cap else None

    def raise_limit(self, pid: int, limit_mb: int) -> None:
        """Raise `pid`'s cap (a job given more room: pool.py's retry, an exclusive job). Only ever up: a
        cap lowered under what a process holds would kill it; a process whose cap was raised is retired
        after its job, never handed back to another at the larger cap."""
        limit = int(limit_mb) << 20
        with self._lock:
            cap = self._procs.get(pid)
            if cap is None or limit <= cap.limit:
                return
            cap.limit = limit
        if cap.cgroup:
            name = "memory.max" if cap.cgroup.startswith(f"{_V2}/{CGROUP_PREFIX}") else "memory.limit_in_bytes"
            try:
                _write(f"{cap.cgroup}/{name}", str(limit))
            except OSError:
                pass  # the watchdog still holds the new cap; the cgroup's old one only kills sooner

    def resident(self, pid: int) -> int:
        """The process's resident bytes now, read by this (trusted) process: evidence of what a worker
        held at a step boundary that does not rest on the worker's word (job.py)."""
        return _rss_bytes(pid)

    def held_at_kill(self, pid: int) -> int | None:
        """What the watchdog last saw the process's group hold (at a kill: over its cap)."""
        with self._lock:
            cap = self._procs.get(pid)
        return cap.seen if cap and cap.seen else None

    def cgroup(self, pid: int) -> str | None:
        """The cgroup capping `pid`, if one was made (running.py counts its members)."""
        with self._lock:
            cap = self._procs.get(pid)
        return cap.cgroup if cap else None

    def tripped(self, pid: int) -> bool:
        with self._lock:
            cap = self._procs.get(pid)
        if cap is None:
            return False
        if cap.tripped:
            return True
        if cap.cgroup:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    text = open(f"{cap.cgroup}/{name}").read()
                except OSError:
                    continue
                for line in text.splitlines():
                    key, _, val = line.partition(" ")
                    if key in ("oom_kill", "oom") and val.strip().isdigit() and int(val) > 0:
                        return True
            try:
                if int(open(f"{cap.cgroup}/memory.failcnt").read()) > 0:
                    return True
            except (OSError, ValueError):
                pass
        return False

    def remove(self, pid: int) -> None:
        """Forget `pid` and remove its cgroup; call once the process is dead (a dying one may take
        a moment to leave its cgroup). Whatever else is still in the cgroup (a child that left the
        worker's process group, which the worker's kill did not reach) is killed first."""
        with self._lock:
            cap = self._procs.pop(pid, None)
        if cap and cap.cgroup:
            running.kill(running.members(pid, cap.cgroup), pid, cap.cgroup)
            remove_cgroup(cap.cgroup)

    def _watch(self) -> None:
        while not self._stop.wait(self._poll):
            with self._lock:
                caps = [c for c in self._procs.values() if not c.tripped]
            if not caps:
                continue
            rss = _groups_rss({c.pid for c in caps})
            for cap in caps:
                cap.seen = rss.get(cap.pid, 0)
                if cap.seen > cap.limit:
                    cap.tripped = True
                    try:
                        os.killpg(cap.pid, signal.SIGKILL)
                    except OSError:
                        pass

    def close(self) -> None:
        self._stop.set()
        for pid in list(self._procs):
            self.remove(pid)


def remove_cgroup(path: str, seconds: float = 1.0) -> bool:
    """rmdir `path`, retrying while its last process leaves; whether it is gone."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _write(path: str, text: str, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except FileNotFoundError:
        if not missing_ok:
            raise
