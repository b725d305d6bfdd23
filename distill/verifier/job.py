"""One verification job: static layer, secret seeds, reference data, the worker's phases, timing.

`run_job` drives a worker through load -> run -> (time) -> end with per-phase deadlines and turns
every way a worker can fail (timeout, death, a tampered channel) into a status. What it borrows and
reads of the pool (reference processes, timers, replayers, caps, gates, the reference-timing cache)
comes as a JobContext (context.py): a job never imports the pool that runs it.
"""
from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from distill.verifier import (environ, inflight, judge, memfault, memplan, procs, reference, replaycheck, running,
                              screen, static, timing)
from distill.verifier.admission import Grant
from distill.verifier.context import JobContext, Slot
from distill.verifier.verdict import Verdict

TIMING_SETS = 2
TIMING_CHECKS = 3


def _seeds(given: list[int] | None, n: int) -> list[int]:
    if given is None:
        return [secrets.randbits(62) for _ in range(n)]
    if len(given) != n or not all(type(x) is int and 0 <= x < 1 << 62 for x in given):
        raise ValueError(f"replay seeds must be {n} integers in [0, 2^62) for this pool's trial settings, "
                         f"got {len(given)} values")
    return list(given)


@dataclass
class JobSpec:
    source: str
    candidate: str
    device: str
    timeout: float
    trials: int
    timing_trials: int
    warmup: int
    static_checks: bool
    problem_id: str
    flops: float
    bytes_moved: float
    static_report: static.StaticReport | None = None
    seeds: list[int] = field(default_factory=list)
    timed: bool = True  # False: correctness only (the resized-twin check)
    traced: int = 0  # the trial whose call is traced and replayed (plan), and the one replayed beside it
    other: int = 0
    alone: bool = False  # hold the GPU alone with its whole budget (admission.py; pool.py's retry of a device error)

    @classmethod
    def make(cls, problem: Any, candidate: str, device: str, timeout: float, trials: int, timing_trials: int,
             warmup: int, static_checks: bool, seeds: list[int] | None = None) -> "JobSpec":
        """`seeds`: replay a recorded verdict's (`checks["replay"]["seeds"]`); default: fresh secret ones.
        Layout: [init, trial 0..n-1, timing sets, replay trial, call, timing init, timing inputs]. The
        replay trial's seed goes to the reference and a replayer, never to the worker."""
        source = problem if isinstance(problem, str) else getattr(problem, "source", None)
        if not isinstance(source, str):
            raise TypeError("problem must be module source text or an object with a .source string")
        pid = getattr(problem, "problem_id", None) or hashlib.sha256(source.encode()).hexdigest()[:16]
        return cls(source=source, candidate=candidate, device=device, timeout=timeout, trials=max(trials, 2),
                   timing_trials=timing_trials, warmup=warmup, static_checks=static_checks, problem_id=str(pid),
                   flops=float(getattr(problem, "flops", 0) or 0),
                   bytes_moved=float(getattr(problem, "bytes_moved", 0) or 0),
                   seeds=_seeds(seeds, max(trials, 2) + TIMING_SETS + 5))

    @property
    def key(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def static_verdict(self) -> Verdict | None:
        if not self.static_checks:
            return None
        self.static_report = static.check_source(self.candidate)
        if self.static_report.status is None:
            return None
        return Verdict(self.static_report.status, self.static_report.reason,
                       checks={"static": self.static_report.to_dict(), "problem_id": self.problem_id},
                       device=self.device)

    @property
    def reference_seeds(self) -> list[int]:
        """The reference's trials: the worker's (correctness, then timing sets), then the replay trial."""
        return self.seeds[1:2 + self.trials + TIMING_SETS]

    @property
    def replay_trial(self) -> int:
        """Index of the replay trial among the reference's trials."""
        return self.trials + TIMING_SETS

    def plan(self) -> list[dict[str, Any]]:
        """Every trial once; one of them (never the first, which compiles and autotunes), chosen in
        secret, is traced: a replayer runs that record without the candidate's Python on the replay
        trial, which the worker never sees, on another trial (`other`: determinism against that
        trial's own call) and with its kernels ablated (replaycheck.py)."""
        if not self.traced:
            rng = secrets.SystemRandom()
            self.traced = rng.randrange(1, self.trials)
            self.other = rng.choice([i for i in range(self.trials) if i != self.traced])
        return [{"kind": "trial", "trial": i, "trace": i == self.traced} for i in range(self.trials)]


def _watched(ctx: JobContext, proc: procs.Proc, reply: dict[str, Any]) -> dict[str, Any]:
    """`reply` with its strings scrubbed (the names the candidate chose bounded to identifiers,
    environ.scrub) and what its phase left running as the kernel counts it (running.py): threads
    over the worker's (or replayer's) start-up count and processes besides it (killed now) join its
    hygiene."""
    reply = environ.scrub(reply, keep=frozenset({"trace"}))  # the traced call's record goes to a replayer as data
    left = running.left_running(proc.pid, int(proc.info.get("tasks") or 0), ctx.memory.cgroup(proc.pid))
    if left:
        hyg = reply.get("hygiene")
        hyg = hyg if isinstance(hyg, dict) else {}
        claimed = hyg.get("threads")
        hyg["threads"] = max(left.threads, claimed if type(claimed) is int else 0)
        hyg["processes"] = len(left.processes)
        reply["hygiene"] = hyg
    return reply


def _reference(ctx: JobContext, gpu: int, msg: dict[str, Any], seconds: float) -> dict[str, Any]:
    t0 = time.monotonic()
    ref = ctx.acquire_reference(gpu)
    waited = time.monotonic() - t0  # queued for a reference process: the pool's, not the problem's
    broken = False
    try:
        ref.send(msg)
        out = ref.receive(seconds, "reference")
        out["wait_s"] = round(waited, 4)
    except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol) as exc:
        broken = True
        raise reference.ProblemError(f"reference process failed: {exc}") from None
    finally:
        ctx.release_reference(gpu, ref, broken)
    if "problem_error" in out:
        if isinstance(out.get("screen"), dict):
            raise reference.ScreenFailed(screen.ScreenReport(**out["screen"]))
        raise reference.ProblemError(out["problem_error"])
    return out


