"""Run a rendered program: shapes as predicted, finite, and genuinely input-dependent.

A problem whose output is (near) constant, or that ignores one of its inputs, would let a kernel
that returns a constant (zeros, say) pass verification; such draws are rejected here, at sampling
time, and the sampler repairs the wiring rather than redrawing the op list.

Checks at workload scale (a profile with `check_on`, such as `gpu`). Its programs hold tensors of
hundreds of MB, which neither this process nor the Triton interpreter should run, so:
1. shapes and dtypes are checked at full size on meta tensors (`meta_check`): PyTorch's own shape
   rules, nothing allocated;
2. finite, not constant and every-input-matters are checked on a *twin*: the same ops, wiring,
   attributes and structural choices, sizes drawn at the `check_on` profile (synth.realize), every
   size that is 1 kept at 1 and every other size kept above 1.

Why the twin's verdict carries over. The three properties belong to the graph, not to its sizes, for
the operations the catalog has: an elementwise op treats each element alike at any size; a
reduction, scan or normalisation over a dim of length >= 2 depends on every element along it at any
length; a matmul or convolution feeds every input element into some output at any size; broadcasting
changes only where a dim is 1, and the twin keeps the 1s. The catalog's non-degeneracy constraints
(a reduced dim >= 2, a normalised dim >= 2, ...) hold in both profiles. So an input that moves an
output of the twin moves it at full size, and a graph whose twin output varies varies at full size.

Where it cannot: magnitudes and concentration grow with length.
- Finiteness: a sum over R unit-scale values grows like sqrt(R) (or R when they are positive, c^R for
  a product); an exp, pow or cumprod after it can overflow at full size and not in the twin.
- Constant output, ignored input: an average of many positive values (a mean, a loss, a norm) varies
  between input draws by ~1/sqrt(R) of its size, ~3e-4 over 10^7 elements, under the verifier's
  float32 tolerance (distill/verifier/tolerance.py): a kernel returning the expected value would pass
  there, while the twin (<= 32,768 elements) shows plenty of spread.
Those cases can only be seen at full size, on the device that verifies: the verifier's trials run at
full size there, and are what must catch them. Some are degenerate there for any kernel: the target
of a binary cross-entropy over 10^7 uniform values moves the loss by less than the tolerance under
any change of its scale (the loss is linear in it, and E log p = E log(1-p)), so a kernel that ignores
it passes random trials. A full-size check here rejects such a program, rightly.

Scale-aware rules. For tensors past LARGE elements (more than any tensor of the `cpu` profile),
comparisons are relative, as the verifier's are: two outputs differ when the normwise relative
difference, or an element's difference beyond RTOL_L of its size, exceeds 5x the verifier's float32
tolerance; an output counts as varying only when its standard deviation exceeds NORM_REL of its RMS
(then every constant, its mean the closest, misses the verifier's normwise test by 5x); an input matters when a fresh
draw, or else the same draw scaled by SHRINK, moves an output. The scaling catches long reductions
whose value concentrates (a fresh draw moves a mean of 10^7 positive values by 1e-4; scaling moves it
by 70%). It is not 1/2: an L1 or MSE loss of two U(0,1) inputs has the same expected value when one
of them is halved (1/3 and 1/6), and over millions of elements only the expectation shows. Smaller
tensors keep the absolute tolerance below, which every `cpu` draw was made with, so those draws stay
byte-identical.

Low precision (bfloat16, float16 problems). Rounding to 8 (bf16) or 11 (fp16) significant bits moves
outputs by far more than ATOL, so the relative rules apply at every size, with thresholds 5x the
verifier's tolerance for that dtype (HALF_RULES), as the float32 ones are 5x float32's.
"""
from __future__ import annotations

from typing import Any

import torch

# Two tensors "differ" when they are not allclose at this tolerance. It is looser than the verifier's
# float32 tolerance, so an output that is distinguishable here is distinguishable there.
ATOL = 1e-3
RTOL = 1e-3
# Past this many elements the relative rules apply (the `cpu` profile caps tensors at 32,768).
LARGE = 1 << 16
NORM_REL = 1e-2          # 5x the verifier's float32 normwise tolerance (2e-3)
SHRINK = 0.3             # keeps every value range the catalog uses: any, nonneg, pos, unit
ATOL_L = RTOL_L = 5e-2   # 5x its elementwise tolerance (1e-2 of the RMS, 1e-2 of each value)
# (normwise, elementwise of the RMS, elementwise of each value): 5x the verifier's tolerance for the
# dtype (distill/verifier/tolerance.py; a test keeps the two in step), at every size
HALF_RULES = {torch.bfloat16: (1e-1, 2.5e-1, 2.5e-1), torch.float16: (2.5e-2, 1e-1, 1e-1)}
FLOAT_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}   # program tags


VIEW = "view of an input"  # a CheckFailed kind: every output shares memory with an input or a parameter


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


def _rms(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t.double())) / max(1, t.numel()) ** 0.5


def _relative(t: torch.Tensor) -> tuple[float, float, float] | None:
    """The relative rules' thresholds for `t` (normwise, atol of the RMS, rtol), or None: absolute."""
    if t.dtype in HALF_RULES:
        return HALF_RULES[t.dtype]
    return (NORM_REL, ATOL_L, RTOL_L) if t.numel() > LARGE else None


