"""The replayer: a sandboxed process that replays a traced forward without the candidate's module.

Started like a worker (a fork of the zygote, under the same lockdown, guard, kernel-table block and
integrity snapshot: worker.worker_main with `role="replayer"`), it serves `replay` and never `load`,
so the candidate's module is never imported here and nothing the candidate ran in its worker reaches
it. One `replay` command:
1. makes the trial's inputs from the problem's text and a seed (trusted code, before any kernel
   exists here): the secret seed is one the worker never saw;
2. writes the kernels module the parent cut out of the candidate's source (kernelsrc.py: only
   `@triton.jit` functions and literal constants) and imports it, as the candidate's own code;
3. rebuilds the worker's record of one traced call (Program, which refuses anything but
   layout steps and launches of those kernels) and runs it on those inputs, with and without the
   candidate's launches (`ablate`);
4. returns the outputs (raw bytes, host copies), what the guard saw, and what the run itself found
   (stores where no tensor of the record reaches, inputs changed, outputs that are inputs' memory:
   replay.Program.audit);
   the parent compares the outputs with the reference's for that trial (judge.judge_replay).
The record's state tensors arrive as the parent accepted them (statecheck.py): layouts of the
reference's parameters as the worker reported them, anything else poisoned.

The replayer is kept for the next job when the replay left nothing behind (the worker's hygiene:
patched attributes, state, threads, candidate code in the harness's steps), else retired (fleet.py).
On the CPU lane kernel bodies run as Python in the interpreter, under the guard and after the GPU
compile check (gpu_compile.py), as in a worker; on a GPU they are compiled code.
"""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys
import time
from typing import Any, Callable, Iterator

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from distill.verifier import problemio, protocol, timing
from distill.verifier.sandbox import bound as bound_mod
from distill.verifier.sandbox import calls, gpu_compile, guard, inputsets, provenance
from distill.verifier.sandbox.replay import NotReplayable, Program

_KINDS = (JITFunction, InterpretedFunction)


def _outputs(tensors: list[torch.Tensor]) -> list[protocol.Output]:
    """A run's outputs as they lie: its report is encoded before another run starts, copying each
    straight into the reply's arena (a device clone, then a host copy, then the arena's took 12.7 s of a
    4.3 GB KernelBench job's 156 s on the H200, 2026-12-01)."""
    return [protocol.Output(dtype=str(t.dtype).replace("torch.", ""), device=t.device.type, shape=list(t.shape),
                            data=t.detach()) for t in tensors]


class _Inputs:
    """The input sets by name: made before the kernel-table block goes on and kept, or (`stream`: the
    job's sets do not fit beside each other, memplan.py) fingerprinted then and made again for each
    run with the block lifted meanwhile (inputsets.py does the same in a worker)."""

    def __init__(self, mod: Any, seeds: dict[str, int], device: torch.device, stream: bool,
                 block: provenance.BackendBlock, prints: dict[str, Any]) -> None:
        self.mod, self.seeds, self.device, self.block, self.kept = mod, dict(seeds), device, block, {}
        for key, seed in self.seeds.items():  # making inputs is compute: before the block goes on
            values = problemio.make_inputs(mod, seed, device)
            prints[key] = problemio.fingerprint(values)
            if not stream:
                self.kept[key] = values
            del values

    def __getitem__(self, key: str) -> list[Any]:
        if key in self.kept:
            return self.kept[key]
        with inputsets.lifted(self.block):
            return problemio.make_inputs(self.mod, self.seeds[key], self.device)

    def __iter__(self) -> Iterator[str]:
        return iter(self.seeds)


def _launch(kernel: Any, args: tuple, grid: tuple, kwargs: dict) -> None:
    kernel.run(*args, grid=grid, warmup=False, **kwargs)  # through the guard's launcher: recorded as a launch