def _trials(ctx: JobContext, slot: Slot, spec: JobSpec, budgets: dict[str, Any]) -> dict[str, Any]:
    """The reference's expected outputs for this job's trials. The problem is screened in the first
    job's reference; later jobs wait for that report (context.Screens) and hand it to theirs, and a
    problem that failed screening fails them at once."""
    msg = {"cmd": "trials", "source": spec.source, "init_seed": spec.seeds[0], "seeds": spec.reference_seeds,
           "calls": len(spec.plan()), "budgets": budgets}
    key = f"{spec.key}:{spec.device}"
    known = ctx.screens.cache.get(key)
    if known is None:  # the first job on the problem screens it; the others wait for its report
        with ctx.screens.lock_for(key):
            known = ctx.screens.cache.get(key)
            if known is None:
                try:
                    out = _reference(ctx, slot.gpu, msg, max(spec.timeout, 120))
                except reference.ScreenFailed as exc:
                    ctx.screens.cache[key] = exc.report.to_dict()
                    raise
                if isinstance(out.get("screen"), dict):
                    ctx.screens.cache[key] = out["screen"]
                return out
    if known["status"] != "ok":
        raise reference.ScreenFailed(screen.ScreenReport(**known))
    return _reference(ctx, slot.gpu, {**msg, "screen": known}, max(spec.timeout, 120))


def _memory_plan(ctx: JobContext, slot: Slot, spec: JobSpec, base: dict[str, Any]) -> tuple[Grant, bool]:
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
    got = _reference(ctx, slot.gpu, {"cmd": "plan", "source": spec.source, "init_seed": spec.seeds[0],
                                      "seed": spec.seeds[1], "calls": len(spec.plan()), "sets": sets,
                                      "budgets": (most or share).budgets(timed)}, max(spec.timeout, 120))
    plan = got.get("plan")
    grant = (share if adm is None else most if spec.alone else adm.grant(ctx.budget, slot.gpu, plan, spec.device, timed))
    budgets = grant.budgets(timed)
    base["memory"] = {"device_budget_bytes": budgets["device"], "host_budget_bytes": budgets["host"],
                      "alone": grant.alone, "wait_s": got["wait_s"]}  # run_job moves wait_s to its phases
    if plan:
        base["memory"]["plan"] = plan
    if ctx.stream_inputs is not None:
        return grant, ctx.stream_inputs
    if not plan:
        return grant, False
    return grant, memplan.streams(plan, spec.device, budgets)


