"""A problem's memory plan: what one verification holds at once, and whether it fits its budgets.

Keeps: the problem's own bytes (inputs, outputs, parameters), read from meta tensors before anything
is allocated (the reference's `plan` command) or measured on the reference's first trial; from them
a peak per process, given how trials are streamed (below); and the check against the per-worker
device budget and the worker's host cap. A problem that does not fit is a ProblemError naming the
bytes needed and available: never a traceback, never a verdict charged to the candidate.

Streaming, and so the multiples (one trial's tensors at a time, never all of them). A worker streams where
its sets kept as made would not fit its budget, or on a GPU would take it past DEVICE_MULTIPLE times the
problem's bytes (`streams`):
* reference: per trial it makes the inputs, runs, copies the outputs to the host and frees them;
  the input-sensitivity check mixes two sets: params + 2 in + 2 out on the device.
* worker, correctness calls: the banded input buffers and the set freshly made from its seed (the
  pristine copy the mutation check compares against), the candidate's output and its copy, and the
  traced call's outputs kept for the replays: params + 2 in + 3 out.
* worker, timing (GPU): two timing sets and the buffers they are copied into; the output and three
  checked outputs, kept on the device until the timing gate opens: params + 3 in + 4 out.
Plus one output of slack for temporaries inside forward, and the worker's fixed share (the 256 MiB
L2 flush buffer and warm-up tensors).
* reference, screening's fp64 measurement (precision.py; `measure_device`), where it runs: more than
  the trials, so the reference's peak is the larger of the two (`measure_bytes`, 0 where unmeasured).
  It runs only within the job's device budget (its grant; precision.measure_limit), so it never makes a
  plan fail: the meta plan, made before the grant, leaves it out, and the first trial's measured plan
  counts it where this job's reference measured (screening here, or each trial of a problem whose
  bound is past the table: reference.make_trials).

Host memory, judged as it goes (callstream.py): a worker sends each call's report as the call ends and
forgets its outputs; the reference sends each trial's expected outputs as it makes them; the parent
compares each call with its trial's expected outputs as the call arrives and keeps small summaries
(error metrics, the secret element subsets of the bound on fixed answers), the full outputs only of the
call the replay's determinism run compares against (and of a call that failed its comparison), and
the expected outputs: each of those on the job's scratch disk when large (spill.py). So no process
holds more than a few outputs at once, however many calls and trials:
* worker: one call's outputs and their encoded copy: 2 out (on the CPU, its device bytes too); timed on
  a GPU, the timing's reply (a worker's `timed_outputs`, a replayer's `time_replay`) carries the three
  checked outputs at once, and their encoded copies: 2 x jobspec.TIMING_CHECKS out. Left out until the
  H200 (KernelBench level 1 #59, 2.0 GiB of outputs, 2026-11-30): its replayer was killed at 15.73 GiB
  (the retry's doubled cap) in the timing, every correctness step having fitted 8 GiB;
* reference: one trial's outputs and their encoded copy: 2 out;
* parent: a message as read and as decoded, and the comparison's float32 working copies of the output,
  the expected one and their difference: PARENT_OUTPUTS out.

Simplifies: the multiples are counted in outputs, each at its own dtype; the comparison's float32
copies of a half-precision output are counted at twice their share by PARENT_OUTPUTS. A replayer sends
each of its three runs' outputs as the run ends, as a worker does, and is planned as one. A large spilled
output costs disk and page cache (which the kernel drops under pressure), not the heap: `job_disk` counts
that disk, and a job whose need does not fit the free disk is the verifier's ResourceError before it starts.
Where the expected outputs of every input set would not stay in the parent's memory they come in step
(refwork.Feed), so that disk is a constant number of outputs, not one per input set (`job_disk`).
"""
from __future__ import annotations

import types
from dataclasses import asdict, dataclass
from typing import Any

import torch

from distill.verifier import sizing
from distill.verifier.jobspec import TIMING_CHECKS
from distill.verifier.problemio import ProblemError, ReferenceFailed, seed_all