def _import_kernels(text: str, path: str, serial: int, token: object,
                    instances: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    with open(path, "w") as fh:
        fh.write(text)
    guard.ctl(token, "own_file", path)  # its launches are the candidate's own
    name = f"tritonforge_kernels_{serial}"
    module = _load(name, path)
    kernels = {}
    for value in list(vars(module).values()):
        if type(value) in _KINDS:
            fn = vars(value).get("fn")
            kernels[getattr(fn, "__name__", "")] = value
    # A factory's kernel, once per set of values it closed over: the module loaded again (its own
    # kernel objects, so each compiles for its values), those names bound as its globals, which
    # Triton reads as it reads a closure's (replaycheck._instances checked their types).
    for k, inst in enumerate(instances):
        again = _load(f"{name}_closure{k}", path)
        for var, (tag, value) in inst["globals"].items():
            vars(again)[var] = (tl.constexpr(value) if tag == "constexpr" else tl.dtype(value) if tag == "dtype"
                                else vars(again)[value] if tag == "kernel" else value)
        kernels[inst["name"]] = vars(again)[inst["kernel"]]
    return kernels, name


def _load(name: str, path: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _session(msg: protocol.Replay | protocol.TimeReplay, state: dict[str, Any], scratch: str, device: torch.device,
             token: object, block: provenance.BackendBlock,
             out: protocol.ReplayReply | protocol.TimeReplayReply) -> Iterator[tuple[Program, dict, dict] | None]:
    """The record rebuilt, every input set made (trusted, before any kernel exists here), then the
    kernel-table block on and the kernels module imported; None (and `out["error"]`) when the record
    or the module cannot be rebuilt. Everything is taken down again on the way out."""
    state["serial"] = state.get("serial", 0) + 1
    # The workspace a kernel's device-side TMA descriptors (tl.make_tensor_descriptor) take at launch
    # comes from Triton's allocator, which the candidate set in its worker with its own code; here it
    # is this trusted one (without it, such a kernel's GPU replay raises "no allocator was set").
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=device))
    mod = problemio.load_problem(msg["problem"], state.setdefault("problems", {}))
    try:
        program = Program(msg["trace"], frozenset(msg.get("kernel_names") or ()), int(msg["byte_limit"]))
    except NotReplayable as exc:
        out["error"] = f"not replayable: {exc}"
        yield None
        return
    name, path = "", os.path.join(scratch, f"kernels_{state['serial']}.py")
    try:
        try:
            sets = _Inputs(mod, msg["seeds"], device, bool(msg.get("stream")), block, out["fingerprints"])
        except torch.OutOfMemoryError as exc:  # no kernel exists here yet: the problem's own size
            out["problem_memory"] = f"the replayer ran out of memory making the inputs: {str(exc)[:300]}"
            yield None
            return
        block.install()
        block.complete()
        try:
            kernels, name = _import_kernels(msg["kernels"], path, state["serial"], token, msg.get("instances") or [])
        except BaseException as exc:  # noqa: BLE001 - the extraction left something a kernel needs
            err = calls.describe_error(exc)
            out["error"] = f"not replayable: loading the kernels module failed: {err['type']}: {err['message'][:300]}"
            yield None
            return
        guard.ctl(token, "harness", True)  # from here, candidate code outside a launch is reported
        yield program, sets, kernels
    finally:
        guard.ctl(token, "harness", False)
        block.remove()
        guard.ctl(token, "harness", True)  # finalizers of the kernels module run in the harness's step
        try:
            for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}_closure")] if name else []:
                sys.modules.pop(loaded, None)
            if os.path.exists(path):
                os.unlink(path)  # the scratch folder stays small
            gpu_compile.forget()
            gc.collect()
        finally:
            guard.ctl(token, "harness", False)


def replay(msg: protocol.Replay, state: dict[str, Any], scratch: str, device: torch.device, token: object,
           block: provenance.BackendBlock, sync: Callable[[], None], reply: Callable[[Any], None]) -> protocol.ReplayReply:
    """Serve one `replay` command (module docstring): the record's runs, each on fresh memory. Each run's
    report goes to the parent as the run ends (it judges it then, job.py), not in the reply."""
    out: protocol.ReplayReply = {"fingerprints": {}, "error": None}
    t0 = time.perf_counter()
    with _session(msg, state, scratch, device, token, block, out) as ready:
        if ready is None:
            return out
        program, sets, kernels = ready
        out["setup_s"] = time.perf_counter() - t0
        for run in msg["runs"]:
            reply(protocol.Progress(progress=f"replay {run['name']}"))
            rep = _run(program, sets[run["inputs"]], run, kernels, device, token, sync, block)
            fatal = bool(rep["error"] and rep.get("fatal"))
            reply(protocol.RunSent(progress=f"replay {run['name']} sent", run=rep, ack=True))
            del rep
            if fatal:
                break
    out["replay_s"] = time.perf_counter() - t0
    return out


