"""Is a problem well-conditioned in float32? Its fp32 reference must agree with an fp64 evaluation.

Some sampled programs amplify rounding beyond any tolerance: `sin` of values near 1e7, an `argmin`
over a row whose entries are all 1 up to rounding (a softmax summed over its own dim). The fp32
reference is then one arbitrary rounding among many, and only a bit-identical replay of torch's own
kernels can match it. We detect them without looking at any candidate: evaluate the reference in
float64 (same weights, same inputs) and compare the fp32 result with the verifier's own tolerance.
A problem that fails is not a fair test of an fp32 kernel; the pass-rate tests report such problems
separately instead of counting them as lowering failures.
"""
from __future__ import annotations

import copy
import types
from typing import Any

import torch

from distill.verifier import tolerance


def _outputs(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _double(x: Any) -> Any:
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def fp32_agrees_with_fp64(problem: Any, trials: int = 2, seed: int = 0) -> bool:
    """True when every output of the fp32 reference is within tolerance of the fp64 one on `trials` inputs."""
    mod = types.ModuleType("tritonforge_conditioning")
    exec(compile(problem.source, "<problem>", "exec"), mod.__dict__)  # noqa: S102 - synth's own program text
    torch.manual_seed(seed)
    model = mod.Model(*mod.get_init_inputs()).eval()
    model64 = copy.deepcopy(model).double()
    for t in range(trials):
        torch.manual_seed(seed + 1 + t)
        inputs = list(mod.get_inputs())
        with torch.no_grad():
            got = _outputs(model(*inputs))
            exact = _outputs(model64(*[_double(x) for x in inputs]))
        for a, b in zip(got, exact):
            ok, _ = tolerance.compare(a, b.to(a.dtype))
            if not ok:
                return False
    return True
