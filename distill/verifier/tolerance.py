"""Numerical agreement between a candidate's output and the reference's, with per-dtype tolerances.

Two tests, both must hold:

* **normwise**: ||out - ref|| / ||ref|| <= `norm_rel`. Catches small systematic errors (a wrong
  constant, a dropped term) that an elementwise test with a loose tolerance lets through.
* **elementwise**: |out - ref| <= `atol_rel` * rms(ref) + `rtol` * |ref|. Catches local errors (an
  unwritten tail, a wrong row). The absolute part scales with the output's RMS so a tf32 matmul with
  large K (absolute error ~ 2u*sqrt(K) on outputs of size ~sqrt(K)) is not failed on elements that
  happen to be near zero.

Why these numbers (u = unit roundoff of the format):
* float32: Triton's `tl.dot` on float32 defaults to tf32 on GPUs (10 explicit mantissa bits,
  u = 2^-11 ~ 4.9e-4). A K-term dot product then has a relative error of about u/sqrt(3)*2 ~ 6e-4
  normwise; exp/log approximations add ~1e-6. `norm_rel` = 2e-3 leaves ~3x margin over tf32 and
  still fails bf16-level shortcuts (~4e-3) and anything cruder. Elementwise 1e-2 follows KernelBench.
* float16: u = 4.9e-4 on every stored value; reductions in different orders differ by a few ulp.
* bfloat16: u = 3.9e-3, eight times float16's.
* float64: no tf32-like shortcut exists for float64 in Triton; kept tight.
* integers and bool: exact.

Non-finite values must sit exactly where the reference has them (same NaN mask, same infinities);
everywhere else the candidate must be finite. Determinism (same inputs twice) uses `det_rel`,
well under the correctness tolerance, so rounding-level differences from atomics pass and noise or
races do not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Tolerance:
    norm_rel: float
    atol_rel: float
    rtol: float
    det_rel: float


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(norm_rel=1e-7, atol_rel=1e-6, rtol=1e-6, det_rel=1e-9),
    torch.float32: Tolerance(norm_rel=2e-3, atol_rel=1e-2, rtol=1e-2, det_rel=1e-4),
    torch.float16: Tolerance(norm_rel=5e-3, atol_rel=2e-2, rtol=2e-2, det_rel=2e-3),
    torch.bfloat16: Tolerance(norm_rel=2e-2, atol_rel=5e-2, rtol=5e-2, det_rel=1e-2),
    torch.complex64: Tolerance(norm_rel=2e-3, atol_rel=1e-2, rtol=1e-2, det_rel=1e-4),
}
# A floor for rms(ref) so an all-zero reference does not demand bit-exact zeros.
_RMS_FLOOR = 1e-6


def tolerance_for(dtype: torch.dtype) -> Tolerance | None:
    """None means exact comparison (integers, bool)."""
    return TOLERANCES.get(dtype)


def compare(out: torch.Tensor, ref: torch.Tensor, det: bool = False) -> tuple[bool, dict[str, Any]]:
    """Whether `out` agrees with `ref` (same dtype and shape assumed checked). Details for `checks`."""
    tol = tolerance_for(ref.dtype)
    if tol is None:
        bad = int((out != ref).sum())
        return bad == 0, {"mismatched": bad, "exact": True}
    o = out.to(torch.complex128 if ref.dtype.is_complex else torch.float64)
    r = ref.to(o.dtype)
    r_fin, o_fin = torch.isfinite(r), torch.isfinite(o)
    # Non-finite reference entries must be reproduced exactly (NaN where NaN, same infinities).
    same_nonfinite = bool(torch.equal(torch.isnan(r), torch.isnan(o))) and bool(
        torch.equal(torch.where(torch.isinf(r), r, 0), torch.where(torch.isinf(o), o, 0))
    )
    spurious = int((~o_fin & r_fin).sum())
    info: dict[str, Any] = {"nonfinite_where_ref_finite": spurious}
    if not same_nonfinite or spurious:
        info["error"] = "non-finite values differ from the reference"
        return False, info
    if r.numel() == 0:
        return True, info
    rf, of = r[r_fin], o[r_fin]
    diff = (of - rf).abs()
    ref_norm = float(rf.abs().pow(2).sum().sqrt())
    err_norm = float(diff.pow(2).sum().sqrt())
    rms = ref_norm / max(rf.numel(), 1) ** 0.5
    norm_err = err_norm / max(ref_norm, _RMS_FLOOR * max(rf.numel(), 1) ** 0.5)
    info.update(norm_rel_err=norm_err, max_abs_err=float(diff.max()) if diff.numel() else 0.0, ref_rms=rms)
    if det:
        ok = norm_err <= tol.det_rel
        info["limit"] = tol.det_rel
        return ok, info
    limit = tol.atol_rel * max(rms, _RMS_FLOOR) + tol.rtol * rf.abs()
    bad = int((diff > limit).sum())
    info.update(elements_out_of_tol=bad, norm_limit=tol.norm_rel)
    return (norm_err <= tol.norm_rel and bad == 0), info


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exact equality of raw bits (NaN payloads included): used for 'inputs unchanged'."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    width = a.element_size()
    if a.dtype.is_complex:
        a, b, width = torch.view_as_real(a), torch.view_as_real(b), 4
    raw = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width]
    return bool(torch.equal(a.contiguous().view(raw), b.contiguous().view(raw)))
