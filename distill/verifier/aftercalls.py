"""A job's steps after the worker's correctness calls: the replay (provenance, from a replayer that never
imported the candidate's module) and the timing (in a replayer, or the worker); and the reading of a
child's reply every step shares (`watched`, `handled`).

job.py drives the worker through its phases and calls these; they raise what run_job places (a
ResourceError for the verifier's own limits, memfault.py) and return a judge.Finding otherwise.
"""
from __future__ import annotations

import secrets
import time
from typing import Any, TypeVar

from distill.verifier import callstream, codec, environ, judge, memfault, procs, protocol, refwork, replaycheck, running, timing
from distill.verifier.admission import Grant
from distill.verifier.context import JobContext, Slot
from distill.verifier.jobspec import TIMING_CHECKS, TIMING_SETS, JobSpec
from distill.verifier.spill import Spill

Reply = TypeVar("Reply")  # one of protocol.py's replies from a worker or a replayer


def watched(ctx: JobContext, proc: procs.Proc, reply: Reply) -> Reply:
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


def handled(phases: dict[str, float], name: str, proc: procs.Proc, before: tuple[float, float]) -> None:
    """The parent's seconds on the messages of `proc` it acknowledged since `before` (procs.Proc.handled_s,
    handled_cpu_s): `{name}.handled` in wall time (what the child waited for its acks, less the pipe),
    `.handled_cpu` of that in this thread's CPU; the rest is waiting for the GIL or torch's threads."""
    phases[f"{name}.handled"] = round(proc.handled_s - before[0], 4)
    phases[f"{name}.handled_cpu"] = round(proc.handled_cpu_s - before[1], 4)


def seconds(claim: Any) -> float:
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


def shared(ctx: JobContext, slot: Slot, grant: Grant) -> bool:
    """Whether the job shares its GPU with other workers (an out-of-memory error then earns a retry alone)."""
    return ctx.admission is not None and ctx.admission.workers.get(slot.gpu, 1) > 1 and not grant.alone


def time_candidate(ctx: JobContext, slot: Slot, spec: JobSpec, ref: protocol.TrialsReply, found: judge.Finding,
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
    gate_s: float | None = None
    try:
        t0 = time.monotonic()
        if replayed is None:
            with ctx.gates[slot.gpu].quiet(keep=proc.pid):
                t1 = time.monotonic()
                rep = watched(ctx, proc, proc.request(msg, spec.timeout, "timing"))
        else:  # the replayer compiles and warms up first, outside the gate (timing.READY)
            nonce = proc.begin(msg)
            early = proc.until_step(nonce, timing.READY, spec.timeout, "timing setup")
            setup_s, t0 = time.monotonic() - t0, time.monotonic()
            if early is not None:
                t1, rep = t0, watched(ctx, proc, early)
            else:
                with ctx.gates[slot.gpu].quiet(keep=proc.pid):
                    t1 = time.monotonic()
                    proc.send(protocol.Go(cmd="go", nonce=nonce))
                    early = proc.until_step(nonce, timing.DONE, spec.timeout, "timing")
                gate_s = time.monotonic() - t1
                rep = watched(ctx, proc, early if early is not None else proc.finish(nonce, spec.timeout, "timing"))
        verdict_phases = {"gate_wait": t1 - t0, "timed": time.monotonic() - t1}
        if gate_s is not None:  # the gate held; `timed` less it is the reply's transfer and reading
            verdict_phases["timing.gate"] = gate_s
        if replayed is not None:
            verdict_phases["timing.wait"] = waited  # queued for a replayer
            verdict_phases["timing_setup"] = setup_s  # the record rebuilt and its kernels compiled, outside the gate
        if replayed is None and not rep.get("error"):
            kept: protocol.TimedOutputsReply = proc.request(protocol.TimedOutputs(cmd="timed_outputs"), spec.timeout, "timing")
            rep["checked"] = kept.get("checked") or {}
        if replayed is not None:
            replaycheck.same_inputs(rep, ref["trials"], {f"t{k}": spec.trials + k for k in range(TIMING_SETS)})
        oom = memfault.later_oom(rep.get("error"), "timing", replayed is not None, shared(ctx, slot, grant))
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


def take_run(runs: list[protocol.ReplayRun], msg: protocol.RunSent | protocol.Progress, spill: Spill,
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


def replay(ctx: JobContext, slot: Slot, spec: JobSpec, ref: protocol.TrialsReply, run: protocol.RunReply,
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
    before = (proc.handled_s, proc.handled_cpu_s)
    runs: list[protocol.ReplayRun] = []  # each run's report as it arrived, compared then (`take_run`)
    secret, own = ref["trials"][spec.replay_trial], replaycheck._own_call(run, spec.other)
    try:
        rep: protocol.ReplayReply = watched(ctx, proc, proc.request(prep.msg, spec.timeout, "replay",
                                                total=spec.timeout * (len(replaycheck.RUNS) + 2),
                                                on_data=lambda msg: take_run(runs, msg, spill, secret, own, spec.device)))
        rep["runs"] = runs
        handled(phases, "replay", proc, before)
        phases["replay.setup"] = seconds(rep.get("setup_s"))  # the replayer's claims: figures only
        phases["replay.calls"] = round(sum(seconds(r.get("call_s")) for r in runs if isinstance(r, dict)), 4)
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
