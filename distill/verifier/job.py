"""One verification job: the worker's phases, its replay and its timing, and the verdict they make.

The job's specification and seeds are jobspec.py's; its work in the reference processes (memory plan,
expected outputs, the reference's medians) is refwork.py's.
`run_job` drives a worker through load -> run -> (time) -> end with per-phase deadlines and turns
every way a worker can fail (timeout, death, a tampered channel) into a status. What it borrows and
reads of the pool (reference processes, timers, replayers, caps, gates, the reference-timing cache)
comes as a JobContext (context.py): a job never imports the pool that runs it.
"""
from __future__ import annotations

import contextlib
import secrets
import time
from typing import Any, TypeVar

from distill.verifier import (callstream, codec, environ, inflight, judge, memfault, procs, protocol, record, reference,
                              refwork, replaycheck, running, timing)
from distill.verifier import admission
from distill.verifier.admission import Grant
from distill.verifier.context import JobContext, Slot
from distill.verifier.jobspec import TIMING_CHECKS, TIMING_SETS, JobSpec
from distill.verifier.spill import Spill
from distill.verifier.verdict import Verdict

Reply = TypeVar("Reply")  # one of protocol.py's replies from a worker or a replayer


def _watched(ctx: JobContext, proc: procs.Proc, reply: Reply) -> Reply:
    """`reply` (a protocol.py reply) with its strings scrubbed (the names the candidate chose bounded to identifiers,
    environ.scrub) and what its phase left running as the kernel counts it (running.py): threads
    over the worker's (or replayer's) start-up count and processes besides it (killed now) join its
    hygiene."""
    reply = environ.scrub(reply, keep=frozenset({"trace"}))  # the traced call's record goes to a replayer as data
    ready: protocol.SandboxReady = proc.info
    left = running.left_running(proc.pid, int(ready.get("tasks") or 0), ctx.memory.cgroup(proc.pid))
    if left:
        hyg: protocol.Hygiene = reply.get("hygiene")
        hyg = hyg if isinstance(hyg, dict) else {}
        claimed = hyg.get("threads")
        hyg["threads"] = max(left.threads, claimed if type(claimed) is int else 0)
        hyg["processes"] = len(left.processes)
        reply["hygiene"] = hyg
    return reply


def _handled(phases: dict[str, float], name: str, proc: procs.Proc, before: tuple[float, float]) -> None:
    """The parent's seconds on the messages of `proc` it acknowledged since `before` (procs.Proc.handled_s,
    handled_cpu_s): `{name}.handled` in wall time (what the child waited for its acks, less the pipe),
    `.handled_cpu` of that in this thread's CPU; the rest is waiting for the GIL or torch's threads."""
    phases[f"{name}.handled"] = round(proc.handled_s - before[0], 4)
    phases[f"{name}.handled_cpu"] = round(proc.handled_cpu_s - before[1], 4)


def _seconds(claim: Any) -> float:
    """A duration a child reported, for the phases only: a number, else 0."""
    return round(float(claim), 4) if type(claim) in (int, float) else 0.0


def _replayer_cap(ctx: JobContext, proc: procs.Proc, grant: Grant) -> bool:
    """Give a replayer the job's host cap; True where that is larger than the pool's (a retry's, pool.py;
    a job alone, admission.py): the replayer is then retired after, never handed on at that cap."""
    cap = ctx.memory.limit_bytes(proc.pid)
    ctx.memory.raise_limit(proc.pid, grant.host_mb)
    return grant.alone or (cap is not None and cap < grant.host_mb << 20)


def _replayer_killed(ctx: JobContext, proc: procs.Proc, exc: procs.ProcDied) -> None:
    """A replayer never imports the candidate's module: killed at its host cap, it hit the verifier's own
    limit (a ResourceError, memfault.py), whatever the command (replay or timing); so is a SIGBUS on a
    full scratch disk (its reply's overflow file had no room)."""
    disk = memfault.disk_fault(exc.exitcode, exc.phase, codec.overflow_dir())
    if disk is not None:
        raise disk from None
    if ctx.memory.tripped(proc.pid):
        err = memfault.host_kill(memfault.StepLog(lambda: 0, [(exc.phase, 0)]), "replay", None,
                                 ctx.memory.limit_bytes(proc.pid), ctx.memory.held_at_kill(proc.pid))
        assert err is not None
        err.args = (f"{err} ({exc.phase})",)
        raise err from None


