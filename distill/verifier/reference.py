"""The trusted reference process: runs the problem's own `Model` to make the expected outputs.

It is a separate process from every worker, so expected values never exist where candidate code
runs. It also times the reference (eager and under torch.compile, GPU only) and measures the
device's copy bandwidth and matmul peak for the physical floor.
"""
from __future__ import annotations

import os
import types
from typing import Any

import torch

from distill.verifier import codec, timing
from distill.verifier.problemio import ProblemError, fingerprint, load_problem, make_inputs, seed_all
from distill.verifier.provenance import OpCount

__all__ = ["ProblemError", "RefTimer", "make_trials", "reference_main"]


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    return x


def _outputs(out: Any) -> tuple[list[torch.Tensor], bool]:
    """Copies on the device (a later forward may reuse the buffers); the reply's encoding moves
    them to the host in one copy."""
    if isinstance(out, torch.Tensor):
        return [out.detach().clone()], False
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        return [t.detach().clone() for t in out], True
    raise ProblemError(f"reference forward returned {type(out).__name__}, not a tensor or tuple of tensors")


def _nbytes(values: Any) -> int:
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(_nbytes(v) for v in values)
    return 0


def _build(mod: types.ModuleType, init_seed: int, device: torch.device) -> tuple[Any, list, dict, dict[str, int]]:
    """The reference model, its init arguments, and the ATen ops its constructor ran (what a
    candidate's constructor may run too: creating the same parameters the same way)."""
    seed_all(init_seed)
    init = mod.get_init_inputs()
    args, kwargs = (list(init), {}) if isinstance(init, (list, tuple)) else ([], dict(init or {}))
    seed_all(init_seed)
    with OpCount() as counter:
        model = mod.Model(*args, **kwargs).to(device)
    return model, args, kwargs, counter.counts


def make_trials(mod: types.ModuleType, init_seed: int, seeds: list[int], device: torch.device) -> dict[str, Any]:
    model, args, kwargs, construct_ops = _build(mod, init_seed, device)
    trials = []
    in_bytes = 0
    for seed in seeds:
        host = make_inputs(mod, seed, device)
        in_bytes = _nbytes(host)
        with torch.no_grad():
            out = model(*_to(host, device))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        outs, seq = _outputs(out)
        trials.append({"outputs": outs, "sequence": seq, "fingerprint": fingerprint(host)})
    flags = insensitive_inputs(mod, model, seeds, device, trials[0]["outputs"]) if len(seeds) > 1 else []
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    io_bytes = in_bytes + _nbytes(trials[0]["outputs"]) + params if trials else params
    return {"init_args": args, "init_kwargs": kwargs, "trials": trials, "io_bytes": io_bytes,
            "construct_ops": construct_ops, "insensitive_inputs": flags}


def insensitive_inputs(mod: types.ModuleType, model: Any, seeds: list[int], device: torch.device,
                       outputs: list[torch.Tensor]) -> list[int]:
    """Positions of tensor inputs whose replacement (by another trial's) leaves the reference's
    outputs bit-identical: the problem ignores them, so a kernel that ignores them is not wrong.
    Reported with every verdict on the problem (`checks["problem"]`), not charged to anyone."""
    first, other = make_inputs(mod, seeds[0], device), make_inputs(mod, seeds[1], device)
    out = []
    for i, (a, b) in enumerate(zip(first, other)):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape or torch.equal(a, b):
            continue
        mixed = list(first)
        mixed[i] = b
        with torch.no_grad():
            got, _ = _outputs(model(*mixed))
        if len(got) == len(outputs) and all(g.shape == o.shape and torch.equal(g, o) for g, o in zip(got, outputs)):
            out.append(i)
    return out


