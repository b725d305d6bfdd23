"""A pool's sizes from the machine: how many workers, each one's host cap and device budget.

The rule (docs/verifier.md, "Memory: a plan per problem"; printed on stderr at every pool start):

* **workers**: on a GPU, one per free core (cores less 2 for the parent and the reference processes),
  at most 8 per GPU, and no more than the host holds at `MIN_HOST_MB` each; on the CPU one (the
  interpreter is single-threaded Python and the box's cores serve the references too).
* **host cap per worker**: half the host's memory shared by the workers (the other half: the parent,
  which keeps a copy of every output, the reference processes and the operating system), never under
  `MIN_HOST_MB`. A cap is a kill limit, not a reservation: each job's own need is also checked against
  the memory available when it starts (memplan.check).
* **device budget per worker**: its share of 80% of its GPU (the GPU's memory as the reference
  processes report it; the rest is left to them and the timers), as before; on the CPU the host cap.

Values given to VerifierPool (`workers`, `max_memory_mb`, `device_memory_mb`) replace the derived ones.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

MIN_HOST_MB = {"cpu": 2048, "cuda": 4096}
HOST_SHARE = 0.5  # of the host's memory, for all workers together
DEVICE_SHARE = 0.8  # of a GPU's memory, for all workers on it together
MAX_WORKERS_PER_GPU = 8


def _meminfo(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_total() -> int | None:
    """The host's memory in bytes: MemTotal, or the page count where there is no /proc/meminfo."""
    total = _meminfo("MemTotal")
    if total is None:
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            return None
    return total


def host_available() -> int | None:
    """MemAvailable, bytes (None where there is none)."""
    return _meminfo("MemAvailable")


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 2


@dataclass(frozen=True)
class Sizing:
    """One pool's sizes and how each was derived (the pool prints `describe()` when it starts)."""

    workers: int
    host_mb: int  # each worker's (and replayer's) host cap
    device_share: float  # each worker's share of its GPU (device budget), when none is given
    device_mb: int | None  # the device budget as given (None: the share)
    why: str

    def describe(self, device: str, device_bytes: int | None = None) -> str:
        dev = (f"{self.device_mb} MB (given)" if self.device_mb is not None else
               f"{self.device_share:.2f} of each GPU" + (f" = {device_bytes >> 20} MB" if device_bytes else "")
               if device == "cuda" else "the host cap")
        return (f"tritonforge verifier pool: {self.workers} worker(s), host cap {self.host_mb} MB per worker, "
                f"device budget {dev} per worker ({self.why})")


def derive(device: str, gpus: int, workers: int | None, max_memory_mb: int | None,
           device_memory_mb: int | None) -> Sizing:
    """The pool's sizes: what was given, the rest from the machine (module docstring)."""
    total, n_cores = host_total(), cores()
    why = []
    if workers is not None:
        n = workers
        why.append("workers given")
    elif device == "cuda":
        n = max(1, min(MAX_WORKERS_PER_GPU, n_cores - 2)) * gpus
        if total:
            n = max(1, min(n, int(HOST_SHARE * total) // (MIN_HOST_MB[device] << 20)))
        why.append(f"{n_cores} cores less 2, at most {MAX_WORKERS_PER_GPU} per GPU x {gpus} GPU(s)")
    else:
        n = 1
        why.append("1 worker on the CPU lane")
    if max_memory_mb is not None:
        host_mb = int(max_memory_mb)
        why.append("host cap given")
    elif total:
        host_mb = max(MIN_HOST_MB[device], int(HOST_SHARE * total / n) >> 20)
        why.append(f"host cap {HOST_SHARE:g} x {total >> 20} MB MemTotal / {n} worker(s)")
    else:
        host_mb = 4 * MIN_HOST_MB[device]
        why.append("host memory unknown: a fixed host cap")
    per_gpu = -(-n // max(gpus, 1))
    share = max(0.1, min(DEVICE_SHARE, DEVICE_SHARE / per_gpu))
    if device == "cuda":
        why.append("device budget given" if device_memory_mb is not None else
                   f"device budget {DEVICE_SHARE:g} of the GPU / {per_gpu} worker(s) on it")
    return Sizing(n, host_mb, share, device_memory_mb, "; ".join(why))


def larger_host_mb(current_mb: int) -> int | None:
    """A larger host cap for one retry of a job that hit the verifier's own limit: twice the cap, as
    far as the memory available now allows (a quarter of it kept back); None when that is not at
    least a quarter more than the cap."""
    avail = host_available()
    if avail is None:
        return None
    bigger = min(2 * current_mb, current_mb + int(0.75 * avail) // (1 << 20))
    return bigger if bigger >= current_mb * 5 // 4 else None
