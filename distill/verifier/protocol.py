"""Every message between the parent and a sandboxed or reference process, typed; and the trust map.

Keeps: one `TypedDict` per command (`cmd` names it), built at every send site, and one per reply (and
per message sent before a reply: a progress step, a call's report, a replay run's, a trial's expected
outputs), built where the child makes it and named where the parent reads it, so a message's keys are
read in one place. At run time each is the plain dict `codec.encode` carries; the parent checks every
message of a worker or a replayer against its type as it decodes it (wirecheck.py: one that is not is the
candidate's protocol breach, `forbidden`), and tests/distill/verifier/test_protocol_replies.py checks
the reference's too on a real verification. A reply's type is the message as the parent decodes it: keys the serving loop adds to every
reply (`nonce`, the worker's `hygiene`) are declared on it, though the function that builds the reply
leaves them to that loop; keys the parent adds to a reply once it has it (`wait_s`, `calls`, `runs`)
are declared too, marked "the parent's". Simplifies: nested values another module owns stay
`dict[str, Any]`, named where they are made (a memory plan: memplan.py; a screening report:
screen.ScreenReport; a traced call's record: record.serialise; a denial: guard.py); a tensor is `Any`
(this module imports no torch). The zygote sends nothing: it is the forkserver's preload, and its forks
speak as workers, replayers and reference processes.

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
  `timing_in="worker"`. Every string in them is scrubbed before it is read (environ.scrub, job.py).

Seeds: the reference gets every trial's; a worker only its own trials' (and the timing sets' only when
it times); a replayer the secret replay trial's, another trial's, and the timing sets'.
"""
from typing import Any, Literal, NotRequired, TypedDict

# No `from __future__ import annotations`: a TypedDict reads NotRequired from evaluated annotations only
# (a string's is lost on Python 3.11), and the reply test reads __required_keys__.


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
    second_init: int  # the last seed's trial (the replay trial's) runs on weights drawn under it (statecheck.py)


class TrialBounds(TypedDict):
    """Each trial's tolerance measured on its own inputs (a near miss, judge.py)."""

    cmd: Literal["trial_bounds"]
    source: str
    init_seed: int
    seeds: list[int]
    second_init: NotRequired[int]  # as in Trials


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
    state_limit: int  # bytes of tensors made before forward that the traced call's record may carry


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
    instances: list[dict[str, Any]]  # a factory's kernel per set of closed-over values (replaycheck._instances)
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


# == replies ==========================================================================================
# -- shared parts ----------------------------------------------------------------------------------
class Failure(TypedDict):
    """An exception as a sandboxed process reports it (sandbox/calls.describe_error, all six keys), or the
    serving loop's own refusal (`ErrorReply`: `type` and `message` only)."""

    type: str
    message: str
    cuda_fault: NotRequired[bool]
    compile: NotRequired[bool]
    denied: NotRequired[bool]
    sandbox: NotRequired[bool]


class Output(TypedDict):
    """One output tensor of a call or a replay run: a host copy (`data`, a torch.Tensor) and its layout."""

    dtype: str
    device: str
    shape: list[int]
    data: Any


class Checked(TypedDict):
    """A timed call's outputs kept for the parent to compare (`check`): the input set it ran on and, from
    a worker, `problem` (the output's structure was not plain tensors, calls.check_structure)."""

    set: int
    problem: str
    outputs: list[Any] | None


class Hygiene(TypedDict):
    """What happened outside the audited calls (worker._hygiene, on every reply of `load`, `run`, `time`,
    `end`, `replay`, `time_replay`): denials, attributes patched, state left (seal.py), disk over the cap,
    candidate code in the harness's steps, threads over the start-up count, kernels blocked. A worker's is
    a claim; aftercalls.watched raises `threads` and sets `processes` from what the parent reads in /proc."""

    denials: list[dict[str, Any]]
    patched: list[str]
    state: list[str]
    disk_bytes: int
    harness_code: NotRequired[list[str]]  # on `end`, moved to EndReply.finalizers
    threads: int
    blocked: dict[str, int]
    processes: NotRequired[int]  # the parent's (aftercalls.watched)