def _shared(ctx: JobContext, slot: Slot, grant: Grant) -> bool:
    """Whether the job shares its GPU with other workers (an out-of-memory error then earns a retry alone)."""
    return ctx.admission is not None and ctx.admission.workers.get(slot.gpu, 1) > 1 and not grant.alone


def _time(ctx: JobContext, slot: Slot, spec: JobSpec, ref: protocol.TrialsReply, found: judge.Finding,
          verdict: dict[str, Any], grant: Grant, replayed: replaycheck.Prepared | None = None,
          call_s: float | None = None) -> judge.Finding:
    """Time the candidate: in its worker, or (`replayed`, the pool's `timing_in="replayer"`) its replayed
    record in a replayer, where none of its Python runs (replayer.time_replay). `call_s`, its quickest
    correctness call (the worker's claim), sets how many trials fit timing.TIMED_S: a candidate that
    claims slower calls is only timed fewer times (never under timing.MIN_TRIALS), and the trials the
    outputs are checked on are drawn from the ones that run."""
    sets = ref["trials"][spec.trials:spec.trials + TIMING_SETS]  # expected outputs of the worker's timing sets
    peaks = ctx.peaks.get(slot.gpu, {})
    floor = timing.physical_floor_ms(spec.bytes_moved or ref["io_bytes"], spec.flops, peaks)
    n = timing.trials_for(call_s, spec.timing_trials)
    checks = sorted(secrets.SystemRandom().sample(range(n), min(TIMING_CHECKS, n)))
    msg: dict[str, Any] = protocol.Time(cmd="time", warmup=spec.warmup, trials=n, check=checks)
    proc, launches, waited = slot.proc, found.checks.get("launches_per_call", 1), 0.0
    if replayed is not None:
        asked = time.monotonic()
        proc, launches = ctx.handouts.replayer(slot.gpu), replayed.launches
        waited = time.monotonic() - asked
        record = {k: v for k, v in replayed.msg.items() if k not in ("cmd", "runs", "seeds")}
        msg = protocol.TimeReplay(**record, cmd="time_replay", warmup=spec.warmup, trials=n,
                                  check=checks, seeds={f"t{k}": spec.seeds[1 + spec.trials + k] for k in range(TIMING_SETS)})
    assert proc is not None
    broken, raised = True, replayed is not None and _replayer_cap(ctx, proc, grant)
    rep: protocol.TimeReply | protocol.TimeReplayReply
    early: protocol.TimeReplayReply | None  # the reply, where it came before the step waited for
    try:
        t0 = time.monotonic()
        if replayed is None:
            with ctx.gates[slot.gpu].quiet(keep=proc.pid):
                t1 = time.monotonic()
                rep = _watched(ctx, proc, proc.request(msg, spec.timeout, "timing"))
        else:  # the replayer compiles and warms up first, outside the gate (timing.READY)
            nonce = proc.begin(msg)
            early = proc.until_step(nonce, timing.READY, spec.timeout, "timing setup")
            setup_s, t0 = time.monotonic() - t0, time.monotonic()
            if early is not None:
                t1, rep = t0, _watched(ctx, proc, early)
            else:
                with ctx.gates[slot.gpu].quiet(keep=proc.pid):
                    t1 = time.monotonic()
                    proc.send(protocol.Go(cmd="go", nonce=nonce))
                    early = proc.until_step(nonce, timing.DONE, spec.timeout, "timing")
                rep = _watched(ctx, proc, early if early is not None else proc.finish(nonce, spec.timeout, "timing"))
        verdict_phases = {"gate_wait": t1 - t0, "timed": time.monotonic() - t1}
        if replayed is not None:
            verdict_phases["timing.wait"] = waited  # queued for a replayer
            verdict_phases["timing_setup"] = setup_s  # the record rebuilt and its kernels compiled, outside the gate
        if replayed is None and not rep.get("error"):
            kept: protocol.TimedOutputsReply = proc.request(protocol.TimedOutputs(cmd="timed_outputs"), spec.timeout, "timing")
            rep["checked"] = kept.get("checked") or {}
        if replayed is not None:
            replaycheck.same_inputs(rep, ref["trials"], {f"t{k}": spec.trials + k for k in range(TIMING_SETS)})
        oom = memfault.later_oom(rep.get("error"), "timing", replayed is not None, _shared(ctx, slot, grant))
        if oom is not None:
            raise oom
        hyg = judge.hygiene(rep) or judge.left_behind(rep)
        f, info = judge.judge_timing(rep, sets, spec.device, launches, spec.warmup + n, floor)
        broken = (hyg or f).status is not None
    except procs.ProcDied as exc:
        if replayed is None:
            raise  # the worker's death: run_job places it
        _replayer_killed(ctx, proc, exc)
        return judge.Finding("crash", f"the replay process died while its kernels were timed: {exc}", found.checks)
    finally:
        if replayed is not None:
            ctx.handouts.release_replayer(slot.gpu, proc, broken or raised)
    verdict.update(kernel_ms=info.get("kernel_ms"))
    found.checks["timing"] = {**info, "trials": n, "peaks": peaks, "timed_in": "worker" if replayed is None else "replayer"}
    found.checks.setdefault("phase_s", {}).update({k: round(v, 4) for k, v in verdict_phases.items()})
    res = hyg or f
    res.checks = {**found.checks, **res.checks}  # the correctness record stays beside the timing one
    return res


