"""A job's work in the pool's trusted reference processes: the memory plan, the expected outputs (with
the problem's screening, once a pool) and the reference's own eager and torch.compile medians.

Each borrows a reference process (or a timer) from the JobContext for one command and gives it back;
the time spent queueing for one is returned as `wait_s` (a job's `*.wait` phases). The expected outputs
come through a Feed: read whole while the worker loads (up front), or, where every input set's expected
outputs would not stay in the parent's memory (memplan.job_disk), in step with the worker's calls, the
reference process held through the run. Why in step, and not the other options weighed for issue 31:
keeping every set where room exists (the parent's memory, the reference's GPU) still grows as sets x
outputs (7 x 4 GiB for KernelBench level 1 #9, past the 3x-the-problem host target); keeping fewer bytes
per set can only drop a trial's outputs once its call was compared, and up front every trial arrives
before the first call, so the disk's peak stayed sets x outputs. In step, a trial's outputs exist in the
parent from the moment its call needs them to the moment it passed: the check reads the same values.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from distill.verifier import judge, memplan, procs, protocol, reference, screen
from distill.verifier.admission import Grant
from distill.verifier.problemio import ReferenceFailed
from distill.verifier.context import JobContext, Slot
from distill.verifier.jobspec import TIMING_SETS, JobSpec
from distill.verifier import spill as spills  # the module; `spill` below is a job's Spill
from distill.verifier.spill import Spill
from distill.verifier.verdict import Verdict


def reference_call(ctx: JobContext, gpu: int, msg: dict[str, Any], seconds: float,
                   spill: Spill | None = None) -> Any:
    """One command in a reference process; its reply (protocol.PlanReply, TrialsReply or TrialBoundsReply:
    a ProblemErrorReply is raised). The expected outputs of a `trials` command arrive one trial at a time
    (protocol.TrialSent), before the reply (reference.make_trials), and are kept as they come (`spill`: on
    disk when large), so the parent never holds a reply with every trial's outputs at once."""
    t0 = time.monotonic()
    ref = ctx.acquire_reference(gpu)
    waited = time.monotonic() - t0  # queued for a reference process: the pool's, not the problem's
    broken = False
    try:
        ref.send(msg)
        end = t0 + waited + seconds
        out: Any = ref.receive(seconds, "reference")  # a protocol.TrialSent, or the command's reply
        trials: list[protocol.Trial] = []
        while "trial" in out:
            trial: protocol.Trial = out.pop("trial")
            trial["outputs"] = spill.keep(trial["outputs"]) if spill is not None else trial["outputs"]
            trials.append(trial)
            del out
            ref.send(protocol.Ack(cmd="ack"))  # copied out of its arena: the next trial may go there
            out = ref.receive(max(end - time.monotonic(), 0.001), "reference")
        if trials:
            out["trials"] = trials
        out["wait_s"] = round(waited, 4)
    except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol) as exc:
        broken = True
        raise ReferenceFailed(f"reference process failed: {exc}") from None
    finally:
        ctx.release_reference(gpu, ref, broken)
    if "problem_error" in out:
        if isinstance(out.get("screen"), dict):
            raise reference.ScreenFailed(screen.ScreenReport(**out["screen"]))
        raise ReferenceFailed(out["problem_error"])
    return out


