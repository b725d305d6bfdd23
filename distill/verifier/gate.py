"""Quiet timing on a shared GPU: one timing at a time, every other process of the pool paused.

Measured on the H100 box (2026-11-22): with correctness work of eleven other workers, their
compilers and the references running beside a timed candidate, the same kernel's median moved by
18% from one verification to the next. A readers-writer gate that made timing wait for in-flight
correctness work cut throughput instead. So a timing run now stops (SIGSTOP) the process groups of
every other worker and reference on its GPU, lets work already queued on the device drain, times,
and resumes them (SIGCONT). Their phase clocks keep running, but a pause lasts well under a second
against per-phase limits of tens of seconds.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

SETTLE_S = 0.02  # for kernels other processes queued just before they were stopped


class TimingGate:
    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._lock = threading.Lock()
        self._pids = pids  # every live worker/reference process (group leader) on this GPU
        self.paused_s = 0.0
        # The parent's own heavy work (comparing outputs: torch ops on every core) runs as "shared"
        # sections, which a timing run waits out and holds off: the parent cannot be SIGSTOPped.
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        """CPU-heavy work in the parent that must not overlap a timing run."""
        with self._cond:
            self._cond.wait_for(lambda: not self._writing)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def quiet(self, keep: int) -> Iterator[None]:
        """Exclusive use of the GPU and the CPUs for the process `keep` while the block runs."""
        with self._lock, self._exclusive():
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
                    time.sleep(SETTLE_S)
                yield
            finally:
                for pid in stopped:
                    try:
                        os.killpg(pid, signal.SIGCONT)
                    except OSError:
                        continue
                self.paused_s += time.monotonic() - t0

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with self._cond:
            self._writing = True
            self._cond.wait_for(lambda: self._readers == 0)
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()
