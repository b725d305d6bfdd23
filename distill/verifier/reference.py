"""The trusted reference process: runs the problem's own `Model` to make the expected outputs.

It is a separate process from every worker, so expected values never exist where candidate code
runs. Before a problem's first trials it screens the problem as `distill` does (screen.py; the pool
keeps the report and hands it to the next job's reference, so a problem is screened once a pool): a
problem that fails is a ProblemError, never a candidate's verdict, and each expected output carries
its bound (the problem's measured honest error, tolerance.fitted). It also times the reference
(eager and under torch.compile, GPU only) and measures the device's copy bandwidth and matmul peak
for the physical floor.
"""
from __future__ import annotations

import os
import time
import types
import weakref
from typing import Any, Callable

import torch

from distill.verifier import codec, memplan, precision, protocol, screen, statecheck, timing
from distill.verifier.policy import OpCount
from distill.verifier.problemio import ProblemError, ReferenceFailed, fingerprint, load_problem, make_inputs, seed_all

__all__ = ["ProblemError", "RefTimer", "make_trials", "reference_main"]

# Outputs past which the reference hands its cached device blocks back before each trial's send: in step
# (refwork.Feed) it waits there through a worker's call, which may need that memory on a shared GPU.
CACHE_BYTES = 64 << 20


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    return x


def _outputs(out: Any, keep: str = "device") -> tuple[list[torch.Tensor], bool]:
    """Copies of the outputs (a later forward may reuse the buffers): on the host (`keep="host"`)
    for the trials the reply carries, so the device holds one trial's tensors at a time; the outputs
    themselves (`keep="sent"`) for a trial encoded before anything else runs (`send`)."""
    if isinstance(out, torch.Tensor):
        items, seq = [out], False
    elif isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        items, seq = list(out), True
    else:
        raise ProblemError(f"reference forward returned {type(out).__name__}, not a tensor or tuple of tensors")
    if keep == "host":
        return [t.detach().to("cpu", copy=True) for t in items], seq
    if keep == "sent":
        return [t.detach() for t in items], seq
    return [t.detach().clone() for t in items], seq


class Held:
    """Bytes of the trial tensors (inputs made, outputs of forward) alive at once in this process,
    and their peak: the streaming the memory plan relies on, counted on any device (weak
    references, so a tensor still referenced anywhere still counts)."""

    def __init__(self) -> None:
        self.live = self.peak = 0

    def add(self, values: Any) -> None:
        for t in values if isinstance(values, (list, tuple)) else [values]:
            if isinstance(t, torch.Tensor):
                n = memplan.nbytes(t)
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._drop, n)

    def _drop(self, n: int) -> None:
        self.live -= n


def _build(mod: types.ModuleType, init_seed: int, device: torch.device,
           weights_seed: int | None = None) -> tuple[Any, list, dict, dict[str, int]]:
    """The reference model, its init arguments, and the ATen ops its constructor ran (what a
    candidate's constructor may run too: creating the same parameters the same way). `weights_seed`:
    the constructor runs under it (the init arguments stay `init_seed`'s)."""
    seed_all(init_seed)
    init = mod.get_init_inputs()
    args, kwargs = (list(init), {}) if isinstance(init, (list, tuple)) else ([], dict(init or {}))
    seed_all(init_seed if weights_seed is None else weights_seed)
    with OpCount() as counter:
        model = mod.Model(*args, **kwargs).to(device)
    return model, args, kwargs, counter.counts


def _second(mod: types.ModuleType, model: Any, init_seed: int, second_init: int | None,
            device: torch.device) -> tuple[dict[str, dict[str, torch.Tensor]], list[str], str]:
    """The second weights' map for the replay trial (statecheck.second_map), the dtypes left on their
    first weights, and why there is none (no `second_init` asked for, or the draw does not fit). The
    caller applies it to `model` in place (statecheck.apply_second) once the other trials are run, so
    whatever else the constructor drew stays as the candidate holds it, and at most one more model is
    ever held: the second draw, here, while the map is made."""
    if second_init is None:
        return {}, [], "not asked for"
    sizes: dict[torch.dtype, int] = {}
    for t in statecheck.held_tensors(model):
        if statecheck.mapped(t.dtype):
            sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel()
    if not sizes or all(n > statecheck.UNION_LIMIT for n in sizes.values()):  # before a second draw doubles them
        why = "no floating-point or integer parameters" if not sizes else \
            f"{max(sizes.values()):,} values of a dtype among the parameters (past {statecheck.UNION_LIMIT:,})"
        return {}, [], why
    drawn = _build(mod, init_seed, device, weights_seed=second_init)[0]
    return statecheck.second_map(model, drawn, second_init)


