"""VerifierPool: persistent warm sandboxed workers, trusted reference processes, many pairs at once.

Torch import and CUDA initialisation are paid once per worker, not per candidate. Any candidate that
does not pass, or leaves its worker tainted, gets its worker killed and replaced in the background
(a fork from the zygote). Several threads may call `verify` at once; `verify_many` does so itself.

The processes themselves (starting, handing out, replacing and killing workers, references, timers
and replayers) are the pool's Fleet (fleet.py); this module decides what runs on them: a job, its
retry, its reference timing and its resized twin.

Nothing is charged to a candidate or a problem for the pool's own failures:
- a worker or reference found dead when handed out (it died idle) is replaced first (fleet.py);
- a job whose worker died while running it (not at the memory cap), or whose reference process
  failed (died, hung, garbled its reply), runs once more, on a fresh worker and a fresh reference.
  Only the second run's outcome counts: `crash` if that worker dies too, `ProblemError` if that
  reference fails too. A retried verdict says why in `checks["retry"]`.
- every wait has a deadline (`handout`, `procs`); what cannot be had in time raises `PoolError`.

What a job needs of the pool (its handouts, caps, gates, the reference-timing cache) it gets as a
JobContext (context.py), built here once and copied for each run of a job; the resized-twin check
gets `_attempt` as a callable. Neither job.py nor twins.py imports this module.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from distill.verifier import lanegap, procs, sizing, twins
from distill.verifier.context import Handouts, JobContext, RefTimings, Slot
from distill.verifier.fleet import Fleet
from distill.verifier.handout import PoolError
from distill.verifier.job import run_job
from distill.verifier.jobspec import JobSpec
from distill.verifier.refwork import apply_ref_timing, ref_timing
from distill.verifier.problemio import ProblemError, ResourceError
from distill.verifier.verdict import TIMING, Verdict

__all__ = ["PoolError", "ProblemError", "ResourceError", "VerifierPool"]

DEFAULT_TIMEOUT = {"cpu": 60.0, "cuda": 60.0}
# The parent judges each job's messages on that job's thread while a worker waits for the acknowledgement:
# a comparison is a series of torch calls, each giving the GIL back, and CPython hands it back only every
# switch interval (5 ms) while another thread runs Python (decoding, judging, the memory watchdog). On the
# H200 a worker waited ~65 ms an acknowledgement for ~6.5 ms of comparison; on the 2-core box a 2^22-value
# comparison beside two busy threads took a median 97.6 ms at 5 ms and 23.3 ms at 0.5 ms
# (bench/bench_parent_gil.py, bench/RESULTS.md). Open pools hold the interval at this; the last one closed puts it back.
SWITCH_INTERVAL_S = 0.0005
_switch = threading.Lock()
_switch_held = {"pools": 0, "before": 0.0}


def _switch_interval(pool: "VerifierPool", hold: bool) -> None:
    """`pool` holds the interval (`hold`) or lets it go; once each, whatever the threads."""
    with _switch:
        if pool._holds_switch == hold:
            return
        pool._holds_switch = hold
        if hold and _switch_held["pools"] == 0:
            _switch_held["before"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch_held["before"], SWITCH_INTERVAL_S))
        _switch_held["pools"] += 1 if hold else -1
        if not hold and _switch_held["pools"] == 0:
            sys.setswitchinterval(_switch_held["before"])


class VerifierPool:
    """A pool of sandboxed workers. Use as a context manager, or call `close()`."""

    def __init__(self, workers: int | None = None, device: str = "cpu", timeout: float | None = None,
                 max_memory_mb: int | None = None, gpus: list[int] | None = None, trials: int = 5,
                 timing_trials: int = 100, warmup: int = 3, static_checks: bool = True,
                 lockdown: bool | tuple[str, ...] = True, references: int | None = None,
                 start_timeout: float = 300.0, resized: str = twins.RESIZED[0], device_memory_mb: int | None = None,
                 stream_inputs: bool | None = None, timing_in: str = "replayer", timing: str = TIMING[0]) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")
        if resized not in twins.RESIZED:
            raise ValueError(f"resized must be one of {', '.join(twins.RESIZED)}, not {resized!r}")
        if timing not in TIMING:
            raise ValueError(f"timing must be one of {', '.join(TIMING)}, not {timing!r}")
        if timing_in not in ("worker", "replayer"):
            raise ValueError(f"timing_in must be 'worker' or 'replayer', not {timing_in!r}")
        # timing_in, which process a GPU timing runs in: a replayer timing the replayed record, where none
        # of the candidate's Python runs (the default: replayer.time_replay), or the candidate's worker.
        # On the H100 the two agree per kernel within 0.7% (bench/RESULTS.md, 2026-11-27); the replayer
        # costs ~12% of a pool's wall time. Jobs read it in self.context.
        self.device = device
        self.resized = resized
        self.timing = timing if device == "cuda" else "off"  # the CPU lane times nothing
        self.gpus = gpus if gpus is not None else (self._count_gpus() if device == "cuda" else [0])
        self.timeout = float(timeout or DEFAULT_TIMEOUT[device])
        # Sizes not given come from the machine (sizing.py); the rule is printed when the pool starts.
        self.sizing = sizing.derive(device, len(self.gpus), workers, max_memory_mb, device_memory_mb)
        self.max_memory_mb = self.sizing.host_mb
        self.spec_defaults = dict(trials=trials, timing_trials=timing_trials, warmup=warmup,
                                  static_checks=static_checks)
        self._holds_switch = False
        self.fleet = Fleet(device, self.gpus, self.sizing.workers, references, self.timeout, trials,
                           self.max_memory_mb, device_memory_mb, lockdown, start_timeout)
        fleet = self.fleet
        # `reference` late-bound: a job calls whatever acquire_reference is now (test_verifier_faults
        # wraps it to kill a process mid-job); a retry's fresh reference comes straight from the queue.
        handouts = Handouts(lambda gpu: self.acquire_reference(gpu), lambda gpu: fleet.acquire_reference(gpu, fresh=True),
                            self.release_reference, fleet.acquire_timer, fleet.release_timer,
                            fleet.acquire_replayer, fleet.release_replayer)
        self.context = JobContext(device, handouts, fleet.memory, fleet.budget, fleet.gates, fleet.peaks, RefTimings(),
                                  fleet.template, stream_inputs, timing_in, compile_reference=timing == TIMING[0],
                                  admission=fleet.admission, scratch=os.path.join(fleet.root, "parent"))
        self.stats = fleet.stats  # the fleet's counters (recycled, started, replaced) and the pool's retries
        self.stats["retried"] = 0

    # -- lifecycle ------------------------------------------------------------------------------
    @staticmethod
    def _count_gpus() -> list[int]:
        import torch

        return list(range(max(torch.cuda.device_count(), 1)))

    def start(self) -> "VerifierPool":
        """Start every process (once); a failed start closes the pool and raises PoolError."""
        first = not self.fleet.started
        self.fleet.start()
        _switch_interval(self, True)
        if first:  # one line on stderr: the sizes and how they were derived
            print(self.sizing.describe(self.device, self.fleet.budget.device_bytes() if self.device == "cuda" else None),
                  file=sys.stderr, flush=True)
        return self

    def __enter__(self) -> "VerifierPool":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self.fleet.closed

    def close(self) -> None:
        """Kill every process, remove every cgroup, arena and folder of this pool."""
        self.fleet.close()
        _switch_interval(self, False)

    @property
    def device_memory_bytes(self) -> int:
        """Each worker's device budget, in bytes."""
        return self.fleet.budget.device_bytes()

    @property
    def sandbox(self) -> dict[str, Any]:
        """What confinement the workers actually got (measured at their start)."""
        return self.fleet.sandbox()

    # -- the references a job borrows (tests wrap acquire_reference on an instance) ---------------
    def acquire_reference(self, gpu: int) -> procs.Proc:
        return self.fleet.acquire_reference(gpu)

    def release_reference(self, gpu: int, proc: procs.Proc, broken: bool) -> None:
        self.fleet.release_reference(gpu, proc, broken)

    # -- verification ---------------------------------------------------------------------------
    def verify(self, problem: Any, candidate_source: str, timeout: float | None = None,
               static_checks: bool | None = None, seeds: list[int] | None = None) -> Verdict:
        """Verify one (problem, candidate) pair. `problem` is a Problem-like object or module source.

        The verdict records its trials' seeds in `checks["replay"]` once judged (the candidate has
        finished by then); passing them back as `seeds` replays the same inputs and weights.
        Raises ProblemError when the problem is broken (its reference failed, on a fresh process
        too), or, as its LaneError, when the CPU lane's interpreter cannot run a construct the candidate
        uses (lanegap.py); PoolError when the pool could not serve the pair in time or closed meanwhile."""
        self.start()
        problem, lane_twin = twins.lane_problem(problem, self.device)
        spec = JobSpec.make(problem, candidate_source, self.device, timeout or self.timeout,
                            **{**self.spec_defaults,
                               **({} if static_checks is None else {"static_checks": static_checks})}, seeds=seeds)
        spec.timed = self.timing != "off"
        early = spec.static_verdict()
        if early is not None:
            return early
        verdict, slot, why = self._attempt(spec, last=False)
        if verdict is None:
            self.stats["retried"] += 1
            verdict, slot, _ = self._attempt(spec, last=True)
            assert verdict is not None
            verdict.checks["retry"] = {"first_attempt": why}
        if verdict.status == "pass" and spec.timed:  # worker already released
            apply_ref_timing(verdict, ref_timing(self.context, spec, slot.gpu))
        verdict.checks["baselines"] = self.timing
        verdict.checks["replay"] = {"seeds": list(spec.seeds), "trials": spec.trials}
        if lane_twin:
            verdict.checks["cpu_twin"] = lane_twin
        if verdict.status == "pass" and self.resized != "off":
            # The twin runs once (last) on any reference: a fresh one (a new process, seconds on a GPU)
            # is for a retry after a reference failed, and would retire a warm one for every twin.
            verdict = twins.check_resized(lambda tspec: self._attempt(tspec, last=True, fresh=False)[0], problem,
                                          candidate_source, spec, verdict, required=self.resized == "required")
        lanegap.check(verdict, candidate_source, self.device)   # the interpreter's gap is no verdict on the candidate
        return verdict

    def _attempt(self, spec: JobSpec, last: bool, fresh: bool | None = None) -> tuple[Verdict | None, Slot, str]:
        """One run of a job: (verdict, slot, "") or, unless `last`, (None, slot, why) when the pool
        failed it (the worker died while running it, or the reference process failed). `fresh` (default:
        `last`): its reference processes must have served no job, as a retry's must. A run that hit
        the verifier's own memory limit (ResourceError, memfault.py) runs once more, with a larger host
        cap where the machine has one free (sizing.larger_host_mb); its outcome is the attempt's."""
        try:
            return self._run(spec, last, None, last if fresh is None else fresh)
        except ResourceError as exc:
            if self.fleet.closed:
                raise PoolError("the pool closed during this job") from None
            cap = self.fleet.budget.host_mb
            retry, bigger, room = self._larger(spec, exc, cap)
            if retry is None:
                raise ResourceError(f"{exc}; not retried: {room}", exc.step, exc.used_bytes, exc.limit_bytes,
                                    exc.resource) from None
            first = str(exc)
        self.stats["retried"] += 1
        try:
            verdict, slot, why = self._run(retry, True, bigger, True)
        except ResourceError as exc:
            raise ResourceError(f"{exc}; retried once with {room}", exc.step, exc.used_bytes, exc.limit_bytes,
                                exc.resource) from None
        if verdict is not None:
            verdict.checks["memory_retry"] = {"first_attempt": first, "retried_with": room,
                                              "host_budget_bytes": bigger << 20 if bigger else None}
        return verdict, slot, why

    def _larger(self, spec: JobSpec, exc: ResourceError, cap: int) -> tuple[JobSpec | None, int | None, str]:
        """What a job that hit the verifier's own limit retries with: (spec, host cap or None, why), or
        (None, None, why not). The host cap doubled where the memory is free (sizing.larger_host_mb); for
        device memory the GPU alone with its whole budget (admission.py), where its workers share it."""
        if exc.resource == "host":
            bigger = sizing.larger_host_mb(cap)
            if bigger is None:
                return None, None, f"this machine has no larger host cap than {cap} MB free"
            return spec, bigger, f"the host cap raised from {cap} to {bigger} MB"
        if exc.resource == "device" and not spec.alone and len(self.fleet.slots) > len(self.gpus):
            return dataclasses.replace(spec, alone=True), None, "the GPU alone, its whole budget (admission.py)"
        return None, None, f"no larger {exc.resource} limit to give it (VerifierPool device_memory_mb, timeout)"

    def _run(self, spec: JobSpec, last: bool, host_mb: int | None, fresh: bool) -> tuple[Verdict | None, Slot, str]:
        """`_attempt`'s one run; `host_mb`: the raised host cap of a retry (its worker is retired after)."""
        slot = self.fleet.take_worker()
        keep = False
        ctx = self.context.attempt(fresh)
        if host_mb is not None:
            ctx = dataclasses.replace(ctx, budget=dataclasses.replace(ctx.budget, host_mb=host_mb))
            if slot.proc is not None:
                self.fleet.memory.raise_limit(slot.proc.pid, host_mb)
        try:
            try:
                verdict, keep = run_job(ctx, slot, spec)
                keep = keep and host_mb is None  # a worker with a raised cap serves no other job
            except ResourceError:
                raise
            except ProblemError as exc:
                if self.fleet.closed:
                    raise PoolError("the pool closed during this job") from None
                if ctx.reference_broke and not last:
                    return None, slot, str(exc)
                raise
            died = (verdict.status == "crash" and not slot.proc.alive()
                    and not self.fleet.memory.tripped(slot.proc.pid))
            if died and self.fleet.closed:
                raise PoolError("the pool closed during this job")
            if died and not last:
                return None, slot, verdict.reason
            return verdict, slot, ""
        finally:
            self.fleet.release_worker(slot, keep)

    def verify_many(self, pairs: Iterable[tuple[Any, str]]) -> list[Verdict | ProblemError | PoolError]:
        """Verify many pairs concurrently (one thread per worker); results in input order.

        Each entry is the pair's Verdict or, where `verify` raised for that pair, the ProblemError
        (its problem is broken) or PoolError it raised: one broken problem costs only its own pairs. Any
        other exception is the verifier's own failure on that pair, returned as a PoolError naming it (its
        traceback chained), so it too costs only that pair: raised, it ended every pair of the batch (an
        RL step's rewards all scored as errors)."""
        pairs = list(pairs)
        self.start()

        def one(pair: tuple[Any, str]) -> Verdict | ProblemError | PoolError:
            try:
                return self.verify(pair[0], pair[1])
            except (ProblemError, PoolError) as exc:
                return exc
            except Exception as exc:  # noqa: BLE001 - the verifier's failure on one pair, kept with that pair
                err = PoolError(f"the verifier failed on this pair: {type(exc).__name__}: {str(exc)[:300]}")
                err.__cause__ = exc
                return err

        # More threads than workers: a thread waiting for its reference's torch.compile timing has
        # already given its worker back, and others should use it meanwhile.
        with ThreadPoolExecutor(max_workers=max(1, 4 * len(self.fleet.slots))) as ex:
            return list(ex.map(one, pairs))