def ref_timing(ctx: JobContext, spec: JobSpec, gpu: int) -> dict[str, Any]:
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
            ref.send({"cmd": "prepare_timing", "source": spec.source, "init_seed": spec.seeds[-1],
                      "seed": spec.seeds[-2], "key": spec.key, "compile": ctx.compile_reference})
            prep = ref.receive(600, "reference compile")
            with ctx.gates[gpu].quiet(keep=ref.pid):
                ref.send({"cmd": "measure", "key": spec.key, "warmup": spec.warmup, "trials": spec.timing_trials})
                out = ref.receive(600, "reference timing")
            out["compile_error"] = out.get("compile_error") or prep.get("compile_error")
        except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol) as exc:
            broken = True
            out = {"eager_ms": None, "compile_ms": None, "error": str(exc)}
        finally:
            ctx.handouts.release_timer(gpu, ref, broken)
        cached.cache[key] = out
        return out


def prefetch_ref_timing(ctx: JobContext, spec: JobSpec, gpu: int) -> None:
    """Start compiling and timing the reference in the background (torch.compile takes seconds)."""
    if not ctx.ref_timings.claim((spec.key, gpu)):
        return
    threading.Thread(target=ref_timing, args=(ctx, spec, gpu), name="tritonforge-ref-timing", daemon=True).start()


def apply_ref_timing(v: Verdict, reft: dict[str, Any]) -> Verdict:
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


def _time(ctx: JobContext, slot: Slot, spec: JobSpec, ref: dict[str, Any], found: judge.Finding,
          verdict: dict[str, Any], replayed: replaycheck.Prepared | None = None) -> judge.Finding:
    """Time the candidate: in its worker, or (`replayed`, the pool's `timing_in="replayer"`) its replayed
    record in a replayer, where none of its Python runs (replayer.time_replay)."""
    sets = ref["trials"][spec.trials:spec.trials + TIMING_SETS]  # expected outputs of the worker's timing sets
    peaks = ctx.peaks.get(slot.gpu, {})
    floor = timing.physical_floor_ms(spec.bytes_moved or ref["io_bytes"], spec.flops, peaks)
    checks = sorted(secrets.SystemRandom().sample(range(spec.timing_trials), min(TIMING_CHECKS, spec.timing_trials)))
    msg = {"cmd": "time", "warmup": spec.warmup, "trials": spec.timing_trials, "check": checks}
    proc, launches = slot.proc, found.checks.get("launches_per_call", 1)
    if replayed is not None:
        proc, launches = ctx.handouts.replayer(slot.gpu), replayed.launches
        msg = {**{k: v for k, v in replayed.msg.items() if k != "runs"}, **msg, "cmd": "time_replay",
               "seeds": {f"t{k}": spec.seeds[1 + spec.trials + k] for k in range(TIMING_SETS)}}
    assert proc is not None
    broken = True
    try:
        t0 = time.monotonic()
        with ctx.gates[slot.gpu].quiet(keep=proc.pid):
            t1 = time.monotonic()
            rep = _watched(ctx, proc, proc.request(msg, spec.timeout, "timing"))
            verdict_phases = {"gate_wait": t1 - t0, "timed": time.monotonic() - t1}
        if replayed is None and not rep.get("error"):
            rep["checked"] = proc.request({"cmd": "timed_outputs"}, spec.timeout, "timing").get("checked") or {}
        if replayed is not None:
            replaycheck.same_inputs(rep, ref["trials"], {f"t{k}": spec.trials + k for k in range(TIMING_SETS)})
        hyg = judge.hygiene(rep) or judge.left_behind(rep)
        f, info = judge.judge_timing(rep, sets, spec.device, launches, spec.warmup + spec.timing_trials, floor)
        broken = (hyg or f).status is not None
    finally:
        if replayed is not None:
            ctx.handouts.release_replayer(slot.gpu, proc, broken)
    verdict.update(kernel_ms=info.get("kernel_ms"))
    found.checks["timing"] = {**info, "peaks": peaks, "timed_in": "worker" if replayed is None else "replayer"}
    found.checks.setdefault("phase_s", {}).update({k: round(v, 4) for k, v in verdict_phases.items()})
    res = hyg or f
    res.checks = {**found.checks, **res.checks}  # the correctness record stays beside the timing one
    return res


