"""bf16 and fp16 problems lower to kernels that load, upcast to float32, compute and store rounded,
and verify on the CPU (the interpreter has float16 natively; the verifier's shims give it a GPU's
bfloat16 arithmetic, distill/verifier/sandbox/interp_shims.py)."""
from __future__ import annotations

import re

import pytest

import synth
from distill.lowering import lower
from tests.distill.lowering.conftest import verify_all

# a long reduction, a matmul, softmax and layernorm (the kinds bench/lowprec_error.py measures)
OPS = ["sum", "matmul", "softmax", "layer_norm"]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_low_precision_problems_lower_and_verify(vpool, dtype):
    problems = [synth.sample(1, level=1, seed=11, ops=[op], dtype=dtype)[0] for op in OPS]
    lowered = [lower(p) for p in problems]
    for low in lowered:
        loads = re.findall(r"tl\.load\([^\n]*", low.source)
        assert loads and all(line.endswith(".to(tl.float32)") for line in loads), low.source
        assert "dtype=tl.bfloat16" not in low.source and "dtype=tl.float16" not in low.source
    _, bad = verify_all(vpool, problems, [low.source for low in lowered])
    assert not bad, bad
