"""GPU timing shared by the worker and the reference process: events, device-wide sync, L2 flush.

The CUDA entry points are captured when this module is imported, before any candidate code runs,
so a candidate that replaces `torch.cuda.synchronize` or `Event.elapsed_time` changes nothing here
(and is reported by the integrity check). Each timed call is bracketed as
`record(start); call(); synchronize(); record(end)`: the device-wide sync pulls work a candidate
left on side streams into the window, at the price of a constant few microseconds that the
reference pays too.
"""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

_EVENT = torch.cuda.Event
_RECORD = torch.cuda.Event.record
_ELAPSED = torch.cuda.Event.elapsed_time
_EVENT_SYNC = torch.cuda.Event.synchronize
_SYNC = torch.cuda.synchronize
_PERF = time.perf_counter

L2_FLUSH_BYTES = 256 << 20
# Warm-up runs at least this long as well as the asked-for number of calls: an idle GPU sits at low
# clocks, and a short burst is timed while they ramp (seen on the H100: one softmax kernel measured
# 0.058 to 0.115 ms over four verifications in a row).
WARMUP_MS = 15.0
WARMUP_MAX_CALLS = 1000


def prefer_spin_wait(ordinal: int) -> bool:
    """Ask the driver to spin, not sleep, in synchronize for this process's context on `ordinal`.

    The timed window ends after a device-wide synchronize, so the host's wake-up latency is inside
    it; a sleeping wait adds tens of microseconds of jitter to kernels that run for tens of
    microseconds. Must run before the process creates its CUDA context. Returns whether it took."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev = ctypes.c_int()
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            return False
        return cuda.cuDevicePrimaryCtxSetFlags_v2(dev, 1) == 0  # CU_CTX_SCHED_SPIN
    except (OSError, AttributeError):
        return False


@dataclass
class Samples:
    times_ms: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms) if self.times_ms else float("nan")

    def unstable(self, limit: float = 0.5) -> bool:
        """Halves of the run disagree by more than `limit` (relative): clocks or interference moved."""
        n = len(self.times_ms)
        if n < 8:
            return False
        a, b = statistics.median(self.times_ms[: n // 2]), statistics.median(self.times_ms[n // 2:])
        return abs(a - b) > limit * max(min(a, b), 1e-9)


def flush_buffer(device: torch.device) -> torch.Tensor:
    return torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)


def time_calls(call: Callable[[int], Any], prepare: Callable[[int], None], n_warmup: int, n_trials: int,
               flush: torch.Tensor, after: Callable[[int, Any], None] | None = None) -> Samples:
    """Median-ready samples of `call(i)`; `prepare(i)` (untimed) stages inputs, `after` inspects outputs."""
    # A collection inside a timed window costs the candidate time it did not spend.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        return _time_calls(call, prepare, n_warmup, n_trials, flush, after)
    finally:
        if gc_was_on:
            gc.enable()


def _time_calls(call: Callable[[int], Any], prepare: Callable[[int], None], n_warmup: int, n_trials: int,
                flush: torch.Tensor, after: Callable[[int, Any], None] | None) -> Samples:
    t0 = _PERF()
    i = 0
    while i < n_warmup or (1e3 * (_PERF() - t0) < WARMUP_MS and i < WARMUP_MAX_CALLS):
        prepare(i)
        call(i)
        _SYNC()
        i += 1
    starts = [_EVENT(enable_timing=True) for _ in range(n_trials)]
    ends = [_EVENT(enable_timing=True) for _ in range(n_trials)]
    out = Samples()
    for i in range(n_trials):
        prepare(i)
        flush.zero_()
        _SYNC()
        _RECORD(starts[i])
        result = call(i)
        _SYNC()
        _RECORD(ends[i])
        _EVENT_SYNC(ends[i])
        if after is not None:
            after(i, result)
        del result
    out.times_ms = [float(_ELAPSED(s, e)) for s, e in zip(starts, ends)]
    return out


def device_peaks(device: torch.device) -> dict[str, float]:
    """Measured ceilings: copy bandwidth (bytes read + written per s) and bf16 matmul FLOP/s."""
    n = 1 << 28
    a = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    b = torch.empty_like(a)
    for _ in range(2):
        b.copy_(a)
    _SYNC()
    t0 = _PERF()
    reps = 10
    for _ in range(reps):
        b.copy_(a)
    _SYNC()
    bw = 2 * 4 * n * reps / (_PERF() - t0)
    del a, b
    m = 8192
    x = torch.randn(m, m, dtype=torch.bfloat16, device=device)
    y = torch.randn(m, m, dtype=torch.bfloat16, device=device)
    for _ in range(2):
        x @ y
    _SYNC()
    t0 = _PERF()
    for _ in range(reps):
        x @ y
    _SYNC()
    flops = 2 * m ** 3 * reps / (_PERF() - t0)
    del x, y
    torch.cuda.empty_cache()
    return {"bandwidth_bytes_per_s": bw, "peak_flops": flops}


def physical_floor_ms(bytes_moved: float, flops: float, peaks: dict[str, float]) -> float:
    """No implementation can beat this: bytes over measured bandwidth, FLOPs over measured peak."""
    bw = peaks.get("bandwidth_bytes_per_s") or float("inf")
    pk = peaks.get("peak_flops") or float("inf")
    return 1e3 * max(bytes_moved / bw, flops / pk)