# Fixed device bytes of a worker besides the problem (flush buffer, warm-up tensors).
DEVICE_BASE = 320 << 20
# Host multiples of one call's outputs (the header above): a worker's and the reference's; the parent's;
# a GPU worker's or replayer's timing reply (the checked outputs and their encoded copy).
PROCESS_OUTPUTS, PARENT_OUTPUTS, TIMED_OUTPUTS = 2, 6, 2 * TIMING_CHECKS
# Host bytes of a worker besides the problem: torch, Triton and the CUDA context (cli.MIN_MEMORY_MB
# measured honest runs at about half of these).
HOST_BASE = {"cpu": 384 << 20, "cuda": 768 << 20}


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 28 else f"{n / (1 << 20):.1f} MiB"


def nbytes(values: Any) -> int:
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(nbytes(v) for v in values)
    return 0


@dataclass
class MemoryPlan:
    """The problem's own bytes, and what each process holds at its peak under streaming."""

    input_bytes: int
    output_bytes: int
    param_bytes: int
    calls: int   # worker calls judged (trials): informative; the host need does not grow with them
    sets: int    # input sets the reference makes (trials + timing sets)
    source: str  # "meta" (before any allocation) or "measured" (the reference's first trial)
    measure_bytes: int = 0  # the fp64 measurement in the reference, where it runs (`measure_device`)

    @property
    def problem_bytes(self) -> int:
        return self.input_bytes + self.output_bytes + self.param_bytes

    def reference_device(self) -> int:
        return max(self.param_bytes + 2 * self.input_bytes + 3 * self.output_bytes, self.measure_bytes)

    def worker_device(self, timed: bool) -> int:
        i, o = self.input_bytes, self.output_bytes
        held = 3 * i + 5 * o if timed else 2 * i + 4 * o
        return self.param_bytes + held

    def device_need(self, device: str, timed: bool) -> int:
        """The largest process's device peak, with a GPU worker's fixed share."""
        base = DEVICE_BASE if device == "cuda" else 0
        return max(self.worker_device(timed) + base, self.reference_device())

    def worker_outputs(self, device: str, timed: bool) -> int:
        """The outputs a worker (or replayer) holds on the host at once: one call's and their encoded copy,
        or, timed on a GPU, the timing reply's checked outputs and theirs."""
        return TIMED_OUTPUTS if timed and device == "cuda" else PROCESS_OUTPUTS

    def worker_host(self, device: str, timed: bool = False) -> int:
        """Its outputs on the host at once (`worker_outputs`); on the CPU the device tensors live in host
        memory too."""
        host = self.worker_outputs(device, timed) * self.output_bytes + HOST_BASE[device]
        return host + (self.worker_device(False) if device == "cpu" else 0)

    def job_host(self, device: str = "cpu", timed: bool = False) -> int:
        """The whole job's host bytes beyond each process's fixed base: the worker's and the reference's
        share of a message each (their device bytes on the CPU are in `worker_host`), and the parent's."""
        return (self.worker_outputs(device, timed) + PROCESS_OUTPUTS + PARENT_OUTPUTS) * self.output_bytes

    def to_dict(self, device: str, timed: bool) -> dict[str, Any]:
        return {**asdict(self), "problem_bytes": self.problem_bytes,
                "reference_device_bytes": self.reference_device(),
                "worker_device_bytes": self.worker_device(timed) + (DEVICE_BASE if device == "cuda" else 0),
                "device_peak_bytes": self.device_need(device, timed),
                "worker_host_bytes": self.worker_host(device, timed), "job_host_bytes": self.job_host(device, timed)}


def measure_device(input_bytes: int, output_bytes: int, param_bytes: int) -> int:
    """What screening's fp64 measurement (precision.measure) holds at its peak, counted on the CPU for
    KernelBench level 2 #93 at batch 8 (o = 69 MB of outputs; VmHWM): screening holds 3.5 o on entry
    (its two kept draws, the model and its twin), then the fp64 forward peaks at 10 o (5 fp64 outputs:
    conv_transpose2d's column buffer and two steps of the chain at once), the honest forward at 7 o (its
    noise's temporaries), the error figures at 1.5 o (in slices); 17.7 o in all. Counted: 3 params (the
    model and its fp64 twin), 5 inputs (two kept draws, one in fp64, its tf32 cut), 18 outputs."""
    return 3 * param_bytes + 5 * input_bytes + 18 * output_bytes


def plan_from(inputs: Any, outputs: Any, params: int, calls: int, sets: int, source: str) -> MemoryPlan:
    return MemoryPlan(nbytes(inputs), nbytes(outputs), params, calls, sets, source)