class ScreenFailed(ReferenceFailed):
    """The problem failed screening; `report` says how (the pool keeps it, and fails later jobs on the
    problem without screening it again)."""

    def __init__(self, report: screen.ScreenReport) -> None:
        super().__init__(f"the problem fails screening ({report.status}): {report.reason}")
        self.report = report


def screened(mod: types.ModuleType, device: torch.device, known: dict[str, Any] | None = None,
             budgets: dict[str, Any] | None = None) -> screen.ScreenReport:
    """The problem's screening report: `known` (the pool's, from an earlier job's screening: context.Screens),
    else screen.screen_module now, its fp64 measurement within the job's `budgets` (precision.measure_limit).
    Raises ScreenFailed when the problem fails it: the problem, not a candidate, is at fault."""
    if known is not None:
        report = screen.ScreenReport(**known)
    else:
        t0 = time.monotonic()
        report = screen.screen_module(mod, device, precision.measure_limit(device, budgets))
        report.seconds = round(time.monotonic() - t0, 3)
        memplan.release(device)
    if report.status != "ok":
        raise ScreenFailed(report)
    return report


def make_trials(mod: types.ModuleType, init_seed: int, seeds: list[int], device: torch.device,
                calls: int = 0, budgets: dict[str, Any] | None = None, screen_first: bool = False,
                known: dict[str, Any] | None = None, send: Callable[[protocol.Trial], Callable[[], None]] | None = None,
                second_init: int | None = None) -> protocol.TrialsReply:
    """Expected outputs per seed, streamed: make the inputs, run, copy the outputs to the host, free
    (memplan.py). `budgets` (the pool's): the plan measured on the first trial is checked before
    the next one. With `screen_first`, the problem is screened first (`screened`, or `known`: the pool's
    report of an earlier screening) and each trial carries the outputs' bounds (`tolerances`:
    tolerance.Tolerance fields per output, None where exact); the reply's `screen` is the whole report.
    `send` (the reference process's): each trial goes to the parent as it is made, not in the reply, so
    this process holds one trial's outputs, not every trial's; the first carries the reply's `head` (how
    the model was built, its parameters' summary, the screening), which the parent may need before it
    reads the rest: it acks each trial when it reads it, as the worker's calls are judged (refwork.Feed). With `second_init`, the last seed (the
    replay trial's) runs on the second weights drawn under it (statecheck.py), which `params` maps."""
    report = screened(mod, device, known, budgets) if screen_first else None
    memplan.reset_peak(device)
    held = Held()
    model, args, kwargs, construct_ops = _build(mod, init_seed, device)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    second, kept, why = _second(mod, model, init_seed, second_init, device)
    state = statecheck.summary(model, second)  # what a replayed forward's kept tensors are checked against
    if second_init is not None and (why or kept):
        state["second_off"] = why or "; ".join(kept) + " on their first weights"
    trials: list[protocol.Trial] = []
    plan = None
    forward_ops: dict[str, int] | None = None
    for i, seed in enumerate(seeds):
        host = make_inputs(mod, seed, device)
        held.add(host)
        if second and i == len(seeds) - 1:  # the replay trial: on the second weights, from here on
            statecheck.apply_second(model, second)
        with torch.no_grad():
            if forward_ops is None:  # what the reference's forward runs (judge.py: a problem of copies alone)
                with OpCount() as counter:
                    out = model(*_to(host, device))
                forward_ops = counter.counts
            else:
                out = model(*_to(host, device))
        held.add(out)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        # A sent trial's outputs go from the device straight into the reply's arena as it is encoded: a host
        # copy first was a second pass over every byte (39 s of a 4.3 GB KernelBench job's 156 s, H200
        # 2026-12-01). Not where the trial's own bounds run forward again first (the buffers may be reused).
        own = report is not None and precision.past_table(report.tolerances)
        outs, seq = _outputs(out, keep="sent" if send is not None and not own else "host")
        if plan is None:
            plan = memplan.plan_from(host, out, params, calls, len(seeds), "measured")
            if report is not None and (precision.past_table(report.tolerances) or known is None and any(
                    (rec or {}).get("basis") == "measured" for rec in report.tolerances)) and precision.measures(
                    plan.input_bytes, plan.output_bytes, params, precision.measure_limit(device, budgets)):
                plan.measure_bytes = memplan.measure_device(plan.input_bytes, plan.output_bytes, params)  # held here
            if budgets:
                memplan.check(plan, device.type, budgets["device"], budgets["host"], budgets["timed"])
        trial = protocol.Trial(outputs=outs, sequence=seq, fingerprint=fingerprint(host))
        if report is not None:
            trial["tolerances"] = report.tolerances
            if own:
                # Past the table the parent asks no trial's own bound on a near miss (compare.py: only
                # within the table), and the honest error moves with the draw and the weights (the replay's
                # are scaled by up to 1/3: statecheck._factor): each trial carries its own, measured here.
                mine = _own_bounds(mod, model, init_seed, device, second if second and i == len(seeds) - 1 else None,
                                   _to(host, device), [out] if isinstance(out, torch.Tensor) else list(out), budgets,
                                   f"trial {i} (seed {seed})")
                trial["tolerances"] = precision.wider(report.tolerances, mine)
        if i == 0 and send is not None:  # what the worker's `run` needs, before the trials the parent reads in step
            head: dict[str, Any] = {"init_args": args, "init_kwargs": kwargs, "construct_ops": construct_ops,
                                    "params": state}
            if report is not None:
                head.update(screen=report.to_dict(), screened_here=known is None)
            trial["head"] = head
        del host, out
        if send is None:
            trials.append(trial)
            del outs, trial
            continue
        wait = send(trial)  # encoded: the outputs are in the arena, the device's copies may go
        del outs, trial  # the parent may read this trial only when a worker's call needs it
        if plan is not None and plan.output_bytes > CACHE_BYTES:  # nor the allocator's cache of them while it waits (refwork.Feed)
            memplan.release(device)
        wait()
    io_bytes = plan.problem_bytes if plan is not None else params
    memory = protocol.ReferenceMemory(plan=plan.to_dict(device.type, bool(budgets and budgets["timed"])) if plan else None,
                                      reference_peak_bytes=memplan.peak(device), reference_held_peak_bytes=held.peak)
    del model
    memplan.release(device)
    out = protocol.TrialsReply(init_args=args, init_kwargs=kwargs, trials=trials, io_bytes=io_bytes,
                               construct_ops=construct_ops, memory=memory, params=state,
                               forward_ops=forward_ops or {})
    if report is not None:
        out["screen"] = report.to_dict()
        out["screened_here"] = known is None
    return out


