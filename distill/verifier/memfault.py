"""Whose fault a worker's memory limit is: the verifier's own steps, or the candidate's.

A worker killed at its host cap (limits.MemoryGuard), or a CUDA out-of-memory error, used to be the
candidate's `crash` or `runtime_error` wherever it struck; for a problem near its budgets that was a
zero reward for a correct kernel. Now the parent places it, from evidence it holds itself:

* **the phase it asked for.** A replayer never imports the candidate's module (replayer.py): a death
  at its cap is the verifier's. A worker's `load` makes the inputs before any candidate code exists.
* **the step the worker announced** (`progress` messages, sandbox/worker.py): `inputs ...` (making,
  refilling and staging input sets), `call ...` (forward: the candidate's), `outputs ...` (copies,
  band and input checks, the reply's encoding), `import`. The announcement is a claim, so
* **what the candidate's own steps grew the worker by**, as the parent read the worker's resident
  bytes at each announcement (limits.MemoryGuard.resident, never the worker's word): the sum over its
  steps (construction, each forward) of the growth from the step's start to the next announcement.
  A death in a harness step is the verifier's only where that growth stayed within what the memory
  plan gives the candidate (its parameters, two outputs: the one it returns and one of temporaries,
  and OWN_BASE for its module and compiled kernels). A candidate that kept more and left the harness
  to trip over it keeps its `crash`.

Simplifies: the parent reads the worker's memory when an announcement arrives, a little after the
worker sent it; a step's first allocations may land in the step before. Both sides of that error
are small next to the plan's headroom (the harness steps copy a known number of known tensors).
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from typing import Any, Callable

from distill.verifier import protocol
from distill.verifier.problemio import ResourceError

HARNESS_STEPS = ("inputs", "outputs", "replay")  # first word of a harness step's announcement
# What a candidate's own steps may grow a worker by beyond the plan: its module, its compiled kernels and
# their launchers, the interpreter's caches (an honest kernel's first launch grew a CPU worker by tens of MB).
OWN_BASE = 128 << 20
# How much slower than the reference's whole trials one harness step of a worker may be and still be the
# verifier's own slowness: a worker makes one input set where the reference made every set and ran them
# (5-7 sets), in the same code, and its sandbox and load cost it well under 8x.
SLOW_HARNESS = 8.0


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 28 else f"{n / (1 << 20):.1f} MiB"


def is_harness(step: str) -> bool:
    return step.split(" ", 1)[0] in HARNESS_STEPS


@dataclass
class StepLog:
    """The steps a worker announced during a job, each with its resident bytes as the parent read them."""

    read: Callable[[], int]  # the worker's resident bytes, read by the parent
    steps: list[tuple[str, int]] = field(default_factory=list)

    def __call__(self, step: str) -> None:
        """Record `step` starting now (Proc.finish's `on_progress`; the parent marks its own commands too)."""
        self.steps.append((step, self.read()))

    @property
    def last(self) -> str:
        return self.steps[-1][0] if self.steps else ""

    def candidate_growth(self) -> int:
        """Bytes the candidate's own steps added, each from its start to the next step's start."""
        return sum(max(0, after - before) for (step, before), (_, after) in zip(self.steps, self.steps[1:])
                   if not is_harness(step))


def allowance(plan: dict[str, Any] | None) -> int | None:
    """Host bytes the plan gives the candidate's own steps (None without a plan): its parameters, two
    outputs (the one it returns and one of temporaries) and OWN_BASE. Not the cap's headroom over the
    plan: where the harness needs more than planned, that headroom is not there to hand out."""
    if not plan or not isinstance(plan.get("worker_host_bytes"), int):
        return None
    return int(plan.get("param_bytes") or 0) + 2 * int(plan.get("output_bytes") or 0) + OWN_BASE


def host_kill(log: StepLog, phase: str, plan: dict[str, Any] | None, cap: int | None,
              held: int | None) -> ResourceError | None:
    """A worker (or, `phase` "replay", a replayer) killed at its host cap: the verifier's error when it
    died in a harness step with the candidate's own steps within their allowance; None: the candidate's."""
    cap = cap or 0
    step = log.last if phase != "replay" else phase
    if phase != "replay" and not is_harness(step):
        return None
    grown, room = log.candidate_growth(), allowance(plan)
    if phase != "replay" and grown and (room is None or grown > room):
        return None  # it filled the room the plan left it: the harness only tripped over what it held
    seen = f" holding {_gib(held)} ({held} bytes)" if held else ""
    own = (f"; the candidate's own steps grew it by {_gib(grown)} ({grown} bytes), within the "
           f"{_gib(room)} ({room} bytes) the plan gives them" if room is not None and phase != "replay" else "")
    return ResourceError(f"the verifier's own memory limit: a {'replayer' if phase == 'replay' else 'worker'} was "
                         f"killed at its {_gib(cap)} ({cap} bytes) host-memory cap{seen} during {step}, a step of "
                         f"the verifier's own{own}", step=step, used_bytes=held, limit_bytes=cap)


def harness_timeout(step: str, seconds: float, reference_s: float) -> ResourceError | None:
    """A phase's time limit passed while the worker was in a harness step it announced (making or
    refilling inputs for a large problem on the CPU lane, copying its outputs): the verifier's, if the
    parent's own evidence agrees. The announcement is the worker's claim; the reference made every
    input set of the job and ran forward on each in `reference_s` (the parent's clock), so one harness
    step of the worker past the limit is the verifier's only where that took at least 1/SLOW_HARNESS
    of the limit. Otherwise something else held the worker there (a candidate that forged the step)."""
    if not is_harness(step) or reference_s * SLOW_HARNESS < seconds:
        return None
    return ResourceError(f"the verifier's own time limit: {step}, a step of the verifier's own, ran past the "
                         f"{seconds:g} s limit of its phase (VerifierPool timeout)", step=step, resource="time")


def device_oom(call: protocol.CallReport, plan: dict[str, Any] | None, budget: int,
               alone: int | None = None) -> ResourceError | None:
    """A CUDA out-of-memory error raised in forward while the candidate's own allocations (the call's
    peak above what the harness held when it began, the worker's figures) were within what the plan
    leaves it of the device budget, or (on a shared GPU, `alone` being the budget the GPU alone gives a
    job) would fit beside the harness there: the verifier's error, retried with the GPU alone (pool.py),
    where an out-of-memory error is the candidate's. The figures are the worker's claims: a candidate
    that raised one itself buys a retry, never a verdict. None: the candidate's (or not an OOM).

    Why `alone`: an honest kernel's temporaries are not bounded by two outputs (the lowering's 1-d
    convolution of KernelBench level 1 #67 at its own sizes asked for 2 GiB more over a 14 GB share,
    68 GiB of the H200 free: a `runtime_error` for a kernel KernelBench's own harness runs)."""
    err = call.get("error") or {}
    mem = call.get("device_memory") or {}
    if not str(err.get("type", "")).endswith("OutOfMemoryError") or not plan:
        return None
    held, peak = mem.get("held_bytes"), mem.get("peak_bytes")
    need = plan.get("worker_device_bytes")
    if not all(isinstance(x, int) for x in (held, peak, need)):
        return None
    own = max(0, peak - held)
    room = max(0, budget - need) + int(plan.get("param_bytes") or 0) + 2 * int(plan.get("output_bytes") or 0)
    if own <= room:
        within = f"within the {_gib(room)} ({room} bytes) the plan leaves it"
    elif alone is not None and held + own < alone:
        within = f"which would fit beside the harness in the {_gib(alone)} ({alone} bytes) the GPU alone gives a job"
    else:
        return None
    return ResourceError(f"the verifier's own memory limit: forward ran out of device memory under the "
                         f"{_gib(budget)} ({budget} bytes) budget per worker with its own allocations at "
                         f"{_gib(own)} ({own} bytes), {within}; the harness held {_gib(held)} ({held} bytes)",
                         step=f"call {call.get('trial')}", used_bytes=held + own, limit_bytes=budget, resource="device")


def later_oom(err: Any, phase: str, in_replayer: bool, shared: bool) -> ResourceError | None:
    """A CUDA out-of-memory error after the correctness calls, in the timing (`phase` "timing") or the
    replay: the verifier's, retried with the GPU alone (pool.py), where the job shares its GPU. The
    candidate's forward ran every correctness call within the same budget before; these phases hold more
    of the harness's own tensors beside it (the timing: three input sets and four outputs, memplan.py),
    so an honest kernel whose temporaries pass the plan's one output of slack runs out there first
    (KernelBench level 2 #4 at its own sizes, timed in a replayer: 1.97 GiB asked over a 14 GB share,
    61 GiB of the H200 free, a `runtime_error`). A replayer runs none of the candidate's Python, so its
    error is the verifier's with the GPU alone too; a worker's, with the GPU alone, stays the candidate's
    (its Python can raise one itself). None: not an out-of-memory error, or the candidate's."""
    text = str(err.get("type", "")) + ": " + str(err.get("message", "")) if isinstance(err, dict) else str(err or "")
    if "OutOfMemoryError" not in text and "out of memory" not in text:
        return None
    if not (shared or in_replayer):
        return None
    where = "a replayer" if in_replayer else "the worker"
    return ResourceError(f"the verifier's own memory limit: {where} ran out of device memory during {phase}, after "
                         f"every correctness call ran within the same budget ({text[:200]})",
                         step=phase, resource="device")


# Free space under which a scratch file system counts as full: a child's write into its reply's overflow
# file (codec.Arena) faults with SIGBUS when no block is left, and the spill refuses to start a file.
DISK_FLOOR = 1 << 30


def disk_free(path: str) -> tuple[int, int]:
    """(free, total) bytes of the file system holding `path` ((0, 0) where it cannot be read)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0, 0
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def disk_full(path: str, need: int = 0) -> ResourceError | None:
    """The verifier's scratch disk out of room for `need` more bytes (beyond DISK_FLOOR), as a
    ResourceError naming the bytes; None while it has room."""
    free, total = disk_free(path)
    if not total or free >= need + DISK_FLOOR:
        return None
    return ResourceError(f"the verifier's scratch disk ({path}) has {_gib(free)} free of {_gib(total)}"
                         + (f", {_gib(need)} needed" if need else ""), "scratch", total - free, total, "disk")


def disk_fault(exitcode: int | None, phase: str, path: str) -> ResourceError | None:
    """A child killed by SIGBUS while the scratch disk is full: its write into a reply's overflow file
    found no block (codec.Arena), the verifier's limit and not the candidate's crash. A SIGBUS with room
    on the disk stays the child's."""
    if exitcode != -signal.SIGBUS:
        return None
    err = disk_full(path)
    if err is not None:
        err.args = (f"{err} when a process died with SIGBUS during {phase} (its reply had no room)",)
        err.step = phase
    return err


# ENOSPC, EDQUOT: what a write meets on a full disk (Triton writing its compiled kernel to the cache in a
# candidate's first call, KernelBench level 2 #54 on the H200, 2026-11-30)
_DISK_ERRNOS = ("[Errno 28]", "[Errno 122]")


def disk_error(err: protocol.Failure | None, step: str, path: str) -> ResourceError | None:
    """A call that raised "no space left on device": the verifier's scratch disk, never the candidate's
    runtime error. Not conditioned on the disk being full when the parent looks (a job beside it may have
    freed it since): a candidate that raises it itself gains nothing, as a ResourceError is no pass."""
    if not err or not any(e in str(err.get("message", "")) for e in _DISK_ERRNOS):
        return None
    free, total = disk_free(path)
    return ResourceError(f"a write found no room on the disk during {step} ({_gib(free)} free of {_gib(total)} "
                         f"on the verifier's scratch disk, {path})", step, total - free, total, "disk")

