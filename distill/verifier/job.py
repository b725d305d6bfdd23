"""One verification job: the worker's phases, its replay and its timing, and the verdict they make.

The job's specification and seeds are jobspec.py's; its work in the reference processes (memory plan,
expected outputs, the reference's medians) is refwork.py's; the replay and the timing, after the worker's
correctness calls, are aftercalls.py's.
`run_job` drives a worker through load -> run -> (time) -> end with per-phase deadlines and turns
every way a worker can fail (timeout, death, a tampered channel) into a status. What it borrows and
reads of the pool (reference processes, timers, replayers, caps, gates, the reference-timing cache)
comes as a JobContext (context.py): a job never imports the pool that runs it.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any

from distill.verifier import (aftercalls, callstream, codec, inflight, judge, memfault, procs, protocol, record,
                              reference, refwork)
from distill.verifier import admission
from distill.verifier.context import JobContext, Slot
from distill.verifier.jobspec import TIMING_SETS, JobSpec
from distill.verifier.spill import Spill
from distill.verifier.verdict import Verdict


def run_job(ctx: JobContext, slot: Slot, spec: JobSpec) -> tuple[Verdict, bool]:
    """Returns (verdict, whether the worker may serve another job). `ctx` is this run's (JobContext.attempt)."""
    proc = slot.proc
    assert proc is not None
    t = spec.timeout
    base = {"problem_id": spec.problem_id, "sandbox": {**slot.info.get("sandbox", {}), "memory": ctx.memory.mode}}
    if spec.static_report is not None:
        base["static"] = spec.static_report.to_dict()
    fields: dict[str, Any] = {}
    phase = "import"
    # Wall seconds per phase, for throughput work (bench/bench_verifier.py sums them over a batch).
    phases: dict[str, float] = {}
    base["phase_s"] = phases
    clock = [time.monotonic()]

    def lap(name: str) -> None:
        now = time.monotonic()
        phases[name] = round(phases.get(name, 0.0) + now - clock[0], 4)
        clock[0] = now

    def verdict(status: str, reason: str, extra: dict[str, Any] | None = None) -> Verdict:
        if spills and isinstance(base.get("memory"), dict):  # the most of the scratch disk its files held at once
            base["memory"]["spill_peak_bytes"] = spills[0].peak
        if steps.steps and isinstance(base.get("memory"), dict):  # the worker's resident bytes, as this process read them
            base["memory"]["worker_host_peak_bytes"] = max(b for _, b in steps.steps)
        return Verdict(status, reason, checks={**base, **(extra or {})}, device=spec.device,
                       versions=slot.info.get("versions", {}), **fields)

    # The steps the worker announces, with its resident bytes as this process reads them: whose a
    # death at the memory cap is (memfault.py).
    steps = memfault.StepLog(lambda: ctx.memory.resident(proc.pid))

    held = contextlib.ExitStack()  # the job's hold on its GPU (admission.py), from its plan to its end
    in_step, spills = False, []
    scratch = ctx.scratch or codec.overflow_dir()  # the disk its spills and the children's overflow files fill
    try:
        grant, stream = refwork.memory_plan(ctx, slot, spec, base)
        if ctx.admission is not None:
            held.enter_context(ctx.admission.hold(slot.gpu, grant.alone))
        disks = ctx.admission or admission.Admission({}, spec.timeout)  # none: this job's own check
        in_step = bool(base["memory"].get("in_step"))  # the expected outputs read as the calls are judged
        hold = held.enter_context(disks.disk(base["memory"].pop("disk_bytes", 0), scratch,
                                             refwork.disk_what(base["memory"].get("plan"), in_step)))
        spill = held.enter_context(Spill(ctx.scratch))  # the outputs kept past their arrival; gone before `hold`
        spill.hold = hold
        spills.append(spill)
        ctx.memory.raise_limit(proc.pid, grant.host_mb)  # a job alone: the worker is retired after
        lap("plan")
        phases["plan.wait"] = base["memory"].pop("wait_s", 0.0)
        if spec.device == "cuda" and spec.timed:  # an untimed job (the resized twin) uses no reference medians
            refwork.prefetch_ref_timing(ctx, spec, slot.gpu)
        steps("inputs load")
        # The timing sets' seeds go to the process that times: a replayer (the default) gets its own in
        # `_time`, so they never enter a worker that does not time (nor one on the CPU lane).
        worker_times = spec.device == "cuda" and spec.timed and ctx.timing_in == "worker"
        nonce = proc.begin(protocol.Load(
            cmd="load", source=spec.candidate, problem=spec.source,
            seeds=spec.seeds[1:1 + spec.trials + (TIMING_SETS if worker_times else 0)], stream=stream,
            template_cache=ctx.template if spec.device == "cuda" else None, device_memory_fraction=grant.fraction))
        feed = held.enter_context(contextlib.closing(refwork.expected_outputs(
            ctx, slot, spec, grant.budgets(spec.device == "cuda" and spec.timed), spill, in_step)))
        ref = refwork.reply(feed, base, phases, whole=not in_step)  # in step: the head and the first trial
        lap("reference_trials")
        load: protocol.LoadReply = aftercalls.watched(ctx, slot.proc,
                                                      proc.finish(nonce, t, phase, on_progress=steps))
        lap("load")
        if load.get("problem_memory"):  # made before any candidate code: the problem's, not the candidate's
            raise reference.ProblemError(str(load["problem_memory"]))
        full = memfault.disk_error(load.get("error"), "import", scratch)
        if full is not None:
            raise full
        f = judge.hygiene(load)
        if f is None and load.get("error"):
            f = judge.error_status(load["error"], {"denials": []})
            if f.status in ("runtime_error", "crash"):
                f = judge.Finding("compile_error", f"importing the candidate failed: {f.reason.split(' raised ', 1)[-1]}")
        if f is not None:
            return verdict(f.status, f.reason, f.checks), False
        phase = "construct"
        steps(phase)
        # Each call's outputs are compared with the reference's as its report arrives (callstream.py).
        plan = spec.plan()  # draws the traced and the other trial, where not drawn yet
        handled = (proc.handled_s, proc.handled_cpu_s)
        judged = callstream.CallStream(ref["trials"], spec.device, keep_trial=spec.other, spill=spill,
                                       **({"feed": feed, "calls": spec.trials} if in_step else {}))
        run: protocol.RunReply = proc.request(
            protocol.Run(cmd="run", init_args=ref["init_args"], init_kwargs=ref["init_kwargs"], init_seed=spec.seeds[0],
                         call_seed=spec.seeds[-3], n_trials=spec.trials,
                         construct_ops=sorted(ref.get("construct_ops") or {}), plan=plan,
                         state_limit=record.state_limit(base["memory"].get("plan"))),
            t, phase, total=t * (len(plan) + 2), on_progress=steps, on_data=lambda msg: callstream.take_call(judged, msg))
        run = aftercalls.watched(ctx, slot.proc, run)
        if in_step:  # the rest: the timing sets', the replay trial's; a worker trial no call reached is not kept
            feed.keep = lambda i, kept=feed.keep: kept(i) and i >= spec.trials
            ref = refwork.reply(feed, base, phases, whole=True)
        # A top-level error is the codec's (a protocol.ErrorReply in the RunReply's place): the run's reply
        # could not be encoded, and no call counts.
        run["calls"] = [] if run.get("error") else judged.calls
        lap("run")
        aftercalls.handled(phases, "run", proc, handled)
        if isinstance(run.get("memory"), dict):  # the worker's own figures: informative only
            base["memory"].update({k: run["memory"].get(k) for k in ("worker_peak_bytes", "streamed")})
        held_at = [c["device_memory"]["held_bytes"] for c in run.get("calls") or ()  # the harness's part of it
                   if isinstance(c.get("device_memory"), dict) and type(c["device_memory"].get("held_bytes")) is int]
        if held_at:
            base["memory"]["worker_held_bytes"] = max(held_at)
        run_s = run.get("run_s")
        for k, sec in (run_s.items() if isinstance(run_s, dict) else ()):
            phases[f"run.{k}"] = round(float(sec), 4)
        # An out-of-memory error in forward within the candidate's own budget is the verifier's, retried
        # with the GPU alone (pool.py). With the most the pool can give already (alone, or a GPU with one
        # worker) it is the candidate's: the error and the figures beside it are the worker's claims, and
        # a candidate that raised one itself must not turn its verdict into the verifier's fault.
        if spec.device == "cuda" and aftercalls.shared(ctx, slot, grant):
            alone = ctx.admission.whole(ctx.budget, slot.gpu).device_bytes
            for call in run.get("calls") or ():
                err = memfault.device_oom(call, base["memory"].get("plan"), grant.device_bytes, alone)
                if err is not None:
                    raise err
        for call in run.get("calls") or ():
            err = memfault.disk_error(call.get("error"), f"call {call.get('kind')} {call.get('trial')}", scratch)
            if err is not None:
                raise err
        found = judge.hygiene(run) or judge.judge_calls(run, ref["trials"], spec.device, ref.get("construct_ops") or {},
                                                        judged, ref.get("forward_ops"))
        if found.status == "wrong_output" and (found.checks.get("compare") or {}).get("within_table"):
            refwork.per_trial_bounds(ctx, slot, spec, ref)  # a pass never pays for this
            judged.rejudge(ref["trials"])
            found = judge.hygiene(run) or judge.judge_calls(run, ref["trials"], spec.device,
                                                            ref.get("construct_ops") or {}, judged, ref.get("forward_ops"))
            found.checks["tolerance_per_trial"] = True
            lap("trial_bounds")
        found.checks["phase_s"] = phases
        lap("judge")
        replayed = None
        if found.status is None:  # provenance, from a process that never ran the candidate's module
            phase = "replay"
            found, replayed = aftercalls.replay(ctx, slot, spec, ref, run, found, stream, grant, spill, phases)
            lap("replay")
        if found.status is None and spec.device == "cuda" and spec.timed:
            phase = "timing"
            quickest = min((c["call_s"] for c in run.get("calls") or () if isinstance(c.get("call_s"), (int, float))
                            and c["call_s"] > 0), default=None)
            found = aftercalls.time_candidate(ctx, slot, spec, ref, found, fields, grant,
                                              replayed if ctx.timing_in == "replayer" else None, quickest)
            lap("timing")
        if found.status is not None:  # the worker is recycled anyway: no clean-up round trip
            return verdict(found.status, found.reason, found.checks), False
        phase = "clean-up"
        end: protocol.EndReply = aftercalls.watched(ctx, slot.proc,
                                                    proc.request(protocol.End(cmd="end"), max(t, 30.0), phase))
        lap("clean_up")
        for k, sec in (end.get("end_s") or {}).items():
            phases[f"clean_up.{k}"] = round(float(sec), 4)
        tainted = judge.hygiene(end)
        if tainted is not None:
            return verdict(tainted.status, tainted.reason, {**found.checks, **tainted.checks}), False
        if end.get("finalizers"):
            found.checks["clean_up_code"] = end["finalizers"]
        return verdict("pass", "every check held", found.checks), not end.get("finalizers") and not grant.alone
    except procs.ProcTimeout as exc:
        ref_s = phases.get("reference_trials", 0.0) - phases.get("reference_trials.wait", 0.0)
        err = memfault.harness_timeout(exc.phase, exc.seconds, ref_s) if phase in ("import", "construct") else None
        if in_step and phase == "construct" and feed.waited_s > 2 * t:  # the run's slack went to the reference
            err = memfault.ResourceError(f"the verifier's own time limit: the run waited {feed.waited_s:.1f} s for "
                                         f"the reference's expected outputs in step, past the run's {2 * t:g} s of "
                                         "slack (VerifierPool timeout)", step=exc.phase, resource="time")
        if err is not None:
            raise err from None
        return verdict("timeout", str(exc)), False
    except procs.ProcDied as exc:
        disk = memfault.disk_fault(exc.exitcode, exc.phase, codec.overflow_dir())
        if disk is not None:
            raise disk from None
        kernel = inflight.died_compiling(slot.scratch)  # the CPU lane's GPU compile crashed (gpu_compile.py)
        if kernel is not None and not ctx.memory.tripped(proc.pid):
            return verdict("compile_error", f"Triton's compiler crashed compiling kernel {kernel} ({exc})"), False
        if ctx.memory.tripped(proc.pid):
            steps.steps.append((exc.phase, steps.steps[-1][1] if steps.steps else 0))  # its last word, read before
            err = memfault.host_kill(steps, phase, base["memory"].get("plan"), ctx.memory.limit_bytes(proc.pid),
                                     ctx.memory.held_at_kill(proc.pid))
            if err is not None:
                raise err from None
            cap = (ctx.memory.limit_bytes(proc.pid) or 0) >> 20
            return verdict("crash", f"worker killed at the {cap} MB memory limit during {exc.phase}"), False
        return verdict("crash", str(exc)), False
    except procs.ProcProtocol as exc:
        return verdict("forbidden", f"at run time: {exc} (harness)"), False
    finally:
        held.close()
