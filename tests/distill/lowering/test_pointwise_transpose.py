"""Elementwise kernels over an operand read through a transpose or a permute (issue 16): flat over the
result, a warp's loads of such an operand land a row apart each. When an operand is contiguous along a
result dim other than the result's innermost (of more than one element), the kernel takes [BLOCK_A,
BLOCK_B] tiles of that dim and the innermost, loading along one and storing along the other, when the
dims span a sector (16 and 8 elements); otherwise it stays flat."""
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
from synth.profiles import load_profile
from tests.distill.lowering.conftest import verify_all

SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N = {n}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return {expr}


def get_inputs():
    return [torch.randn({shape}), torch.randn({shape})]


def get_init_inputs():
    return []
"""
CASES = {
    # (expression, input shape, tiled): the result's last dim is the input's dim 1 / dim 0
    "sin_transpose": ("torch.sin(x.transpose(1, 2))", "3, N, 70", True),
    "permute_add": ("(x + y).permute(0, 3, 1, 2) * 2.0", "2, 5, N, 66", True),
    "contiguous_relu": ("torch.relu(x) + y", "3, N, 70", False),
    "short_transposed_dim": ("torch.exp(x.transpose(0, 1))", "N, 10", False),  # 10 < 16: flat
    # the outermost axis moved innermost, 10 wide: stores of 10 contiguous values still fill a sector
    "narrow_last_dim": ("torch.exp(x.permute(3, 1, 2, 0))", "10, 3, 5, N", True),
    # the result's last dim is single: the tile's store dim is the innermost of more than one element
    "single_last_dim": ("torch.exp(x.permute(2, 1, 0, 3)) - y.permute(2, 1, 0, 3)", "12, 4, N, 1", True),
    "narrow_both": ("torch.exp(x.permute(1, 0))", "6, N", False),  # a store run of 6: flat
}


def _lowered(key: str, n: int = 100) -> tuple[str, str]:
    expr, shape, _ = CASES[key]
    src = SOURCE.format(expr=expr, shape=shape, n=n)
    return src, lower_source(types.SimpleNamespace(source=src, problem_id=key)).source


@pytest.mark.parametrize("key", list(CASES))
def test_transposed_operands_take_tiles_and_match_pytorch(key):
    src, new_src = _lowered(key)
    tiled = CASES[key][2]
    assert ("tl.arange(0, BLOCK_A)[:, None]" in new_src) == tiled
    assert ("offs = tl.program_id(0) * BLOCK" in new_src) == (not tiled)
    ref, new, mod = build(src, new_src, "cpu")
    inputs = mod.get_inputs()
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)


def _sampled(ops: list[str], seed: int):
    config = load_profile("cpu").config()
    config = dataclasses.replace(config, dims={"default": (2, 3, 64, 70, 100)}, max_elements=1 << 18)
    return synth.sample(1, level=2, seed=seed, ops=ops, config=config)[0]


# ({transpose, sin}, 17) drew [transpose, transpose], views only and no longer drawn (issue 34): 8 is transpose -> sin
@pytest.mark.parametrize("ops,seed", [(["transpose", "sin"], 8), (["permute", "relu"], 2), (["transpose", "add"], 19)])
def test_a_sampled_transpose_takes_tiles_and_runs_resized(ops, seed):
    p = _sampled(ops, seed)
    src = lower(p).source
    assert "tl.arange(0, BLOCK_A)[:, None]" in src, p.source
    res = check(p.source, src)
    assert res.ok, res.message
    # a twin: every module-level size 64 or more grows by 37 (no longer a multiple of the tile)
    twin = re.sub(r"^(\w+) = (\d+)$", lambda m: f"{m[1]} = {int(m[2]) + 37 if int(m[2]) >= 64 else m[2]}",
                  p.source, flags=re.M)
    assert twin != p.source
    res = check(twin, src)
    assert res.ok, res.message


def test_the_tile_loads_along_the_operand_and_stores_along_the_result():
    _, new_src = _lowered("sin_transpose")
    # both strides that are 1 at run time are parameters Triton specialises: x's along ra, out's along rb
    load = re.search(r"tl\.load\(x0_ptr \+ ([^,]+),", new_src).group(1)
    store = re.search(r"tl\.store\(out_ptr \+ ([^,]+),", new_src).group(1)
    assert "ra * x0_stride1" in load and "rb * x0_stride2" in load
    assert "rb * out_stride2" in store
    assert "BLOCK_A=64, BLOCK_B=64" in new_src


def test_sampled_programs_with_transposes_verify(vpool):
    """Through the verifier, whose CPU lane also compiles every kernel for sm_90."""
    problems = [_sampled(ops, seed) for ops, seed in ((["transpose", "sin"], 8), (["permute", "relu"], 4))]
    sources = [lower(p).source for p in problems]
    assert all("tl.arange(0, BLOCK_A)[:, None]" in s for s in sources)
    _, bad = verify_all(vpool, problems, sources)
    assert not bad, "\n".join(bad)