def time_replay(msg: protocol.TimeReplay, state: dict[str, Any], scratch: str, device: torch.device, token: object,
                block: provenance.BackendBlock, flush: torch.Tensor, go: Callable[[], bool],
                done: Callable[[], None]) -> protocol.TimeReplayReply:
    """Serve one `time_replay` command (GPU only; the parent holds the timing gate from timing.READY on): the record timed
    with timing.py's protocol, input sets alternating in memory allocated once (bound.py), with
    the outputs of the calls in `msg["check"]` kept for the parent to compare. The pool's default
    (pool.py `timing_in`); on the H100 its medians agree with the worker's within 0.7% per kernel."""
    out: protocol.TimeReplayReply = {"error": None, "fingerprints": {}, "checked": {}}
    with _session(msg, state, scratch, device, token, block, out) as ready:
        if ready is None:
            return out
        program, made, kernels = ready
        order = list(made)
        sets = {key: made[key] for key in order}  # both timing sets held, as a worker holds them
        bound = bound_mod.bind(program, device)
        checked: dict[str, protocol.Checked] = {}
        changed: list[str] = []  # Bound.kept_changed's finding, at the checked calls and after the last

        def kept_check() -> None:
            guard.ctl(token, "record", False)  # the harness's own compare, between two of the record's calls
            try:
                with inputsets.lifted(block):
                    changed.extend(bound.kept_changed())
            finally:
                guard.ctl(token, "record", True)

        def after(i: int, result: Any) -> None:
            if i in msg["check"]:
                checked[str(i)] = protocol.Checked(set=i % len(order), problem="",
                                                   outputs=[t.detach().clone() for t in result])
                if not changed:  # at the parent's secret calls too: a store into the kept state undone before the
                    kept_check()  # last call is seen where a checked call's outputs came from it

        def timed(window: str) -> timing.Samples:
            return timing.time_calls(lambda i: bound.call(kernels, _launch), lambda i: bound.load(sets[order[i % len(order)]]),
                                     int(msg["warmup"]), int(msg["trials"]), flush, after, window)

        # One call before the gate: the kernels compile and load here (hundreds of ms to seconds on
        # the H100) while the other workers run, not inside the timing gate that pauses them all.
        # `go` announces timing.READY and returns once the parent holds the gate.
        guard.ctl(token, "record", True)
        try:
            bound.load(sets[order[0]])
            bound.call(kernels, _launch)
            torch.cuda.synchronize(device)
        except BaseException as exc:  # noqa: BLE001 - a kernel failing before it is timed is the candidate's
            out["error"] = calls.describe_error(exc)
        finally:
            guard.ctl(token, "record", False)
        if out["error"] is None and not go():
            out["error"] = {"type": "harness", "message": "the parent did not start the timing"}
        if out["error"] is not None:
            rec = guard.collect(token)
            out.update(launches=len(rec["launches"]), aten=rec["aten"], blocked=rec["blocked"], denials=rec["denials"],
                       harness_code=rec["harness_code"])
            return out
        guard.ctl(token, "record", True)
        try:
            # Only the stream window: every launch here is the record's, made by _launch on the current
            # stream, so no work can sit on another stream. The worker's fallback to the device window
            # (timing.Samples.work_after_window) read a late host wake-up as such work and put 5 of 30
            # H100 timings at 7-15x their kernel's time, host latency included.
            samples = timed("stream")
            fallback = ""
            retried = samples.unstable()
            if retried:
                samples = timed(samples.window)
            out.update(samples.to_dict(), fallback=fallback, retried=retried)
        except BaseException as exc:  # noqa: BLE001 - a kernel failing while timed is the candidate's
            out["error"] = calls.describe_error(exc)
        finally:
            guard.ctl(token, "record", False)
            done()  # the parent opens the gate: what follows (outputs to the host, clean-up) pauses nobody
        if out["error"] is None and not changed:
            with inputsets.lifted(block):  # after the timed calls ended
                changed.extend(bound.kept_changed())
        if out["error"] is None and changed:
            out["error"] = protocol.Failure(type="distill.verifier.replay.OutOfRecord", message=changed[0],
                                            cuda_fault=False, compile=False, denied=False, sandbox=False)
        if out["error"] is None:  # on the device: the reply's encoding copies them straight into the arena
            out["checked"] = checked  # (their host copies first were 11 s of L1 #7's 156 s, H200 2026-12-01)
        rec = guard.collect(token)
        out.update(launches=len(rec["launches"]), aten=rec["aten"], blocked=rec["blocked"], denials=rec["denials"],
                   harness_code=rec["harness_code"])
    return out


def _run(program: Program, inputs: list[Any], run: dict[str, Any], kernels: dict[str, Any], device: torch.device,
         token: object, sync: Callable[[], None], block: provenance.BackendBlock) -> protocol.ReplayRun:
    """One run of the record on fresh memory holding `inputs`, then the run's own audit (Program.audit)."""
    t0 = time.perf_counter()
    rep: protocol.ReplayRun = {"name": run["name"], "error": None, "outputs": None}
    done = None
    guard.ctl(token, "record", True)
    try:
        done = program.run(inputs, kernels, device, bool(run.get("ablate")), _launch, bool(run.get("second")))
        sync()
        rep["outputs"] = _outputs(done.outputs)
    except NotReplayable as exc:
        rep["error"], rep["fatal"] = f"not replayable: {exc}", True
    except torch.OutOfMemoryError as exc:  # a worker's budget, with more held: not the candidate's fault
        rep["error"], rep["fatal"] = "out of memory", True
        rep["out_of_memory"] = str(exc)[:300]
    except BaseException as exc:  # noqa: BLE001 - a kernel failing on replay is a finding
        err = calls.describe_error(exc)
        rep["error"] = f"{err['type']}: {err['message'][:300]}"
        rep["compile"], rep["cuda_fault"] = err["compile"], err["cuda_fault"]
    finally:
        guard.ctl(token, "record", False)
    rec = guard.collect(token)
    if done is not None and rep["error"] is None and not run.get("ablate"):
        with inputsets.lifted(block):   # the harness's own compare, after the record's steps ended
            program.audit(done, inputs)
        rep.update(out_of_bounds=done.out_of_bounds, inputs_changed=done.inputs_changed, aliases=done.aliases)
    rep.update(launches=len(rec["launches"]), foreign=len(rec["foreign"]), blocked=rec["blocked"],
               denials=rec["denials"], harness_code=rec["harness_code"], call_s=time.perf_counter() - t0)
    return rep
