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
* bfloat16 and float16 (problems drawn in them, DESIGN §2: fp32 accumulation is the sense of
  correctness). Measured with `bench/lowprec_error.py` (CPU, torch 2.13; normwise error against fp64
  on the same rounded inputs; R = reduction length, 16 rows, matmul 64xRx64):

  | bf16, R = 4096 (65536)    | fp32-accumulating kernel | eager torch (the reference) | bf16 accumulation |
  |---------------------------|--------------------------|-----------------------------|-------------------|
  | sum of N(0,1)             | 2.1e-3 (1.7e-3)          | 2.1e-3 (1.7e-3)             | 7.1e-3 (3.1e-2)   |
  | sum / mean of U(0,1)      | 2.3e-3 (2.0e-3)          | 2.3e-3 (2.0e-3)             | 2.4e-3 (0.50)     |
  | matmul                    | 1.7e-3 (1.7e-3)          | 1.7e-3 (1.7e-3)             | 1.3e-2 (5.4e-2)   |
  | softmax                   | 1.7e-3 (1.7e-3)          | 1.7e-3 (1.7e-3)             | 2.6e-3 (0.36)     |
  | layernorm                 | 1.7e-3 (1.7e-3)          | 1.7e-3 (1.7e-3)             | 4.4e-3 (0.62)     |

  A correct kernel's error is the one rounding of its output (u/sqrt(3)-ish, u = 2^-8 = 3.9e-3), and
  eager PyTorch accumulates in fp32 too, so kernel and reference agree to <= 1.7e-5 on single ops
  (bit-identical on most). What separates them is a chain: eager rounds every intermediate to bf16,
  a fused kernel does not; over 40 lowered level-4 bf16 programs the worst disagreement was 2.2e-2
  (one program, through an amplifying op), the next 9e-3. `norm_rel` = 2e-2 is ~10x one rounding
  and fails accumulation in bf16 once it matters: a lane that adds >= ~512 same-sign values stalls
  (the spacing of bf16 at 256 is 2), 0.36-0.62 above; short accumulations (R = 4096 over 64 lanes,
  64 steps each) stay within 1.3e-2 and pass: there bf16 accumulation costs no more than one
  rounding of the reference would. Elementwise 5e-2 of the RMS and of each value: the worst element
  of a correct kernel is 7.8e-3 of the RMS (matmul), softmax's small entries 5e-2 relative to the
  row's RMS come from their own rounding (rtol covers them). float16: u = 4.9e-4; the same table
  reads 1.6e-4 to 6.9e-4 (fp32 accumulation, both lengths) and, for fp16 accumulation, 2.9e-4 to
  1.6e-3 at R = 4096 (passes) and 4.5e-3 to 6.8e-3 at R = 65536 (sum of N(0,1), matmul, softmax: at
  or past the limit; layernorm's sum of squares overflows to inf). 5e-3 normwise is ~20x one
  rounding: fp16 accumulation is caught only on long reductions, being 8x finer than bf16's.
* float64: no tf32-like shortcut exists for float64 in Triton; kept tight.
* integers and bool: exact.

Per problem (`fitted`). The table is as wide as the worst honest float32 kernel needs (tf32 dot
products); a kernel that drops a term whose effect is under it would pass a problem whose reference
is far more exact. So a float32 output is judged against its own problem's bound: the honest error
measured on the reference side (precision.py: the fp32 reference and its tf32-dot variant against
an fp64 evaluation, worst over the screening draws) times MARGIN, never looser than the table, never
tighter than FLOOR_FP32. The floor is the freedom an honest kernel keeps on a problem measured exact:
another order of summation and fast-math exp/log/division/sqrt (each a few units of fp32 rounding,
~1e-7 to 1e-6 relative) pass it 10-100x over; a term dropped with an effect of 1e-5 of the output's
norm does not, nor a GELU's tanh approximation where the problem asks for erf (2e-4 normwise), nor
intermediates kept in fp16 (2e-4). Where the reference rounds through tf32-sized steps or is
ill-conditioned, the measured error is larger and the bound follows it up to the table. Other dtypes
keep the table: bf16 and fp16 were measured against their own eager references above, and float64
has nothing more exact to measure against.

Past the table (float32 only: `fitted`, `IllConditioned`). Where the honest error itself is over what
the table allows, the problem is ill-conditioned for a tf32 kernel, and capping the bound at the table
failed the honest kernel: KernelBench level 2 #93 (ConvTranspose2d, +0.5, min(., 0), GELU, x2) lowered
with `tl.dot` on float32 drew `norm rel err 0.0168 (limit 0.002)` on the H200. Its output is 0 but
where conv + 0.5 < 0 (~4e-6 of the elements), so the output's norm is the size of the cancellation
conv + 0.5, while tf32's cut toward zero shrinks every product of its all-positive inputs, the conv by
~1e-3 of itself. There the bound is ILL_MARGIN times the measured honest error (the honest kernel's
error is the modelled one, not a figure ten times under the table), up to CEILING; past CEILING the
problem, not a candidate, is at fault: screening refuses it (`ill_conditioned`), and a trial's own
bound past it is a ProblemError (reference.py). Measured on #93 (CPU, fp64 reference; the models of
precision.py; normwise / elementwise; screening's draws are seeds 11 and 23 on INIT_SEED's weights):

  | #93                                   | normwise                  | elementwise   |
  |---------------------------------------|---------------------------|---------------|
  | fp32 reference as written             | 1.4e-6 to 5.1e-6          | 4e-5 to 1.6e-3|
  | honest (tf32 cut), batch 128, 3 draws | 0.0130 to 0.0144          | 0.875 to 0.888|
  | honest, batch 16, 6 draws             | 0.0122 to 0.0160          | 0.76 to 0.89  |
  | honest, batch 16, 3 weight draws      | 0.0121 to 0.0162          | 0.49 to 0.76  |
  | honest, b 16, weights x0.9/x1.1/x1.33 | 0.0197 / 0.0094 / 0.0051  | 0.95 / 0.48 / 0.16 |
  | honest, weights x0.67 or x0.8         | 0 (no output below 0)     | 0             |
  | honest, batch 2, 4 draws              | 0.0105 to 0.0232          | 0.46          |
  | tf32 rounded to nearest, batch 2      | 0.0012 to 0.0019          | 0.015         |
  | bf16 operands rounded, batch 128      | 0.0182 to 0.0201          | 13.8 to 15.4  |
  | bf16 rounded, batch 16, 3 weights     | 0.0075 to 0.0202          | 0.34 to 1.47  |
  | bf16 operands cut, batch 2            | 0.10 to 0.23              | 0.94          |
  | one of 64 input channels dropped, b 2 | 0.14 to 0.38              | 16            |
  | the conv's bias dropped, batch 2      | 0.35 to 0.83              | 222           |

  ILL_MARGIN = 2: the honest error moves 1.10x between draws at batch 128 (1.31x at batch 16, 2.2x at
  batch 2, where 10-17 of 4.3M outputs are nonzero) and 1.34x between weight draws; the replay trial's
  second weights (scaled by 0.67-0.9 or 1.1-1.33: statecheck._factor) move it most (1.6x at x0.9), and
  past the table the parent asks no trial's own bound on a near miss (compare.py: only within the
  table), so the reference measures each such trial's bound as it makes it (reference.make_trials). The
  margin then covers a kernel's distance from the model; it stays 5x under MARGIN. What it cannot do is
  fail bf16 operands rounded to nearest: the tf32 cut is biased on inputs of one sign and rounding is
  not (tf32 rounded is 10x under tf32 cut on #93), so bf16 rounded measures 0.6-1.6x the honest cut,
  sometimes under it: on #93 it fails on its elements with INIT_SEED's weights (it crosses the min's
  threshold where the reference is 0, 14-15x the RMS, and the cut does not), not on every weight draw.
  A cut to bf16 (~10x the honest error) and dropped terms (13-36x) fail on the norm.
  CEILING = 5e-2 normwise, 4.0 elementwise. 5e-2 is 2.5x the bf16 table (2e-2, the loosest normwise
  bound the verifier grants any output otherwise) and 1.3x #93's worst trial bound measured (0.0197 x
  2, at weights x0.9); a dropped input channel (0.14) and a cut to bf16 (0.10) stay 2-3x over it.
  Elementwise, #93's honest error reaches 0.95 (x0.9), near the 1 at which an honest kernel's element
  is off by its whole size plus the RMS; 4 keeps 2x over its bound (1.9), and past it the elementwise
  test admits any sign on every element.

