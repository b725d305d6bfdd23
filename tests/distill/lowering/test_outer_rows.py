"""Reductions and normalisations along a dim that is not the last (issue 16): after `movedim` the kernel's
rows are contiguous in memory and the reduced elements strided, so BLOCK_R is capped at 64 and
BLOCK_ROWS grows to 64 ([64, 64] tiles, 256 bytes of each row block per reduced position instead of 16:
a softmax over dim 0 of [4096, 19484] 1.70x on an H100). A reduction's split form (few long rows)
takes it too. A short contiguous run and the last dim keep their tiles; every form matches PyTorch."""
from __future__ import annotations

import re
import types

import pytest
import torch

from distill.lowering.kernels.rowspace import OUTER_BLOCK_R
from distill.lowering.selfcheck import build
from distill.lowering.trace import lower_source
from tests.distill.lowering.test_pool_windows import SOURCE

CASES = {
    # expression, input shape, whether the outer tile applies
    "softmax_dim0": ("torch.softmax(x, dim=0)", "300, 40", True),
    "softmin_dim1_of_4d": ("F.softmin(x, dim=1)", "3, 100, 9, 4", True),
    "sum_dim0": ("torch.sum(x, dim=0)", "130, 70", True),
    "amax_dims01": ("torch.amax(x, dim=(0, 1))", "90, 80, 50", True),
    # few long rows: a reduction's split form takes the tall tile too (std over dim 0 of [65536, 1448] fell
    # back to [4, 1024] tiles, unsplit: 0.442 ms on the H200, eager 0.155)
    "std_dim0_split": ("torch.std(x, dim=0)", "20000, 40", True),
    "sum_dim0_split": ("torch.sum(x, dim=0)", "20000, 40", True),
    "logsumexp_dim1_short_run": ("torch.logsumexp(x, dim=1)", "20, 300, 5", False),
    "softmax_last": ("torch.softmax(x, dim=-1)", "40, 300", False),
    "sum_last": ("torch.sum(x, dim=-1)", "40, 3000", False),
}


@pytest.mark.parametrize("key", list(CASES))
def test_outer_dim_rows_take_the_tall_tile_and_match_pytorch(key):
    expr, shape, outer = CASES[key]
    src = SOURCE.format(expr=expr, shape=shape)
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id=key)).source
    caps = {int(c) for c in re.findall(r"BLOCK_R(?: = min\(triton\.next_power_of_2\([^)]*\)|=min\(\w+), (\d+)\)", new_src)}
    widths = {int(w) for w in re.findall(r"BLOCK_R=(\d+)", new_src)}
    assert (max(caps | widths) <= OUTER_BLOCK_R) == outer, new_src[new_src.index("def forward"):]
    ref, new, mod = build(src, new_src, "cpu")
    x = mod.get_inputs()[0]
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5)
