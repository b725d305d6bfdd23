"""How exact a problem's float32 reference is: the error an honest fp32 kernel may make, measured.

The dtype table (tolerance.py) has to admit every honest kernel of any problem, so it is as wide as
the worst one needs (tf32 dot products, ~6e-4 normwise). Most problems are far more exact than that,
and a kernel that drops a term whose effect is under the table would pass them. So each float32
output gets a bound from its own problem, measured on the reference side (screen.py, cached per
problem) against an fp64 evaluation of the same model (same weights, same inputs, every float
parameter, input and default dtype in float64), for two fp32 evaluations:

  fp32    the reference as written: its own rounding, amplified by the problem's conditioning;
  honest  the reference as an honest GPU kernel might compute it: the operands of its dot products
          (mm, addmm, bmm, convolution, attention, ...) cut to tf32 (10 explicit mantissa bits,
          toward zero), what `tl.dot` does with float32 data by default; every sum (sum, mean,
          cumsum) moved by up to ULPS units of rounding of its terms' absolute mass (the same sum
          over |x|), since another order of summation errs by that, not by units of the result,
          which cancellation can make far smaller (a mean of 2,032 randn values: an honest blocked
          sum drew 1.05e-5 normwise against the fp32 reference, where 4 units of the result
          measured 2e-7); and every other op's result moved by up to ULPS units of fp32 rounding,
          fixed-seed noise standing for fast-math exp/log/tanh/division (a few units each). Where
          the problem amplifies rounding (a cancellation, a near-tie before an argmax or a floor)
          the noise is amplified with it, so the bound grows where an honest kernel's error does.

The larger of the two, times a margin, is the bound (tolerance.fitted), never looser than the table
and never tighter than a floor.

Where it runs (`measures`): the measurement holds ~18x a trial's outputs (memplan.measure_device: the
fp64 forward, the honest one beside it and screening's kept draws). On a GPU the limit is the job's
device budget (its grant, `budgets["device"]`, which memplan.check holds the reference to; the trials'
plan then counts the measurement, MemoryPlan.measure_bytes; a trial whose bound is past the table is
measured again on its own inputs within the same limit: reference.make_trials) where the job holds its
GPU alone; a shared job's within MEASURE_BYTES too (`measure_limit`). So KernelBench level 2 #93 at its
own sizes (1.24 GB a trial: 20.6 GB measured) is measured only where its job holds the GPU alone (it
fits a 14 GB share of the H200, so it does not: its wrong verdict for an honest tf32 kernel stands
there); elsewhere (the CPU, where the reference shares the host with the workers and the parent; a
screening without a pool) within MEASURE_BYTES. A measurement on a slice
of the batch was the other way, and was not taken: a batch-coupled forward (BatchNorm in training
mode, a mean over dim 0, an input whose dim 0 is not the batch) changes under a slice, and the
slice's worst element is not the problem's.

Simplified: a problem whose fp64 evaluation cannot be made (it raises, or computes some step in a
lower precision on purpose, so that step's rounding would look exact) keeps the table, and says why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from distill.verifier import policy

# Operand positions of the ops whose float32 operands a GPU's tl.dot rounds to tf32 (schema names;
# composite ops such as linear, matmul and einsum reach the dispatcher as these).
_DOT_OPERANDS: dict[str, tuple[int, ...]] = {
    **{op: (0, 1) for op in ("aten::mm", "aten::bmm", "aten::dot", "aten::vdot", "aten::mv", "aten::convolution",
                             "aten::_convolution", "aten::conv_tbc", "aten::_euclidean_dist", "aten::_cdist_forward",
                             "aten::tensordot")},
    **{op: (1, 2) for op in ("aten::addmm", "aten::addmm_", "aten::baddbmm", "aten::baddbmm_", "aten::addbmm",
                             "aten::addbmm_", "aten::addmv", "aten::addmv_", "aten::addr", "aten::_addmm_activation")},
    "aten::_trilinear": (0, 1, 2),
}
_ATTENTION = ("aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention")
# Sums whose honest error is a few units of rounding of the terms' absolute mass (`_HonestKernel`).
_SUMS = frozenset({"aten::sum", "aten::mean", "aten::nansum", "aten::cumsum"})
# The measurement's hold (memplan.measure_device) past which the reference keeps the table where no
# device budget is known (`measure_limit`): outputs of up to 512 MiB, as the earlier rule (twice a
# trial's bytes within 1 GiB), which held these 9 GiB while it counted 1.
MEASURE_BYTES = 9 << 30
# Units of fp32 rounding (2^-24) by which the honest evaluation moves each op's result, at most: fast
# exp/log/division are within 2-3 of them (PTX ex2/lg2/div.full), libdevice within 1-2.
ULPS = 4.0
# The unit of rounding of each measured dtype. float64 outputs are measured too: against the table alone
# (1e-7, ~1.7x fp32's unit) a kernel computing a float64 problem in float32 passed (red-team, 2026-11-30).
_UNIT = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53}
_NOISE_SEED = 20261124


@dataclass(frozen=True)
class Measured:
    """One output's error against its fp64 evaluation, the worst over the draws measured: normwise
    (||d|| / ||ref64||) and elementwise (max |d| / (rms(ref64) + |ref64|)), for the fp32 reference
    and its honest-kernel variant."""

    fp32_norm: float
    fp32_elem: float
    honest_norm: float
    honest_elem: float

    @property
    def norm(self) -> float:
        return max(self.fp32_norm, self.honest_norm)

    @property
    def elem(self) -> float:
        return max(self.fp32_elem, self.honest_elem)


def tf32(t: torch.Tensor) -> torch.Tensor:
    """`t` (float32) with its mantissa cut to tf32's 10 bits, toward zero: what an NVIDIA tensor core
    reads of the fp32 operands of Triton's `tl.dot` (input_precision "tf32", the default), which are not
    rounded first (triton-lang/triton#4574: Triton's tf32 matmul far less exact than PyTorch's, which
    rounds). Unlike rounding, the cut has a sign: on operands of one sign (`torch.rand` inputs) the
    products' errors add up instead of cancelling. On the H200, KernelBench level 2's
    ConvTranspose3d_Max_Max_Sum lowered with one tf32 product missed fp64 by 6.7e-4 where the operands
    rounded to nearest measured 1.7e-5 (the bound, x10: 1.7e-4), a correct kernel failed by the model."""
    bits = t.contiguous().view(torch.int32) & -0x2000
    return torch.where(t.isnan(), t, bits.view(torch.float32).view(t.shape))


class _HonestKernel(TorchDispatchMode):
    """Rounds the float32 operands of dot-product ops to tf32 before they run, and moves every
    float32 result of an op that rounds (not allocation, views or copies, nor an in-place op, which
    would move its operand) by up to ULPS units of rounding, from a fixed seed."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.gen = torch.Generator(device=device).manual_seed(_NOISE_SEED)

    def _noisy(self, t: Any, mass: Any = None) -> Any:
        """`t` moved by up to ULPS units of rounding of `mass` (a sum's |terms|), else of itself."""
        if not isinstance(t, torch.Tensor) or t.dtype not in _UNIT or t.numel() == 0:
            return t
        r = torch.rand(t.shape, generator=self.gen, device=t.device, dtype=t.dtype)
        if mass is None:
            return t * (1.0 + (2.0 * r - 1.0) * (ULPS * _UNIT[t.dtype]))
        return t + mass * ((2.0 * r - 1.0) * (ULPS * _UNIT[t.dtype]))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func._schema.name
        where = _DOT_OPERANDS.get(name) or ((0, 1, 2) if name.startswith(_ATTENTION) else ())
        if where:
            args = tuple(tf32(a) if i in where and isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
                         for i, a in enumerate(args))
        out = func(*args, **(kwargs or {}))
        if name in policy.ALLOWED_OPS or func.is_view or func._schema.is_mutable:
            return out
        if isinstance(out, (tuple, list)):
            return type(out)(self._noisy(t) for t in out)
        x = args[0] if args else None
        if name in _SUMS and isinstance(x, torch.Tensor) and x.dtype in _UNIT and isinstance(out, torch.Tensor):
            return self._noisy(out, func(x.abs(), *args[1:], **(kwargs or {})))  # the mode is off in here
        return self._noisy(out)