Non-finite values must sit exactly where the reference has them (same NaN mask, same infinities);
everywhere else the candidate must be finite. Determinism (same inputs twice) uses `det_rel`,
well under the correctness tolerance, so rounding-level differences from atomics pass and noise or
races do not.
"""
from __future__ import annotations

import math

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
# A float32 output's bound: MARGIN times its measured honest error (precision.py), within
# [FLOOR_FP32, the table] (module docstring).
MARGIN = 10.0
FLOOR_FP32 = Tolerance(norm_rel=1e-5, atol_rel=1e-4, rtol=1e-4, det_rel=5e-6)
# float64's floor, as float32's: a few units of rounding per op (~1e-16 to 1e-15) pass it 1,000x over; a
# float64 problem computed in float32 (~6e-8) does not.
FLOOR_FP64 = Tolerance(norm_rel=1e-12, atol_rel=1e-11, rtol=1e-11, det_rel=5e-13)
_FLOORS = {torch.float32: FLOOR_FP32, torch.float64: FLOOR_FP64}
# A float32 output whose measured honest error is over the table (tf32 dot products on an ill-conditioned
# problem): ILL_MARGIN times it, up to CEILING (normwise, elementwise); past that the problem is refused
# (module docstring: the figures).
ILL_MARGIN = 2.0
CEILING = Tolerance(norm_rel=5e-2, atol_rel=4.0, rtol=4.0, det_rel=2.5e-2)


class IllConditioned(ValueError):
    """An output whose honest error, times ILL_MARGIN, is past CEILING: the problem's fault, never a
    candidate's verdict (screen.py: `ill_conditioned`; reference.trial_bounds: a ProblemError)."""


