"""The pool's processes: workers in slots, reference processes, timers and replayers, kept alive.

A `Fleet` starts them (references first: on a GPU they build the warm Triton cache the workers start
from), hands them out and takes them back, replaces what died or broke (off the caller's thread
where it can), and kills them all at `close`. It is the trusted side's door to the sandbox: it starts
workers and replayers with `sandbox.worker.worker_main`, under the layers `sandbox.lockdown` names.

The pool (pool.py) owns one and decides what runs on its processes (jobs, retries, twins); nothing
here knows what a job is. Every wait has a deadline (`handout`, `procs`); what cannot be had in time
raises `PoolError`. Nothing is charged to a candidate for the fleet's own failures: a worker or
reference found dead when handed out is replaced first.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from distill.verifier import admission, leftovers, limits, procs, protocol, reference, trusted
from distill.verifier.context import DeviceBudget, Slot
from distill.verifier.gate import TimingGate, timing_core
from distill.verifier.handout import Handout, PoolError, References
from distill.verifier.sandbox import lockdown, worker

# The longest a job holds a reference (job.py: trials wait max(t, 120) s; a timer compiles and
# times for up to 600 s each) and a worker (its phases: load, run, timing, clean-up), in s.
REF_HOLD = 120.0
TIMER_HOLD = 1200.0
CLOSE_WAIT = 10.0  # seconds close() waits for background starts before it removes their folders
# What a failed start raises: the slot, or the queue, keeps why and the next caller tries again.
_START_ERRORS = (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol, procs.ProcStartError, PoolError, OSError)


class Fleet:
    """Every process of one pool, and the folders, caps and gates that go with them."""

    def __init__(self, device: str, gpus: list[int], workers: int | None, references: int | None, timeout: float,
                 trials: int, max_memory_mb: int, device_memory_mb: int | None,
                 confinement: bool | tuple[str, ...], start_timeout: float) -> None:
        self.device = device
        self.gpus = gpus
        n = workers or (max(1, min(8, (os.cpu_count() or 2) - 2)) * len(gpus) if device == "cuda" else 1)
        self.max_memory_mb = max_memory_mb
        # True: the layers known to work on this device; False: none; or a tuple naming them.
        self.layers = (lockdown.DEFAULT_LAYERS[device] if confinement is True else () if confinement is False
                       else tuple(confinement))
        self.start_timeout = start_timeout
        leftovers.sweep()  # what pools killed before their close() left behind
        self.root = tempfile.mkdtemp(prefix=f"{leftovers.TEMP_PREFIX}{os.getpid()}-")
        self.memory = limits.MemoryGuard()
        self.trusted = trusted.code_roots()
        self.exec_files = trusted.toolchain() if device == "cuda" else []
        self.children = device == "cuda"  # Triton on GPU runs ptxas and cc; the interpreter runs nothing
        self.template = os.path.join(self.root, "triton-template")
        os.makedirs(self.template, exist_ok=True)
        self.closed = False
        # A start is a launch and a ready message, each under start_timeout.
        start_s = 2 * start_timeout
        job_s = REF_HOLD + timeout * (trials + 14) + 60  # the trials, the replay (5 limits), timing, clean-up
        self.slots = [Slot(i, gpus[i % len(gpus)]) for i in range(n)]
        # Device memory per worker (caps.py): as given, or its share of 80% of the GPU, the rest left to
        # the reference processes and the timers; never under a tenth.
        self.budget = DeviceBudget(device, max_memory_mb, device_memory_mb,
                                   max(0.1, min(0.8, 0.8 / -(-n // len(gpus)))))
        self._free: Handout[Slot] = Handout("worker", start_s + job_s, lambda: self.closed)
        # Jobs share their GPU, or one whose plan needs more than a worker's share holds it alone (admission.py).
        self.admission = admission.Admission({g: sum(s.gpu == g for s in self.slots) for g in gpus}, start_s + job_s)
        self._n_refs = references or (max(4, n // 2) if device == "cuda" else 1)
        self._refs = {g: References("reference process", lambda g=g: self._start_reference(g, "ref"),
                                    self._discard, start_s + max(REF_HOLD, timeout), lambda: self.closed)
                      for g in gpus}
        # Reference processes that only compile and time references (torch.compile holds one for
        # seconds per problem, mostly on the host): correctness work never queues behind a compile, and
        # a quarter of the host's cores compile side by side (4 on a 16-core GPU box; timing itself
        # takes the GPU's gate one at a time).
        self._n_timers = max(2, min(8, (os.cpu_count() or 2) // 4)) if device == "cuda" else 0
        self._timers = {g: References("reference timer", lambda g=g: self._start_reference(g, "timer"),
                                      self._discard, start_s + TIMER_HOLD, lambda: self.closed) for g in gpus}
        # Replayers (replayer.py): confined like workers, they never import a candidate's module. A job
        # holds one for its replay only (seconds); one retired after a replay is replaced in the background.
        self._n_replayers = max(1, -(-n // len(gpus)) // 2)
        self._replayers = {g: References("replayer", lambda g=g: self._start_replayer(g), self._discard,
                                         start_s + timeout * 6, lambda: self.closed) for g in gpus}
        self._scratch: dict[int, str] = {}  # replayer pid -> its scratch folder
        # pid -> (process, GPU) for every worker and reference: what a timing run pauses and what
        # close() kills. Only processes still alive are signalled, so a reused pid is never someone else's.
        self.live: dict[int, tuple[procs.Proc, int]] = {}
        self.gates = {g: TimingGate(lambda g=g: [pid for pid, (pr, gg) in list(self.live.items())
                                                 if gg == g and pr.alive()],
                                    core=timing_core(g) if device == "cuda" else None) for g in gpus}
        self.peaks: dict[int, protocol.PeaksReply] = {}
        self._lock = threading.Lock()
        self._started = False
        self.background: set[threading.Thread] = set()  # recycle and replace threads still running
        # The fleet's counters; the pool adds its retries to the same dict.
        self.stats = {"recycled": 0, "started": 0, "replaced": 0}

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        """Start every process (once; later calls return at once). A failed start closes the fleet."""
        with self._lock:
            if self.closed:
                raise PoolError("the pool is closed")
            if self._started:
                return
            self._started = True
        try:
            self._start_all()
        except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol, procs.ProcStartError) as exc:
            self.close()  # nothing half-started outlives a failed start
            raise PoolError(f"the pool could not start its reference processes: {exc}") from None
        except BaseException:
            self.close()
            raise

    def _start_all(self) -> None:
        # References first: on GPU they build the warm Triton cache the workers start from.
        jobs = [(g, k) for g in self.gpus for k in range(self._n_refs + self._n_timers)]
        with ThreadPoolExecutor(max_workers=len(jobs)) as ex:
            started = ex.map(lambda gk: self._start_reference(gk[0], "ref" if gk[1] < self._n_refs else "timer"), jobs)
            for (g, k), proc in zip(jobs, started):
                (self._refs if k < self._n_refs else self._timers)[g].add(proc)
        replayers = [g for g in self.gpus for _ in range(self._n_replayers)]
        with ThreadPoolExecutor(max_workers=len(self.slots) + len(replayers)) as ex:
            later = [ex.submit(self._start_replayer, g) for g in replayers]
            list(ex.map(self._start_worker, self.slots))
            for g, fut in zip(replayers, later):
                self._replayers[g].add(fut.result())
        for slot in self.slots:
            self._free.put(slot)
        if self.device == "cuda":  # the physical floor needs the measured ceilings: once, GPU idle
            for g in self.gpus:
                ref = self.acquire_reference(g)
                try:
                    with self.gates[g].quiet(keep=ref.pid):
                        ref.send(protocol.Peaks(cmd="peaks"))
                        peaks: protocol.PeaksReply = ref.receive(300, "device peaks")
                        self.peaks[g] = peaks
                finally:
                    self.release_reference(g, ref, False)

    def close(self) -> None:
        """Kill every process, remove every cgroup, arena and folder of this fleet."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        for refs in list(self._refs.values()) + list(self._timers.values()) + list(self._replayers.values()):
            refs.drain()
        for proc, _ in list(self.live.values()):  # workers and references, busy or starting included
            proc.kill()
        for thread in list(self.background):  # their starts end now that their processes are dead
            thread.join(CLOSE_WAIT)
        for proc, _ in list(self.live.values()):
            proc.kill()
        self.live.clear()
        self.memory.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _register(self, proc: procs.Proc, gpu: int) -> None:
        self.live[proc.pid] = (proc, gpu)
        if self.closed:  # close() may have missed it: it started while the fleet closed
            self._discard(proc)

    def _discard(self, proc: procs.Proc) -> None:
        """Kill a process of this fleet and remove what it had (its cgroup)."""
        self.live.pop(proc.pid, None)
        proc.kill()
        self.memory.remove(proc.pid)
        if proc.pid in self._scratch:
            shutil.rmtree(self._scratch.pop(proc.pid), ignore_errors=True)

    def _in_background(self, work: Callable[[], None], name: str) -> None:
        """Run `work` on a daemon thread that close() waits for (CLOSE_WAIT); `work` leaves the set itself."""
        thread = threading.Thread(target=work, name=name, daemon=True)
        self.background.add(thread)
        thread.start()

    # -- starting -------------------------------------------------------------------------------
    def _start_reference(self, gpu: int, role: str) -> procs.Proc:
        own = os.path.join(self.root, f"{role}-{gpu}-{os.urandom(4).hex()}")
        os.mkdir(own)  # not makedirs: after close() the root is gone and stays gone
        cfg = {"device": self.device, "gpu": gpu, "template_cache": self.template, "own_cache": own, "role": role}
        proc = procs.Proc(reference.reference_main, cfg, f"tritonforge-{role}-{gpu}", self.start_timeout)
        self._register(proc, gpu)
        try:
            ready: protocol.RefReady = proc.wait_ready(self.start_timeout)
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
            if self.closed:
                raise PoolError("the pool is closed")
            slot.scratch = os.path.join(self.root, f"w{slot.index}-{os.urandom(4).hex()}")
            os.mkdir(slot.scratch)  # not makedirs: after close() the root is gone and stays gone
            if self.device == "cuda":
                shutil.copytree(self.template, os.path.join(slot.scratch, "triton"), dirs_exist_ok=True)
            cfg = {"device": self.device, "gpu": slot.gpu, "scratch": slot.scratch, "trusted_roots": self.trusted,
                   "exec_files": self.exec_files, "layers": list(self.layers), "children": self.children,
                   "device_memory_fraction": self.budget.fraction(slot.gpu), "read_dirs": [self.template]}
            proc = procs.Proc(worker.worker_main, cfg, f"tritonforge-worker-{slot.index}", self.start_timeout, untrusted=True)
            self.memory.add(proc.pid, self.max_memory_mb)
            self._register(proc, slot.gpu)
            ready: protocol.SandboxReady = proc.wait_ready(self.start_timeout)
            slot.info = ready
            slot.proc = proc
            self.stats["started"] += 1
        except _START_ERRORS as exc:
            if proc is not None:
                self._discard(proc)
            slot.info = {"start_error": str(exc)}
        if self.closed and slot.proc is not None:  # the fleet closed while this worker started
            self._discard(slot.proc)
            slot.proc = None

    def _start_replayer(self, gpu: int) -> procs.Proc:
        """A replayer (replayer.py): the worker's process and confinement, serving `replay` only."""
        if self.closed:
            raise PoolError("the pool is closed")
        scratch = os.path.join(self.root, f"r{gpu}-{os.urandom(4).hex()}")
        os.mkdir(scratch)  # not makedirs: after close() the root is gone and stays gone
        if self.device == "cuda":
            shutil.copytree(self.template, os.path.join(scratch, "triton"), dirs_exist_ok=True)
        cfg = {"device": self.device, "gpu": gpu, "scratch": scratch, "trusted_roots": self.trusted,
               "exec_files": self.exec_files, "layers": list(self.layers), "children": self.children,
               "device_memory_fraction": self.budget.fraction(gpu), "role": "replayer"}
        proc = procs.Proc(worker.worker_main, cfg, f"tritonforge-replayer-{gpu}", self.start_timeout, untrusted=True)
        self._scratch[proc.pid] = scratch
        self.memory.add(proc.pid, self.max_memory_mb)
        self._register(proc, gpu)
        try:
            proc.wait_ready(self.start_timeout)
        except BaseException:
            self._discard(proc)
            raise
        return proc

    # -- workers --------------------------------------------------------------------------------
    def take_worker(self) -> Slot:
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

    def release_worker(self, slot: Slot, keep: bool) -> None:
        """The slot back to the queue with its worker (`keep`: its job left it clean), or recycled."""
        if keep:
            self._free.put(slot)
        else:
            self._recycle(slot)

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
                self.background.discard(threading.current_thread())

        self._in_background(work, f"tritonforge-recycle-{slot.index}")

    # -- references, timers, replayers ----------------------------------------------------------
    def acquire_reference(self, gpu: int, fresh: bool = False) -> procs.Proc:
        """A live reference process; `fresh`: one that has served no job (a retry's)."""
        return self._refs[gpu].acquire(fresh=fresh)

    def release_reference(self, gpu: int, proc: procs.Proc, broken: bool) -> None:
        self._refs[gpu].release(proc, broken)

    def references_replaced(self) -> int:
        """Reference processes started after the pool's start (a dead or broken one replaced, or one that
        had served handed over for a retry's fresh one): each costs a start, seconds on a GPU."""
        return sum(r.replaced for r in self._refs.values())

    def gate_totals(self) -> dict[str, float]:
        """The timing gates' totals over every GPU: timings run, seconds spent stopping the others,
        seconds held (the pool paused)."""
        return {k: round(sum(g.stats[k] for g in self.gates.values()), 2) for k in ("timings", "stop_s", "held_s")}

    def acquire_timer(self, gpu: int) -> procs.Proc:
        """A reference process for compiling and timing references (a plain one on pools without)."""
        return (self._timers if self._n_timers else self._refs)[gpu].acquire()

    def release_timer(self, gpu: int, proc: procs.Proc, broken: bool) -> None:
        (self._timers if self._n_timers else self._refs)[gpu].release(proc, broken)

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
            except _START_ERRORS:
                new = None  # the next acquire starts one
            finally:
                self._replayers[gpu].add(new)
                self.background.discard(threading.current_thread())

        self._in_background(work, f"tritonforge-replayer-{gpu}")

    def sandbox(self) -> dict[str, Any]:
        """What confinement the workers actually got (measured at their start)."""
        info = next((s.info for s in self.slots if s.info.get("sandbox")), {})
        return {**info.get("sandbox", {}), "memory": self.memory.mode}
