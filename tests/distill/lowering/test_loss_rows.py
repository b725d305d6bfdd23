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


@pytest.mark.parametrize("shape,few", [("3, 20000", True), ("600, 40", False), ("5, 300", False)])
def test_triplet_rows_take_their_tile_and_match_pytorch(shape, few):
    src = SOURCE.format(shape=shape)
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id="triplet")).source
    assert bool(re.search(r"BLOCK_ROWS=1, BLOCK_R=\w+, num_warps=8", new_src)) == few, new_src[new_src.index("def forward"):]
    ref, new, mod = build(src, new_src, "cpu")
    inputs = mod.get_inputs()
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)
