"""VerifierPool: persistent warm sandboxed workers, trusted reference processes, many pairs at once.

Torch import and CUDA initialisation are paid once per worker, not per candidate. Any candidate that
does not pass, or leaves its worker tainted, gets its worker killed and replaced in the background
(a fork from the zygote). Several threads may call `verify` at once; `verify_many` does so itself.
"""
from __future__ import annotations

import importlib.metadata
import os
import queue
import shutil
import sysconfig
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from distill.verifier import limits, procs, reference, worker
from distill.verifier.gate import TimingGate, timing_core
from distill.verifier.job import JobSpec, _ref_timing, apply_ref_timing, run_job
from distill.verifier.verdict import Verdict

DEFAULT_TIMEOUT = {"cpu": 60.0, "cuda": 60.0}
DEFAULT_MEMORY_MB = {"cpu": 4096, "cuda": 16384}


def _trusted_roots() -> list[str]:
    """Where trusted code lives: the interpreter's own paths, every folder holding an installed
    distribution (a user site, a `.pth`- or PYTHONPATH-added site dir: torch may be imported from
    there), and the verifier itself. The working directory is left out even when it holds metadata."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {str(d.locate_file("")) for d in importlib.metadata.distributions()}
    roots.add(os.path.dirname(os.path.abspath(__file__)))
    cwd = os.path.realpath(os.getcwd())
    return sorted({os.path.realpath(r) for r in roots if r and os.path.isabs(r)} - {cwd})


def _toolchain() -> list[str]:
    """Executables a GPU worker may start: Triton's ptxas and the C compiler that builds launchers."""
    import triton

    found = []
    nv = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    for name in ("ptxas", "ptxas-blackwell"):
        if os.path.exists(os.path.join(nv, name)):
            found.append(os.path.join(nv, name))
    for knob in ("ptxas", "ptxas_blackwell"):
        try:
            found.append(getattr(triton.knobs.nvidia, knob).path)
        except Exception:  # noqa: BLE001 - a missing tool only means that tool is not allowed
            continue
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    if cc:
        found.append(cc)
        import subprocess

        for prog in ("cc1", "collect2", "as", "ld", "lto-wrapper"):
            try:
                out = subprocess.run([cc, f"-print-prog-name={prog}"], capture_output=True, text=True, timeout=10)
                path = out.stdout.strip()
                path = path if os.path.isabs(path) else (shutil.which(path) or "")
                if path:
                    found.append(path)
            except (OSError, subprocess.SubprocessError):
                continue
    for loader in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"):
        if os.path.exists(loader):
            found.append(loader)
    return sorted({os.path.realpath(p) for p in found})


class _Slot:
    def __init__(self, index: int, gpu: int) -> None:
        self.index, self.gpu = index, gpu
        self.proc: procs.Proc | None = None
        self.info: dict[str, Any] = {}