def tolerance_for(dtype: torch.dtype) -> Tolerance | None:
    """None means exact comparison (integers, bool)."""
    return TOLERANCES.get(dtype)


def fitted(dtype: torch.dtype, norm_err: float, elem_err: float) -> Tolerance | None:
    """The bound for an output of `dtype` whose honest error was measured as `norm_err` (normwise)
    and `elem_err` (elementwise, of rms + |value|): the table for every dtype but float32 and float64."""
    table = tolerance_for(dtype)
    if table is None or dtype not in _FLOORS:
        return table
    floor = _FLOORS[dtype]
    norm = min(table.norm_rel, max(floor.norm_rel, MARGIN * norm_err))
    elem = min(table.atol_rel, max(floor.atol_rel, MARGIN * elem_err))
    rtol = min(table.rtol, elem)
    if dtype == torch.float32 and max(ILL_MARGIN * norm_err / table.norm_rel, ILL_MARGIN * elem_err / table.atol_rel) > 1:
        # past the table: the honest error itself is over it (module docstring). Each figure follows its
        # own measurement where that is over the table; rtol with atol, since |d| <= e * (rms + |ref|) is
        # what was measured (with rtol kept at 1e-2, an element 100x the RMS would need e <= 1e-2 alone).
        norm = max(norm, ILL_MARGIN * norm_err)
        elem = rtol = max(elem, ILL_MARGIN * elem_err)
        if norm > CEILING.norm_rel or elem > CEILING.atol_rel:
            raise IllConditioned(f"an honest float32 kernel's error (tf32 dot products, fast math: precision.py) "
                                 f"misses the fp64 evaluation by {norm_err:.3g} normwise and {elem_err:.3g} "
                                 f"elementwise; x{ILL_MARGIN:g} that is past the verifier's ceiling "
                                 f"({CEILING.norm_rel:g}, {CEILING.atol_rel:g}), so no bound both passes the honest "
                                 "kernel and fails a wrong one")
    # Same inputs twice may differ by half the bound (atomics in another order, ~1e-7 to 1e-6): two
    # runs each within it could differ by twice it, and a kernel that noisy is no kernel to keep.
    return Tolerance(norm_rel=norm, atol_rel=elem, rtol=rtol, det_rel=min(table.det_rel, norm / 2))