# -- from a worker or a replayer (both are sandbox/worker.worker_main) -----------------------------------
class SandboxReady(TypedDict):
    """Sent once at start-up, before any command (worker.worker_main): the confinement it got and its
    versions. The sandbox report is the process's own account, shown on verdicts (`checks.sandbox`);
    `tasks` (its thread count) is the base the parent counts threads left running against."""

    ready: Literal[True]
    pid: int
    sandbox: dict[str, Any]  # lockdown.LockdownReport.to_dict() and the caps' limits
    versions: dict[str, str | None]
    tasks: int


class ErrorReply(TypedDict):
    """The serving loop's reply in place of any message it could not encode (the codec's error, which ends
    the command) or to a command this role does not serve (a worker asked to `replay`). From a worker a
    claim like any other; the parent takes it as the command's reply."""

    nonce: str
    error: Failure


class Progress(TypedDict):
    """A step announced before the reply (worker, replayer): `progress` names it (memfault.py places a
    death at the memory cap by it; timing.READY and timing.DONE frame a replayer's timing). Carries
    nothing else."""

    nonce: str
    progress: str


class CallReport(TypedDict):
    """One `forward` call of the worker's `run` (sandbox/calls.run_call, completed in worker._calls): a
    claim. The parent compares `outputs` with the reference's as it arrives (callstream.py) and judges the
    rest in judge.judge_calls; `trace` (the traced call only) goes to a replayer as data."""

    kind: str
    trial: int
    error: Failure | None
    launches: int
    kernels: list[str]
    foreign: list[str]
    aten: dict[str, int]
    blocked: dict[str, int]
    denials: list[dict[str, Any]]
    outputs: list[Output] | None
    sequence: bool
    bad_type: str
    aliases: list[str]
    out_of_bounds: list[str]
    inputs_changed: list[int] | None
    call_s: float
    harness_code: list[str]
    state: list[str]
    trace: NotRequired[dict[str, Any]]  # record.serialise's, or {"error": ...}
    device_memory: NotRequired[dict[str, int]]  # GPU: held_bytes, peak_bytes (memfault.device_oom)


class CallSent(Progress):
    """A worker's call report, sent as the call ends; the parent acks it once copied out of the arena."""

    call: CallReport
    ack: Literal[True]


class WorkerMemory(TypedDict):
    """The worker's own memory figures on `run`: informative only (job.py copies them to the verdict)."""

    worker_peak_bytes: int | None
    streamed: bool


class LoadReply(TypedDict):
    """The worker's reply to `load` (worker._load): whether the candidate imported. `problem_memory`:
    making the inputs ran out of memory before any candidate code existed (the problem's, not the
    candidate's). A claim."""

    nonce: str
    hygiene: Hygiene
    ok: bool
    error: NotRequired[Failure]
    problem_memory: NotRequired[str]


class RunReply(TypedDict):
    """The worker's reply to `run` (worker._run), after every call's report (CallSent): construction, the
    ops its import and constructor ran, the inputs' fingerprints (checked against the reference's), state
    changed, the steps' seconds. The keys after `run_s` are missing where construction failed or left
    state. A claim."""

    nonce: str
    hygiene: Hygiene
    construct_error: Failure | None
    blocked_ops: int
    run_s: dict[str, float]
    construct_ops: NotRequired[dict[str, int]]
    import_ops: NotRequired[dict[str, int]]
    early_launches: NotRequired[list[str]]
    fingerprints: NotRequired[list[list[str]]]
    state_after_construct: NotRequired[list[str]]
    inputs_remade: NotRequired[str]
    memory: NotRequired[WorkerMemory]
    calls: NotRequired[list[CallReport]]  # the parent's: the reports as callstream.py kept them


class TimedSamples(TypedDict):
    """timing.Samples.to_dict(): per-trial times and how the window was taken."""

    times_ms: list[float]
    window: str
    synced_ms: list[float]
    base_gap_ms: float
    pad_ms: float
    host_ms: float
    late: int