def _take_run(runs: list[protocol.ReplayRun], msg: protocol.RunSent | protocol.Progress, spill: Spill,
              secret: protocol.Trial, own: protocol.CallReport | None, device: str) -> None:
    """One replay run's report, as the replayer sent it when the run ended: compared at once (judge.replay_compare,
    under judge.RUN_COMPARED, which only this sets) and its outputs dropped, so the parent holds one run's
    outputs as they arrive and keeps none on disk; kept (spill.py) where a widened bound may change what
    was found (a near miss, a determinism failure), and compared again then."""
    rep: protocol.ReplayRun | None = msg.get("run")
    if rep is None:
        return
    rep = environ.scrub(rep)
    if isinstance(rep, dict):
        rep[judge.RUN_COMPARED] = got = judge.replay_compare(rep, secret, own, device)  # type: ignore[literal-required]
        again = isinstance(got, Exception) or isinstance(got, judge.Finding) and (
            (got.checks.get("compare") or {}).get("within_table") or got.status == "nondeterministic")
        if again:
            del rep[judge.RUN_COMPARED]  # type: ignore[misc]
        if "outputs" in rep:
            rep["outputs"] = spill.keep_outputs(rep["outputs"]) if again else callstream.without_values(rep["outputs"])
    runs.append(rep)