class VerifierPool:
    """A pool of sandboxed workers. Use as a context manager, or call `close()`."""

    def __init__(self, workers: int | None = None, device: str = "cpu", timeout: float | None = None,
                 max_memory_mb: int | None = None, gpus: list[int] | None = None, trials: int = 5,
                 timing_trials: int = 100, warmup: int = 3, static_checks: bool = True,
                 lockdown: bool | tuple[str, ...] = True, references: int | None = None,
                 start_timeout: float = 300.0) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")
        self.device = device
        self.gpus = gpus if gpus is not None else (self._count_gpus() if device == "cuda" else [0])
        n = workers or (max(1, min(8, (os.cpu_count() or 2) - 2)) * len(self.gpus) if device == "cuda" else 1)
        self.timeout = float(timeout or DEFAULT_TIMEOUT[device])
        self.max_memory_mb = max_memory_mb if max_memory_mb is not None else DEFAULT_MEMORY_MB[device]
        self.spec_defaults = dict(trials=trials, timing_trials=timing_trials, warmup=warmup,
                                  static_checks=static_checks)
        from distill.verifier.lockdown import DEFAULT_LAYERS

        # True: the layers known to work on this device; False: none; or a tuple naming them.
        self.layers = DEFAULT_LAYERS[device] if lockdown is True else () if lockdown is False else tuple(lockdown)
        self.start_timeout = start_timeout
        self.root = tempfile.mkdtemp(prefix="tritonforge-verify-")
        self.memory = limits.MemoryGuard()
        self.trusted = _trusted_roots()
        self.exec_files = _toolchain() if device == "cuda" else []
        self.children = device == "cuda"  # Triton on GPU runs ptxas and cc; the interpreter runs nothing
        self.template = os.path.join(self.root, "triton-template")
        os.makedirs(self.template, exist_ok=True)
        self._slots = [_Slot(i, self.gpus[i % len(self.gpus)]) for i in range(n)]
        self._free: queue.Queue[_Slot] = queue.Queue()
        self._refs: dict[int, queue.Queue[procs.Proc]] = {g: queue.Queue() for g in self.gpus}
        self._n_refs = references or (max(4, n // 2) if device == "cuda" else 1)
        # Reference processes that only compile and time references (torch.compile holds one for
        # seconds per problem): correctness work never queues behind a compile.
        self._timers: dict[int, queue.Queue[procs.Proc]] = {g: queue.Queue() for g in self.gpus}
        self._n_timers = 2 if device == "cuda" else 0
        # pid -> (process, GPU) for every worker and reference: what a timing run pauses. Only
        # processes still alive are signalled, so a reused pid is never someone else's.
        self.live: dict[int, tuple[procs.Proc, int]] = {}
        self.gates = {g: TimingGate(lambda g=g: [pid for pid, (pr, gg) in list(self.live.items())
                                                 if gg == g and pr.alive()],
                                    core=timing_core(g) if device == "cuda" else None) for g in self.gpus}
        self.ref_cache: dict[tuple, dict[str, Any]] = {}
        self.ref_cache_locks: dict[tuple, threading.Lock] = {}
        self.ref_prefetch: set[tuple] = set()
        self.peaks: dict[int, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._started = False
        self.stats = {"recycled": 0, "started": 0}

    # -- lifecycle ------------------------------------------------------------------------------
    @staticmethod
    def _count_gpus() -> list[int]:
        import torch

        return list(range(max(torch.cuda.device_count(), 1)))

    def start(self) -> "VerifierPool":
        with self._lock:
            if self._started:
                return self
            self._started = True
        # References first: on GPU they build the warm Triton cache the workers start from.
        jobs = [(g, k) for g in self.gpus for k in range(self._n_refs + self._n_timers)]
        with ThreadPoolExecutor(max_workers=len(jobs)) as ex:
            for (g, k), proc in zip(jobs, ex.map(lambda gk: self._start_reference(*gk), jobs)):
                (self._refs if k < self._n_refs else self._timers)[g].put(proc)
        with ThreadPoolExecutor(max_workers=len(self._slots)) as ex:
            list(ex.map(self._fill, self._slots))
        if self.device == "cuda":  # the physical floor needs the measured ceilings: once, GPU idle
            for g in self.gpus:
                ref = self.acquire_reference(g)
                try:
                    with self.gates[g].quiet(keep=ref.pid):
                        ref.send({"cmd": "peaks"})
                        self.peaks[g] = ref.receive(300, "device peaks")
                finally:
                    self.release_reference(g, ref, False)
        return self

    def __enter__(self) -> "VerifierPool":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.live.clear()
        for slot in self._slots:
            if slot.proc is not None:
                self.memory.remove(slot.proc.pid)
                slot.proc.kill()
        for q in list(self._refs.values()) + list(self._timers.values()):
            while not q.empty():
                q.get_nowait().kill()
        self.memory.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _start_reference(self, gpu: int, k: int) -> procs.Proc:
        own = os.path.join(self.root, f"ref-{gpu}-{k}")
        os.makedirs(own, exist_ok=True)
        cfg = {"device": self.device, "gpu": gpu, "template_cache": self.template, "own_cache": own}
        proc = procs.Proc(reference.reference_main, cfg, f"tritonforge-ref-{gpu}-{k}")
        self.live[proc.pid] = (proc, gpu)
        proc.wait_ready(self.start_timeout)
        return proc

    def _fill(self, slot: _Slot) -> None:
        """Start a fresh worker in `slot` and hand the slot to waiting callers."""
        scratch = os.path.join(self.root, f"w{slot.index}-{os.urandom(4).hex()}")
        os.makedirs(scratch)
        if self.device == "cuda":
            shutil.copytree(self.template, os.path.join(scratch, "triton"), dirs_exist_ok=True)
        cfg = {"device": self.device, "gpu": slot.gpu, "scratch": scratch, "trusted_roots": self.trusted,
               "exec_files": self.exec_files, "layers": list(self.layers), "children": self.children}
        slot.scratch = scratch
        if self._closed:
            return
        proc = None
        try:
            proc = procs.Proc(worker.worker_main, cfg, f"tritonforge-worker-{slot.index}")
            self.live[proc.pid] = (proc, slot.gpu)
            self.memory.add(proc.pid, self.max_memory_mb)
            slot.info = proc.wait_ready(self.start_timeout)
            slot.proc = proc
            self.stats["started"] += 1
        except (procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol) as exc:
            if proc is not None:
                self.live.pop(proc.pid, None)
                proc.kill()
            slot.proc, slot.info = None, {"start_error": str(exc)}
        if self._closed and slot.proc is not None:  # the pool closed while this worker started
            slot.proc.kill()
            self.memory.remove(slot.proc.pid)
            return
        self._free.put(slot)

    def _recycle(self, slot: _Slot) -> None:
        """Kill the slot's worker and refill the slot, all off the caller's thread."""
        old, scratch = slot.proc, getattr(slot, "scratch", "")
        slot.proc = None
        self.stats["recycled"] += 1

        def work() -> None:
            if old is not None:
                self.live.pop(old.pid, None)
                old.kill()
                self.memory.remove(old.pid)
            shutil.rmtree(scratch, ignore_errors=True)
            if not self._closed:
                self._fill(slot)

        threading.Thread(target=work, name=f"tritonforge-recycle-{slot.index}", daemon=True).start()

    # -- verification ---------------------------------------------------------------------------
    @property
    def sandbox(self) -> dict[str, Any]:
        """What confinement the workers actually got (measured at their start)."""
        info = next((s.info for s in self._slots if s.info.get("sandbox")), {})
        return {**info.get("sandbox", {}), "memory": self.memory.mode}

    def acquire_reference(self, gpu: int) -> procs.Proc:
        return self._refs[gpu].get()

    def release_reference(self, gpu: int, proc: procs.Proc, broken: bool, timer: bool = False) -> None:
        if broken:
            self.live.pop(proc.pid, None)
            proc.kill()
            proc = self._start_reference(gpu, 99)
        (self._timers if timer else self._refs)[gpu].put(proc)

    def acquire_timer(self, gpu: int) -> procs.Proc:
        """A reference process for compiling and timing references (a plain one on pools without)."""
        return self._timers[gpu].get() if self._n_timers else self._refs[gpu].get()

    def release_timer(self, gpu: int, proc: procs.Proc, broken: bool) -> None:
        self.release_reference(gpu, proc, broken, timer=bool(self._n_timers))

    def verify(self, problem: Any, candidate_source: str, timeout: float | None = None,
               static_checks: bool | None = None) -> Verdict:
        """Verify one (problem, candidate) pair. `problem` is a Problem-like object or module source."""
        self.start()
        spec = JobSpec.make(problem, candidate_source, self.device, timeout or self.timeout,
                            **{**self.spec_defaults,
                               **({} if static_checks is None else {"static_checks": static_checks})})
        early = spec.static_verdict()
        if early is not None:
            return early
        slot = self._free.get()
        keep = False
        try:
            if slot.proc is None:
                return Verdict("crash", f"worker could not start: {slot.info.get('start_error')}",
                               device=self.device)
            verdict, keep = run_job(self, slot, spec)
        finally:
            if keep:
                self._free.put(slot)
            else:
                self._recycle(slot)
        if verdict.status == "pass" and self.device == "cuda":  # worker already released
            apply_ref_timing(verdict, _ref_timing(self, spec, slot.gpu))
        return verdict

    def verify_many(self, pairs: Iterable[tuple[Any, str]]) -> list[Verdict]:
        """Verify many pairs concurrently (one thread per worker); results in input order."""
        pairs = list(pairs)
        self.start()
        # More threads than workers: a thread waiting for its reference's torch.compile timing has
        # already given its worker back, and others should use it meanwhile.
        with ThreadPoolExecutor(max_workers=max(1, 4 * len(self._slots))) as ex:
            return list(ex.map(lambda p: self.verify(p[0], p[1]), pairs))