def meta_plan(mod: types.ModuleType, init_seed: int, seed: int, calls: int, sets: int) -> MemoryPlan | None:
    """The plan from meta tensors: the model built and run with shapes only, nothing allocated.
    None where the problem cannot run on meta tensors (values read on the host, an op without a
    meta kernel): the reference's measured first trial decides then."""
    try:
        seed_all(init_seed)
        init = mod.get_init_inputs()
        args, kwargs = (list(init), {}) if isinstance(init, (list, tuple)) else ([], dict(init or {}))
        with torch.device("meta"):
            model = mod.Model(*args, **kwargs)
            seed_all(seed)
            inputs = list(mod.get_inputs())
            with torch.no_grad():
                out = model(*inputs)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        params += sum(b.numel() * b.element_size() for b in model.buffers())
    except Exception:  # noqa: BLE001 - no meta run: measured on the first trial instead
        return None
    if not all(t.device.type == "meta" for t in _tensors(inputs) + _tensors(out)):
        return None  # a factory call that ignored the default device: its sizes are not all known
    return plan_from(inputs, out, params, calls, sets, "meta")


# A job's outputs past their arrival, counted in outputs (`job_disk`). Either way: the call the replay's
# determinism run compares against, the replay trial's expected outputs and one reply in a child's overflow
# file (codec.Arena); with the timing sets' expected outputs where the job is timed. The replay's three runs
# are compared as they arrive (aftercalls.take_run) and kept only where a widened bound may change that (a near
# miss: its hold grows then, admission.DiskHold).
KEPT_ALWAYS = 1 + 1 + 1
# In step, during the run: the trial in hand, the first trial's (the degenerate-reference check compares
# each later one with it, until one differs), the kept call, and the next trial in the reference's overflow.
IN_STEP_RUN = 4


def job_disk(plan: dict[str, Any], spill_bytes: int, timed: bool = True) -> tuple[int, bool]:
    """(the scratch disk a job fills at its peak, whether its expected outputs come in step) for `plan`
    (MemoryPlan.to_dict). Up front, as before, the reference makes every input set's expected outputs
    while the worker loads and is free before the run: all of them kept, (sets + KEPT_ALWAYS) outputs;
    none on disk where that stays within what the parent keeps in memory (`spill_bytes`, spill.SPILL_BYTES).
    Past that, in step (refwork.Feed): each worker trial's expected outputs are read as its call is judged
    and dropped once it passed (callstream.py), so the need is a constant number of outputs whatever the
    number of sets; at KernelBench's tall-skinny matmul (level 1 #9: 4 GiB of outputs, 7 sets) 40 GiB up
    front (and more written: the plan left out the replay trial and the three runs) asked more than the
    H200's disk had free beside 8 jobs (27.85 GiB); in step 5 outputs timed: 20 GiB.
    (`sets` counts the worker's input sets, `calls` trials and the timing sets; the replay trial is one more.)"""
    out = plan["output_bytes"]
    front = (plan["sets"] + KEPT_ALWAYS) * out
    if front <= spill_bytes:
        return 0, False
    after = KEPT_ALWAYS + (max(0, plan["sets"] - plan["calls"]) if timed else 0)  # the timing sets
    return max(IN_STEP_RUN, after) * out, True


def _tensors(values: Any) -> list[torch.Tensor]:
    if isinstance(values, torch.Tensor):
        return [values]
    if isinstance(values, (list, tuple)):
        return [t for v in values for t in _tensors(v)]
    return []


def host_available() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is none)."""
    return sizing.host_available()


def _host_budget(device: str, device_budget: int, host_budget: int) -> int:
    """On the CPU the device is the host: the device budget is the problem's share of the host cap."""
    return min(host_budget, device_budget + HOST_BASE[device]) if device == "cpu" else host_budget


# A GPU worker's device peak in problem bytes that keeping its sets resident may not push it past (issue 31's
# bound: one verification's device memory within 4x the problem's bytes, whatever the number of trials).
# KernelBench L1 #47-53 kept 7 sets of a 8.6 GB input resident, a worker peak of 7.0x (H200, 2026-12-02);
# streamed, a set is made again on the GPU per call (microseconds; problemio.make_inputs).
DEVICE_MULTIPLE = 4
# Sets beyond the plan's two this small stay resident at any multiple: test_verifier_memory_gpu's 512 MiB sets
# (2.5 GiB beyond two) check the resident path on a GPU; KernelBench's largest keep 32-43 GB beyond two.
RESIDENT_FREE = 4 << 30