def compare(out: torch.Tensor, ref: torch.Tensor, det: bool = False,
            tol: Tolerance | None = None) -> tuple[bool, dict[str, Any]]:
    """Whether `out` agrees with `ref` (same dtype and shape assumed checked), under `tol` (the
    problem's fitted bound) or else the dtype table. Details for `checks`."""
    tol = tolerance_for(ref.dtype) if tol is None or tolerance_for(ref.dtype) is None else tol
    if out.numel() > CHUNK and out.shape == ref.shape:
        return _compare_chunked(out, ref, det, tol)
    if tol is None:
        bad = int((out != ref).sum())
        return bad == 0, {"mismatched": bad, "exact": True}
    work = _work_dtype(ref.dtype)
    o, r = out.to(work), ref.to(work)
    # Finite norms of the reference and of the difference mean both tensors are finite: no
    # separate finiteness passes over 16 MB outputs on the common path.
    got = _finite_compare(o, r, tol, det)
    if got is not None:
        return got
    r_fin, o_fin = torch.isfinite(r), torch.isfinite(o)
    # Non-finite reference entries must be reproduced exactly (NaN where NaN, same infinities). A
    # non-finite value where the reference is finite decides it first: a replay without the
    # candidate's launches (poisoned, NaN) took six more passes over its output here.
    spurious = int((~o_fin & r_fin).sum())
    info: dict[str, Any] = {"nonfinite_where_ref_finite": spurious}
    if spurious or not (bool(torch.equal(torch.isnan(r), torch.isnan(o))) and bool(
            torch.equal(torch.where(torch.isinf(r), r, 0), torch.where(torch.isinf(o), o, 0)))):
        info["error"] = "non-finite values differ from the reference"
        return False, info
    if r.numel() == 0:
        return True, info
    got = _finite_compare(o[r_fin], r[r_fin], tol, det)
    if got is None:  # finite inputs with a difference that overflows float32
        got = _finite_compare(o[r_fin].to(torch.float64), r[r_fin].to(torch.float64), tol, det)
    ok, more = got if got is not None else (False, {"error": "difference overflows"})
    info.update(more)
    return ok, info


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    # Work in float32 (float64 for float64 data): the rounding of a float32 difference is ~1e-7
    # relative, far under every limit below, and float64 copies of every output made this the
    # parent's bottleneck on GPU-sized problems (1.1 s per 4M-element compare on the CPU box).
    return {torch.float64: torch.float64, torch.complex64: torch.complex64,
            torch.complex128: torch.complex128}.get(dtype, torch.float32)


# Elements per slice of a large comparison. A whole-tensor comparison holds four temporaries the size of
# its output (the difference, |ref|, the excess, a mask): 27 GiB beside a 6 GiB output (KernelBench's
# ReLU), which with the outputs themselves put the parent past the H200 box's 128 GB. Sliced, the
# temporaries stay near 4 x 64 MiB at any size; outputs up to CHUNK elements take the whole-tensor path.
CHUNK = 1 << 24


def _slices(out: torch.Tensor, ref: torch.Tensor) -> Any:
    o, r = out.reshape(-1), ref.reshape(-1)
    for i in range(0, o.numel(), CHUNK):
        yield o[i:i + CHUNK], r[i:i + CHUNK]