class TimeReply(TimedSamples):
    """The worker's reply to `time` (worker._time, `timing_in="worker"` only): its own times, so a claim;
    the parent counts its launches and compares the kept outputs (`checked`, sent after the gate opens:
    `timed_outputs`) with the reference's (judge.judge_timing)."""

    nonce: str
    hygiene: Hygiene
    error: Failure | None
    fallback: str
    other_streams: list[str]
    retried: bool
    checked_count: int
    launches: int
    aten: dict[str, int]
    blocked: dict[str, int]
    denials: list[dict[str, Any]]
    checked: NotRequired[dict[str, Checked]]  # the parent's: TimedOutputsReply's


class TimedOutputsReply(TypedDict):
    """The worker's reply to `timed_outputs`: the outputs `time` kept, by call index. A claim."""

    nonce: str
    checked: dict[str, Checked]


class EndReply(TypedDict):
    """The worker's reply to `end` (worker._end): hygiene after the job's clean-up, the candidate code that
    ran in it (`finalizers`: the worker is then retired) and the steps' seconds. A claim."""

    nonce: str
    hygiene: Hygiene
    finalizers: list[str]
    end_s: dict[str, float]


class ReplayRun(TypedDict):
    """One run of the record in a replayer (replayer._run), sent as it ends: a fact. The outputs are
    compared with the reference's (judge.judge_replay); the audit's keys (`out_of_bounds`,
    `inputs_changed`, `aliases`) come with a clean run that is not ablated; `fatal` ends the replay."""

    name: str
    error: str | None
    outputs: list[Output] | None
    launches: int
    foreign: int
    blocked: dict[str, int]
    denials: list[dict[str, Any]]
    harness_code: list[str]
    call_s: float
    fatal: NotRequired[bool]
    out_of_memory: NotRequired[str]
    compile: NotRequired[bool]
    cuda_fault: NotRequired[bool]
    out_of_bounds: NotRequired[list[str]]
    inputs_changed: NotRequired[list[int]]
    aliases: NotRequired[list[str]]
    sequence: NotRequired[bool]  # the parent's (judge.judge_replay): the reference's, for the comparison


class RunSent(Progress):
    """A replayer's run report, sent as the run ends; the parent acks it once copied out of the arena."""

    run: ReplayRun
    ack: Literal[True]


class ReplayReply(TypedDict):
    """The replayer's reply to `replay` (replayer.replay), after every run (RunSent): the fingerprints of
    the inputs it made (replaycheck.same_inputs), an error where the record or its kernels module could not
    be rebuilt, `problem_memory` where making the inputs ran out of memory. A fact."""

    nonce: str
    hygiene: Hygiene
    fingerprints: dict[str, list[str]]
    error: str | None
    setup_s: NotRequired[float]
    replay_s: NotRequired[float]
    problem_memory: NotRequired[str]
    runs: NotRequired[list[ReplayRun]]  # the parent's: the RunSent reports as they arrived (aftercalls.take_run)


class TimeReplayReply(TypedDict):
    """The replayer's reply to `time_replay` (replayer.time_replay; GPU only): GPU times of the record, the
    kept outputs, the fingerprints of the timing sets it made. A fact. The timing keys are missing where it
    failed before timing (the error says why); the guard's counts where the record was never rebuilt. The
    guard's `harness_code` goes into its hygiene (worker._hygiene)."""

    nonce: str
    hygiene: Hygiene
    error: Failure | str | None  # a string where the record or its kernels could not be rebuilt
    fingerprints: dict[str, list[str]]
    checked: dict[str, Checked]
    problem_memory: NotRequired[str]
    times_ms: NotRequired[list[float]]
    window: NotRequired[str]
    synced_ms: NotRequired[list[float]]
    base_gap_ms: NotRequired[float]
    pad_ms: NotRequired[float]
    host_ms: NotRequired[float]
    late: NotRequired[int]
    fallback: NotRequired[str]
    retried: NotRequired[bool]
    launches: NotRequired[int]
    aten: NotRequired[dict[str, int]]
    blocked: NotRequired[dict[str, int]]
    denials: NotRequired[list[dict[str, Any]]]


