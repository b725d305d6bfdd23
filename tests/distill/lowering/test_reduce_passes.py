"""Reductions read their input once, in memory order (issue 34: slow reduction rows on an H200).

- var/std are one pass (per-lane Welford, lanes and chunks combined by Chan's formula): the two-pass
  form read the input twice (std over dim 0 of [861, 220436]: 0.45 ms against eager's 0.21).
- A reduction over several dims walks them in memory order: `std(x.permute(2, 1, 0), dim=(0, 1, 2))`
  walked the view's order, lanes a plane apart (5.55 ms against eager's 0.155).
- argmin/argmax keep a best value and index per lane and combine lanes once, after the loop: a
  `tl.argmin` per step was a cross-warp reduction in the loop (0.46 ms against eager's 0.26).

Each form must still match PyTorch at awkward sizes, split or not, with ties, infinities and NaNs.
"""
from __future__ import annotations

import re
import types

import pytest
import torch

import synth
from distill.lowering import lower
from distill.lowering.kernels.rowspace import OUTER_BLOCK_R
from distill.lowering.selfcheck import build
from distill.lowering.trace import lower_source
from tests.distill.lowering.test_pool_windows import SOURCE


def _lower(expr: str, shape: str) -> tuple[str, str]:
    src = SOURCE.format(expr=expr, shape=shape)
    return src, lower_source(types.SimpleNamespace(source=src, problem_id="t")).source


def _kernels(new_src: str) -> dict[str, str]:
    """Each @triton.jit kernel's body, by name."""
    parts = new_src.split("@triton.jit\n")[1:]
    return {re.match(r"def (\w+)", p).group(1): p.split("\nclass ModelNew")[0] for p in parts}


