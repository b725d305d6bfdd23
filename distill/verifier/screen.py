"""Screening a problem: the questions every problem must answer before a candidate is judged on it.

synth checks its own programs as it draws them (synth/check.py). `distill` screens a problem from
anywhere else (a user's KernelBench file, a KernelBook row) in a sandboxed child process before any
teacher is asked about it (`screen_problem`), and the verifier's reference process asks the same
questions of every problem it serves (`screen_module`, cached per problem: reference.py), so
`tritonforge verify`, `distill.verify` and the pool refuse what `distill` would have left out:

  loads        the module defines Model, get_inputs and get_init_inputs, and they run
  runs         forward returns a tensor or a tuple of tensors
  finite       no NaN or infinity in any output
  deterministic the same model on the same inputs gives the same outputs (within the verifier's
               determinism tolerance); a rebuilt model with the same seed does too; get_inputs
               makes the same inputs from the same seed
  bounds       each float32 output's acceptance bound, from its measured honest error
               (precision.py, tolerance.fitted); the bounds travel with the expected outputs
  not constant no constant tensor passes that bound on every trial. Where it fails, a kernel that
               writes zeros (or the mean) passes, as an all-zeros kernel does on KernelBench level 2
               #9 (a ReLU after a shift of -2 over outputs of std 0.33) and #83 (min(x, 0) then clamp
               to [0, 1])
  conditioned  no float32 output of the reference as written misses its fp64 evaluation by more
               than the dtype table's bound, and no honest kernel's measured error (tf32 dot products)
               puts the bound past tolerance.CEILING (`ill_conditioned`: the output is rounding noise,
               or so ill-conditioned for tf32, and an honest kernel cannot be told from a wrong one)
  inputs matter every tensor input moves some output by well over its bound (EFFECT_MARGIN times,
               normwise; any change of an exact output), by a fresh draw or, for long reductions
               whose value concentrates, by the same draw scaled by SHRINK: else a kernel that
               ignores it, or drops the term it feeds, passes

Each failure is a status (`broken`, `nondeterministic`, `degenerate`, `ill_conditioned`, `timeout`) with a reason a
person can act on; `ok` problems carry the shapes and dtypes the run showed, the bounds, and each
input's effect in multiples of the bound.

What is covered: the child starts from the environment allow-list (no credentials), in a private
network namespace, under Landlock (writes only in its scratch folder) and seccomp (no new processes),
with the file-size cap; it is killed at the time limit. What is not: the reference process of a
verification runs the same module unconfined, as it runs synth's own text: screening a problem is
what makes its text a problem the project accepts, not a proof it is harmless.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("ok", "broken", "nondeterministic", "degenerate", "ill_conditioned", "timeout")
# Input draws. A discrete output (an argmax, a floor) or an argmax of one input can agree on two draws
# by chance: at synth's level 5, 3 of 200 programs did on 2 draws, none on 4. The fp64 measurement
# (precision.py) uses the first two.
SEEDS = (11, 23, 37, 41)
INIT_SEED = 5
# An input must move some output by this many times its bound: the trials draw other inputs than
# screening did, and an effect at the bound itself would let its omission pass on some of them.
EFFECT_MARGIN = 10.0
# Elements of each output the constant check keeps per draw (the rest of a draw is freed at once).
SAMPLE = 1 << 16
# The scaled draw: not 1/2, for which an L1 or MSE loss of two U(0,1) inputs keeps its expected
# value (synth/check.py's SHRINK, for the same reason).
SHRINK = 0.3


@dataclass
class ScreenReport:
    """What screening found out about one problem."""

    status: str                                          # one of STATUSES
    reason: str = ""                                     # why, when not ok
    input_shapes: list[list[int]] = field(default_factory=list)
    output_shapes: list[list[int]] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    io_bytes: int = 0                                    # one trial's inputs + outputs + parameters
    seconds: float = 0.0
    # per output: its bound (tolerance.Tolerance's fields) and how it was set; None for exact outputs
    tolerances: list[dict[str, Any] | None] = field(default_factory=list)
    # per input: the largest normwise change a redraw made to an output, in multiples of its bound
    # (inf: an exact output changed); None for inputs that are not tensors
    effects: list[float | None] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def screen_problem(source: str, device: str = "cpu", timeout: float = 300.0) -> ScreenReport:
    """Screen one KernelBench-format module in a sandboxed child (see the module docstring)."""
    from distill.verifier import environ

    t0 = time.monotonic()
    nonce = os.urandom(8).hex()
    with tempfile.TemporaryDirectory(prefix="tritonforge-screen-") as scratch:
        env = {**environ.allowed(), "TRITON_INTERPRET": "1" if device == "cpu" else "0", "HOME": scratch,
               "TMPDIR": scratch, "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        request = json.dumps({"source": source, "device": device, "scratch": scratch, "nonce": nonce})
        try:
            done = subprocess.run([sys.executable, "-m", "distill.verifier.screen"], input=request, text=True,
                                  capture_output=True, env=env, cwd=scratch, timeout=timeout)
        except subprocess.TimeoutExpired:
            return ScreenReport("timeout", f"screening ran past {timeout:.0f} s", seconds=time.monotonic() - t0)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(nonce)]
    if not lines:
        tail = (done.stderr or "").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return ScreenReport("broken", f"the screening process died: {tail[0][:300]}", seconds=time.monotonic() - t0)
    report = ScreenReport(**json.loads(lines[-1][len(nonce):]))
    report.seconds = round(time.monotonic() - t0, 3)
    return report


# ---------------------------------------------------------------------------------------- the child
def _child(req: dict[str, Any]) -> ScreenReport:
    from distill.verifier import trusted
    from distill.verifier.sandbox import caps, lockdown

    caps.cap_files()
    netns = lockdown.unshare_network()
    # Reads as a worker's: the system, the Python installation and every site torch may come from,
    # and this package (its checks import lazily); not /tmp or a home folder.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lockdown.lock_down(req["scratch"], [], no_children=True, layers=("landlock", "seccomp", "capabilities"),
                       netns=netns, read_paths=lockdown.readable(trusted.code_roots() + [package]))
    import torch

    device = torch.device("cuda" if req["device"] == "cuda" else "cpu")
    from distill.verifier.problemio import load_problem

    try:
        mod = load_problem(req["source"], {})
    except Exception as exc:  # noqa: BLE001 - the problem's own error is the finding
        return ScreenReport("broken", f"loading the module raised {type(exc).__name__}: {str(exc)[:300]}")
    return screen_module(mod, device)


class _Finding(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def _tensors(out: Any, what: str) -> list:
    import torch

    outs = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else None
    if not outs or not all(isinstance(t, torch.Tensor) for t in outs):
        raise _Finding("broken", f"{what} returned {type(out).__name__}, not a tensor or a tuple of tensors")
    return [t.detach().clone() for t in outs]


def screen_module(mod: Any, device: Any, measure_limit: int | None = None) -> ScreenReport:
    """Screen a loaded problem module on `device` (a torch.device); never raises for the problem's
    own failures, which are the report's status. `measure_limit`: the bytes the fp64 measurement may
    hold (precision.measure_limit; MEASURE_BYTES where None)."""
    try:
        return _checks(mod, device, measure_limit)
    except _Finding as f:
        return ScreenReport(f.status, f.reason)


def _checks(mod: Any, device: Any, measure_limit: int | None = None) -> ScreenReport:
    import torch

    from distill.verifier import precision
    from distill.verifier.problemio import fingerprint, make_inputs, seed_all
    from distill.verifier.tolerance import compare

    def step(what: str, fn: Any) -> Any:
        try:
            return fn()
        except _Finding:
            raise
        except Exception as exc:  # noqa: BLE001 - the problem's own error is the finding
            raise _Finding("broken", f"{what} raised {type(exc).__name__}: {str(exc)[:300]}") from None

    def build() -> Any:
        seed_all(INIT_SEED)
        init = mod.get_init_inputs()
        args, kwargs = (list(init), {}) if isinstance(init, (list, tuple)) else ([], dict(init or {}))
        seed_all(INIT_SEED)
        return mod.Model(*args, **kwargs).to(device)

    def run(model: Any, inputs: list) -> list:
        with torch.no_grad():
            return _tensors(model(*inputs), "forward")

    kept: dict[int, list] = {}

    def draw(k: int) -> list:
        if k in kept:
            return kept[k]
        made = step(f"get_inputs (seed {SEEDS[k]})", functools.partial(make_inputs, mod, SEEDS[k], device))
        if small:
            kept[k] = made
        return made

    # Memory as the reference's own trials (memplan.py): draw 0's inputs and outputs stay, every other
    # draw is made, run and freed, keeping a fixed sample of its outputs (SAMPLE elements each); a
    # problem measured in fp64 (precision.measures) keeps its draws' inputs rather than make them again.
    small = False
    model = step("Model(*get_init_inputs())", build)
    inputs0 = draw(0)
    # The worker makes its inputs from the same seeds: a get_inputs that does not repeat itself would
    # make the reference and the worker disagree, and the parent then blames the candidate (judge.py).
    again = step(f"get_inputs (seed {SEEDS[0]})", functools.partial(make_inputs, mod, SEEDS[0], device))
    if fingerprint(again) != fingerprint(inputs0):
        raise _Finding("nondeterministic", "get_inputs() made different inputs from the same seed: inputs must "
                                           "come from torch/random/numpy RNGs, which the harness seeds")
    del again
    outs0 = step("forward", functools.partial(run, model, inputs0))
    report = ScreenReport("ok", input_shapes=[list(v.shape) for v in inputs0 if isinstance(v, torch.Tensor)],
                          input_dtypes=[str(v.dtype).removeprefix("torch.") for v in inputs0
                                        if isinstance(v, torch.Tensor)],
                          output_shapes=[list(o.shape) for o in outs0],
                          output_dtypes=[str(o.dtype).removeprefix("torch.") for o in outs0])
    sizes = (sum(v.numel() * v.element_size() for v in inputs0 if isinstance(v, torch.Tensor)),
             sum(o.numel() * o.element_size() for o in outs0), sum(p.numel() * p.element_size() for p in model.parameters()))
    report.io_bytes = int(sum(sizes))  # what the measurement holds is a multiple of these (memplan.measure_device)
    small = precision.measures(*sizes, precision.MEASURE_BYTES if measure_limit is None else measure_limit)
    _finite(outs0)

    def same(label: str, again_model: Any) -> None:
        got = step("forward", functools.partial(run, again_model, inputs0))
        for k, (g, o) in enumerate(zip(got, outs0)):
            if g.shape != o.shape or not compare(g, o, det=True)[0]:
                hint = " (training-mode dropout or another random op in forward?)" if label == "the same model" else ""
                raise _Finding("nondeterministic", f"output {k}: {label} on the same inputs gave different "
                                                   f"values{hint}")

    same("the same model", model)
    # A rebuilt model: now where it also becomes the fp64 model, else at the end, once `model` is gone
    # (two models at once would double a large problem's parameters).
    twin = step("Model(*get_init_inputs())", build) if small else None
    if twin is not None:
        same("a model rebuilt with the same seed", twin)
    picks = [_sample(o) for o in outs0]
    samples = [[o.reshape(-1)[p] for o, p in zip(outs0, picks)]]
    inputs1 = outs1 = None
    for k in range(1, len(SEEDS)):
        ins = draw(k)
        outs = step("forward", functools.partial(run, model, ins))
        _finite(outs)
        samples.append([o.reshape(-1)[p] if o.shape == b.shape else None for o, b, p in zip(outs, outs0, picks)])
        if k == 1 and small:  # the fp64 measurement's second draw
            inputs1, outs1 = ins, outs
        del ins, outs
    tols, report.tolerances = precision.bounds(model, twin, [inputs0, inputs1], [outs0, outs1], run, report.io_bytes)
    del twin, inputs1, outs1
    for k, tol in enumerate(tols):
        per_draw = [draw_k[k] for draw_k in samples]
        if all(t is not None for t in per_draw) and _constant_passes(per_draw,
                                                                     lambda a, b, tol=tol: compare(a, b, tol=tol)):
            raise _Finding("degenerate", f"output {k} is (near) constant: a kernel that writes a constant passes "
                                         f"the verifier's tolerance on every trial")
    noise = precision.rounding_noise(outs0, report.tolerances)  # after the constant check: zeros passing says more
    if noise is not None:
        k, err, bound = noise
        raise _Finding("ill_conditioned", f"output {k} is rounding noise at float32: an fp32 evaluation of the reference "
                                          f"misses its fp64 evaluation by {err:.3g} normwise, over the verifier's float32 "
                                          f"bound ({bound:g}), so no bound can tell an honest kernel from a wrong one")
    if precision.past_ceiling(report.tolerances):
        raise _Finding("ill_conditioned", precision.past_ceiling(report.tolerances))
    report.effects = _effects(model, inputs0, outs0, draw, tols, run, step)
    if not small:
        del model
        same("a model rebuilt with the same seed", step("Model(*get_init_inputs())", build))
    for i, effect in enumerate(report.effects):
        if effect is not None and effect < EFFECT_MARGIN:
            raise _Finding("degenerate", f"input {i} does not move any output well over the verifier's tolerance "
                                         f"(by {effect:.3g}x its bound at most, {EFFECT_MARGIN:g}x needed): a kernel "
                                         "that ignores it, or drops the term it feeds, passes")
    return report


def _finite(outs: list) -> None:
    import torch

    for k, o in enumerate(outs):
        if (o.is_floating_point() or o.is_complex()) and not bool(torch.isfinite(o).all()):
            raise _Finding("degenerate", f"output {k} has NaN or infinite values")


def _sample(out: Any) -> Any:
    """The positions of `out` the constant check compares on every draw: all of a small output, a
    fixed sample of SAMPLE of a large one (whether one constant passes shows on any large sample)."""
    import torch

    n = out.numel()
    if n <= SAMPLE:
        return slice(None)
    return torch.randint(0, n, (SAMPLE,), generator=torch.Generator().manual_seed(n)).to(out.device)


def _effects(model: Any, inputs0: list, outs0: list, draw: Any, tols: list, run: Any, step: Any) -> list[float | None]:
    """Per tensor input: the largest change that replacing it (by the other draws' one, then draw 0's
    scaled by SHRINK) made to any output, normwise, in multiples of that output's bound, stopping
    once one reaches EFFECT_MARGIN; inf where an exact output changed or an output changed shape."""
    import torch

    effects: list[float | None] = []
    for i, a in enumerate(inputs0):
        if not isinstance(a, torch.Tensor):
            effects.append(None)
            continue
        best, tried = 0.0, 0
        for k in list(range(1, len(SEEDS))) + ([None] if a.is_floating_point() else []):
            c = a * SHRINK if k is None else draw(k)[i]
            if not isinstance(c, torch.Tensor) or c.shape != a.shape:
                continue
            tried += 1
            got = step("forward", functools.partial(run, model, inputs0[:i] + [c] + inputs0[i + 1:]))
            for g, o, tol in zip(got, outs0, tols):
                best = max(best, _change(g, o, tol))
            del c, got
            if best >= EFFECT_MARGIN:
                break
        effects.append(best if tried else None)
    return effects


def _change(got: Any, base: Any, tol: Any) -> float:
    """How far `got` is from `base`: normwise, in multiples of the bound; exact outputs: 0 or inf."""
    import torch

    if got.shape != base.shape:
        return float("inf")
    if tol is None or not (base.is_floating_point() or base.is_complex()):
        return 0.0 if torch.equal(got, base) else float("inf")
    from distill.verifier.tolerance import norm2

    work = base if base.dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128) else base.float()
    d = norm2(got.to(work.dtype) - work)
    n = norm2(work)
    if d == 0:
        return 0.0
    return float("inf") if n == 0 else d / n / tol.norm_rel


def _constant_passes(per_trial: list, compare: Any) -> bool:
    """Whether one constant (zero, or the mean over trials) passes the tolerance on every trial."""
    import torch

    if not per_trial[0].is_floating_point():
        if not per_trial[0].numel():
            return True
        first = per_trial[0].reshape(-1)[0]
        return all(bool((t == first).all()) for t in per_trial)
    mean = float(torch.stack([t.double().mean() for t in per_trial]).mean())
    return any(all(compare(torch.full_like(t, c), t)[0] for t in per_trial) for c in (0.0, mean))


def main() -> None:
    req = json.loads(sys.stdin.read())
    try:
        report = _child(req)
    except Exception as exc:  # noqa: BLE001 - a harness failure is reported, not raised
        report = ScreenReport("broken", f"screening failed: {type(exc).__name__}: {str(exc)[:300]}")
    sys.stdout.write("\n" + req["nonce"] + json.dumps(report.to_dict()) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
