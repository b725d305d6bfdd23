"""GPU timing shared by the worker and the reference process: events, L2 flush, device-wide sync.

The CUDA entry points are captured when this module is imported, before any candidate code runs,
so a candidate that replaces `torch.cuda.synchronize` or `Event.elapsed_time` changes nothing here
(and is reported by the integrity check). Two windows (see `time_calls`): the stream window times
the call's GPU work with the host's launch latency hidden behind an L2 flush and a GPU-side pad;
the device window brackets the call with device-wide syncs, so work on any stream is inside it.
The worker uses the stream window and falls back to the device window for a call that touched
another stream (seen by its guard) or left the device busy after the window closed.
"""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from distill.verifier import protocol

_EVENT = torch.cuda.Event
_RECORD = torch.cuda.Event.record
_ELAPSED = torch.cuda.Event.elapsed_time
_EVENT_SYNC = torch.cuda.Event.synchronize
_SYNC = torch.cuda.synchronize
_PERF = time.perf_counter
_SLEEP = torch.cuda._sleep

L2_FLUSH_BYTES = 256 << 20
# Warm-up runs at least this long as well as the asked-for number of calls: an idle GPU sits at low
# clocks, and a short burst is timed while they ramp (seen on the H100: one softmax kernel measured
# 0.058 to 0.115 ms over four verifications in a row).
# What a replayer announces once its record is rebuilt and its kernels compiled and warm; the parent
# takes the timing gate and answers `go` (job.py, replayer.time_replay).
READY = "ready to time"
DONE = "timed"  # announced when the last timed call has ended: the gate opens before the clean-up
WARMUP_MS = 10.0
WARMUP_MAX_CALLS = 1000
# A timing's trials: as many calls as fit TIMED_S, at least MIN_TRIALS, at most the pool's count. Every
# timing holds its GPU's gate with the other processes there stopped (gate.py), so the gate's time is
# the pool's: at KernelBench's own sizes a 100-trial timing of a 150 ms kernel held it 15-19 s, and with
# the reference's eager and torch.compile timings a large problem's job stopped the H200's seven others
# for about a minute (level 1 and 2's largest, 2026-11-30: 2-8 verdicts per 540 s call). The median of
# ten 150 ms calls moves by well under the 3% a repeat may.
TIMED_S = 1.0
MIN_TRIALS = 10


