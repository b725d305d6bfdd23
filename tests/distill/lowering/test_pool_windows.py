"""Pools with windows longer than one tile (issue 16): an adaptive pool of a long dim has windows of
thousands of taps. The pool kernel walks them BLOCK_W (<= 1024) taps at a time instead of holding a
[BLOCK_P, next_pow2(window)] tile (7038 taps made [16, 8192] tiles that spilled on an H100); windows
of up to 1024 taps stay one tile. Either way a NaN in a max-pool window reaches the output."""
from __future__ import annotations

import re
import types

import pytest
import torch

import synth
from distill.lowering import lower
from distill.lowering.selfcheck import build
from distill.lowering.trace import lower_source
from tests.distill.lowering.conftest import verify_all

SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return []
"""
CASES = {
    # (expression, input shape): windows of 2500, 1500 and 30 x 40 = 1200 taps, and one of 25 for contrast
    "adaptive_avg_2d": ("F.adaptive_avg_pool2d(x, 1)", "2, 3, 50, 50"),
    "adaptive_max_1d": ("F.adaptive_max_pool1d(x, 2)", "2, 3, 3000"),
    "adaptive_max_2d_transposed": ("F.adaptive_max_pool2d(x.transpose(0, 3), 2)", "80, 3, 60, 5"),
    "max_2d_small": ("F.max_pool2d(x, 5, stride=2, padding=1)", "2, 3, 20, 20"),
}


@pytest.fixture(scope="module")
def lowered() -> dict:
    out = {}
    for key, (expr, shape) in CASES.items():
        src = SOURCE.format(expr=expr, shape=shape)
        traced = types.SimpleNamespace(source=src, problem_id=key)
        out[key] = (src, lower_source(traced).source)
    return out


@pytest.mark.parametrize("key", list(CASES))
def test_pool_windows_of_any_length_match_pytorch(lowered, key):
    src, new_src = lowered[key]
    # windows over 1024 taps are walked in a loop (not pipelined); shorter ones are one tile
    looped = key != "max_2d_small"
    assert ("for w_start in range(0, WINDOW, BLOCK_W)" in new_src) == looped
    assert ("num_stages=1" in new_src) == looped
    ref, new, mod = build(src, new_src, "cpu")
    inputs = mod.get_inputs()
    with torch.no_grad():
        want, got = ref(*inputs), new(*inputs)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        # a non-finite value inside a window reaches the output, as in PyTorch
        x = inputs[0].clone()
        x.view(-1)[x.numel() // 3] = float("nan")
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5, equal_nan=True)


def test_long_windows_are_walked_in_tiles_of_at_most_1024_taps(lowered):
    for key in ("adaptive_avg_2d", "adaptive_max_1d"):
        launch = lowered[key][1]
        m = re.search(r"BLOCK_W = min\(triton\.next_power_of_2\(.+\), 1024\)|BLOCK_W=1024", launch)
        assert m, launch[launch.index("def forward"):]


def test_every_pool_kind_verifies_and_compiles_for_a_gpu(vpool):
    # the verifier also compiles each kernel for sm_90: a bound computed inside the tap loop and read
    # after it runs under the interpreter but is a NameError for Triton's code generator
    pools = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
             "adaptive_max_pool2d", "avg_pool2d", "max_pool1d", "max_pool3d"]
    problems = [synth.sample(1, level=2, seed=5, ops=[op, "relu"])[0] for op in pools]
    assert all(any(op in p.ops for op in pools) for p in problems)
    _, bad = verify_all(vpool, problems, [lower(p).source for p in problems])
    assert not bad, "\n".join(bad)


def test_looped_windows_take_fewer_per_program_when_windows_are_few():
    """16 windows a program, fewer while that leaves under 8 programs per SM (1056 on an H100): an
    adaptive pool of a few long windows must not leave most of the machine idle."""
    from distill.lowering.kernels.spatial import looped_positions

    assert [looped_positions(n) for n in (6, 1840, 7296, 20000, 10 ** 6)] == [1, 1, 4, 16, 16]
    src = SOURCE.format(expr="F.adaptive_avg_pool3d(x, 2)", shape="2, 3, 60, 20, 10")
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id="few")).source
    assert "BLOCK_P=1," in new_src  # 24 windows of 1500 taps
    ref, new, mod = build(src, new_src, "cpu")
    x = mod.get_inputs()[0]
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("expr,shape,block_w", [
    ("F.adaptive_avg_pool2d(x, 7)", "2, 3, 27, 1218", 1024),  # windows of 5 x 176 taps at most
    ("F.adaptive_max_pool1d(x, 3)", "4, 5, 900", 512),  # windows of 301 taps at most
])
def test_one_tile_windows_hold_at_most_4096_values(expr, shape, block_w):
    """A window of up to 1024 taps is one tile; the positions a program takes shrink with it, so a tile
    holds at most 4096 values (a floor of 16 positions made [16, 1024] tiles that spilled on an H200)."""
    src = SOURCE.format(expr=expr, shape=shape)
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id="wide")).source
    bp = int(re.search(r"BLOCK_P=(\d+)", new_src).group(1))
    assert "for w_start" not in new_src and bp * block_w == 4096, bp
    ref, new, mod = build(src, new_src, "cpu")
    x = mod.get_inputs()[0]
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5)