def trial_bounds(mod: types.ModuleType, init_seed: int, seeds: list[int], device: torch.device,
                 second_init: int | None = None, budgets: dict[str, Any] | None = None) -> list[list[Any]]:
    """Each output's bound measured on one trial's own inputs (precision.bounds: the reference in fp32 and
    an honest kernel's error against the model in fp64), per seed; the table where the problem is too
    large to measure. Screening measures on two draws of its own, which cannot foresee a draw where an
    honest kernel errs more (every value small next to a constant added and taken away again).
    `second_init`: the last seed's trial is on the second weights, as make_trials made it. `budgets`: as
    screening's (precision.measure_limit)."""
    model = _build(mod, init_seed, device)[0]
    second_weights = _second(mod, model, init_seed, second_init, device)[0]
    out: list[list[Any]] = []
    for i, seed in enumerate(seeds):
        second = second_weights if second_weights and i == len(seeds) - 1 else None
        if second:
            statecheck.apply_second(model, second)
        inputs = _to(make_inputs(mod, seed, device), device)
        with torch.no_grad():
            outs = _outputs(model(*inputs))[0]
        out.append(_own_bounds(mod, model, init_seed, device, second, inputs, outs, budgets, f"trial {i} (seed {seed})"))
        del inputs, outs
    memplan.release(device)
    return out