def _replay(ctx: JobContext, slot: Slot, spec: JobSpec, ref: dict[str, Any], run: dict[str, Any],
            found: judge.Finding, stream: bool, grant: Grant) -> tuple[judge.Finding, replaycheck.Prepared]:
    """Provenance from a replayer (replaycheck.py), a process that never imported the candidate's
    module; and what was sent to it (the timing may send it again). It runs under the job's grant."""
    prep = replaycheck.prepare(spec.candidate, spec.source, run, spec.traced, ref.get("params") or {},
                               {"secret": spec.seeds[1 + spec.replay_trial], "other": spec.seeds[1 + spec.other]},
                               grant.device_bytes, found.checks, stream)
    if prep.msg is None:
        return prep.finding, prep
    if grant.fraction is not None:  # the job's device cap, set by the replayer's harness before the record runs
        prep.msg = {**prep.msg, "device_memory_fraction": grant.fraction}
    proc = ctx.handouts.replayer(slot.gpu)
    broken, checks = True, prep.checks
    cap = ctx.memory.limit_bytes(proc.pid)
    # A larger cap than the pool's (a retry's, pool.py; a job alone, admission.py): the replayer is retired after.
    raised = grant.alone or (cap is not None and cap < grant.host_mb << 20)
    try:
        ctx.memory.raise_limit(proc.pid, grant.host_mb)
        rep = _watched(ctx, proc, proc.request(prep.msg, spec.timeout, "replay",
                                                total=spec.timeout * (len(replaycheck.RUNS) + 2)))
        found = replaycheck.decide(rep, prep, ref["trials"], spec.replay_trial, spec.other, run, spec.device)
        broken = found.status is not None  # kept only after a clean replay, like a worker after a pass
        return found, prep
    except procs.ProcTimeout as exc:
        return judge.Finding("timeout", f"replaying its kernels ({exc.phase}) ran past its {exc.seconds:g} s limit",
                             checks), prep
    except procs.ProcDied as exc:
        if ctx.memory.tripped(proc.pid):  # it never imported the candidate's module: the verifier's limit
            err = memfault.host_kill(memfault.StepLog(lambda: 0, [(exc.phase, 0)]), "replay", None,
                                     ctx.memory.limit_bytes(proc.pid), ctx.memory.held_at_kill(proc.pid))
            assert err is not None
            err.args = (f"{err} ({exc.phase})",)
            raise err from None
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
        return Verdict(status, reason, checks={**base, **(extra or {})}, device=spec.device,
                       versions=slot.info.get("versions", {}), **fields)

    # The steps the worker announces, with its resident bytes as this process reads them: whose a
    # death at the memory cap is (memfault.py).
    steps = memfault.StepLog(lambda: ctx.memory.resident(proc.pid))

    held = contextlib.ExitStack()  # the job's hold on its GPU (admission.py), from its plan to its end
    try:
        grant, stream = _memory_plan(ctx, slot, spec, base)
        if ctx.admission is not None:
            held.enter_context(ctx.admission.hold(slot.gpu, grant.alone))
        ctx.memory.raise_limit(proc.pid, grant.host_mb)  # a job alone: the worker is retired after
        lap("plan")
        phases["plan.wait"] = base["memory"].pop("wait_s", 0.0)
        if spec.device == "cuda" and spec.timed:  # an untimed job (the resized twin) uses no reference medians
            prefetch_ref_timing(ctx, spec, slot.gpu)
        steps("inputs load")
        nonce = proc.begin({"cmd": "load", "source": spec.candidate, "problem": spec.source,
                            "seeds": spec.seeds[1:1 + spec.trials + TIMING_SETS], "stream": stream,
                            "template_cache": ctx.template if spec.device == "cuda" else None,
                            "device_memory_fraction": grant.fraction})
        ref = _trials(ctx, slot, spec, grant.budgets(spec.device == "cuda" and spec.timed))
        phases["reference_trials.wait"] = ref.get("wait_s", 0.0)
        base["memory"].update({k: v for k, v in (ref.get("memory") or {}).items() if v is not None})
        if isinstance(ref.get("screen"), dict):  # screened by this job's reference, or by an earlier job's
            base["screening"] = {"seconds": ref["screen"]["seconds"], "here": bool(ref.get("screened_here"))}
        lap("reference_trials")
        load = _watched(ctx, slot.proc, proc.finish(nonce, t, phase, on_progress=steps))
        lap("load")
        if load.get("problem_memory"):  # made before any candidate code: the problem's, not the candidate's
            raise reference.ProblemError(str(load["problem_memory"]))
        f = judge.hygiene(load)
        if f is None and load.get("error"):
            f = judge.error_status(load["error"], {"denials": []})
            if f.status in ("runtime_error", "crash"):
                f = judge.Finding("compile_error", f"importing the candidate failed: {f.reason.split(' raised ', 1)[-1]}")
        if f is not None:
            return verdict(f.status, f.reason, f.checks), False
        phase = "construct"
        steps(phase)
        run = proc.request({"cmd": "run", "init_args": ref["init_args"], "init_kwargs": ref["init_kwargs"],
                            "init_seed": spec.seeds[0], "call_seed": spec.seeds[-3], "n_trials": spec.trials,
                            "construct_ops": sorted(ref.get("construct_ops") or {}),
                            "plan": spec.plan()}, t, phase, total=t * (len(spec.plan()) + 2), on_progress=steps)
        run = _watched(ctx, slot.proc, run)
        lap("run")
        if isinstance(run.get("memory"), dict):  # the worker's own figures: informative only
            base["memory"].update({k: run["memory"].get(k) for k in ("worker_peak_bytes", "streamed")})
        run_s = run.get("run_s")
        for k, sec in (run_s.items() if isinstance(run_s, dict) else ()):
            phases[f"run.{k}"] = round(float(sec), 4)
        if spec.device == "cuda":  # an out-of-memory error in forward within its own budget: the verifier's
            for call in run.get("calls") or ():
                err = memfault.device_oom(call, base["memory"].get("plan"), grant.device_bytes)
                if err is not None:
                    raise err
        if ref.get("insensitive_inputs"):  # a property of the problem, stated with every verdict on it
            base["problem"] = {"insensitive_inputs": ref["insensitive_inputs"]}
        found = judge.hygiene(run) or judge.judge_calls(run, ref["trials"], spec.device, ref.get("construct_ops") or {})
        found.checks["phase_s"] = phases
        lap("judge")
        replayed = None
        if found.status is None:  # provenance, from a process that never ran the candidate's module
            phase = "replay"
            found, replayed = _replay(ctx, slot, spec, ref, run, found, stream, grant)
            lap("replay")
        if found.status is None and spec.device == "cuda" and spec.timed:
            phase = "timing"
            found = _time(ctx, slot, spec, ref, found, fields, replayed if ctx.timing_in == "replayer" else None)
            lap("timing")
        if found.status is not None:  # the worker is recycled anyway: no clean-up round trip
            return verdict(found.status, found.reason, found.checks), False
        phase = "clean-up"
        end = _watched(ctx, slot.proc, proc.request({"cmd": "end"}, max(t, 30.0), phase))
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
        err = memfault.harness_timeout(exc.phase, exc.seconds) if phase in ("import", "construct") else None
        if err is not None:
            raise err from None
        return verdict("timeout", f"{exc.phase} ran past its {exc.seconds:g} s limit"), False
    except procs.ProcDied as exc:
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
