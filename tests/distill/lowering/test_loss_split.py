"""Cross entropy over few long rows is split along the class dim (kernels/losses.py, kernels/split.py):
a partial kernel stores each (row, chunk)'s online (max, sum of exp) of the logits to a float32
workspace, and one combining program turns each row's chunks, in a fixed order, into its logsumexp,
subtracts the target class's logit and averages over rows. Many rows keep the single row kernel
(BLOCK_ROWS whole rows per program, then the fixed-order sum of the per-program sums). The modules
run on the CPU (TRITON_INTERPRET=1) against PyTorch, at the size they were lowered at, resized, on
large and -inf logits, and through the real verifier."""
from __future__ import annotations

import dataclasses
import re
import types

import pytest
import torch

import synth
from distill.lowering import lower
from distill.lowering.selfcheck import build, check
from distill.lowering.trace import lower_source
from synth.profiles import OpTarget, load_profile
from tests.distill.lowering.conftest import verify_all

# 40000 > 2 * 16384 classes: 3 chunks of CHUNK = 14336 (a multiple of BLOCK_R = 1024), the last one
# 11328 long, so its last tiles lie wholly past the row's end; 3 rows, one block of BLOCK_ROWS = 4
FEW_LONG = ("N == 3", "C == 40000")
CHUNK = 14336
# 300 rows of 40 classes: 3 blocks of BLOCK_ROWS = 128 rows, each program walks whole rows
MANY_SHORT = ("N == 300", "C == 40")
# a fused prologue on the logits (read through a transpose) and an epilogue on the scalar
FUSED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, t):
        return F.cross_entropy(torch.tanh(x.t()) * 4.0, t) * 3.0


def get_inputs():
    return [torch.randn(40000, 3), torch.randint(0, 40000, (3,))]


def get_init_inputs():
    return []
