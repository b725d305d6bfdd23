"""What a verification job gets from its pool: the JobContext, handed to `job.run_job`.

A job (job.py) runs on one worker and borrows the pool's other processes for moments: a reference
process for the memory plan and the expected outputs, a timer for the reference's medians, a replayer
for the replay. It reads the pool's memory caps, timing gates and measured peaks, and shares one
cache of reference timings with every other job. The pool (pool.py) builds one JobContext when it is
made and hands each run of a job a copy carrying that run's own flags (whether its reference must be
fresh, whether one broke), so job.py never imports the pool and only the pool's fleet (fleet.py) knows
how its processes are kept. Nothing here imports job.py, pool.py or fleet.py: they import this.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from distill.verifier import limits, procs, protocol
from distill.verifier.gate import TimingGate


@dataclass(eq=False)  # a slot is one place in the pool: compared and hashed by identity
class Slot:
    """One worker's place in the pool: a job runs on `proc`; a recycled slot gets a new one."""

    index: int  # its place among the pool's workers (names its scratch folder and recycle thread)
    gpu: int  # the GPU its worker uses
    proc: procs.Proc | None = None  # the worker; None while it starts, or when it could not
    info: dict[str, Any] = field(default_factory=dict)  # the worker's ready message, or {"start_error": why}
    scratch: str = ""  # the worker's scratch folder (inflight.py's marker of a GPU compile lives there)


@dataclass
class DeviceBudget:
    """Memory per worker: the host cap, and the device budget that memplan.py checks each problem's plan
    against and caps.py enforces as a fraction of the GPU."""

    device: str  # "cpu" or "cuda"
    host_mb: int  # the host-memory cap of each worker and replayer (limits.MemoryGuard), MB
    given_mb: int | None  # the device budget as given (VerifierPool device_memory_mb); None: a share
    share: float  # each worker's share of its GPU when none is given (the rest: references and timers)
    totals: dict[int, int] = field(default_factory=dict)  # GPU -> its memory, bytes, as references report it

    def __post_init__(self) -> None:
        if self.given_mb is not None and self.given_mb <= 0:
            raise ValueError(f"device_memory_mb must be > 0, not {self.given_mb}")

    def device_bytes(self) -> int:
        """Each worker's device budget: as given, or its share of the smallest GPU (known once a
        reference has started), or on the CPU (and before any reference) the host cap."""
        if self.given_mb is not None:
            return self.given_mb << 20
        if self.device == "cpu" or not self.totals:
            return self.host_mb << 20
        return int(self.share * min(self.totals.values()))

    def fraction(self, gpu: int) -> float:
        """The fraction of `gpu` a worker there may allocate (caps.py): what enforces the budget."""
        total = self.totals.get(gpu)
        if self.given_mb is None or not total:
            return self.share
        return max(0.01, min(0.95, (self.given_mb << 20) / total))


@dataclass
class OncePerKey:
    """Values measured once a pool and read by every later job: `cache` by key, and a lock per key so
    that one job measures while the others on the same key wait for its value."""

    cache: dict[Any, dict[str, Any]] = field(default_factory=dict)  # key -> the measured value
    locks: dict[Any, threading.Lock] = field(default_factory=dict)  # per key: one measures, the rest wait
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards `locks` (and a subclass's own sets)

    def lock_for(self, key: Any) -> threading.Lock:
        with self.lock:
            return self.locks.setdefault(key, threading.Lock())


@dataclass
class RefTimings(OncePerKey):
    """The reference's eager and torch.compile medians per (problem key, GPU): torch.compile holds a
    timer for seconds per problem, and every later job on the problem reads them here."""

    started: set[tuple[str, int]] = field(default_factory=set)  # keys a background thread is measuring (prefetch)

    def claim(self, key: tuple[str, int]) -> bool:
        """Whether the caller should start measuring `key` in the background: not cached, not started."""
        with self.lock:
            if key in self.cache or key in self.started:
                return False
            self.started.add(key)
            return True


@dataclass
class Screens(OncePerKey):
    """Each problem's screening report (screen.ScreenReport's fields) by "problem sha256:device":
    screening runs the problem in float64 and float32 on several draws (seconds on a GPU-sized problem),
    and a pool has several reference processes, each of which would otherwise screen every problem
    again. The first job on a problem screens it in its reference; the others wait on its lock, then
    hand the report to theirs. Held in the trusted parent."""


@dataclass(frozen=True)
class Handouts:
    """The pool's processes a job borrows, as the pool's own functions. Each acquire waits under a
    deadline (handout.py) and hands out a live process for one GPU; each release takes `broken`: the
    process failed during the command, and is killed and replaced."""

    reference: Callable[[int], procs.Proc]  # a reference process (plan, expected outputs)
    fresh_reference: Callable[[int], procs.Proc]  # one that has served no job: a retry's
    release_reference: Callable[[int, procs.Proc, bool], None]
    timer: Callable[[int], procs.Proc]  # a reference process that compiles and times references
    release_timer: Callable[[int, procs.Proc, bool], None]
    replayer: Callable[[int], procs.Proc]  # a replayer (replayer.py), never a candidate's module in it
    release_replayer: Callable[[int, procs.Proc, bool], None]


@dataclass
class JobContext:
    """What a job reads and borrows of its pool. The pool builds one; `attempt` copies it for each run
    of a job, so the flags below belong to that run alone, whichever thread runs it."""

    device: str  # "cpu" or "cuda"
    handouts: Handouts  # references, timers and replayers, borrowed and given back
    memory: limits.MemoryGuard  # per-process host caps: whether a dead worker was killed at its cap
    budget: DeviceBudget  # host and device memory per worker
    gates: dict[int, TimingGate]  # per GPU: one timing at a time, the pool's other processes paused
    peaks: dict[int, protocol.PeaksReply]  # per GPU: the measured ceilings behind timing's physical floor
    ref_timings: RefTimings  # the reference's medians, shared by every job of the pool
    template: str  # the pool's warm Triton cache, which seeds each GPU candidate's own compile cache
    stream_inputs: bool | None  # None: each job's memory plan decides; True/False: always/never stream
    timing_in: str  # which process times a candidate on the GPU: "worker" or "replayer"
    screens: Screens = field(default_factory=Screens)  # each problem's screening report, shared by the pool's jobs
    compile_reference: bool = True  # the reference is also timed under torch.compile (pool timing "eager+compile")
    admission: Any = None  # admission.Admission (fleet.py): a job shares its GPU or holds it alone; None: shares
    fresh_reference: bool = False  # this run is the retry: its references must have served no job
    reference_broke: bool = False  # a reference failed in this run (died, hung, garbled): retry, don't blame
    scratch: str = ""  # the parent's scratch folder (spill.py: a job's kept outputs); "": the system's temp

    def attempt(self, fresh: bool) -> "JobContext":
        """The context for one run of a job; `fresh` (a retry's) takes only references that served no job."""
        return dataclasses.replace(self, fresh_reference=fresh, reference_broke=False)

    def acquire_reference(self, gpu: int) -> procs.Proc:
        return (self.handouts.fresh_reference if self.fresh_reference else self.handouts.reference)(gpu)

    def release_reference(self, gpu: int, proc: procs.Proc, broken: bool) -> None:
        if broken:
            self.reference_broke = True
        self.handouts.release_reference(gpu, proc, broken)
