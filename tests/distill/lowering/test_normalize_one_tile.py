"""Normalisations whose rows fit one tile read them once (issue 34): the statistics and the output come
from the registers the row was loaded into, where the loops read every row twice (softmax's stats and
write passes) or three times (mean, variance, write). `log_softmax` over rows of 215 ran 0.68x eager
on an H200 (seed 808's L1-611fd238). Whether a row fits is decided at run time (`ONE_TILE`), so the
same module loops over rows longer than a tile: both branches must match PyTorch."""
from __future__ import annotations

import types

import pytest
import torch

import synth
from distill.lowering import lower
from distill.lowering.selfcheck import build, check
from distill.lowering.trace import lower_source
from tests.distill.lowering.test_pool_windows import SOURCE

CASES = {
    "softmax": "torch.softmax(x, dim=-1)",
    "log_softmax": "torch.log_softmax(x, dim=-1)",
    "softmin": "torch.nn.functional.softmin(x, dim=-1)",
}


@pytest.mark.parametrize("key", list(CASES))
def test_rows_that_fit_a_tile_are_read_once_and_longer_ones_loop(key):
    src = SOURCE.format(expr=CASES[key], shape="7, 215")
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id=key)).source
    assert "if ONE_TILE:" in new_src and "ONE_TILE=x0_size1 <= BLOCK_R" in new_src, new_src
    one = new_src.split("if ONE_TILE:")[1].split("    else:")[0]
    assert one.count("tl.load(x0_ptr") == 1 and "for start" not in one, one
    ref, new, _ = build(src, new_src, "cpu")
    g = torch.Generator().manual_seed(0)
    # the drawn size (one tile), a shorter row, and rows past the widest tile (the loops)
    for shape in ((7, 215), (5, 3), (3, 1500)):
        x = torch.randn(*shape, generator=g) * 3
        x[0, 1] = float("-inf") if key in ("softmax", "log_softmax", "softmin") else x[0, 1]
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "group_norm", "l2_normalize"])
def test_sampled_norms_of_every_statistic_take_the_one_tile_branch_and_match(op):
    """The mean-and-variance (layer, group norm) and sum-of-squares (rms norm, l2 normalize) statistics
    of one tile, on sampled programs: right at the drawn sizes, where the branch runs."""
    p = next(q for seed in range(1, 20) for q in synth.sample(1, level=1, seed=seed, ops=[op])
             if "if ONE_TILE:" in lower(q).source)
    res = check(p.source, lower(p).source)
    assert res.ok, f"{op}: {res.message}"


@pytest.mark.parametrize("key", list(CASES))
def test_rows_up_to_8192_are_one_program_tile_read_once(key):
    """Rows of 1,025-8,192 take a one-row tile of up to 8,192 values at 8 warps: seed 1010's softmax over
    rows of 6,889 looped over 1,024-wide blocks, three passes over 1 GB, 0.78x eager on the H200. Longer
    rows (a resized twin) take the loops in the same module; rows of 1,024 keep the usual tile."""
    src = SOURCE.format(expr=CASES[key], shape="3, 3001")
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id=key)).source
    launch = new_src[new_src.index("def forward"):]
    assert "min(triton.next_power_of_2(x0_size1), 8192)" in launch and "num_warps=8" in launch, launch
    # both bounds written (smin/smax): at 3 rows the same 2 rows a tile, and bounded on a twin with many rows
    assert "BLOCK_ROWS = max(1, min(triton.next_power_of_2(x0_size0), 8192 // min(" in launch, launch
    ref, new, _ = build(src, new_src, "cpu")
    g = torch.Generator().manual_seed(1)
    for shape in ((3, 3001), (2, 9000)):
        x = torch.randn(*shape, generator=g) * 3
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5)
    narrow = lower_source(types.SimpleNamespace(source=SOURCE.format(expr=CASES[key], shape="3, 1024"),
                                                problem_id=key)).source
    assert "8192" not in narrow[narrow.index("def forward"):]