# -- from a reference process (reference.reference_main): facts ------------------------------------------
class RefReady(TypedDict):
    """Sent once at start-up: the GPU's whole memory (`device_total`, None on the CPU lane) for the pool's
    budgets (fleet.py)."""

    ready: Literal[True]
    pid: int
    device_total: int | None


class ProblemErrorReply(TypedDict):
    """The reference's reply to any command that failed: the problem is at fault (a ProblemError), never a
    candidate. `screen`: the screening report that failed it (the pool fails later jobs on it at once)."""

    problem_error: str
    screen: NotRequired[dict[str, Any]]  # screen.ScreenReport's fields


class PlanReply(TypedDict):
    """The reply to `plan`: the problem's memory plan from meta tensors (memplan.Plan.to_dict), None where
    the problem cannot run on meta tensors."""

    plan: dict[str, Any] | None
    wait_s: NotRequired[float]  # the parent's (refwork.reference_call): queued for a reference process


class Trial(TypedDict):
    """One trial's expected outputs (host tensors), whether forward returned a sequence, the inputs'
    fingerprint (a worker's and a replayer's are checked against it) and each output's bound."""

    outputs: list[Any]
    sequence: bool
    fingerprint: list[str]
    tolerances: NotRequired[list[dict[str, Any] | None]]  # tolerance.Tolerance's fields, None where exact
    # The first trial's only: the reply's init_args, init_kwargs, construct_ops, params (and screen,
    # screened_here), which a job reading the trials in step needs before the reply (refwork.Feed)
    head: NotRequired[dict[str, Any]]


class TrialSent(TypedDict):
    """A trial of `trials`, sent as it is made, before the reply; the parent acks it once copied out."""

    trial: Trial


class ReferenceMemory(TypedDict):
    """The reference's memory figures: the plan measured on its first trial and its own peaks."""

    plan: dict[str, Any] | None
    reference_peak_bytes: int | None
    reference_held_peak_bytes: int


class TrialsReply(TypedDict):
    """The reply to `trials` (reference.make_trials): how the reference was built (the worker builds
    ModelNew the same way), the ops its constructor ran, its parameters' summary (statecheck.summary),
    the problem's screening. `trials` is empty as sent: each went before as a TrialSent."""

    init_args: list[Any]
    init_kwargs: dict[str, Any]
    trials: list[Trial]
    io_bytes: int
    construct_ops: dict[str, int]
    memory: ReferenceMemory
    params: dict[str, Any]
    forward_ops: NotRequired[dict[str, int]]  # the ops the reference's forward ran (policy.op_name's names)
    screen: NotRequired[dict[str, Any]]  # screen.ScreenReport's fields
    screened_here: NotRequired[bool]
    wait_s: NotRequired[float]  # the parent's (refwork.reference_call)
    per_trial: NotRequired[bool]  # the parent's: `trials` widened by each trial's own bound (job.py)


class TrialBoundsReply(TypedDict):
    """The reply to `trial_bounds`: each trial's bounds measured on its own inputs (precision.bounds)."""

    bounds: list[list[Any]]
    wait_s: NotRequired[float]  # the parent's (refwork.reference_call)


class PrepareTimingReply(TypedDict):
    """The reply to `prepare_timing`: why torch.compile failed on the reference, if it did."""

    compile_error: str | None


class MeasureReply(TypedDict):
    """The reply to `measure` (reference.RefTimer.measure): the reference's eager and torch.compile medians."""

    eager_ms: float | None
    compile_ms: float | None
    compile_error: NotRequired[str | None]  # missing from the parent's stand-in (`error`)
    error: NotRequired[str]  # the parent's (refwork.ref_timing): the timer process failed, no medians


class PeaksReply(TypedDict):
    """The reply to `peaks` (timing.device_peaks): the GPU's measured copy bandwidth and bf16 matmul peak."""

    bandwidth_bytes_per_s: float
    peak_flops: float
