"""Issue 34: two level-1 rows the H200 bench found far slower than eager.

sdpa at L = 19, S = 38, E = 152, V = 256 took one 32-row query block and two 128-wide value slices
(126.8 ms, eager 1.23): now two 16-row blocks that each hold the whole value dim. adaptive_avg_pool3d of
(512, 32, 215, 5, 8) to 2 walked [16, 1024] tiles of flattened (d, h, w) taps (14.5 ms, eager 3.1): now
rows of the innermost dim padded to a power of two, tiles of at most 4096 values. Both are checked
against torch under the interpreter on small twins."""
from __future__ import annotations

import re
import types

import pytest
import torch

from distill.lowering.kernels import attention, spatial
from distill.lowering.kernels.attention import HEAD_MAX, Attention, wide_values
from distill.lowering.kernels.pool_rows import TILE_BUDGET, window_bound
from distill.lowering.selfcheck import build, check
from distill.lowering.trace import lower_source
from tests.distill.lowering.conftest import sdpa_source

POOL = """
import torch
import torch.nn as nn
import torch.nn.functional as F

N = {n}
C = {c}
D = {d}
H = {h}
W = {w}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x0):
        return {expr}


def get_inputs():
    return [torch.randn((N, C, D, H, W))]


def get_init_inputs():
    return []
"""


def _lower(src: str) -> str:
    return lower_source(types.SimpleNamespace(source=src, problem_id="issue34")).source


def test_short_queries_with_a_wide_value_dim_take_16_row_blocks_and_the_whole_value_dim():
    bh = 27 * 724
    form, consts, grid = Attention.tiles(bh, 19, 38, 152, 256)
    assert wide_values(19, 256, 152) and not form.batched
    # E = 152 in 64-wide chunks: 128-wide ones spilled registers compiled for sm_90
    assert (consts["BLOCK_L"], consts["BLOCK_S"], consts["BLOCK_E"], consts["BLOCK_V"]) == (16, 16, 64, 256)
    assert consts["E_CHUNKED"] and consts["num_warps"] == 8
    # two query blocks, one value slice: the scores are computed once per query
    assert grid == f"(triton.cdiv(19, BLOCK_L) * triton.cdiv(256, BLOCK_V) * {bh},)"
    # a wide head over narrow values: 16-row blocks too (one 32-row block spilled with E chunked)
    _, consts, _ = Attention.tiles(bh, 19, 38, 152, 100)
    assert (consts["BLOCK_L"], consts["BLOCK_E"], consts["BLOCK_V"], consts["E_CHUNKED"]) == (16, 64, 128, True)
    # past 32 queries, within HEAD_MAX, and a wide head over narrow values at 16 queries or fewer, the
    # split form stays as it was
    _, consts, _ = Attention.tiles(bh, 40, 38, 152, 256)
    assert (consts["BLOCK_L"], consts["BLOCK_V"]) == (64, HEAD_MAX)
    _, consts, _ = Attention.tiles(bh, 19, 38, 64, 64)
    assert (consts["BLOCK_L"], consts["BLOCK_V"]) == (32, 64)
    _, consts, _ = Attention.tiles(bh, 8, 40, 200, 100)
    assert (consts["BLOCK_L"], consts["BLOCK_S"], consts["BLOCK_E"]) == (16, 32, HEAD_MAX)


@pytest.mark.parametrize("causal", [False, True])
def test_issue_shape_twin_matches_torch(causal, monkeypatch):
    # the short flash form, kept for attentions whose scores outgrow their inputs (the scores form,
    # tests/distill/lowering/test_attention_scores.py, now takes this shape)
    monkeypatch.setattr(attention, "scores_form", lambda *sizes: False)
    src = sdpa_source(causal=causal)
    new = _lower(src)
    assert "Short queries, wide values" in new
    assert "BLOCK_L=16" in new and "BLOCK_S=16" in new
    assert re.search(r"BLOCK_E = min\(max\(triton\.next_power_of_2\(\w+\), 16\), 64\)", new)
    res = check(src, new)
    assert res.ok, res.message
    # the same module at other sizes: one query block, a value dim split in two, a narrow head
    for sizes in ({"l": 7, "v": 1100}, {"l": 40, "e": 40, "v": 64}, {"v": 100}):
        res = check(sdpa_source(causal=causal, **sizes), new)
        assert res.ok, (sizes, res.message)


def test_window_bound_is_exact_for_literals_and_at_most_one_over_at_run_time():
    from distill.lowering.sizes import Sym

    for n in range(1, 40):
        for o in range(1, 9):
            exact = window_bound(n, o)
            starts = [(i * n) // o for i in range(o)]
            ends = [-(-((i + 1) * n) // o) for i in range(o)]
            assert exact == max(e - s for s, e in zip(starts, ends))
            assert exact <= int(window_bound(Sym(n, "n"), o)) <= exact + 1


def _pool_module(expr: str, monkeypatch, **sizes: int) -> tuple[str, str]:
    # one SM: BLOCK_P is 16 at a few hundred windows, the bench's form, at sizes the interpreter runs
    monkeypatch.setattr(spatial, "SMS", 1)
    src = POOL.format(expr=expr, **sizes)
    return src, _lower(src)


def test_issue_pool_walks_contiguous_rows_in_small_tiles(monkeypatch):
    src, new = _pool_module("F.adaptive_avg_pool3d(x0, 2)", monkeypatch, n=4, c=8, d=215, h=5, w=8)
    assert "row by row" in new and "num_stages=1" in new
    assert "BLOCK_P=16," in new
    # the innermost window (4 of W = 8) is one power-of-two row; tiles of 16 x 256 values
    assert re.search(r"row_pad = min\(triton\.next_power_of_2\(row_window\), 256\)", new), new
    assert "BLOCK_W = min(triton.next_power_of_2(window_taps), 256)" in new
    assert 16 * 256 <= TILE_BUDGET
    for sizes in ({}, {"d": 21}, {"d": 40, "h": 7, "w": 13}):
        args = {"n": 4, "c": 8, "d": 215, "h": 5, "w": 8} | sizes
        res = check(POOL.format(expr="F.adaptive_avg_pool3d(x0, 2)", **args), new)
        assert res.ok, (sizes, res.message)


@pytest.mark.parametrize("expr", [
    "F.adaptive_max_pool3d(x0, 2)",
    "F.adaptive_avg_pool3d(x0, 1)",  # single outputs: the padded row is masked at the dim's end
    "F.adaptive_avg_pool2d(x0.flatten(3), 3)",
    "F.adaptive_max_pool1d(x0.flatten(2), 3)",
])
def test_other_looped_adaptive_pools_match_torch(monkeypatch, expr):
    src, new = _pool_module(expr, monkeypatch, n=2, c=8, d=215, h=5, w=8)
    assert "row by row" in new
    ref, mod_new, mod = build(src, new, "cpu")
    x = mod.get_inputs()[0]
    with torch.no_grad():
        torch.testing.assert_close(mod_new(x), ref(x), rtol=1e-5, atol=1e-5)
        # NaN reaches a max pool's output, as in torch
        x.view(-1)[x.numel() // 3] = float("nan")
        torch.testing.assert_close(mod_new(x), ref(x), rtol=1e-5, atol=1e-5, equal_nan=True)
    res = check(POOL.format(expr=expr, n=2, c=8, d=33, h=9, w=11), new)
    assert res.ok, res.message