"""


def _problem(constraints: tuple[str, ...], dims: tuple[int, ...], ops: tuple[str, ...] = ("cross_entropy",),
             seed: int = 1):
    config = load_profile("cpu").config()
    config = dataclasses.replace(config, dims={"default": dims}, max_elements=1 << 18,
                                 op_targets={"cross_entropy": OpTarget(constraints=constraints)})
    return synth.sample(1, level=len(ops), seed=seed, ops=list(ops), config=config)[0]


def _resized(source: str, **sizes: int) -> str:
    """The reference with module-level sizes changed (targets drawn below the new class count)."""
    for dim, size in sizes.items():
        source, n = re.subn(rf"^{dim} = \d+$", f"{dim} = {size}", source, flags=re.M)
        assert n == 1, (dim, source)
    source, n = re.subn(r"torch\.randint\(0, \d+,", "torch.randint(0, C,", source)
    assert n == 1, source
    return source


def _launches(src: str) -> list[tuple[str, str]]:
    return re.findall(r"(\w+_kernel)\[([^\]]*)\]", src)


def _kernel(src: str, name: str) -> str:
    return src.split(f"def {name}(", 1)[1].split("@triton.jit", 1)[0]


@pytest.fixture(scope="module")
def few_long():
    p = _problem(FEW_LONG, (3, 40000))
    assert p.input_shapes == [[3, 40000], [3]], p.input_shapes
    return p, lower(p)


def test_cross_entropy_few_long_rows_split(few_long):
    p, low = few_long
    src = low.source
    (first, grid1), (second, grid2) = _launches(src)
    assert first == "cross_entropy_partial_kernel" and second == "cross_entropy_kernel"
    assert grid1 == "(triton.cdiv(N, BLOCK_ROWS), SPLIT)" and grid2 == "(1,)"
    # the chunk count is computed in forward from the sizes read at run time
    # at least 16384 values a program: 4096 of each of the block's 4 rows (3 rows, tiles of [4, 1024])
    assert "SPLIT = max(1, min(triton.cdiv(C, 4096)" in src and "CHUNK = triton.cdiv(" in src
    assert "4096 elements of each of 4 rows or more each" in src
    assert "y0_part = torch.empty((N, SPLIT, 2), device=x0.device, dtype=torch.float32)" in src
    assert "tl.atomic" not in src
    # the partial kernel reads the logits only (no target, no gather); the combining kernel gathers
    part = _kernel(src, first)
    assert "x1_ptr" not in part and "for step in range(0, CHUNK, BLOCK_R):" in part
    assert "tl.store(part_ptr + part_off + 1, row_sum, mask=row_mask)" in part
    comb = _kernel(src, second)
    assert "for first in range(0, n_rows, BLOCK_ROWS):" in comb and "x1 = tl.load(x1_ptr + rows" in comb
    assert "acc = tl.sum(total, axis=0) / n_rows" in comb
    # the comments and the plan say what the kernels do
    assert "# chunk partials of y0 = cross_entropy(x0, x1); few long rows" in part
    assert "online max and sum of exp" in low.plan and "in a fixed order into its logsumexp" in low.plan
    res = check(p.source, src)
    assert res.ok, res.message


def test_cross_entropy_split_resized(few_long):
    """More chunks (70001 classes: 5) and rows, one chunk (1000 classes), more row blocks."""
    p, low = few_long
    for sizes in (dict(N=5, C=70001), dict(N=2, C=1000), dict(N=40, C=20000)):
        res = check(_resized(p.source, **sizes), low.source)
        assert res.ok, (sizes, res.message)


def test_cross_entropy_split_large_and_inf_logits(few_long):
    """Logits near 100 (exp overflows without the max shift); in row 1 a whole chunk is -inf (its max
    is -inf: no exp(-inf + inf)), in row 2 the first chunk is (the row's max comes from a later one);
    the block's fourth row slot is past n_rows. Two runs agree bit for bit (fixed order)."""
    p, low = few_long
    ref, new, _ = build(p.source, low.source, "cpu")
    torch.manual_seed(0)
    x = 100.0 + torch.randn(3, 40000)
    x[1, CHUNK:2 * CHUNK] = float("-inf")
    x[2, :CHUNK] = float("-inf")
    t = torch.tensor([5, 39999, 2 * CHUNK + 7])
    with torch.no_grad():
        want, got, again = ref(x, t), new(x, t), new(x, t)
    assert torch.isfinite(got) and torch.equal(got, again)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_cross_entropy_split_fused_prologue_and_epilogue():
    """tanh(x.t()) * 4 fused into the logits' loads (and into the gathered logit), * 3 on the mean."""
    traced = types.SimpleNamespace(source=FUSED, problem_id="cross_entropy_fused")
    src = lower_source(traced).source
    names = [n for n, _ in _launches(src)]
    assert names == ["cross_entropy_mul_partial_kernel", "cross_entropy_mul_kernel"], names
    assert "tanh_f32(x0)" in _kernel(src, names[1])
    res = check(FUSED, src)
    assert res.ok, res.message


def test_cross_entropy_many_rows_single_form():
    p = _problem(MANY_SHORT, (300, 40))
    assert p.input_shapes == [[300, 40], [300]], p.input_shapes
    low = lower(p)
    src = low.source
    (first, grid1), (second, grid2) = _launches(src)
    assert (first, grid1) == ("cross_entropy_partial_kernel", "(triton.cdiv(N, BLOCK_ROWS),)")
    assert (second, grid2) == ("cross_entropy_kernel", "(1,)")
    assert "SPLIT" not in src and "CHUNK" not in src and "few long rows" not in low.plan
    part = _kernel(src, first)
    assert "for start in range(0, R, BLOCK_R):" in part and "tl.store(part_ptr + tl.program_id(0)" in part
    res = check(p.source, src)
    assert res.ok, res.message


def test_cross_entropy_split_verifies(vpool, few_long):
    p, low = few_long
    _, bad = verify_all(vpool, [p], [low.source])
    assert not bad, "\n".join(bad)
