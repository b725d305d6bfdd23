"""Workers from the problem: small jobs share a GPU, a job that needs the whole of it runs alone.

Each worker has a share of its GPU (and of the host) for the problems most jobs bring. A problem whose
memory plan (memplan.py, from meta tensors before anything is allocated) does not fit that share but
fits what the pool holds on that GPU altogether (every worker's share: 80% of the GPU, each worker's
host cap times the workers on it) used to be refused as `too large for this verifier`. Now its job
waits until the GPU's other jobs are done, holds the GPU alone, and gets the whole: its worker's host
cap is raised (limits.MemoryGuard.raise_limit) and its device cap set for the job (the `load` and
`replay` commands carry the fraction; the worker's harness sets it before any candidate code runs);
the worker and replayer that ran it are retired after, so no raised cap outlives its job. A problem
over the whole is still refused, naming the bytes.

The wait is writer-preferring: once a job waits to run alone, no new job starts sharing that GPU, so a
stream of small jobs cannot starve it. Every job holds its GPU (shared or alone) from its plan to its
end; a job that waits longer than `seconds` (the pool's longest job) raises PoolError.

The scratch disk is held the same way (`disk`): a job whose spill (memplan.job_disk) the disk cannot hold
beside the spills of the jobs in flight waits for them, and is the verifier's ResourceError only when it
does not fit with none in flight. Checking the free bytes alone let side-by-side jobs fill a 252 GiB disk
(KernelBench level 2 on the H200, 2026-11-30: three ResourceErrors and a candidate's `No space left`).
Every file a job writes goes through its hold (DiskHold.take, spill.Spill): a write past the plan grows
the hold under the same rule, so a plan that undercounts costs a wait, not a side-by-side job's verdict.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from distill.verifier import memfault, memplan
from distill.verifier.context import DeviceBudget
from distill.verifier.handout import PoolError


@dataclass(frozen=True)
class Grant:
    """The memory one job may use: its worker's share, or (`alone`) its GPU's whole."""

    host_mb: int  # host cap of its worker and replayer
    device_bytes: int  # device budget (on the CPU: the host share the plan is checked against)
    fraction: float | None  # device-memory fraction its worker and replayer set for the job (GPU only)
    alone: bool

    def budgets(self, timed: bool) -> dict[str, Any]:
        """The budgets memplan checks a plan against (the reference's `plan` and `trials` commands)."""
        return {"device": self.device_bytes, "host": self.host_mb << 20, "timed": timed, "alone": self.alone}


class Admission:
    """Per GPU: how many jobs share it, and whether one holds it alone (or waits to)."""

    def __init__(self, workers_per_gpu: dict[int, int], seconds: float) -> None:
        self.workers = dict(workers_per_gpu)
        self.seconds = seconds
        self._cond = threading.Condition()
        self._shared = dict.fromkeys(workers_per_gpu, 0)
        self._alone = dict.fromkeys(workers_per_gpu, False)
        self._waiting = dict.fromkeys(workers_per_gpu, 0)
        self._disk: dict[DiskHold, int] = {}  # a job in flight -> the spill bytes it holds back
        self._growing: set[DiskHold] = set()  # jobs waiting for more of the disk

    def share(self, budget: DeviceBudget, gpu: int) -> Grant:
        """One worker's grant: the pool's budget as configured."""
        return Grant(budget.host_mb, budget.device_bytes(),
                     budget.fraction(gpu) if budget.device == "cuda" else None, False)

    def whole(self, budget: DeviceBudget, gpu: int) -> Grant:
        """What the pool holds on `gpu` altogether: every worker's host cap and device share there."""
        n = max(1, self.workers.get(gpu, 1))
        host_mb = budget.host_mb * n
        if budget.device != "cuda":
            return Grant(host_mb, host_mb << 20 if budget.given_mb is None else (budget.given_mb << 20) * n, None, True)
        total = budget.totals.get(gpu) or (min(budget.totals.values()) if budget.totals else 0)
        if not total:
            return self.share(budget, gpu)
        fraction = min(0.95, budget.fraction(gpu) * n)
        return Grant(host_mb, int(fraction * total), fraction, True)

    def grant(self, budget: DeviceBudget, gpu: int, plan: dict[str, Any] | None, device: str, timed: bool) -> Grant:
        """The share where the plan fits it (or is not known yet), else the whole."""
        share = self.share(budget, gpu)
        if not plan or memplan.fits(plan, device, share.budgets(timed)):
            return share
        return self.whole(budget, gpu)

    @contextmanager
    def hold(self, gpu: int, alone: bool) -> Iterator[None]:
        """Hold `gpu` for one job: shared, or alone (waiting for its other jobs to end)."""
        deadline = time.monotonic() + self.seconds
        with self._cond:
            if alone:
                self._waiting[gpu] += 1
            try:
                while self._alone[gpu] or (self._shared[gpu] if alone else self._waiting[gpu]):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise PoolError(f"waited {self.seconds:g} s to {'hold' if alone else 'share'} GPU {gpu}")
                    self._cond.wait(min(left, 1.0))
            finally:
                if alone:
                    self._waiting[gpu] -= 1
                    self._cond.notify_all()  # sharers that waited behind this job may go (it holds, or gave up)
            if alone:
                self._alone[gpu] = True
            else:
                self._shared[gpu] += 1
        try:
            yield
        finally:
            with self._cond:
                if alone:
                    self._alone[gpu] = False
                else:
                    self._shared[gpu] -= 1
                self._cond.notify_all()

    @contextmanager
    def disk(self, need: int, path: str, what: str) -> Iterator["DiskHold"]:
        """Hold `need` bytes of the scratch disk at `path` for one job, until it ends; the job's writes
        go through the DiskHold it yields, which grows past `need` as `take` asks. A job in flight
        counts whole, however much it has written yet: a wait too many, never a full disk. `what` says
        what the bytes are, in the ResourceError of a job the disk cannot hold alone."""
        hold = DiskHold(self, path, what)
        with self._cond:
            self._disk[hold] = 0
        try:
            if need:
                hold.take(need, planned=True)
            yield hold
        finally:
            with self._cond:
                del self._disk[hold]
                self._growing.discard(hold)
                self._cond.notify_all()

    def _grow(self, hold: "DiskHold", extra: int, planned: bool) -> None:
        """Add `extra` bytes to `hold`'s share once the disk has room for them beside every other job's
        share (what it has not written yet: its whole share, counted again, as `disk` does)."""
        deadline = time.monotonic() + self.seconds
        with self._cond:
            self._growing.add(hold)
            try:
                while True:
                    others = sum(n for h, n in self._disk.items() if h is not hold)
                    mine = self._disk[hold] - hold.used  # reserved and not yet written
                    full = memfault.disk_full(hold.path, mine + extra + others)
                    if full is None:
                        break
                    # None in flight beside it, or every other job waiting to grow too (each would wait
                    # for the others): the disk cannot hold this job, the verifier's limit.
                    stuck = not planned and all(h in self._growing for h in self._disk if h is not hold and self._disk[h])
                    if not others or stuck:
                        full = memfault.disk_full(hold.path, mine + extra) or full
                        what = hold.what if planned else f"{hold.what} (past its plan of {self._disk[hold] >> 20} MiB)"
                        full.args = (f"{full} {what}",)
                        raise full
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise PoolError(f"waited {self.seconds:g} s for {extra >> 20} MiB of the scratch disk")
                    self._cond.wait(min(left, 1.0))
                self._disk[hold] += extra
            finally:
                self._growing.discard(hold)


    def _room(self, hold: "DiskHold", n: int) -> None:
        """A write within `hold`'s share, on a disk that has less free than the share promised (something
        outside every job's hold wrote there: a child's overflow, a compiler's cache): it waits for the jobs
        in flight to give some back, and is the verifier's ResourceError with none to wait for."""
        deadline = time.monotonic() + self.seconds
        with self._cond:
            while (full := memfault.disk_full(hold.path, n)) is not None:
                others = [h for h in self._disk if h is not hold and self._disk[h]]
                if not others or all(h in self._growing for h in others):
                    full.args = (f"{full} {hold.what} (within its plan: the disk was filled from outside the jobs' holds)",)
                    raise full
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolError(f"waited {self.seconds:g} s for {n >> 20} MiB of the scratch disk")
                self._cond.wait(min(left, 1.0))


class DiskHold:
    """One job's share of the scratch disk (Admission.disk): `take` before each write (spill.Spill),
    `give` when a file is removed. A write within the share was made room for when the share was taken;
    one past it grows the share, waiting for side-by-side jobs as a new job does."""

    def __init__(self, admission: Admission, path: str, what: str) -> None:
        self.admission, self.path, self.what = admission, path, what
        self.used = 0  # bytes written under the share and not given back

    @property
    def bytes(self) -> int:
        return self.admission._disk.get(self, 0)

    def take(self, n: int, planned: bool = False) -> None:
        """Make room for `n` more bytes: `planned`, the job's plan (Admission.disk); else a write."""
        if planned:
            self.admission._grow(self, n, True)
            return
        extra = self.used + n - self.bytes
        if extra > 0:
            self.admission._grow(self, extra, False)
        else:
            self.admission._room(self, n)
        self.used += n

    def give(self, n: int) -> None:
        """A removed file's bytes: free again for this job's next writes (the share stays as it is)."""
        with self.admission._cond:
            self.used = max(0, self.used - n)
            self.admission._cond.notify_all()
