"""Quiet timing on a shared GPU: one timing at a time, every other process of the pool paused.

Measured on the H100 box (2026-11-22): with correctness work of eleven other workers, their
compilers and the references running beside a timed candidate, the same kernel's median moved by
18% from one verification to the next. So a timing run stops (SIGSTOP) the process groups of every
other worker and reference on its GPU, lets work already queued on the device drain, times, and
resumes them (SIGCONT). Their phase clocks keep running, but a pause lasts well under a second
against per-phase limits of tens of seconds. The parent's own work (comparing outputs) runs on: it
uses no GPU, and the stream window (see `timing`) does not see the host's load.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

# For kernels other processes queued just before they were stopped; the timing's own warm-up (at
# least timing.WARMUP_MS of the trial protocol) drains the rest before anything is measured.
SETTLE_S = 0.005
STOP_WAIT_S = 0.5  # a stop signal lands at the target's next scheduling; on a loaded box that waits


def timing_core(gpu: int) -> int | None:
    """One CPU close to GPU `gpu` (from sysfs), where every timed call of that GPU runs.

    The timed window holds the host's launch and wake-up latency; a process on a core far from the
    GPU, or one the scheduler moves mid-run, pays more of it. Measured on the H100 box
    (bench/timing_noise.py): the same kernel's median differed by up to 35% between fresh processes
    while repeating within 2% inside one. None when sysfs says nothing.

    `gpu` is a CUDA index, so under CUDA_VISIBLE_DEVICES (one dask worker per GPU) it is mapped to the
    host's GPU first; GPUs sharing a NUMA node get different cores (the n-th GPU the n-th last), so
    pools of several workers do not pin their timings to one core."""
    allowed = sorted(os.sched_getaffinity(0))
    local: list[int] = []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    phys = gpu
    if gpu < len(visible) and visible[gpu].strip().isdigit():
        phys = int(visible[gpu])
    try:
        devs = sorted(d for d in os.listdir("/sys/bus/pci/drivers/nvidia") if d.count(":") == 2)
        with open(f"/sys/bus/pci/drivers/nvidia/{devs[phys]}/local_cpulist") as fh:
            for part in fh.read().strip().split(","):
                lo, _, hi = part.partition("-")
                local += range(int(lo), int(hi or lo) + 1)
    except (OSError, IndexError, ValueError):
        local = []
    pick = [c for c in local if c in allowed] or allowed
    return pick[-1 - phys % len(pick)] if pick else None  # from the last: core 0 takes most interrupts


class TimingGate:
    def __init__(self, pids: Callable[[], list[int]], core: int | None = None) -> None:
        self._lock = threading.Lock()
        self.core = core  # pin the timed process here while it is timed
        self._pids = pids  # every live worker/reference process (group leader) on this GPU
        # Where exclusive time goes: stopping the others, and held in all.
        self.stats = {"timings": 0, "stop_s": 0.0, "held_s": 0.0}

    @property
    def paused_s(self) -> float:
        return self.stats["held_s"]

    @contextmanager
    def quiet(self, keep: int) -> Iterator[None]:
        """Exclusive use of the GPU and the CPUs for the process `keep` while the block runs."""
        with self._lock:
            stopped = []
            t0 = time.monotonic()
            try:
                for pid in self._pids():
                    if pid != keep:
                        try:
                            os.killpg(pid, signal.SIGSTOP)
                            stopped.append(pid)
                        except OSError:
                            continue
                if stopped:
                    _wait_stopped(stopped, time.monotonic() + STOP_WAIT_S)
                    time.sleep(SETTLE_S)
                self.stats["stop_s"] += time.monotonic() - t0
                with _pinned(keep, self.core), _parent_off(self.core):
                    yield
            finally:
                for pid in stopped:
                    try:
                        os.killpg(pid, signal.SIGCONT)
                    except OSError:
                        continue
                self.stats["held_s"] += time.monotonic() - t0
                self.stats["timings"] += 1


@contextmanager
def _pinned(pid: int, core: int | None) -> Iterator[None]:
    """Run `pid`'s main thread (the one that times) on `core` for the block, then restore its mask."""
    before = None
    if core is not None and pid > 0:
        try:
            before = os.sched_getaffinity(pid)
            os.sched_setaffinity(pid, {core})
        except OSError:
            before = None
    try:
        yield
    finally:
        if before is not None:
            try:
                os.sched_setaffinity(pid, before)
            except OSError:
                pass


@contextmanager
def _parent_off(core: int | None) -> Iterator[None]:
    """Keep this (parent) process's threads off `core` for the block: the parent is not stopped
    while a candidate is timed, and its comparisons (torch ops on every core) would otherwise
    take the timed process's core in slices of milliseconds, longer than the GPU-side pad that
    hides the host's launches."""
    saved: list[tuple[int, set[int]]] = []
    if core is not None:
        try:
            tids = [int(t) for t in os.listdir("/proc/self/task")]
        except OSError:
            tids = []
        for tid in tids:
            try:
                mask = os.sched_getaffinity(tid)
                if core in mask and len(mask) > 1:
                    os.sched_setaffinity(tid, mask - {core})
                    saved.append((tid, mask))
            except OSError:
                continue
    try:
        yield
    finally:
        for tid, mask in saved:
            try:
                os.sched_setaffinity(tid, mask)
            except OSError:
                continue


def _wait_stopped(pids: list[int], deadline: float) -> None:
    """Until each process is in the stopped state (or gone), or the deadline passes."""
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[0] in ("T", "t", "Z", "X"):
                        break
            except (OSError, IndexError):
                break
            time.sleep(0.001)
