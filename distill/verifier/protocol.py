"""Every command the parent sends a sandboxed process, typed; and the trust map of their replies.

Keeps: one `TypedDict` per command (`cmd` names it), built at every send site, so a command's keys are
read in one place. At run time each is the plain dict `codec.encode` carries; the receiving side
(sandbox/worker.py, sandbox/replayer.py, reference.py) reads the same keys. Simplifies: replies are
not typed here; what each holds, and which side computes every check from it, is the map below.

The trust map (docs/verifier.md, "The worker is untrusted"):

* **reference** (`plan`, `trials` with an `ack` per trial, `trial_bounds`, `prepare_timing`, `measure`,
  `peaks`): never runs a candidate's Python. Its replies are facts: expected outputs, bounds,
  screening, the memory plan, baseline medians.
* **replayer** (`replay`, `time_replay`, `go`): never imports the candidate's module; it runs only the
  recorded launches of its kernels. Its replies are facts for provenance and GPU times; the inputs it
  made are checked against the reference's fingerprints.
* **worker** (`load`, `run` with an `ack` per call's report, `time`, `timed_outputs`, `end`): runs the
  candidate. Its replies are claims: the parent compares its outputs with the reference's as each
  call's report arrives (callstream.py), replays its record elsewhere, reads
  its resident bytes, threads and processes from /proc itself, and uses its timing only with
  `timing_in="worker"`.

Seeds: the reference gets every trial's; a worker only its own trials' (and the timing sets' only when
it times); a replayer the secret replay trial's, another trial's, and the timing sets'.
"""
from __future__ import annotations

from typing import Any, Literal, TypedDict


class _Budgets(TypedDict):
    device: int
    host: int
    timed: bool


# -- to a reference process (trusted: it never imports a candidate) ---------------------------------
class Plan(TypedDict):
    """The problem's memory plan from meta tensors, checked against `budgets` (memplan.py)."""

    cmd: Literal["plan"]
    source: str
    init_seed: int
    seed: int
    calls: int
    sets: int
    budgets: _Budgets


class Trials(TypedDict, total=False):
    """Expected outputs for `seeds` (the worker's trials, the timing sets, the replay trial), with the
    problem's screening (`screen`: an earlier job's report, else screened here)."""

    cmd: Literal["trials"]
    source: str
    init_seed: int
    seeds: list[int]
    calls: int
    budgets: _Budgets | None
    screen: dict[str, Any]


class TrialBounds(TypedDict):
    """Each trial's tolerance measured on its own inputs (a near miss, judge.py)."""

    cmd: Literal["trial_bounds"]
    source: str
    init_seed: int
    seeds: list[int]


class PrepareTiming(TypedDict):
    """Build the reference (and its torch.compile twin) for `measure`, outside the timing gate."""

    cmd: Literal["prepare_timing"]
    source: str
    init_seed: int
    seed: int
    key: str
    compile: bool


class Measure(TypedDict):
    """Eager (and torch.compile) medians of the prepared reference, inside the timing gate."""

    cmd: Literal["measure"]
    key: str
    warmup: int
    trials: int


class Peaks(TypedDict):
    """The GPU's measured copy bandwidth and matmul peak (the timing's physical floor)."""

    cmd: Literal["peaks"]


# -- to a worker (untrusted once `load` has imported the candidate) ----------------------------------
class Load(TypedDict):
    """Make the input sets from `seeds` (before any candidate code exists), then import the candidate."""

    cmd: Literal["load"]
    source: str
    problem: str
    seeds: list[int]
    stream: bool
    template_cache: str | None
    device_memory_fraction: float | None


class Run(TypedDict):
    """Construct ModelNew as the reference was (`construct_ops`: what its constructor may run too) and
    call it on every trial of `plan`, one of them traced."""

    cmd: Literal["run"]
    init_args: list[Any]
    init_kwargs: dict[str, Any]
    init_seed: int
    call_seed: int
    n_trials: int
    construct_ops: list[str]
    plan: list[dict[str, Any]]


class Time(TypedDict):
    """Time forward in the worker (`timing_in="worker"` only), keeping the outputs of calls `check`."""

    cmd: Literal["time"]
    warmup: int
    trials: int
    check: list[int]


class TimedOutputs(TypedDict):
    """The outputs `time` kept, sent after the gate has opened."""

    cmd: Literal["timed_outputs"]


class End(TypedDict):
    """Clean up after the job: finalizers, threads and processes left, the state the job changed."""

    cmd: Literal["end"]


# -- to a replayer (trusted: it never imports the candidate's module) --------------------------------
class _Record(TypedDict, total=False):
    """What a replayer rebuilds a traced call from: never the candidate's module, only its kernels."""

    problem: str
    kernels: str
    kernel_names: list[str]
    trace: dict[str, Any]
    byte_limit: int
    stream: bool
    device_memory_fraction: float


class Replay(_Record, total=False):
    """Run the record on the secret replay trial, another trial and with its kernels ablated (`runs`)."""

    cmd: Literal["replay"]
    runs: list[dict[str, Any]]
    seeds: dict[str, int]


class TimeReplay(_Record, total=False):
    """Time the record on the timing sets (`seeds` t0, t1), keeping the outputs of calls `check`;
    announces timing.READY once compiled and warm, and times on `go`."""

    cmd: Literal["time_replay"]
    seeds: dict[str, int]
    warmup: int
    trials: int
    check: list[int]


class Go(TypedDict):
    """The parent holds the timing gate: time now (the command `nonce` announced timing.READY)."""

    cmd: Literal["go"]
    nonce: str


class Ack(TypedDict, total=False):
    """A message that asked for it (a worker's call report, a reference's trial) is copied out of the
    child's arena, which its next message may fill from the start. `nonce`: the worker's command."""

    cmd: Literal["ack"]
    nonce: str