class RefTimer:
    """A reference model, its inputs and its torch.compile'd twin, warmed up and ready to be timed."""

    def __init__(self, mod: types.ModuleType, init_seed: int, seed: int, device: torch.device) -> None:
        self.model, _, _, _ = _build(mod, init_seed, device)
        self.inputs = _to(make_inputs(mod, seed, device), device)
        self.compiled: Any = None
        self.compile_error = ""
        with torch.no_grad():
            try:
                compiled = torch.compile(self.model)
                for _ in range(3):  # compilation happens here, outside any timed window
                    compiled(*self.inputs)
                self.compiled = compiled
            except Exception as exc:  # noqa: BLE001 - the reference may not compile; eager still counts
                self.compile_error = f"{type(exc).__name__}: {str(exc)[:300]}"

    def measure(self, warmup: int, trials: int, flush: torch.Tensor) -> dict[str, Any]:
        with torch.no_grad():
            eager = timing.time_calls(lambda i: self.model(*self.inputs), lambda i: None, warmup, trials, flush)
            out: dict[str, Any] = {"eager_ms": eager.median_ms, "compile_ms": None,
                                   "compile_error": self.compile_error or None}
            if self.compiled is not None:
                comp = timing.time_calls(lambda i: self.compiled(*self.inputs), lambda i: None, warmup, trials, flush)
                out["compile_ms"] = comp.median_ms
        return out


def reference_main(conn: Any, cfg: dict[str, Any]) -> None:
    os.setsid()
    os.dup2(2, 1)  # library chatter must not reach a `verify --json` caller's stdout
    try:  # expected outputs live here: not readable through /proc/PID/mem by same-uid processes
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass
    os.environ.pop("TRITON_INTERPRET", None) if cfg["device"] == "cuda" else None
    device = torch.device("cuda", cfg.get("gpu", 0)) if cfg["device"] == "cuda" else torch.device("cpu")
    cache: dict[str, types.ModuleType] = {}
    timers: dict[str, RefTimer] = {}
    flush = None
    if device.type == "cuda":
        timing.prefer_spin_wait(device.index)
        torch.cuda.set_device(device)
        os.environ["TRITON_CACHE_DIR"] = cfg["template_cache"]
        from distill.verifier import worker  # the worker's warm kernel, compiled into the template cache

        worker._warm_up(device)
        os.environ["TRITON_CACHE_DIR"] = cfg["own_cache"]
        flush = timing.flush_buffer(device)
        try:  # import inductor now, at pool start, not at the first problem's timing
            torch.compile(lambda x: x * 2.0 + 1.0)(torch.ones(8, device=device))
        except Exception:  # noqa: BLE001 - then references are timed eagerly only
            pass
    arena = codec.open_arena(cfg)
    conn.send_bytes(codec.encode({"ready": True, "pid": os.getpid()}))
    while True:
        try:
            msg = codec.decode(conn.recv_bytes())
        except (EOFError, OSError):  # the pool closed or died: nothing left to serve
            os._exit(0)
        cmd = msg["cmd"]
        if arena is not None:
            arena.reset()
        try:
            if cmd == "trials":
                mod = load_problem(msg["source"], cache)
                out = make_trials(mod, msg["init_seed"], msg["seeds"], device)
            elif cmd == "prepare_timing":  # compile outside the parent's GPU timing lock
                mod = load_problem(msg["source"], cache)
                timers[msg["key"]] = RefTimer(mod, msg["init_seed"], msg["seed"], device)
                out = {"compile_error": timers[msg["key"]].compile_error or None}
            elif cmd == "measure":  # the parent holds the GPU timing lock
                out = timers.pop(msg["key"]).measure(msg["warmup"], msg["trials"], flush)
            elif cmd == "peaks":
                out = timing.device_peaks(device)
            elif cmd == "exit":
                os._exit(0)
            else:
                out = {"problem_error": f"unknown command {cmd}"}
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            out = {"problem_error": f"{type(exc).__name__}: {str(exc)[:1000]}"}
        try:
            conn.send_bytes(codec.encode(out, arena))
        except OSError:  # the pool went away mid-command
            os._exit(0)