class Feed:
    """A `trials` command in a reference process, read as the job needs its input sets.

    The reference sends each trial as it makes it and waits for the parent's ack before the next
    (reference.make_trials); the parent acks a trial when it reads it, so the reference is one trial
    ahead at most. Up front (`finish` at once), as before: every set read while the worker loads, the
    reference free before the run. In step (memplan.job_disk: where the sets' expected outputs would
    not stay in the parent's memory): trial t is read when the worker's call on it arrives (`upto`,
    callstream.py), which drops it once judged, so the parent's disk holds a few outputs whatever the
    number of sets; the reference process is held through the worker's run (its cost: one reference per
    such job, which on the GPU mostly runs alone anyway). `keep(i)`: whether set i's expected outputs are
    kept at all (an untimed job never reads its timing sets').
    """

    def __init__(self, ctx: JobContext, gpu: int, msg: dict[str, Any], seconds: float, spill: Spill,
                 keep: Callable[[int], bool]) -> None:
        self.ctx, self.gpu, self.seconds, self.spill, self.keep = ctx, gpu, seconds, spill, keep
        self.count = len(msg["seeds"])
        self.trials: list[protocol.Trial] = []
        self.head: dict[str, Any] = {}
        self.reply: Any = None
        self.waited_s = 0.0  # in `upto`: read and kept, or waited for (in step, inside the worker's run)
        t0 = time.monotonic()
        self.ref: procs.Proc | None = ctx.acquire_reference(gpu)
        self.wait_s = round(time.monotonic() - t0, 4)  # queued for a reference process: the pool's
        self._call(lambda: self.ref.send(msg) if self.ref is not None else None)

    def _call(self, step: Callable[[], Any]) -> Any:
        try:
            return step()
        except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol) as exc:
            self.close()
            raise ReferenceFailed(f"reference process failed: {exc}") from None

    def _next(self) -> None:
        assert self.ref is not None
        ref = self.ref
        out: Any = self._call(lambda: ref.receive(self.seconds, "reference"))
        if "trial" not in out:  # the command's reply: the reference is free again
            self.ctx.release_reference(self.gpu, ref, False)
            self.ref, self.reply = None, out
            if "problem_error" in out:
                if isinstance(out.get("screen"), dict):
                    raise reference.ScreenFailed(screen.ScreenReport(**out["screen"]))
                raise ReferenceFailed(out["problem_error"])
            return
        trial: Any = out.pop("trial")
        del out
        self.head.update(trial.pop("head", None) or {})
        trial["outputs"] = self.spill.keep(trial["outputs"]) if self.keep(len(self.trials)) else None
        self.trials.append(trial)
        del trial
        self._call(lambda: ref.send(protocol.Ack(cmd="ack")))  # copied out of its arena: the next may go there

    def upto(self, n: int) -> None:
        """Read trials until the first `n` are in (or the reply came)."""
        t0 = time.monotonic()
        while self.reply is None and len(self.trials) < n:
            self._next()
        self.waited_s += time.monotonic() - t0

    def finish(self) -> protocol.TrialsReply:
        """Every trial read, and the reply, with the trials and the head in it."""
        self.upto(self.count + 1)
        if self.reply is None:
            raise ReferenceFailed("reference process failed: no reply to `trials` after its trials")
        out: protocol.TrialsReply = {**self.reply, **self.head, "trials": self.trials, "wait_s": self.wait_s}
        return out

    def close(self) -> None:
        """Give the reference back; one left mid-command is replaced (the pool's `broken`)."""
        if self.ref is not None:
            ref, self.ref = self.ref, None
            self.ctx.release_reference(self.gpu, ref, True)


def expected_outputs(ctx: JobContext, slot: Slot, spec: JobSpec, budgets: dict[str, Any], spill: Spill,
                     in_step: bool = False) -> Feed:
    """The reference's expected outputs for this job's trials, as a Feed: read whole before it returns,
    or (`in_step`) its first trial only (what the worker's `run` needs, the head, comes with it). The
    problem is screened in the first job's reference; later jobs wait for that report (context.Screens)
    and hand it to theirs, and a problem that failed screening fails them at once. The caller closes it."""
    msg = protocol.Trials(cmd="trials", source=spec.source, init_seed=spec.seeds[0], seeds=spec.reference_seeds,
                          calls=len(spec.plan()), budgets=budgets, second_init=spec.second_init)
    timed = spec.device == "cuda" and spec.timed
    sets = range(spec.trials, spec.trials + TIMING_SETS)

    def start(m: dict[str, Any]) -> Feed:
        feed = Feed(ctx, slot.gpu, m, max(spec.timeout, 120), spill, lambda i: timed or i not in sets)
        try:
            feed.upto(1) if in_step else feed.finish()
        except BaseException:
            feed.close()
            raise
        return feed

    key = f"{spec.key}:{spec.device}"
    known = ctx.screens.cache.get(key)
    if known is None:  # the first job on the problem screens it; the others wait for its report
        with ctx.screens.lock_for(key):
            known = ctx.screens.cache.get(key)
            if known is None:
                try:
                    feed = start(dict(msg))
                except reference.ScreenFailed as exc:
                    ctx.screens.cache[key] = exc.report.to_dict()
                    raise
                if isinstance(feed.head.get("screen"), dict):
                    ctx.screens.cache[key] = feed.head["screen"]
                return feed
    if known["status"] != "ok":
        raise reference.ScreenFailed(screen.ScreenReport(**known))
    return start({**msg, "screen": known})