class _LowerPrecision(TorchDispatchMode):
    """Notes an op of the fp64 evaluation that made a floating tensor below float64 (a cast in the
    problem's own forward): that step's rounding is then in both results and looks exact."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = ""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if not self.seen:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) \
                        and t.dtype not in (torch.float64, torch.complex128):
                    self.seen = f"{func._schema.name} makes {str(t.dtype).removeprefix('torch.')}"
                    break
        return out


def measure_limit(device: Any, budgets: dict[str, Any] | None) -> int:
    """The most the measurement may hold: the device budget of a GPU job that holds its GPU alone
    (admission.py; memplan.check holds the reference to it), else MEASURE_BYTES (within a shared job's
    budget). A shared GPU's references live in the fifth its workers leave (28 GB on the H200, four
    references): the job's whole 14 GB share measured in each would outgrow it."""
    if budgets and getattr(device, "type", device) == "cuda" and budgets.get("device"):
        return int(budgets["device"]) if budgets.get("alone") else min(int(budgets["device"]), MEASURE_BYTES)
    return MEASURE_BYTES


def measures(input_bytes: int, output_bytes: int, param_bytes: int, limit: int) -> bool:
    """Whether a problem with these bytes a trial is measured within `limit` (`measure_limit`)."""
    from distill.verifier import memplan

    return memplan.measure_device(input_bytes, output_bytes, param_bytes) <= limit


