"""Triplet margin loss over rows too few to fill the GPU (issue 16): one row a program, 4096 columns at a
time, 8 warps, instead of 32 programs of 4 rows for 128 rows of 155,872 (1.67x on an H100); many or
short rows keep the usual tile. Either way the loss matches PyTorch."""
from __future__ import annotations

import re
import types

import pytest
import torch

from distill.lowering.selfcheck import build
from distill.lowering.trace import lower_source

SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, p, n):
        return F.triplet_margin_loss(a, p, n, margin=1.0)


def get_inputs():
    return [torch.randn({shape}), torch.randn({shape}), torch.randn({shape})]


def get_init_inputs():
    return []
"""


def _block_rows(launch: str, rows: int, cols: int) -> int:
    """The rows a program takes at these sizes: the tile is an expression of the sizes (both its bounds
    written, so a twin with many rows stays within the tile), its value what the drawn sizes give."""
    import triton

    expr = re.search(r"BLOCK_ROWS = (.*)", launch).group(1)
    return eval(expr, {"triton": triton, "x0_size0": rows, "x0_size1": cols})  # noqa: S307 - our own module's text


@pytest.mark.parametrize("shape,few", [("3, 20000", True), ("600, 40", False), ("5, 300", False)])
def test_triplet_rows_take_their_tile_and_match_pytorch(shape, few):
    src = SOURCE.format(shape=shape)
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id="triplet")).source
    launch = new_src[new_src.index("def forward"):]
    rows, cols = (int(d) for d in shape.split(", "))
    assert (_block_rows(launch, rows, cols) == 1 and "BLOCK_R=BLOCK_R, num_warps=8" in launch) == few, launch
    ref, new, mod = build(src, new_src, "cpu")
    inputs = mod.get_inputs()
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)


COSINE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(F.cosine_similarity(a, b, dim={dim})) * 2.0


def get_inputs():
    return [torch.randn({shape}), torch.randn({shape})]


def get_init_inputs():
    return []
"""


def _lowered(src: str) -> str:
    return lower_source(types.SimpleNamespace(source=src, problem_id="rows")).source


@pytest.mark.parametrize("shape", ["3, 40000", "2, 70001"])
def test_triplet_over_few_long_rows_cuts_each_row_into_chunks(shape):
    """4 rows of 8,388,608 were 4 programs (a level-5 problem at 0.20x eager on an H200): rows too few to
    fill the machine and long enough are cut into chunks, their sums combined per row in a fixed order.
    70,001 columns leave a last chunk that ends inside a block."""
    src = SOURCE.format(shape=shape)
    new_src = _lowered(src)
    forward = new_src[new_src.index("def forward"):]
    assert "SPLIT)](" in forward and "SPLIT, 2)" in forward, forward
    assert "tl.store(part_ptr + part_off + 1, tl.sum(dan, axis=1), mask=row_mask)" in new_src
    ref, new, mod = build(src, new_src, "cpu")
    torch.manual_seed(3)
    inputs = mod.get_inputs()
    # against float64: the loss is a difference of two distances near 370, where fp32 sums in any
    # order differ by about 1e-4 (PyTorch's own fp32 result is 8.5e-5 off on the 70,001 case)
    with torch.no_grad():
        want = ref(*[x.double() for x in inputs])
        torch.testing.assert_close(new(*inputs).double(), want, rtol=0, atol=1e-4)
        # each chunk's sums reach the result: rows whose distances differ in their last chunk only
        inputs[1][:, -5:] += 100.0
        moved = ref(*[x.double() for x in inputs])
        assert not torch.allclose(moved, want)
        torch.testing.assert_close(new(*inputs).double(), moved, rtol=0, atol=1e-4)


@pytest.mark.parametrize("shape,dim,split", [("3, 40000", 1, True), ("4, 70001", 1, True), ("40, 50", 1, False)])
def test_cosine_similarity_over_few_long_rows_splits_and_keeps_its_epilogue(shape, dim, split):
    src = COSINE.format(shape=shape, dim=dim)
    new_src = _lowered(src)
    forward = new_src[new_src.index("def forward"):]
    assert ("SPLIT, 3)" in forward) == split, forward
    ref, new, mod = build(src, new_src, "cpu")
    torch.manual_seed(4)
    inputs = mod.get_inputs()
    inputs[1][0] = inputs[0][0] * 3.0  # a row at cosine 1 exactly
    with torch.no_grad():
        got, want = new(*inputs), ref(*inputs)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