def trials_for(call_s: float | None, most: int) -> int:
    """Timed trials for calls of about `call_s` seconds each (None: unknown, `most`)."""
    if not call_s or not call_s > 0 or call_s == float("inf"):
        return most
    return max(min(most, MIN_TRIALS), min(most, int(TIMED_S / call_s) + 1))


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
    """Per-trial times of one timing run. `times_ms` is the window the verdict uses; `window` says
    which: "stream" (events on the timing stream, the GPU busy with flush and pad while the host
    launches) or "device" (a device-wide sync before and after each call)."""
    times_ms: list[float] = field(default_factory=list)
    window: str = "device"
    synced_ms: list[float] = field(default_factory=list)  # stream window: start to after a device-wide sync
    base_gap_ms: float = float("nan")  # what that sync adds to a call that does nothing
    pad_ms: float = 0.0
    host_ms: float = float("nan")  # host time of one call, measured in the warm-up
    late: int = 0  # stream-window trials whose host enqueueing outran flush and pad

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms) if self.times_ms else float("nan")

    def unstable(self, limit: float = 0.5) -> bool:
        """Halves of the run disagree by more than `limit` (relative): clocks or interference moved."""
        n = len(self.times_ms)
        if n < 8:
            return False
        a, b = statistics.median(self.times_ms[: n // 2]), statistics.median(self.times_ms[n // 2:])
        return abs(a - b) > max(limit * min(a, b), UNSTABLE_ABS_MS)

    def work_after_window(self) -> bool:
        """The device stayed busy after the call's last work on the timing stream: the call left
        work on another stream, which only the device window measures."""
        if self.window != "stream" or not self.synced_ms:
            return False
        gap = statistics.median(s - t for s, t in zip(self.synced_ms, self.times_ms))
        return gap > self.base_gap_ms + max(GAP_SLACK_MS, GAP_SLACK_REL * self.median_ms)

    def to_dict(self) -> protocol.TimedSamples:
        return {"times_ms": self.times_ms, "window": self.window, "synced_ms": self.synced_ms,
                "base_gap_ms": self.base_gap_ms, "pad_ms": self.pad_ms, "host_ms": self.host_ms,
                "late": self.late}


# Halves a few microseconds apart are not instability: kernels that short move by that much.
UNSTABLE_ABS_MS = 0.005
# Side-work test: the sync after a call may add this much over an empty call's before it counts
# (host wake-up after a sync jitters by tens of microseconds on a busy box; work put on another
# stream is caught by the stream check first, this test is the backstop).
GAP_SLACK_MS = 0.03
GAP_SLACK_REL = 0.5
# The stream window's pad: the host gets this multiple of one call's host time (less the flush,
# which the GPU runs meanwhile) to enqueue the call.
PAD_FACTOR = 1.5
PAD_P90_FACTOR = 1.2  # on the 90th percentile of the warm-up's whole enqueueing time
LATE_LIMIT = 0.1  # more trials than this whose host outran flush and pad: measured again
PAD_MIN_MS, PAD_MAX_MS = 0.05, 5.0
_cycles_per_ms: list[float] = []


def _sleep_cycles_per_ms() -> float:
    """GPU clock cycles per millisecond as `torch.cuda._sleep` counts them (measured once per process)."""
    if not _cycles_per_ms:
        a, b = _EVENT(enable_timing=True), _EVENT(enable_timing=True)
        _SLEEP(100_000)
        _SYNC()
        _RECORD(a)
        _SLEEP(1_000_000)
        _RECORD(b)
        _SYNC()
        _cycles_per_ms.append(1_000_000 / max(float(_ELAPSED(a, b)), 1e-3))
    return _cycles_per_ms[0]


_flush_cost: list[float] = []


def _flush_ms(flush: torch.Tensor) -> float:
    """GPU time of one L2 flush (measured once per process, the median of five)."""
    if not _flush_cost:
        times = []
        for _ in range(6):
            a, b = _EVENT(enable_timing=True), _EVENT(enable_timing=True)
            _RECORD(a)
            flush.zero_()
            _RECORD(b)
            _SYNC()
            times.append(float(_ELAPSED(a, b)))
        _flush_cost.append(statistics.median(times[1:]))
    return _flush_cost[0]


def flush_buffer(device: torch.device) -> torch.Tensor:
    return torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)


def time_calls(call: Callable[[int], Any], prepare: Callable[[int], None], n_warmup: int, n_trials: int,
               flush: torch.Tensor, after: Callable[[int, Any], None] | None = None,
               window: str = "stream") -> Samples:
    """Median-ready samples of `call(i)`; `prepare(i)` (untimed) stages inputs, `after` inspects outputs.

    window="stream" (the default): each trial enqueues the L2 flush and a GPU-side pad, then
    records the start event, calls, and records the end event on the same stream; the host
    enqueues the call while the GPU is still busy with flush and pad, so the window holds the
    call's GPU work and not the host's launch latency, whose jitter (tens of microseconds, moving
    with CPU clocks and scheduling) otherwise dominates kernels of tens of microseconds. A
    device-wide sync still ends each trial, and its extra time is kept (`synced_ms`) to show work
    left on other streams. window="device": sync, start, call, device-wide sync, end - the window
    for calls that use other streams, at the price of the host latency inside it."""
    # A collection inside a timed window costs the candidate time it did not spend.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        return _time_calls(call, prepare, n_warmup, n_trials, flush, after, window)
    finally:
        if gc_was_on:
            gc.enable()


def _time_calls(call: Callable[[int], Any], prepare: Callable[[int], None], n_warmup: int, n_trials: int,
                flush: torch.Tensor, after: Callable[[int, Any], None] | None, window: str) -> Samples:
    if window not in ("stream", "device"):
        raise ValueError(f"window must be 'stream' or 'device', not {window!r}")
    t0 = _PERF()
    host: list[float] = []
    i = 0
    # Plain calls first: the device window's warm-up, and the host time the stream window's pad must cover.
    while i < n_warmup or (window == "device" and 1e3 * (_PERF() - t0) < WARMUP_MS and i < WARMUP_MAX_CALLS):
        prepare(i)
        h = _PERF()
        call(i)
        host.append(1e3 * (_PERF() - h))
        _SYNC()
        i += 1
    out = Samples(window=window, host_ms=statistics.median(host) if host else float("nan"))
    starts = [_EVENT(enable_timing=True) for _ in range(n_trials)]
    ends = [_EVENT(enable_timing=True) for _ in range(n_trials)]
    if window == "device":
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
    # The flush runs on the GPU while the host enqueues too: the pad covers the rest of one call's
    # host time, with PAD_FACTOR for margin (re-sized below from the protocol's own warm-up).
    flush_ms = _flush_ms(flush)
    pad = [0]

    def size_pad(host_ms: float) -> None:
        out.pad_ms = min(PAD_MAX_MS, max(PAD_MIN_MS, host_ms - flush_ms))
        pad[0] = int(out.pad_ms * _sleep_cycles_per_ms())

    size_pad(PAD_FACTOR * out.host_ms if host else float("inf"))
    synced = [_EVENT(enable_timing=True) for _ in range(n_trials)]

    def trial(i: int, fn: Callable[[int], Any], s: Any, e: Any, d: Any) -> tuple[Any, float]:
        h = _PERF()
        prepare(i)
        flush.zero_()
        _SLEEP(pad[0])
        _RECORD(s)
        result = fn(i)
        _RECORD(e)
        enqueue_ms = 1e3 * (_PERF() - h)  # longer than flush + pad: the GPU waited for the host
        _SYNC()
        _RECORD(d)
        return result, enqueue_ms

    # Then the trial protocol itself until WARMUP_MS have passed, so clocks settle under the load
    # they are measured under; its host times size the pad for the measured trials.
    spare = [_EVENT(enable_timing=True) for _ in range(3)]
    t1 = _PERF()
    enq: list[float] = []
    while 1e3 * (_PERF() - t1) < WARMUP_MS and i < WARMUP_MAX_CALLS:
        enq.append(trial(i, call, *spare)[1])
        i += 1
    if len(enq) >= 5:
        enq.sort()
        size_pad(PAD_P90_FACTOR * enq[int(0.9 * (len(enq) - 1))])
    # The sync's own cost, from calls that do nothing: the yardstick for work left on other streams.
    n_base = 10
    base = [[_EVENT(enable_timing=True) for _ in range(3)] for _ in range(n_base)]
    for i in range(n_base):
        trial(i, lambda _i: None, *base[i])

    def measure() -> list[float]:
        enqueue = []
        for i in range(n_trials):
            result, enqueue_ms = trial(i, call, starts[i], ends[i], synced[i])
            enqueue.append(enqueue_ms)
            if after is not None:
                after(i, result)
            del result
        _SYNC()
        return enqueue

    enqueue = measure()
    out.late = sum(ms > flush_ms + out.pad_ms for ms in enqueue)
    if out.late > LATE_LIMIT * n_trials and out.pad_ms < PAD_MAX_MS:
        # The host outran flush and pad too often (its delay would sit inside those windows): once
        # more, with a pad sized on this run's slow trials. Trials are never dropped one by one: a
        # candidate could then choose which of its calls count.
        enqueue.sort()
        size_pad(PAD_FACTOR * enqueue[int(0.95 * (n_trials - 1))])
        enqueue = measure()
        out.late = sum(ms > flush_ms + out.pad_ms for ms in enqueue)
    out.base_gap_ms = statistics.median(float(_ELAPSED(e, d)) for _, e, d in base)
    out.times_ms = [float(_ELAPSED(s, e)) for s, e in zip(starts, ends)]
    out.synced_ms = [float(_ELAPSED(s, d)) for s, d in zip(starts, synced)]
    return out


def device_peaks(device: torch.device) -> protocol.PeaksReply:
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