def _double(x: Any) -> Any:
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


# Elements per slice of `_errors`: its fp64 temporaries stay at a few times 32 MiB at any size.
_SLICE = 1 << 22


def _errors(got: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    """Normwise and elementwise error, scaled as tolerance.compare scales them: an RMS under its floor
    counts as the floor (a trial whose output is all zeros, as #93's is on weights scaled by 0.67:
    there an honest kernel's zeros measure 0, not an infinite error)."""
    from distill.verifier.tolerance import _RMS_FLOOR

    ref_norm = float(torch.linalg.vector_norm(exact))
    if not math.isfinite(ref_norm):
        return math.inf, math.inf
    root = math.sqrt(max(exact.numel(), 1))
    ref_norm = max(ref_norm, _RMS_FLOOR * root)
    rms = ref_norm / root
    g, e = got.reshape(-1), exact.reshape(-1)
    sq, elem = 0.0, 0.0
    for i in range(0, e.numel(), _SLICE):
        d = (g[i:i + _SLICE].double() - e[i:i + _SLICE]).abs_()
        sq += float(torch.linalg.vector_norm(d)) ** 2
        elem = max(elem, float((d / (e[i:i + _SLICE].abs() + rms)).max()))
    return math.sqrt(sq) / ref_norm, elem


def measure(model: Any, model64: Any, draws: list[list[Any]], outs: list[list[torch.Tensor]],
            run: Callable[[Any, list[Any]], list[torch.Tensor]]) -> list[Measured | None] | str:
    """Per output, the fp32 and honest-kernel errors of the reference against `model64` (the same model in
    float64) over `draws` (whose fp32 outputs are `outs`); None for outputs that are not float32.
    A string instead says why nothing could be measured."""
    if not any(o.dtype in _UNIT for o in outs[0]):
        return "no float32 or float64 output"
    worst: list[list[float]] = [[0.0] * 4 for _ in outs[0]]
    before = torch.get_default_dtype()
    for inputs, got in zip(draws, outs):
        watch = _LowerPrecision()
        try:
            torch.set_default_dtype(torch.float64)
            with watch:
                exact = run(model64, [_double(x) for x in inputs])
        except Exception as exc:  # noqa: BLE001 - the problem may not run in fp64; the table stays
            return f"the fp64 evaluation raised {type(exc).__name__}: {str(exc)[:200]}"
        finally:
            torch.set_default_dtype(before)
        if watch.seen:
            return f"the fp64 evaluation computes in lower precision ({watch.seen})"
        try:
            with _HonestKernel(got[0].device):
                rounded = run(model, inputs)
        except Exception as exc:  # noqa: BLE001 - as above
            return f"the honest-kernel evaluation raised {type(exc).__name__}: {str(exc)[:200]}"
        if len(exact) != len(got) or len(rounded) != len(got):
            return "the fp64 evaluation returns another number of outputs"
        for k, (g, e, r) in enumerate(zip(got, exact, rounded)):
            if g.dtype not in _UNIT:
                continue
            if e.shape != g.shape or r.shape != g.shape:
                return f"output {k} has another shape in the fp64 evaluation"
            errs = _errors(g, e) + _errors(r, e)
            worst[k] = [max(a, b) for a, b in zip(worst[k], errs)]
        del exact, rounded
    return [Measured(*w) if o.dtype in _UNIT else None for w, o in zip(worst, outs[0])]


def rounding_noise(outs: list[torch.Tensor], records: list[dict[str, Any] | None]) -> tuple[int, float, float] | None:
    """The first output whose float32 reference, as written, misses its fp64 evaluation by more than
    the dtype table's bound, as (index, that error, the bound); None when there is none. Such an output
    is rounding noise at float32 (a GroupNorm then a mean over whole groups: exactly its bias in exact
    arithmetic, ~1e-8 of noise, 1e9 times off relatively): an honest kernel errs as much, so no bound
    tells it from a wrong one (screen.py refuses the problem). Only the reference's own error counts:
    where just the honest variant's fast-math noise is over the bound (`1 - cos(x)` for small x), a
    kernel with accurate math, or a better-conditioned formula, still passes."""
    from distill.verifier.tolerance import tolerance_for

    for k, (o, rec) in enumerate(zip(outs, records)):
        m, table = (rec or {}).get("measured"), tolerance_for(o.dtype)
        if m and table is not None and m["fp32_norm"] > table.norm_rel:
            return k, float(m["fp32_norm"]), table.norm_rel
    return None


def bounds(model: Any, twin: Any, draws: list, outs: list, run: Any, io_bytes: int) -> tuple[list, list]:
    """Each output's bound (tolerance.fitted from precision.measure) and its record for the report;
    `twin` (the same model, rebuilt; None where unmeasured: precision.measures) becomes the fp64 model.
    An output whose bound would be past tolerance.CEILING keeps the table here and its record says why
    (`past_ceiling`), so the checks that read the bounds still run in their order before it is refused."""
    from distill.verifier.tolerance import IllConditioned, fitted, tolerance_for

    if twin is None:
        measured: Any = f"not measured: {io_bytes} bytes of parameters, inputs and outputs"
    else:
        measured = measure(model, twin.double(), draws, outs, run)
    tols, records = [], []
    for k, o in enumerate(outs[0]):
        table = tolerance_for(o.dtype)
        m = measured[k] if isinstance(measured, list) else None
        past = ""
        try:
            tol = fitted(o.dtype, m.norm, m.elem) if m is not None else table
        except IllConditioned as exc:
            tol, past = table, f"output {k}: {exc}"
        tols.append(tol)
        if tol is None:
            records.append(None)
            continue
        rec: dict[str, Any] = {"norm_rel": tol.norm_rel, "atol_rel": tol.atol_rel, "rtol": tol.rtol,
                               "det_rel": tol.det_rel}
        if m is not None:
            rec.update(basis="measured", measured={"fp32_norm": m.fp32_norm, "honest_norm": m.honest_norm,
                                                   "fp32_elem": m.fp32_elem, "honest_elem": m.honest_elem})
            if past:
                rec["past_ceiling"] = past
        else:
            rec.update(basis="table", why=measured if isinstance(measured, str) else
                       f"{str(o.dtype).removeprefix('torch.')} outputs keep the dtype table")
        records.append(rec)
    return tols, records


def trial_records(model: Any, twin: Callable[[], Any], inputs: list, outs: list, run: Any, limit: int, where: str) -> list:
    """One trial's bound records (`bounds`) on its own inputs: measured where the measurement fits
    `limit` (`twin()` makes the model it ran on, which `bounds` turns fp64), else the table. A bound past
    tolerance.CEILING is a ProblemError naming the figures (`where`: which trial), never a candidate's verdict."""
    from distill.verifier.problemio import ProblemError

    sizes = [sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor)) for ts in (inputs, outs)]
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    made = twin() if measures(sizes[0], sizes[1], params, limit) else None
    records = bounds(model, made, [inputs], [outs], run, params + sum(sizes))[1]
    del made
    past = past_ceiling(records)
    if past:
        raise ProblemError(f"the problem is ill-conditioned past judging on {where}: {past}")
    return records