def _differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not a.dtype.is_floating_point:
        return not torch.equal(a, b)
    if (rules := _relative(b)) is not None:
        norm_rel, atol, rtol = rules
        d = (a - b).double()
        rms = _rms(b)
        if float(torch.linalg.vector_norm(d)) > norm_rel * rms * b.numel() ** 0.5:
            return True
        return bool(((d.abs() - rtol * b.double().abs()) > atol * rms).any())
    # `not allclose`, in fewer passes (a NaN counts as a difference)
    return not bool((torch.abs(a - b) <= ATOL + RTOL * torch.abs(b)).all())


def _spread_ok(t: torch.Tensor) -> bool:
    if t.numel() < 2:
        return True
    if not t.dtype.is_floating_point:
        return bool((t != t.reshape(-1)[0]).any())
    if (rules := _relative(t)) is not None:
        return float(t.double().std(correction=0)) > rules[0] * _rms(t)
    lo, hi = t.min().item(), t.max().item()
    return hi - lo > 2 * (ATOL + RTOL * max(abs(lo), abs(hi)))


def _shrunk(t: torch.Tensor) -> torch.Tensor | None:
    """The input scaled by SHRINK, for a large floating input that is not a +-1 target."""
    if not t.dtype.is_floating_point or _relative(t) is None or bool((t.abs() == 1).all()):
        return None
    return t * SHRINK


def _check_outputs(outs: tuple, out_shapes: list[list[int]], out_dtypes: list[str]) -> None:
    if len(outs) != len(out_shapes):
        raise CheckFailed("output count", f"{len(outs)}, expected {len(out_shapes)}")
    for i, (t, shape, dt) in enumerate(zip(outs, out_shapes, out_dtypes)):
        if list(t.shape) != list(shape):
            raise CheckFailed("shape mismatch", f"output {i} has {list(t.shape)}, predicted {shape}")
        if (dt == "i64") == t.dtype.is_floating_point or (dt != "i64" and t.dtype != FLOAT_DTYPES[dt]):
            raise CheckFailed("dtype mismatch", f"output {i} has {t.dtype}, predicted {dt}")


def meta_check(source: str, out_shapes: list[list[int]], out_dtypes: list[str]) -> None:
    """Build the model and its inputs on the meta device and run it: shapes and dtypes at full size,
    by PyTorch's own rules, with no memory allocated."""
    try:
        ns = load_module(source)
        with torch.device("meta"):  # factories (weights, inputs) make meta tensors
            model, inputs = ns["Model"](*ns["get_init_inputs"]()), ns["get_inputs"]()
        with torch.no_grad():  # outside the device mode, which would add a Python hop to every op
            outs = _as_tuple(model(*inputs))
    except Exception as exc:  # noqa: BLE001 - a catalog rule PyTorch disagrees with: repairable, counted by kind
        raise CheckFailed("runtime error", f"on meta tensors: {type(exc).__name__}: {exc}") from exc
    _check_outputs(outs, out_shapes, out_dtypes)


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
        _check_outputs(base, out_shapes, out_dtypes)
        _not_a_view(base, base_in, model)
        for i, t in enumerate(base):
            if t.dtype.is_floating_point and not torch.isfinite(t).all():
                raise CheckFailed("not finite", f"output {i}")
            if not _spread_ok(t):
                raise CheckFailed("constant output", f"output {i}")
        touched = [False] * len(base)
        other = ns["get_inputs"]()  # a second draw of every input; each trial swaps in one of them
        for j in range(len(base_in)):
            moved = _moved(model, base_in, base, j, other[j])
            if not any(moved) and (shrunk := _shrunk(other[j])) is not None:
                moved = _moved(model, base_in, base, j, shrunk)
            if not any(moved):
                raise CheckFailed("input ignored", f"input {j}")
            touched = [t or m for t, m in zip(touched, moved)]
        if not all(touched):
            raise CheckFailed("input-insensitive output", f"output {touched.index(False)}")


def _not_a_view(outs: tuple, inputs: list, model: torch.nn.Module) -> None:
    """Refuse a program whose every output shares memory with an input or a parameter (a lone
    transpose, permute, narrow or select; a flatten of a contiguous input): eager PyTorch does no work
    for it, and the verifier rightly refuses a candidate that returns an alias of its input
    (`aliases_input`), so the only honest answer is a copy eager never makes: no kernel to write.
    One such output beside a computed one stays (a loss and a transpose of another input): the task
    has its kernel, plus the copy the verifier asks for. The sampler never draws a list that could
    fail here (synth.sampler.computes); this is the rule that list is decided by, checked at run time."""
    held = [t for t in [*inputs, *model.parameters(), *model.buffers()] if isinstance(t, torch.Tensor)]
    starts = {t.untyped_storage().data_ptr() for t in held if t.untyped_storage().nbytes()}
    if all(t.untyped_storage().nbytes() and t.untyped_storage().data_ptr() in starts for t in outs):
        raise CheckFailed(VIEW, f"all {len(outs)} outputs")


def _moved(model, base_in: list, base: tuple, j: int, replacement: torch.Tensor) -> list[bool]:
    trial = list(base_in)
    trial[j] = replacement
    return [_differ(a, b) for a, b in zip(base, _as_tuple(model(*trial)))]