def _own_bounds(mod: types.ModuleType, model: Any, init_seed: int, device: torch.device, second: dict | None,
                inputs: list, outs: list, budgets: dict[str, Any] | None, where: str) -> list[Any]:
    """One trial's bound records on its own inputs and weights (`second`: the replay trial's map):
    precision.trial_records, its fp64 twin the model the trial ran on."""
    def twin() -> Any:
        made = _build(mod, init_seed, device)[0]
        if second:
            statecheck.apply_second(made, second)
        return made

    return precision.trial_records(model, twin, inputs, outs, _run, precision.measure_limit(device, budgets), where)


def _run(model: Any, inputs: list) -> list[torch.Tensor]:
    with torch.no_grad():
        return _outputs(model(*inputs))[0]


class RefTimer:
    """A reference model, its inputs and (`compile`) its torch.compile'd twin, warmed up and ready to be timed."""

    def __init__(self, mod: types.ModuleType, init_seed: int, seed: int, device: torch.device,
                 compile: bool = True) -> None:
        self.model, _, _, _ = _build(mod, init_seed, device)
        self.device = device
        self.inputs = _to(make_inputs(mod, seed, device), device)
        self.compiled: Any = None
        self.compile_error = ""
        if not compile:  # the pool times eager only: no compile to pay for (seconds per problem)
            return
        with torch.no_grad():
            try:
                compiled = torch.compile(self.model)
                for _ in range(3):  # compilation happens here, outside any timed window
                    compiled(*self.inputs)
                self.compiled = compiled
            except Exception as exc:  # noqa: BLE001 - the reference may not compile; eager still counts
                self.compile_error = f"{type(exc).__name__}: {str(exc)[:300]}"

    def measure(self, warmup: int, trials: int, flush: torch.Tensor) -> protocol.MeasureReply:
        """Eager and compiled medians, each over as many of `trials` as fit timing.TIMED_S (one call's
        time, synchronised, says how many)."""
        def timed(fn: Callable[[], Any]) -> float:
            t0 = time.perf_counter()
            fn()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            n = timing.trials_for(time.perf_counter() - t0, trials)
            return timing.time_calls(lambda i: fn(), lambda i: None, warmup, n, flush).median_ms

        with torch.no_grad():
            out = protocol.MeasureReply(eager_ms=timed(lambda: self.model(*self.inputs)), compile_ms=None,
                                        compile_error=self.compile_error or None)
            if self.compiled is not None:
                out["compile_ms"] = timed(lambda: self.compiled(*self.inputs))
        return out