def past_table(records: list[dict[str, Any] | None] | None) -> bool:
    """Whether any output's measured bound is wider than the float32 table (tolerance.fitted past it; the
    other dtypes' bounds never are)."""
    from distill.verifier.tolerance import TOLERANCES

    table = TOLERANCES[torch.float32]
    return any(rec and rec.get("basis") == "measured" and (rec["norm_rel"] > table.norm_rel or rec["atol_rel"] > table.atol_rel)
               for rec in records or [])


def wider(records: list[Any], own: list[Any]) -> list[Any]:
    """Each output's bound the wider, field by field, of `records` (screening's) and a trial's `own` (as judge.widened)."""
    fields = ("norm_rel", "atol_rel", "rtol", "det_rel")
    return [rec if not rec or not mine else {**rec, **{f: max(rec[f], mine[f]) for f in fields},
                                             "basis": "measured on this trial" if mine["norm_rel"] > rec["norm_rel"]
                                             else rec.get("basis")}
            for rec, mine in zip(records, own)]


def past_ceiling(records: list[dict[str, Any] | None]) -> str:
    """Why the first output whose bound would be past tolerance.CEILING is past judging (`bounds`
    keeps the table for it, and says why); "" where none is."""
    return next((rec["past_ceiling"] for rec in records if rec and rec.get("past_ceiling")), "")