def reply(feed: Feed, base: dict[str, Any], phases: dict[str, float], whole: bool) -> protocol.TrialsReply:
    """The `trials` reply as far as the job reads it now: whole (every trial and the reply), or in step
    its head and the trials read so far (`trials` then grows as the calls are judged). Its figures go to
    the verdict's `memory`, `screening` and `reference_trials.wait`."""
    ref: Any = feed.finish() if whole else {**feed.head, "trials": feed.trials, "wait_s": feed.wait_s}
    phases["reference_trials.wait"] = ref.get("wait_s", 0.0)
    phases["reference_trials.read"] = round(feed.waited_s, 4)  # in step: most of it inside the worker's run
    base["memory"].update({k: v for k, v in (ref.get("memory") or {}).items() if v is not None})
    if isinstance(ref.get("screen"), dict):  # screened by this job's reference, or by an earlier job's
        base["screening"] = {"seconds": ref["screen"]["seconds"], "here": bool(ref.get("screened_here"))}
    return ref


def disk_what(plan: dict[str, Any] | None, in_step: bool) -> str:
    """What a job's disk hold is for, in a ResourceError's words."""
    if not plan:
        return "for the job's spill"
    if in_step:
        return (f"for the job's spill (in step: the expected outputs of the trial in hand, the timing sets and the "
                f"replay trial, the kept call, {plan['output_bytes']} bytes each)")
    return f"for the job's spill (the expected outputs of {plan['sets'] + 1} input sets and two more outputs)"


def per_trial_bounds(ctx: JobContext, slot: Slot, spec: JobSpec, ref: protocol.TrialsReply) -> bool:
    """A near miss: screening's bound comes from two draws of its own, and a trial's draw (a worker's,
    or the replay's secret one) may be one where an honest kernel errs more (every value tiny). Each
    trial's bound is measured on its own inputs and the wider kept in `ref["trials"]`, once a job;
    False where that was done already."""
    if ref.get("per_trial"):
        return False
    ref["trials"] = judge.widened(ref["trials"], trial_bounds(ctx, slot, spec))
    ref["per_trial"] = True
    return True


def trial_bounds(ctx: JobContext, slot: Slot, spec: JobSpec) -> list[list[Any]]:
    """Each reference trial's bounds measured on its own inputs (reference.trial_bounds), in the order of
    `spec.reference_seeds`: asked for only when a candidate missed the screening's bound but not the
    dtype table's (job.py), so a pass pays nothing for it."""
    got: protocol.TrialBoundsReply = reference_call(ctx, slot.gpu, protocol.TrialBounds(cmd="trial_bounds", source=spec.source,
                                                            init_seed=spec.seeds[0], seeds=spec.reference_seeds,
                                                            second_init=spec.second_init),
                         max(spec.timeout, 120))
    return got["bounds"]