def _finite_pair(a: torch.Tensor, b: torch.Tensor, work: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """One slice in the working dtype, with its non-finite facts; masked to the reference's finite
    entries where any entry is not finite (as `compare` masks a whole tensor)."""
    o, r = a.to(work), b.to(work)
    facts = {"same": True, "spurious": 0}
    r_fin, o_fin = torch.isfinite(r), torch.isfinite(o)
    if bool(r_fin.all()) and bool(o_fin.all()):
        return o, r, facts
    facts["spurious"] = int((~o_fin & r_fin).sum())
    if facts["spurious"]:  # decided (as in `compare`): the other facts are not read
        return o[:0], r[:0], facts
    facts["same"] = bool(torch.equal(torch.isnan(r), torch.isnan(o))) and bool(
        torch.equal(torch.where(torch.isinf(r), r, 0), torch.where(torch.isinf(o), o, 0)))
    return o[r_fin], r[r_fin], facts


def _abs_diff(o: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    d = torch.sub(o, r).abs_()
    if d.numel() and not bool(torch.isfinite(d).all()):  # finite values whose difference overflows float32
        d = (o.to(torch.float64) - r.to(torch.float64)).abs()
    return d


class _Scratch:
    """Slice-sized buffers reused across a comparison's slices. A fresh 64 MiB temporary per slice is
    a fresh mapping from the allocator (past glibc's 32 MiB mmap threshold), zeroed page by page by the
    kernel on first touch and unmapped after: on the CPU box the parent spent about a third of its CPU
    in those page faults (`perf record` of bench_parent_cpu.py, 2026-12-01)."""

    def __init__(self, n: int, dtype: torch.dtype, device: torch.device) -> None:
        # on the compared tensors' device: a reference on a GPU compares its own runs there
        self.n, self.dtype, self.device, self.bufs = n, dtype, device, {}

    def take(self, key: str, n: int) -> torch.Tensor:
        if key not in self.bufs:
            self.bufs[key] = torch.empty(self.n, dtype=self.dtype, device=self.device)
        return self.bufs[key][:n]

    def cast(self, key: str, t: torch.Tensor) -> torch.Tensor:
        """`t` in the working dtype: itself where it already is, else copied into buffer `key`."""
        if t.dtype == self.dtype:
            return t
        return self.take(key, t.numel()).copy_(t)


def _compare_chunked(out: torch.Tensor, ref: torch.Tensor, det: bool, tol: Tolerance | None) -> tuple[bool, dict[str, Any]]:
    """`compare` over CHUNK-element slices, in two passes (the norms and the RMS, then the elements
    against the tolerance the RMS sets): the same figures up to float32 summation order."""
    if tol is None:
        bad = sum(int((a != b).sum()) for a, b in _slices(out, ref))
        return bad == 0, {"mismatched": bad, "exact": True}
    work = _work_dtype(ref.dtype)
    scratch = _Scratch(min(CHUNK, out.numel()), work, out.device)
    same_finite = True  # no slice held a non-finite value
    ref_sq = err_sq = max_abs = 0.0
    n, same, spurious = 0, True, 0
    for a, b in _slices(out, ref):
        # Finite norms of the slice and of its difference mean both are finite (as `compare` reads a whole
        # tensor): four passes over a slice, where checking finiteness first took ten (4.0 s per GiB of
        # float32 output on one core of the CPU box; the parent's comparisons of a 2 GB KernelBench output).
        # The difference keeps its sign: its norms and largest magnitude read it as it is.
        r = scratch.cast("r", b)
        d = torch.sub(scratch.cast("o", a), r, out=scratch.take("d", r.numel()))
        rn, dn = norm2(r), norm2(d)
        if not (math.isfinite(rn) and math.isfinite(dn)):
            same_finite = False
            o, r, facts = _finite_pair(a, b, work)
            same, spurious = same and facts["same"], spurious + facts["spurious"]
            if not same or spurious:
                break
            d = _abs_diff(o, r)
            rn, dn = norm2(r), norm2(d)
        n += r.numel()
        ref_sq += rn ** 2
        err_sq += dn ** 2
        if d.numel():  # one pass for both ends (vector_norm's inf norm took 19x aminmax's time on the CPU box)
            lo, hi = torch.aminmax(d)
            max_abs = max(max_abs, -float(lo), float(hi))
    info: dict[str, Any] = {"nonfinite_where_ref_finite": spurious}
    if not same or spurious:
        info["error"] = "non-finite values differ from the reference"
        return False, info
    if n == 0:
        return True, info
    ref_norm, err_norm = math.sqrt(ref_sq), math.sqrt(err_sq)
    if not (math.isfinite(ref_norm) and math.isfinite(err_norm)):
        info["error"] = "difference overflows"
        return False, info
    rms = ref_norm / n ** 0.5
    norm_err = err_norm / max(ref_norm, _RMS_FLOOR * n ** 0.5)
    info.update(norm_rel_err=norm_err, max_abs_err=max_abs, ref_rms=rms)
    if det:
        info["limit"] = tol.det_rel
        return norm_err <= tol.det_rel, info
    atol = tol.atol_rel * max(rms, _RMS_FLOOR)
    bad = 0
    if max_abs > atol:  # no element can exceed atol + rtol|r| otherwise
        for a, b in _slices(out, ref):
            if same_finite:  # every slice and difference finite (the first pass's norms): no masking
                r = scratch.cast("r", b)
                d = torch.sub(scratch.cast("o", a), r, out=scratch.take("d", r.numel())).abs_()
                e = scratch.take("e", r.numel())
                bad += int(torch.count_nonzero(torch.add(d, torch.abs(r, out=e), alpha=-tol.rtol, out=e) > atol))
                continue
            o, r, _ = _finite_pair(a, b, work)
            d = _abs_diff(o, r)
            bad += int((torch.addcmul(d, r.abs().to(d.dtype), torch.tensor(-tol.rtol, dtype=d.dtype)) > atol).sum())
    info.update(elements_out_of_tol=bad, norm_limit=tol.norm_rel)
    return (norm_err <= tol.norm_rel and bad == 0), info


def norm2(x: torch.Tensor) -> float:
    """2-norm; torch's cascaded float32 sum is accurate to ~1e-7 here, float64 only on overflow."""
    n = float(torch.linalg.vector_norm(x))
    if n == float("inf"):
        n = float(torch.linalg.vector_norm(x.to(torch.complex128 if x.is_complex() else torch.float64)))
    return n


def _finite_compare(of: torch.Tensor, rf: torch.Tensor, tol: Tolerance,
                    det: bool) -> tuple[bool, dict[str, Any]] | None:
    """None when either tensor holds a NaN or an infinity (then the caller masks them out)."""
    info: dict[str, Any] = {"nonfinite_where_ref_finite": 0}
    diff = torch.sub(of, rf).abs_()  # one temporary the output's size, not two
    ref_norm = norm2(rf)
    err_norm = norm2(diff)
    if not (math.isfinite(ref_norm) and math.isfinite(err_norm)):
        return None
    rms = ref_norm / max(rf.numel(), 1) ** 0.5
    norm_err = err_norm / max(ref_norm, _RMS_FLOOR * max(rf.numel(), 1) ** 0.5)
    max_abs = float(diff.max()) if diff.numel() else 0.0
    info.update(norm_rel_err=norm_err, max_abs_err=max_abs, ref_rms=rms)
    if det:
        ok = norm_err <= tol.det_rel
        info["limit"] = tol.det_rel
        return ok, info
    # |d| <= atol + rtol*|r|  <=>  |d| - rtol*|r| <= atol: one max instead of a count over a bool mask,
    # and no pass at all when no |d| exceeds atol (an honest output's case; a third of the parent's
    # comparison time on 4M-element outputs)
    atol = tol.atol_rel * max(rms, _RMS_FLOOR)
    bad = 0
    if max_abs > atol:
        excess = torch.addcmul(diff, rf.abs(), torch.tensor(-tol.rtol, dtype=diff.dtype))
        bad = int((excess > atol).sum()) if float(excess.amax()) > atol else 0
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