def _replay(ctx: JobContext, slot: Slot, spec: JobSpec, ref: protocol.TrialsReply, run: protocol.RunReply,
            found: judge.Finding, stream: bool, grant: Grant, spill: Spill,
            phases: dict[str, float]) -> tuple[judge.Finding, replaycheck.Prepared]:
    """Provenance from a replayer (replaycheck.py), a process that never imported the candidate's
    module; and what was sent to it (the timing may send it again). It runs under the job's grant.
    `phases` gets the wait for a replayer and the replayer's own seconds (`replay.*`)."""
    prep = replaycheck.prepare(spec.candidate, spec.source, run, spec.traced, ref.get("params") or {},
                               {"secret": spec.seeds[1 + spec.replay_trial], "other": spec.seeds[1 + spec.other]},
                               grant.device_bytes, found.checks, stream)
    if prep.msg is None:
        return prep.finding, prep
    if grant.fraction is not None:  # the job's device cap, set by the replayer's harness before the record runs
        prep.msg = {**prep.msg, "device_memory_fraction": grant.fraction}
    waited = time.monotonic()
    proc = ctx.handouts.replayer(slot.gpu)
    phases["replay.wait"] = round(time.monotonic() - waited, 4)
    broken, checks, raised = True, prep.checks, _replayer_cap(ctx, proc, grant)
    handled = (proc.handled_s, proc.handled_cpu_s)
    runs: list[protocol.ReplayRun] = []  # each run's report as it arrived, compared then (`_take_run`)
    secret, own = ref["trials"][spec.replay_trial], replaycheck._own_call(run, spec.other)
    try:
        rep: protocol.ReplayReply = _watched(ctx, proc, proc.request(prep.msg, spec.timeout, "replay",
                                                total=spec.timeout * (len(replaycheck.RUNS) + 2),
                                                on_data=lambda msg: _take_run(runs, msg, spill, secret, own, spec.device)))
        rep["runs"] = runs
        _handled(phases, "replay", proc, handled)
        phases["replay.setup"] = _seconds(rep.get("setup_s"))  # the replayer's claims: figures only
        phases["replay.calls"] = round(sum(_seconds(r.get("call_s")) for r in runs if isinstance(r, dict)), 4)
        found = replaycheck.decide(rep, prep, ref["trials"], spec.replay_trial, spec.other, run, spec.device)
        spill.release()
        near = found.checks.get("kernel_replay") if found.status == "not_triton" else None
        if isinstance(near, dict) and (near.get("compare") or {}).get("within_table") \
                and refwork.per_trial_bounds(ctx, slot, spec, ref):  # as for the worker's calls (run_job)
            found = replaycheck.decide(rep, prep, ref["trials"], spec.replay_trial, spec.other, run, spec.device)
            found.checks["tolerance_per_trial"] = True
        broken = found.status is not None  # kept only after a clean replay, like a worker after a pass
        return found, prep
    except procs.ProcTimeout as exc:
        return judge.Finding("timeout", f"replaying its kernels: {exc}",
                             checks), prep
    except procs.ProcDied as exc:
        _replayer_killed(ctx, proc, exc)
        return judge.Finding("crash", f"the replay process died while its kernels ran: {exc}", checks), prep
    except procs.ProcProtocol as exc:
        return judge.Finding("forbidden", f"at run time: {exc} (the replay's channel)", checks), prep
    finally:
        ctx.handouts.release_replayer(slot.gpu, proc, broken or raised)


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
        load: protocol.LoadReply = _watched(ctx, slot.proc, proc.finish(nonce, t, phase, on_progress=steps))
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
        run = _watched(ctx, slot.proc, run)
        if in_step:  # the rest: the timing sets', the replay trial's; a worker trial no call reached is not kept
            feed.keep = lambda i, kept=feed.keep: kept(i) and i >= spec.trials
            ref = refwork.reply(feed, base, phases, whole=True)
        # A top-level error is the codec's (a protocol.ErrorReply in the RunReply's place): the run's reply
        # could not be encoded, and no call counts.
        run["calls"] = [] if run.get("error") else judged.calls
        lap("run")
        _handled(phases, "run", proc, handled)
        if isinstance(run.get("memory"), dict):  # the worker's own figures: informative only
            base["memory"].update({k: run["memory"].get(k) for k in ("worker_peak_bytes", "streamed")})
        run_s = run.get("run_s")
        for k, sec in (run_s.items() if isinstance(run_s, dict) else ()):
            phases[f"run.{k}"] = round(float(sec), 4)
        # An out-of-memory error in forward within the candidate's own budget is the verifier's, retried
        # with the GPU alone (pool.py). With the most the pool can give already (alone, or a GPU with one
        # worker) it is the candidate's: the error and the figures beside it are the worker's claims, and
        # a candidate that raised one itself must not turn its verdict into the verifier's fault.
        if spec.device == "cuda" and _shared(ctx, slot, grant):
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
            found, replayed = _replay(ctx, slot, spec, ref, run, found, stream, grant, spill, phases)
            lap("replay")
        if found.status is None and spec.device == "cuda" and spec.timed:
            phase = "timing"
            quickest = min((c["call_s"] for c in run.get("calls") or () if isinstance(c.get("call_s"), (int, float))
                            and c["call_s"] > 0), default=None)
            found = _time(ctx, slot, spec, ref, found, fields, grant, replayed if ctx.timing_in == "replayer" else None,
                          quickest)
            lap("timing")
        if found.status is not None:  # the worker is recycled anyway: no clean-up round trip
            return verdict(found.status, found.reason, found.checks), False
        phase = "clean-up"
        end: protocol.EndReply = _watched(ctx, slot.proc, proc.request(protocol.End(cmd="end"), max(t, 30.0), phase))
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
