"""VerifierPool: persistent warm sandboxed workers, trusted reference processes, many pairs at once.

Torch import and CUDA initialisation are paid once per worker, not per candidate. Any candidate that
does not pass, or leaves its worker tainted, gets its worker killed and replaced in the background
(a fork from the zygote). Several threads may call `verify` at once; `verify_many` does so itself.

Nothing is charged to a candidate or a problem for the pool's own failures:
- a worker or reference found dead when handed out (it died idle) is replaced first;
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

import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from distill.verifier import leftovers, limits, procs, reference, trusted, twins
from distill.verifier.sandbox import worker
from distill.verifier.context import DeviceBudget, Handouts, JobContext, RefTimings, Slot
from distill.verifier.gate import TimingGate, timing_core
from distill.verifier.handout import Handout, PoolError, References
from distill.verifier.job import JobSpec, apply_ref_timing, ref_timing, run_job
from distill.verifier.problemio import ProblemError
from distill.verifier.verdict import Verdict

__all__ = ["PoolError", "ProblemError", "VerifierPool"]

DEFAULT_TIMEOUT = {"cpu": 60.0, "cuda": 60.0}
DEFAULT_MEMORY_MB = {"cpu": 4096, "cuda": 16384}
# The longest a job holds a reference (job.py: trials wait max(t, 120) s; a timer compiles and
# times for up to 600 s each) and a worker (its phases: load, run, timing, clean-up), in s.
REF_HOLD = 120.0
TIMER_HOLD = 1200.0
CLOSE_WAIT = 10.0  # seconds close() waits for background starts before it removes their folders
# Which baselines a GPU verification times (`VerifierPool(timing=...)`; the first is the default):
# the candidate against the reference run eagerly and under torch.compile, against eager only (no
# compile: on the H100 it took most of ~14 s per `gpu`-profile problem), or nothing timed at all
# (correctness only; speedups stay null). Recorded in every verdict's `checks["baselines"]`.
TIMING = ("eager+compile", "eager", "off")


class VerifierPool:
    """A pool of sandboxed workers. Use as a context manager, or call `close()`."""

    def __init__(self, workers: int | None = None, device: str = "cpu", timeout: float | None = None,
                 max_memory_mb: int | None = None, gpus: list[int] | None = None, trials: int = 5,
                 timing_trials: int = 100, warmup: int = 3, static_checks: bool = True,
                 lockdown: bool | tuple[str, ...] = True, references: int | None = None,
                 start_timeout: float = 300.0, resized: str = twins.RESIZED[0], device_memory_mb: int | None = None,
                 stream_inputs: bool | None = None, timing_in: str = "worker", timing: str = TIMING[0]) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")
        if resized not in twins.RESIZED:
            raise ValueError(f"resized must be one of {', '.join(twins.RESIZED)}, not {resized!r}")
        if timing not in TIMING:
            raise ValueError(f"timing must be one of {', '.join(TIMING)}, not {timing!r}")
        if timing_in not in ("worker", "replayer"):
            raise ValueError(f"timing_in must be 'worker' or 'replayer', not {timing_in!r}")
        # timing_in, which process a GPU timing runs in: the candidate's worker (the default, measured on
        # the H100), or a replayer timing the replayed record, where none of the candidate's Python runs
        # (replayer.time_replay: written for issue 30, not yet run on a GPU). Jobs read it in self.context.
        self.device = device
        self.resized = resized
        self.timing = timing if device == "cuda" else "off"  # the CPU lane times nothing
        self.gpus = gpus if gpus is not None else (self._count_gpus() if device == "cuda" else [0])
        n = workers or (max(1, min(8, (os.cpu_count() or 2) - 2)) * len(self.gpus) if device == "cuda" else 1)
        self.timeout = float(timeout or DEFAULT_TIMEOUT[device])
        self.max_memory_mb = max_memory_mb if max_memory_mb is not None else DEFAULT_MEMORY_MB[device]
        self.spec_defaults = dict(trials=trials, timing_trials=timing_trials, warmup=warmup,
                                  static_checks=static_checks)
        from distill.verifier.sandbox.lockdown import DEFAULT_LAYERS

        # True: the layers known to work on this device; False: none; or a tuple naming them.
        self.layers = DEFAULT_LAYERS[device] if lockdown is True else () if lockdown is False else tuple(lockdown)
        self.start_timeout = start_timeout
        leftovers.sweep()  # what pools killed before their close() left behind
        self.root = tempfile.mkdtemp(prefix=f"{leftovers.TEMP_PREFIX}{os.getpid()}-")
        self.memory = limits.MemoryGuard()
        self.trusted = trusted.code_roots()
        self.exec_files = trusted.toolchain() if device == "cuda" else []
        self.children = device == "cuda"  # Triton on GPU runs ptxas and cc; the interpreter runs nothing
        self.template = os.path.join(self.root, "triton-template")
        os.makedirs(self.template, exist_ok=True)
        self._closed = False
        # A start is a launch and a ready message, each under start_timeout.
        start_s = 2 * start_timeout
        job_s = REF_HOLD + self.timeout * (trials + 14) + 60  # the trials, the replay (5 limits), timing, clean-up
        self._slots = [Slot(i, self.gpus[i % len(self.gpus)]) for i in range(n)]
        # Device memory per worker (caps.py): as given, or its share of 80% of the GPU, the rest left to
        # the reference processes and the timers; never under a tenth.
        self.budget = DeviceBudget(device, self.max_memory_mb, device_memory_mb,
                                   max(0.1, min(0.8, 0.8 / -(-n // len(self.gpus)))))
        self._free: Handout[Slot] = Handout("worker", start_s + job_s, lambda: self._closed)
        self._n_refs = references or (max(4, n // 2) if device == "cuda" else 1)
        self._refs = {g: References("reference process", lambda g=g: self._start_reference(g, "ref"),
                                    self._discard, start_s + max(REF_HOLD, self.timeout), lambda: self._closed)
                      for g in self.gpus}
        # Reference processes that only compile and time references (torch.compile holds one for
        # seconds per problem): correctness work never queues behind a compile.
        self._n_timers = 2 if device == "cuda" else 0
        self._timers = {g: References("reference timer", lambda g=g: self._start_reference(g, "timer"),
                                      self._discard, start_s + TIMER_HOLD, lambda: self._closed) for g in self.gpus}
        # Replayers (replayer.py): confined like workers, they never import a candidate's module. A job
        # holds one for its replay only (seconds); one retired after a replay is replaced in the background.
        self._n_replayers = max(1, -(-n // len(self.gpus)) // 2)
        self._replayers = {g: References("replayer", lambda g=g: self._start_replayer(g), self._discard,
                                         start_s + self.timeout * 6, lambda: self._closed) for g in self.gpus}
        self._scratch: dict[int, str] = {}  # replayer pid -> its scratch folder
        # pid -> (process, GPU) for every worker and reference: what a timing run pauses and what
        # close() kills. Only processes still alive are signalled, so a reused pid is never someone else's.
        self.live: dict[int, tuple[procs.Proc, int]] = {}
        self.gates = {g: TimingGate(lambda g=g: [pid for pid, (pr, gg) in list(self.live.items())
                                                 if gg == g and pr.alive()],
                                    core=timing_core(g) if device == "cuda" else None) for g in self.gpus}
        self.peaks: dict[int, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._started = False
        self._background: set[threading.Thread] = set()
        # `reference` late-bound: a job calls whatever acquire_reference is now (test_verifier_faults
        # wraps it to kill a process mid-job); a retry's fresh reference comes straight from the queue.
        handouts = Handouts(lambda gpu: self.acquire_reference(gpu), lambda gpu: self._refs[gpu].acquire(fresh=True),
                            self.release_reference, self.acquire_timer, self.release_timer,
                            self.acquire_replayer, self.release_replayer)
        self.context = JobContext(device, handouts, self.memory, self.budget, self.gates, self.peaks, RefTimings(),
                                  self.template, stream_inputs, timing_in, compile_reference=timing == TIMING[0])
        self.stats = {"recycled": 0, "started": 0, "replaced": 0, "retried": 0}

    # -- lifecycle ------------------------------------------------------------------------------
    @staticmethod
    def _count_gpus() -> list[int]:
        import torch

        return list(range(max(torch.cuda.device_count(), 1)))

    def start(self) -> "VerifierPool":
        with self._lock:
            if self._closed:
                raise PoolError("the pool is closed")
            if self._started:
                return self
            self._started = True
        try:
            self._start_all()
        except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol, procs.ProcStartError) as exc:
            self.close()  # nothing half-started outlives a failed start
            raise PoolError(f"the pool could not start its reference processes: {exc}") from None
        except BaseException:
            self.close()
            raise
        return self

    def _start_all(self) -> None:
        # References first: on GPU they build the warm Triton cache the workers start from.
        jobs = [(g, k) for g in self.gpus for k in range(self._n_refs + self._n_timers)]
        with ThreadPoolExecutor(max_workers=len(jobs)) as ex:
            started = ex.map(lambda gk: self._start_reference(gk[0], "ref" if gk[1] < self._n_refs else "timer"), jobs)
            for (g, k), proc in zip(jobs, started):
                (self._refs if k < self._n_refs else self._timers)[g].add(proc)
        replayers = [g for g in self.gpus for _ in range(self._n_replayers)]
        with ThreadPoolExecutor(max_workers=len(self._slots) + len(replayers)) as ex:
            later = [ex.submit(self._start_replayer, g) for g in replayers]
            list(ex.map(self._start_worker, self._slots))
            for g, fut in zip(replayers, later):
                self._replayers[g].add(fut.result())
        for slot in self._slots:
            self._free.put(slot)
        if self.device == "cuda":  # the physical floor needs the measured ceilings: once, GPU idle
            for g in self.gpus:
                ref = self.acquire_reference(g)
                try:
                    with self.gates[g].quiet(keep=ref.pid):
                        ref.send({"cmd": "peaks"})
                        self.peaks[g] = ref.receive(300, "device peaks")
                finally:
                    self.release_reference(g, ref, False)

    def __enter__(self) -> "VerifierPool":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Kill every process, remove every cgroup, arena and folder of this pool."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for refs in list(self._refs.values()) + list(self._timers.values()) + list(self._replayers.values()):
            refs.drain()
        for proc, _ in list(self.live.values()):  # workers and references, busy or starting included
            proc.kill()
        for thread in list(self._background):  # their starts end now that their processes are dead
            thread.join(CLOSE_WAIT)
        for proc, _ in list(self.live.values()):
            proc.kill()
        self.live.clear()
        self.memory.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _register(self, proc: procs.Proc, gpu: int) -> None:
        self.live[proc.pid] = (proc, gpu)
        if self._closed:  # close() may have missed it: it started while the pool closed
            self._discard(proc)

    def _discard(self, proc: procs.Proc) -> None:
        """Kill a process of this pool and remove what it had (its cgroup)."""
        self.live.pop(proc.pid, None)
        proc.kill()
        self.memory.remove(proc.pid)
        if proc.pid in self._scratch:
            shutil.rmtree(self._scratch.pop(proc.pid), ignore_errors=True)

    def _start_reference(self, gpu: int, role: str) -> procs.Proc:
        own = os.path.join(self.root, f"{role}-{gpu}-{os.urandom(4).hex()}")
        os.mkdir(own)  # not makedirs: after close() the root is gone and stays gone
        cfg = {"device": self.device, "gpu": gpu, "template_cache": self.template, "own_cache": own}
        proc = procs.Proc(reference.reference_main, cfg, f"tritonforge-{role}-{gpu}", self.start_timeout)
        self._register(proc, gpu)
        try:
            ready = proc.wait_ready(self.start_timeout)
            if isinstance(ready.get("device_total"), int):
                self.budget.totals[gpu] = ready["device_total"]
        except BaseException:
            self._discard(proc)
            raise
        return proc

    def _start_worker(self, slot: Slot) -> None:
        """Start a fresh worker in `slot` (which holds none); on failure the slot keeps why."""
        slot.proc, slot.info = None, {}
        proc = None
        try:
            if self._closed:
                raise PoolError("the pool is closed")
            slot.scratch = os.path.join(self.root, f"w{slot.index}-{os.urandom(4).hex()}")
            os.mkdir(slot.scratch)  # not makedirs: after close() the root is gone and stays gone
            if self.device == "cuda":
                shutil.copytree(self.template, os.path.join(slot.scratch, "triton"), dirs_exist_ok=True)
            cfg = {"device": self.device, "gpu": slot.gpu, "scratch": slot.scratch, "trusted_roots": self.trusted,
                   "exec_files": self.exec_files, "layers": list(self.layers), "children": self.children,
                   "device_memory_fraction": self.budget.fraction(slot.gpu), "read_dirs": [self.template]}
            proc = procs.Proc(worker.worker_main, cfg, f"tritonforge-worker-{slot.index}", self.start_timeout)
            self.memory.add(proc.pid, self.max_memory_mb)
            self._register(proc, slot.gpu)
            slot.info = proc.wait_ready(self.start_timeout)
            slot.proc = proc
            self.stats["started"] += 1
        except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol, procs.ProcStartError, PoolError,
                OSError) as exc:
            if proc is not None:
                self._discard(proc)
            slot.info = {"start_error": str(exc)}
        if self._closed and slot.proc is not None:  # the pool closed while this worker started
            self._discard(slot.proc)
            slot.proc = None

    def _start_replayer(self, gpu: int) -> procs.Proc:
        """A replayer (replayer.py): the worker's process and confinement, serving `replay` only."""
        if self._closed:
            raise PoolError("the pool is closed")
        scratch = os.path.join(self.root, f"r{gpu}-{os.urandom(4).hex()}")
        os.mkdir(scratch)  # not makedirs: after close() the root is gone and stays gone
        if self.device == "cuda":
            shutil.copytree(self.template, os.path.join(scratch, "triton"), dirs_exist_ok=True)
        cfg = {"device": self.device, "gpu": gpu, "scratch": scratch, "trusted_roots": self.trusted,
               "exec_files": self.exec_files, "layers": list(self.layers), "children": self.children,
               "device_memory_fraction": self.budget.fraction(gpu), "role": "replayer"}
        proc = procs.Proc(worker.worker_main, cfg, f"tritonforge-replayer-{gpu}", self.start_timeout)
        self._scratch[proc.pid] = scratch
        self.memory.add(proc.pid, self.max_memory_mb)
        self._register(proc, gpu)
        try:
            proc.wait_ready(self.start_timeout)
        except BaseException:
            self._discard(proc)
            raise
        return proc

    def acquire_replayer(self, gpu: int) -> procs.Proc:
        return self._replayers[gpu].acquire()

    def release_replayer(self, gpu: int, proc: procs.Proc, broken: bool) -> None:
        """Back to the queue, or (`broken`: it ran a replay that did not pass) killed and replaced off
        the caller's thread."""
        if not broken:
            self._replayers[gpu].release(proc, False)
            return

        def work() -> None:
            new = None
            try:
                self._discard(proc)
                new = self._start_replayer(gpu)
            except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol, procs.ProcStartError, PoolError, OSError):
                new = None  # the next acquire starts one
            finally:
                self._replayers[gpu].add(new)
                self._background.discard(threading.current_thread())

        thread = threading.Thread(target=work, name=f"tritonforge-replayer-{gpu}", daemon=True)
        self._background.add(thread)
        thread.start()

    def _retire(self, slot: Slot) -> None:
        """Kill the slot's worker (if any) and remove its scratch."""
        if slot.proc is not None:
            self._discard(slot.proc)
            slot.proc = None
        if slot.scratch:
            shutil.rmtree(slot.scratch, ignore_errors=True)

    def _recycle(self, slot: Slot) -> None:
        """Kill the slot's worker and refill the slot, all off the caller's thread. The slot always
        goes back to the queue, with a worker or with why none could start."""
        self.stats["recycled"] += 1

        def work() -> None:
            try:
                self._retire(slot)
                self._start_worker(slot)
            finally:
                self._free.put(slot)
                self._background.discard(threading.current_thread())

        thread = threading.Thread(target=work, name=f"tritonforge-recycle-{slot.index}", daemon=True)
        self._background.add(thread)
        thread.start()

    def _take_worker(self) -> Slot:
        """A slot with a live worker. One found dead (it died idle, or never started) is replaced
        here, once; a replacement that fails to start raises PoolError."""
        slot = self._free.get()
        if slot.proc is not None and slot.proc.alive():
            return slot
        self.stats["replaced"] += 1
        try:
            self._retire(slot)
            self._start_worker(slot)
        except BaseException:
            self._free.put(slot)
            raise
        if slot.proc is None:
            self._free.put(slot)  # the next caller tries again
            raise PoolError(f"a worker could not start: {slot.info.get('start_error')}")
        return slot

    @property
    def device_memory_bytes(self) -> int:
        """Each worker's device budget, in bytes."""
        return self.budget.device_bytes()

    # -- verification ---------------------------------------------------------------------------
    @property
    def sandbox(self) -> dict[str, Any]:
        """What confinement the workers actually got (measured at their start)."""
        info = next((s.info for s in self._slots if s.info.get("sandbox")), {})
        return {**info.get("sandbox", {}), "memory": self.memory.mode}

    def acquire_reference(self, gpu: int) -> procs.Proc:
        return self._refs[gpu].acquire()

    def release_reference(self, gpu: int, proc: procs.Proc, broken: bool) -> None:
        self._refs[gpu].release(proc, broken)

    def acquire_timer(self, gpu: int) -> procs.Proc:
        """A reference process for compiling and timing references (a plain one on pools without)."""
        return (self._timers if self._n_timers else self._refs)[gpu].acquire()

    def release_timer(self, gpu: int, proc: procs.Proc, broken: bool) -> None:
        (self._timers if self._n_timers else self._refs)[gpu].release(proc, broken)

    def verify(self, problem: Any, candidate_source: str, timeout: float | None = None,
               static_checks: bool | None = None, seeds: list[int] | None = None) -> Verdict:
        """Verify one (problem, candidate) pair. `problem` is a Problem-like object or module source.

        The verdict records its trials' seeds in `checks["replay"]` once judged (the candidate has
        finished by then); passing them back as `seeds` replays the same inputs and weights.
        Raises ProblemError when the problem is broken (its reference failed, on a fresh process
        too), PoolError when the pool could not serve the pair in time or closed meanwhile."""
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
            verdict = twins.check_resized(lambda tspec: self._attempt(tspec, last=True)[0], problem,
                                          candidate_source, spec, verdict, required=self.resized == "required")
        return verdict

    def _attempt(self, spec: JobSpec, last: bool) -> tuple[Verdict | None, Slot, str]:
        """One run of a job: (verdict, slot, "") or, unless `last`, (None, slot, why) when the pool
        failed it (the worker died while running it, or the reference process failed)."""
        slot = self._take_worker()
        keep = False
        ctx = self.context.attempt(last)
        try:
            try:
                verdict, keep = run_job(ctx, slot, spec)
            except ProblemError as exc:
                if self._closed:
                    raise PoolError("the pool closed during this job") from None
                if ctx.reference_broke and not last:
                    return None, slot, str(exc)
                raise
            died = (verdict.status == "crash" and not slot.proc.alive()
                    and not self.memory.tripped(slot.proc.pid))
            if died and self._closed:
                raise PoolError("the pool closed during this job")
            if died and not last:
                return None, slot, verdict.reason
            return verdict, slot, ""
        finally:
            if keep:
                self._free.put(slot)
            else:
                self._recycle(slot)

    def verify_many(self, pairs: Iterable[tuple[Any, str]]) -> list[Verdict | ProblemError | PoolError]:
        """Verify many pairs concurrently (one thread per worker); results in input order.

        Each entry is the pair's Verdict or, where `verify` raised for that pair, the ProblemError
        (its problem is broken) or PoolError it raised: one broken problem costs only its own pairs."""
        pairs = list(pairs)
        self.start()

        def one(pair: tuple[Any, str]) -> Verdict | ProblemError | PoolError:
            try:
                return self.verify(pair[0], pair[1])
            except (ProblemError, PoolError) as exc:
                return exc

        # More threads than workers: a thread waiting for its reference's torch.compile timing has
        # already given its worker back, and others should use it meanwhile.
        with ThreadPoolExecutor(max_workers=max(1, 4 * len(self._slots))) as ex:
            return list(ex.map(one, pairs))