def streams(plan: dict[str, Any], device: str, budgets: dict[str, Any]) -> bool:
    """Whether a worker must stream its input sets: keeping every set as made (the sets beyond the
    two the plan counts) does not fit beside the plan's peak, or, on a GPU, would take the worker past
    DEVICE_MULTIPLE times the problem's bytes by more than RESIDENT_FREE."""
    extra = (plan["sets"] - 2) * plan["input_bytes"]
    if device == "cuda":
        peak = extra + plan["worker_device_bytes"]
        return peak > budgets["device"] or (
            extra > RESIDENT_FREE and peak > DEVICE_MULTIPLE * plan["problem_bytes"] + DEVICE_BASE)
    return extra + plan["worker_host_bytes"] > _host_budget(device, budgets["device"], budgets["host"])


def fits(plan: dict[str, Any], device: str, budgets: dict[str, Any]) -> bool:
    """Whether a plan (`MemoryPlan.to_dict`) fits one worker's budgets: `check`'s first two tests, without
    the machine's available memory (admission.py asks this of the share before granting the whole)."""
    if device == "cuda" and plan["device_peak_bytes"] > budgets["device"]:
        return False
    return plan["worker_host_bytes"] <= _host_budget(device, budgets["device"], budgets["host"])


def check(plan: MemoryPlan, device: str, device_budget: int, host_budget: int, timed: bool) -> None:
    """Raise ProblemError when the problem cannot be verified within the budgets: its message names
    the bytes needed and the bytes available. Not the candidate's doing, so never its verdict."""
    what = (f"the problem holds {_gib(plan.problem_bytes)} (inputs {_gib(plan.input_bytes)}, outputs "
            f"{_gib(plan.output_bytes)}, parameters {_gib(plan.param_bytes)}; {plan.source})")
    need = plan.device_need(device, timed)
    if device == "cuda" and need > device_budget:
        raise ReferenceFailed(f"too large for this verifier: {what}; verifying it streamed needs "
                           f"{_gib(need)} ({need} bytes) of device memory per process, the budget is "
                           f"{_gib(device_budget)} ({device_budget} bytes) for one job, its GPU's workers' together "
                           f"(VerifierPool device_memory_mb; admission.py)")
    host = plan.worker_host(device, timed)
    budget = _host_budget(device, device_budget, host_budget)
    if host > budget:
        held = "the timing's checked outputs" if plan.worker_outputs(device, timed) > PROCESS_OUTPUTS else "one call's outputs"
        raise ReferenceFailed(f"too large for this verifier: {what}; a worker needs {_gib(host)} ({host} bytes) of "
                           f"host memory for {held}, the most one job gets is {_gib(budget)} ({budget} "
                           "bytes) (VerifierPool max_memory_mb times the workers, device_memory_mb on the CPU)")
    total = plan.job_host(device, timed)
    avail = host_available()
    if avail is not None and total > avail:
        raise ReferenceFailed(f"too large for this machine: {what}; the job's outputs take {_gib(total)} ({total} bytes) "
                           f"of host memory across the reference, the worker and the parent, {_gib(avail)} "
                           f"({avail} bytes) are available")


def out_of_memory(exc: BaseException, where: str, plan: MemoryPlan | None, device: torch.device) -> ProblemError:
    """A real out-of-memory error of trusted code (the reference, or a worker making inputs before
    any candidate code exists), as the problem-side error it is."""
    free = total = None
    if device.type == "cuda":
        try:
            free, total = torch.cuda.mem_get_info(device)
        except Exception:  # noqa: BLE001 - the figure is only informative
            pass
    need = f"; its plan needs {_gib(plan.reference_device())}" if plan is not None else ""
    have = f"; {_gib(free)} of {_gib(total)} free on the device" if free is not None else ""
    return ProblemError(f"{where} ran out of memory{need}{have}: {type(exc).__name__}: {str(exc)[:300]}")


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak(device: torch.device) -> int | None:
    """Bytes the caching allocator held at most since `reset_peak` (None on the CPU)."""
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def release(device: torch.device) -> None:
    """Hand cached blocks back to the device, so other processes on it can use them."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
