"""Run a rendered program on the CPU: shapes as predicted, finite, and genuinely input-dependent.

A problem whose output is (near) constant, or that ignores one of its inputs, would let a kernel
that returns a constant (zeros, say) pass verification; such draws are rejected here, at sampling
time, and the sampler repairs the wiring rather than redrawing the op list.
"""
from __future__ import annotations

from typing import Any

import torch

# Two tensors "differ" when they are not allclose at this tolerance. It is looser than the verifier's
# float32 tolerance, so an output that is distinguishable here is distinguishable there.
ATOL = 1e-3
RTOL = 1e-3


class CheckFailed(Exception):
    def __init__(self, kind: str, detail: str = ""):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


def load_module(source: str, name: str = "problem") -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": name}
    exec(compile(source, f"<{name}>", "exec"), namespace)  # noqa: S102 - synth's own program text
    return namespace


def _as_tuple(out: Any) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:  # `not allclose`, in fewer passes (a NaN counts as a difference)
        return not bool((torch.abs(a - b) <= ATOL + RTOL * torch.abs(b)).all())
    return not torch.equal(a, b)


def _spread_ok(t: torch.Tensor) -> bool:
    if t.numel() < 2:
        return True
    if not t.dtype.is_floating_point:
        return bool((t != t.reshape(-1)[0]).any())
    lo, hi = t.min().item(), t.max().item()
    return hi - lo > 2 * (ATOL + RTOL * max(abs(lo), abs(hi)))


def run_checks(source: str, seed: int, out_shapes: list[list[int]], out_dtypes: list[str]) -> None:
    """Raise CheckFailed with a reason unless the program behaves as the sampler predicted."""
    threads = torch.get_num_threads()
    # these tensors are small: one thread is faster, and far faster when other processes load the
    # machine (intra-op thread pools spin while they wait)
    torch.set_num_threads(1)
    try:
        _run_checks(source, seed, out_shapes, out_dtypes)
    except CheckFailed:
        raise
    except Exception as exc:  # a catalog rule PyTorch disagrees with: repairable, but counted by kind
        raise CheckFailed("runtime error", f"{type(exc).__name__}: {exc}") from exc
    finally:
        torch.set_num_threads(threads)


def _run_checks(source: str, seed: int, out_shapes: list[list[int]], out_dtypes: list[str]) -> None:
    ns = load_module(source)
    torch.random.default_generator.manual_seed(seed)  # CPU only: torch.manual_seed also seeds devices
    with torch.no_grad():
        model = ns["Model"](*ns["get_init_inputs"]())
        base_in = ns["get_inputs"]()
        base = _as_tuple(model(*base_in))
        if len(base) != len(out_shapes):
            raise CheckFailed("output count", f"{len(base)}, expected {len(out_shapes)}")
        for i, (t, shape, dt) in enumerate(zip(base, out_shapes, out_dtypes)):
            if list(t.shape) != list(shape):
                raise CheckFailed("shape mismatch", f"output {i} has {list(t.shape)}, predicted {shape}")
            if (dt == "i64") == t.dtype.is_floating_point:
                raise CheckFailed("dtype mismatch", f"output {i} has {t.dtype}, predicted {dt}")
            if t.dtype.is_floating_point and not torch.isfinite(t).all():
                raise CheckFailed("not finite", f"output {i}")
            if not _spread_ok(t):
                raise CheckFailed("constant output", f"output {i}")
        touched = [False] * len(base)
        other = ns["get_inputs"]()  # a second draw of every input; each trial swaps in one of them
        for j in range(len(base_in)):
            trial = list(base_in)
            trial[j] = other[j]
            outs = _as_tuple(model(*trial))
            moved = [_differ(a, b) for a, b in zip(base, outs)]
            if not any(moved):
                raise CheckFailed("input ignored", f"input {j}")
            touched = [t or m for t, m in zip(touched, moved)]
        if not all(touched):
            raise CheckFailed("input-insensitive output", f"output {touched.index(False)}")