def _run(src: str, new_src: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ref, new, _ = build(src, new_src, "cpu")
    with torch.no_grad():
        return new(x), ref(x)


# expression, input shape, whether the kernel is split (few long rows)
VAR_CASES = {
    "std_dim0_outer_tile": ("torch.std(x, dim=0)", "131, 70", False),
    "var_last_dim_tail": ("torch.var(x, dim=-1)", "5, 1037", False),
    "std_keepdim_middle": ("torch.std(x, dim=1, keepdim=True)", "3, 77, 19", False),
    "var_long_row_split": ("torch.var(x, dim=-1)", "2, 40001", True),
}


def _one_pass(new_src: str) -> None:
    first = next(iter(_kernels(new_src).values()))  # the whole kernel, or a split's chunk kernel
    assert len(re.findall(r"^ +for ", first, re.M)) == 1 and "w_mean += d * inv" in first, first


@pytest.mark.parametrize("key", list(VAR_CASES))
def test_var_std_read_the_input_once_and_match_pytorch(key):
    expr, shape, split = VAR_CASES[key]
    src, new_src = _lower(expr, shape)
    _one_pass(new_src)
    assert ("_partial_kernel[" in new_src) == split
    # a mean 1000 standard deviations from zero: a one-pass sum of squares loses the variance to
    # cancellation (fp32: about 6e-2 relative), Welford keeps it
    x = torch.randn(*[int(s) for s in shape.split(",")]) * 0.1 + 100.0
    out, ref = _run(src, new_src, x)
    torch.testing.assert_close(out, ref, rtol=2e-4, atol=1e-6)


@pytest.fixture(scope="module")
def permuted_std():
    """The issue's problem: `std(x0.permute(2, 1, 0), dim=(0, 1, 2))` at its gpu size (split) and a cpu twin."""
    p = next(q for q in synth.sample(40, level=2, seed=103, profile="gpu") if q.problem_id.startswith("L2-9a33ef500"))
    return p, p.twin("cpu", seed=0)


def test_reduced_dims_are_walked_in_memory_order(permuted_std):
    for p in permuted_std:
        new_src = lower(p).source
        _one_pass(new_src)
        body = next(iter(_kernels(new_src).values()))
        # the view's order made col0..col2 coordinates, lanes a plane apart; memory order is flat
        assert "x0_ptr + rows[:, None] * R + cols[None, :]" in body and "col_size" not in body, body
        assert "= x0.permute" not in new_src  # forward reads x0 itself, no view
        ref, new, _ = build(p.source, new_src, "cpu")
        # awkward sizes; 61 * 40 * 29 = 70760 elements: 5 chunks in the split form
        for shape in ((23, 17, 31), (61, 40, 29)):
            x = torch.randn(shape) * 0.5 + 3.0
            with torch.no_grad():
                torch.testing.assert_close(new(x), ref(x), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("expr,shape,outer", [
    # the view's last dim is reduced, but the rows are x's last dim (stride 1): tall [64, 64] tiles
    ("torch.sum(x.permute(0, 2, 1), dim=2)", "5, 30, 41", True),
    ("torch.argmax(x.transpose(0, 1), dim=1)", "70, 130", True),
    ("torch.std(x.transpose(0, 1), dim=1)", "70, 9", False),  # a run of 9 rows: the wide tile
    # rows are x's dim 2 (stride 1): the reduced dim 3, 1 wide in this draw, spans nothing
    ("torch.amax(x, dim=(0, 1, 3))", "6, 5, 70, 1", True),
    ("torch.sum(x, dim=(0, 2))", "6, 70, 1", True),
])
def test_rows_contiguous_in_memory_take_the_tall_tile(expr, shape, outer):
    src, new_src = _lower(expr, shape)
    widths = {int(w) for w in re.findall(r"BLOCK_R = min\(triton\.next_power_of_2\(\w+\), (\d+)\)", new_src)}
    widths |= {int(w) for w in re.findall(r"BLOCK_R=(\d+)", new_src)}
    assert (max(widths) <= OUTER_BLOCK_R) == outer, new_src[new_src.index("def forward"):]
    x = torch.randn(*[int(s) for s in shape.split(",")])
    out, ref = _run(src, new_src, x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def _awkward(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Few distinct values (ties everywhere), and infinities of both signs."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, shape, generator=g).float()
    flat = x.view(-1)
    pick = torch.randperm(flat.numel(), generator=g)[:6]
    flat[pick[:3]] = float("inf")
    flat[pick[3:]] = float("-inf")
    return x


@pytest.mark.parametrize("fn", ["argmin", "argmax"])
@pytest.mark.parametrize("dim,shape", [(0, (70, 130)), (-1, (9, 1500)), (1, (4, 37, 3)), (0, (40000,))])
def test_argmin_argmax_keep_lane_bests_and_match_pytorch(fn, dim, shape):
    src, new_src = _lower(f"torch.{fn}(x, dim={dim})", ", ".join(map(str, shape)))
    assert f"tl.{fn}(" not in new_src  # no cross-lane reduction inside the loop
    assert ("_partial_kernel[" in new_src) == (shape == (40000,))
    ref, new, _ = build(src, new_src, "cpu")
    for seed in range(2):
        x = _awkward(shape, seed)
        with torch.no_grad():
            assert torch.equal(new(x), ref(x)), (seed, fn, dim, shape)
    # a NaN is torch's answer, the first one when there are several
    x = _awkward(shape, 5)
    flat = x.view(-1)
    flat[flat.numel() // 3] = float("nan")
    flat[flat.numel() - 2] = float("nan")
    with torch.no_grad():
        assert torch.equal(new(x), ref(x)), ("nan", fn, dim, shape)


def test_a_split_of_tall_row_blocks_counts_values_a_program_not_a_row():
    """Chunks hold at least 16384 values a program: with tall [64, 64] tiles that is 256 of each of 64
    rows, so few row blocks still give about 528 programs (chunks of 16384 per row gave 115 programs for
    an amin over (0, 1, 2) of [38, 108, 16, 1448] on 132 SMs: 0.40x eager on an H200)."""
    src, new_src = _lower("torch.amin(x, dim=0)", "24000, 70")
    assert "_partial_kernel" in new_src
    assert "triton.cdiv(x0_size0, 256)" in new_src, new_src[new_src.index("def forward"):]
    assert "256 elements of each of 64 rows or more each" in new_src
    x = torch.randn(24000, 70)
    out, ref = _run(src, new_src, x)
    torch.testing.assert_close(out, ref)