def memory_plan(ctx: JobContext, slot: Slot, spec: JobSpec, base: dict[str, Any]) -> tuple[Grant, bool]:
    """The problem's memory plan from meta tensors (memplan.py), checked against the most the pool can
    give one job before the worker makes anything (a ProblemError names the bytes); the job's grant
    (admission.py: a worker's share, or its GPU's whole where only that fits); and whether the worker
    streams its input sets (they do not all fit beside the plan's peak) or keeps them as made."""
    timed = spec.device == "cuda" and spec.timed
    adm = ctx.admission
    most = adm.whole(ctx.budget, slot.gpu) if adm is not None else None
    share = adm.share(ctx.budget, slot.gpu) if adm is not None else Grant(
        ctx.budget.host_mb, ctx.budget.device_bytes(), None, False)
    sets = spec.trials + TIMING_SETS
    got: protocol.PlanReply = reference_call(ctx, slot.gpu, protocol.Plan(cmd="plan", source=spec.source, init_seed=spec.seeds[0],
                                                      seed=spec.seeds[1], calls=len(spec.plan()), sets=sets,
                                                      budgets=(most or share).budgets(timed)), max(spec.timeout, 120))
    plan = got.get("plan")
    grant = (share if adm is None else most if spec.alone else adm.grant(ctx.budget, slot.gpu, plan, spec.device, timed))
    budgets = grant.budgets(timed)
    base["memory"] = {"device_budget_bytes": budgets["device"], "host_budget_bytes": budgets["host"],
                      "alone": grant.alone, "wait_s": got["wait_s"]}  # run_job moves wait_s to its phases
    if plan:
        base["memory"]["plan"] = plan
        # The scratch disk is the verifier's: a job it cannot hold waits or ends (job.py, admission.disk),
        # before minutes of work and a child's SIGBUS on a full disk, never as the candidate's verdict.
        disk, in_step = memplan.job_disk(plan, spills.SPILL_BYTES, timed)
        base["memory"].update(disk_bytes=disk, in_step=in_step)
    if ctx.stream_inputs is not None:
        return grant, ctx.stream_inputs
    if not plan:
        return grant, False
    return grant, memplan.streams(plan, spec.device, budgets)


def ref_timing(ctx: JobContext, spec: JobSpec, gpu: int) -> protocol.MeasureReply:
    """Eager and torch.compile medians of the reference (torch.compile's only where the pool times both
    baselines), cached per problem and GPU."""
    key = (spec.key, gpu)
    cached = ctx.ref_timings
    with cached.lock_for(key):
        if key in cached.cache:
            return cached.cache[key]
        ref = ctx.handouts.timer(gpu)
        broken = False
        try:
            ref.send(protocol.PrepareTiming(cmd="prepare_timing", source=spec.source, init_seed=spec.seeds[-1],
                                            seed=spec.seeds[-2], key=spec.key, compile=ctx.compile_reference))
            prep: protocol.PrepareTimingReply = ref.receive(600, "reference compile")
            with ctx.gates[gpu].quiet(keep=ref.pid):
                ref.send(protocol.Measure(cmd="measure", key=spec.key, warmup=spec.warmup, trials=spec.timing_trials))
                out: protocol.MeasureReply = ref.receive(600, "reference timing")
            out["compile_error"] = out.get("compile_error") or prep.get("compile_error")
        except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol) as exc:
            broken = True
            out = protocol.MeasureReply(eager_ms=None, compile_ms=None, error=str(exc))
        finally:
            ctx.handouts.release_timer(gpu, ref, broken)
        cached.cache[key] = out
        return out


def prefetch_ref_timing(ctx: JobContext, spec: JobSpec, gpu: int) -> None:
    """Start compiling and timing the reference in the background (torch.compile takes seconds)."""
    if not ctx.ref_timings.claim((spec.key, gpu)):
        return
    threading.Thread(target=ref_timing, args=(ctx, spec, gpu), name="tritonforge-ref-timing", daemon=True).start()


def apply_ref_timing(v: Verdict, reft: protocol.MeasureReply) -> Verdict:
    """Fill the reference medians and speedups of a timed verdict (after its worker is released)."""
    eager, comp = reft.get("eager_ms"), reft.get("compile_ms")
    v.ref_eager_ms, v.ref_compile_ms = eager, comp
    if v.kernel_ms:
        v.speedup_eager = eager / v.kernel_ms if eager else None
        v.speedup_compile = comp / v.kernel_ms if comp else None
    t = v.checks.setdefault("timing", {})
    t["reference"] = reft
    if (v.speedup_eager or 0) > 10 or (v.speedup_compile or 0) > 10:
        t["flag"] = "speedup over 10x: check by hand before trusting it"
    return v