def _send_trial(conn: Any, arena: codec.Arena | None, trial: protocol.Trial) -> Callable[[], None]:
    """Send one trial's expected outputs, before the reply; what it returns waits for the parent's ack,
    which says it copied them out of the arena (the next trial then fills it from its start). The caller
    drops its device tensors in between: the parent may read the trial only when a worker's call needs it."""
    conn.send_bytes(codec.encode(protocol.TrialSent(trial=trial), arena))

    def wait() -> None:
        got = codec.decode(conn.recv_bytes())
        if arena is not None and got.get("cmd") == "ack":
            arena.reset()
    return wait


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
    # The job's budgets (its grant: admission.py) as the last `trials` command gave them: a near miss's
    # `trial_bounds` comes after its job's trials, and measures within them as screening did.
    budgets: dict[str, Any] | None = None
    flush = None
    if device.type == "cuda":
        timing.prefer_spin_wait(device.index)
        torch.cuda.set_device(device)
        os.environ["TRITON_CACHE_DIR"] = cfg["template_cache"]
        from distill.verifier.sandbox import worker  # the worker's warm kernel, compiled into the template cache

        worker._warm_up(device)
        os.environ["TRITON_CACHE_DIR"] = cfg["own_cache"]
        flush = timing.flush_buffer(device)
        # Inductor compiles a graph's kernels in a pool of subprocesses (one per core), each importing
        # torch afresh; every reference process warmed one up at its start. On the 16-core H200 box
        # that was 168 processes and 44% of the host's CPU samples during bench_verifier (py-spy,
        # 2026-11-29), taken from the workers. A reference graph has a few kernels: they compile here.
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
        if cfg.get("role", "timer") == "timer":  # plain references never compile on a pool with timers
            try:  # import inductor now, at pool start, not at the first problem's timing
                torch.compile(lambda x: x * 2.0 + 1.0)(torch.ones(8, device=device))
            except Exception:  # noqa: BLE001 - then references are timed eagerly only
                pass
    arena = codec.open_arena(cfg)
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    conn.send_bytes(codec.encode(protocol.RefReady(ready=True, pid=os.getpid(), device_total=total)))
    while True:
        try:
            msg = codec.decode(conn.recv_bytes())
        except (EOFError, OSError):  # the pool closed or died: nothing left to serve
            os._exit(0)
        cmd = msg["cmd"]
        if arena is not None:
            arena.reset()
        # One of protocol.py's replies: PlanReply, TrialsReply, TrialBoundsReply, PrepareTimingReply,
        # MeasureReply, PeaksReply, or ProblemErrorReply.
        out: Any
        try:
            if cmd == "plan":  # shapes only, before the worker makes anything (memplan.py)
                mod = load_problem(msg["source"], cache)
                plan = memplan.meta_plan(mod, msg["init_seed"], msg["seed"], msg["calls"], msg["sets"])
                if plan is not None and msg.get("budgets"):
                    b = msg["budgets"]
                    memplan.check(plan, device.type, b["device"], b["host"], b["timed"])
                out = protocol.PlanReply(plan=plan.to_dict(device.type, bool(msg.get("budgets", {}).get("timed"))) if plan else None)
            elif cmd == "trials":
                mod = load_problem(msg["source"], cache)
                budgets = msg.get("budgets") or budgets
                try:
                    out = make_trials(mod, msg["init_seed"], msg["seeds"], device, msg.get("calls", 0),
                                      msg.get("budgets"), screen_first=True, known=msg.get("screen"),
                                      send=lambda trial: _send_trial(conn, arena, trial),
                                      second_init=msg.get("second_init"))
                except torch.OutOfMemoryError as exc:
                    raise memplan.out_of_memory(exc, "the reference", None, device) from None
            elif cmd == "trial_bounds":  # a near miss: each trial's bound measured on its own inputs (judge.py)
                out = protocol.TrialBoundsReply(bounds=trial_bounds(load_problem(msg["source"], cache), msg["init_seed"],
                                                                    msg["seeds"], device, msg.get("second_init"), budgets))
            elif cmd == "prepare_timing":  # compile outside the parent's GPU timing lock
                mod = load_problem(msg["source"], cache)
                timers[msg["key"]] = RefTimer(mod, msg["init_seed"], msg["seed"], device, msg.get("compile", True))
                out = protocol.PrepareTimingReply(compile_error=timers[msg["key"]].compile_error or None)
            elif cmd == "measure":  # the parent holds the GPU timing lock
                out = timers.pop(msg["key"]).measure(msg["warmup"], msg["trials"], flush)
            elif cmd == "peaks":
                out = timing.device_peaks(device)
            elif cmd == "exit":
                os._exit(0)
            else:
                out = protocol.ProblemErrorReply(problem_error=f"unknown command {cmd}")
        except ScreenFailed as exc:  # the report goes back too: the pool fails later jobs on it at once
            out = protocol.ProblemErrorReply(problem_error=str(exc)[:1500], screen=exc.report.to_dict())
        except ProblemError as exc:  # already says what about the problem failed
            out = protocol.ProblemErrorReply(problem_error=str(exc)[:1500])
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            out = protocol.ProblemErrorReply(problem_error=f"{type(exc).__name__}: {str(exc)[:1000]}")
        finally:
            memplan.release(device)  # whatever the command cached goes back to the device
        try:
            conn.send_bytes(codec.encode(out, arena))
        except OSError:  # the pool went away mid-command
            os._exit(0)
