"""Screening a problem that did not come from synth (a user's KernelBench file, a KernelBook row).

synth checks its own programs as it draws them (synth/check.py). A problem from anywhere else gets
the same questions here, in a sandboxed child process, before any teacher is asked about it:

  loads        the module defines Model, get_inputs and get_init_inputs, and they run
  runs         forward returns a tensor or a tuple of tensors
  finite       no NaN or infinity in any output
  deterministic the same model on the same inputs gives the same outputs (within the verifier's
               determinism tolerance); a rebuilt model with the same seed does too
  not constant no constant tensor passes the verifier's tolerance on every trial. This is the test
               that matters for verification: where it fails, a kernel that writes zeros (or the
               mean) passes, as an all-zeros kernel does on KernelBench level 2 #9 (a ReLU after a
               shift of -2 over outputs of std 0.33) and #83 (min(x, 0) then clamp to [0, 1])
  inputs matter every tensor input moves some output beyond the tolerance, by a fresh draw or, for
               long reductions whose value concentrates, by the same draw halved

Each failure is a status (`broken`, `nondeterministic`, `degenerate`, `timeout`) with a reason a
person can act on; `ok` problems carry the shapes and dtypes the run showed.

What is covered: the child starts from the environment allow-list (no credentials), in a private
network namespace, under Landlock (writes only in its scratch folder) and seccomp (no new processes),
with the file-size cap; it is killed at the time limit. What is not: the reference process of a
verification later runs the same module unconfined, as it runs synth's own text: screening a
problem is what makes its text a problem the project accepts, not a proof it is harmless.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("ok", "broken", "nondeterministic", "degenerate", "timeout")
SEEDS = (11, 23)          # two input draws: enough to see variation, cheap at full size
INIT_SEED = 5


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
    from distill.verifier import caps, lockdown

    caps.cap_files()
    netns = lockdown.unshare_network()
    lockdown.lock_down(req["scratch"], [], no_children=True, layers=("landlock", "seccomp", "capabilities"),
                       netns=netns)
    import torch

    device = torch.device("cuda" if req["device"] == "cuda" else "cpu")
    try:
        return _checks(req["source"], device)
    except _Finding as f:
        return ScreenReport(f.status, f.reason)


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


def _checks(source: str, device: Any) -> ScreenReport:
    import torch

    from distill.verifier.problemio import load_problem, make_inputs, seed_all
    from distill.verifier.tolerance import compare

    def step(what: str, fn: Any) -> Any:
        try:
            return fn()
        except _Finding:
            raise
        except Exception as exc:  # noqa: BLE001 - the problem's own error is the finding
            raise _Finding("broken", f"{what} raised {type(exc).__name__}: {str(exc)[:300]}") from None

    mod = step("loading the module", lambda: load_problem(source, {}))

    def build() -> Any:
        seed_all(INIT_SEED)
        init = mod.get_init_inputs()
        args, kwargs = (list(init), {}) if isinstance(init, (list, tuple)) else ([], dict(init or {}))
        seed_all(INIT_SEED)
        return mod.Model(*args, **kwargs).to(device)

    def run(model: Any, inputs: list) -> list:
        with torch.no_grad():
            return _tensors(model(*inputs), "forward")

    model = step("Model(*get_init_inputs())", build)
    trials = [step(f"get_inputs (seed {s})", lambda s=s: make_inputs(mod, s, device)) for s in SEEDS]
    outs = [step("forward", lambda t=t: run(model, t)) for t in trials]
    report = ScreenReport("ok", input_shapes=[list(v.shape) for v in trials[0] if isinstance(v, torch.Tensor)],
                          input_dtypes=[str(v.dtype).removeprefix("torch.") for v in trials[0]
                                        if isinstance(v, torch.Tensor)],
                          output_shapes=[list(o.shape) for o in outs[0]],
                          output_dtypes=[str(o.dtype).removeprefix("torch.") for o in outs[0]])
    report.io_bytes = int(sum(v.numel() * v.element_size() for v in trials[0] if isinstance(v, torch.Tensor))
                          + sum(o.numel() * o.element_size() for o in outs[0])
                          + sum(p.numel() * p.element_size() for p in model.parameters()))
    for k, o in enumerate(outs[0]):
        if o.is_floating_point() and not bool(torch.isfinite(o).all()):
            raise _Finding("degenerate", f"output {k} has NaN or infinite values")
    again = step("forward", lambda: run(model, trials[0]))
    rebuilt = step("forward", lambda: run(step("Model(*get_init_inputs())", build), trials[0]))
    for label, got in (("the same model", again), ("a model rebuilt with the same seed", rebuilt)):
        for k, (g, o) in enumerate(zip(got, outs[0])):
            if not compare(g, o, det=True)[0]:
                hint = " (training-mode dropout or another random op in forward?)" if label == "the same model" else ""
                raise _Finding("nondeterministic", f"output {k}: {label} on the same inputs gave different "
                                                   f"values{hint}")
    for k in range(len(outs[0])):
        if _constant_passes([trial[k] for trial in outs], compare):
            raise _Finding("degenerate", f"output {k} is (near) constant: a kernel that writes a constant passes "
                                         f"the verifier's tolerance on every trial")
    for i, (a, b) in enumerate(zip(trials[0], trials[1])):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
            continue
        candidates = [b] + ([a * 0.5] if a.is_floating_point() else [])
        if not any(_moves(run(model, trials[0][:i] + [c] + trials[0][i + 1:]), outs[0], compare) for c in candidates):
            raise _Finding("degenerate", f"input {i} does not move any output beyond the verifier's tolerance: a "
                                         f"kernel that ignores it passes")
    return report


def _constant_passes(per_trial: list, compare: Any) -> bool:
    """Whether one constant (zero, or the mean over trials) passes the tolerance on every trial."""
    import torch

    if not per_trial[0].is_floating_point():
        return all(torch.equal(t, per_trial[0].flatten()[:1].expand_as(t)) for t in per_trial) if per_trial[0].numel() \
            else True
    mean = float(torch.stack([t.double().mean() for t in per_trial]).mean())
    return any(all(compare(torch.full_like(t, c), t)[0] for t in per_trial) for c in (0.0, mean))


def _moves(got: list, base: list, compare: Any) -> bool:
    return any(g.shape != b.shape or not compare(g, b)[0] for g, b in zip(got, base))


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
