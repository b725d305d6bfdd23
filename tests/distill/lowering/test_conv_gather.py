"""How a conv kernel gathers its input patch (kernels/conv.py): positions along the tile's fast dim when a
position takes several taps (a warp's loads are then neighbouring addresses: on an H100 a
conv_transpose3d with two output channels went 135 -> 65 ms), the old [positions, taps] orientation
when it takes one (1x1 convs: the transpose cost more than it saved), and in both the x offset split into
a position part, computed once per program, plus a tap part. Each module is checked against PyTorch."""
from __future__ import annotations

import dataclasses
import re

import pytest

import synth
from distill.lowering import lower
from distill.lowering.selfcheck import check
from synth.profiles import OpTarget, load_profile


def _conv(op: str, constraints: tuple[str, ...]):
    config = load_profile("cpu").config()
    config = dataclasses.replace(config, op_targets={op: OpTarget(constraints=constraints)})
    return synth.sample(1, level=1, seed=1, ops=[op], config=config)[0]


SEVERAL = {
    "conv1d": ("kernel_size >= 3",),
    "conv2d": ("kernel_size_h * kernel_size_w >= 4",),
    # N <= 2: the unbounded draw (a batch of 12, 70 taps) took 6.5 of the file's CPU-s under the
    # interpreter; this one (groups 3, 24 taps, stride and dilation in every dim) 0.6
    "conv3d": ("kernel_size_d * kernel_size_h * kernel_size_w >= 4", "N <= 2"),
    "conv_transpose2d": ("kernel_size_h >= 3", "kernel_size_w >= 3", "stride_h == 1", "stride_w == 1"),
}


@pytest.mark.parametrize("op", list(SEVERAL))
def test_several_taps_gather_positions_fastest_with_split_offsets(op):
    p = _conv(op, SEVERAL[op])
    src = lower(p).source
    assert "acc = tl.dot(tl.trans(xv), wv, acc" in src, p.source
    assert "x_p = " in src and "xv = tl.load(x0_ptr + x_p[None, :] + x_r[:, None]" in src
    # the position part is computed before the reduction loop, the tap part inside it
    # (a transposed conv's loop runs over its phase's own pairs, red_ph)
    before, loop = re.split(r"for red_start in range\(0, (?:RED|red_ph), BLOCK_R\):", src, maxsplit=1)
    assert "x_p = " in before and "x_r = " in loop
    res = check(p.source, src)
    assert res.ok, f"{op}: {res.message}"


def test_one_tap_convs_keep_positions_on_the_tile_rows():
    p = _conv("conv1d", ("kernel_size == 1",))
    src = lower(p).source
    assert "acc = tl.dot(xv, wv, acc" in src and "tl.trans(xv)" not in src
    assert "xv = tl.load(x0_ptr + x_p[:, None] + x_r[None, :]" in src
    res = check(p.source, src)
    assert res.ok, res.message


def test_tiles_keep_the_gather_short_and_widen_many_output_channels():
    """The gather bounds these kernels (an H100 sweep, kernels/conv.py tiles_for): 16-row reduction
    steps, 8 warps, and 128-channel tiles once OCG passes 64 so each gathered element feeds more MMA."""
    narrow = _conv("conv1d", ("out_channels <= 8", "kernel_size >= 3"))
    wide = _conv("conv1d", ("out_channels >= 65", "kernel_size >= 3"))
    for p, boc, br in ((narrow, 16, 16), (wide, 128, 32)):
        src = lower(p).source
        launch = src[src.index("def forward"):]
        assert f"BLOCK_OC={boc}" in launch and "num_warps=8" in launch, launch
        assert re.search(rf"BLOCK_R = min\(max\(.*, 16\), {br}\)|BLOCK_R={br}\b", launch), launch
        res = check(p.source, src)
        assert res.ok, res.message



def _conv_then(op: str):
    """A level-2 program whose `op` reads the conv's output (the first such seed)."""
    from distill.lowering.ir import read_program

    config = load_profile("cpu").config()
    config = dataclasses.replace(config, op_targets={"conv2d": OpTarget(constraints=("N <= 2",))})
    for seed in range(1, 40):
        p = synth.sample(1, level=2, seed=seed, ops=["conv2d", op], config=config)[0]
        prog = read_program(p)
        conv = next(o for o in prog.ops if o.op == "conv2d")
        if any(c.op == op for c, _ in prog.consumers(conv.name)):
            return p, prog, conv
    raise AssertionError(f"no seed in 1-39 feeds conv2d into {op}")


@pytest.mark.parametrize("op,exact", [("floor", True), ("prod", True), ("exp2", True), ("expm1", True),
                                      ("relu", False), ("sin", False)])
def test_a_conv_that_reaches_a_rounding_sensitive_op_takes_three_tf32_products(op, exact):
    """One TF32 product a tap is within tolerance alone, but a floor or a product after it moves a 1e-3
    error past the tolerance, and an exponential makes it relative: on the H200 level-10 convs feeding a
    floor, a prod and an exp2 were wrong with one TF32 product (the prod's right with tf32x3). Correct on
    the CPU either way."""
    from distill.lowering.ir import lowering_table

    p, prog, conv = _conv_then(op)
    precision = lowering_table()["precision"]
    assert prog.reaches(conv.name, set(precision["rounding_sensitive"]) | set(precision["error_growing"])) == exact
    src = lower(p).source
    assert ('input_precision="tf32x3"' in src) == exact and ('input_precision="tf32")' in src) == (not exact), src
    res = check(p.source, src)
    assert res.ok, res.message


def test_the_rounding_sensitive_op_may_be_several_ops_away():
    """Seed 606's L10-c444753cfafead56: conv_transpose3d -> conv_transpose3d -> adaptive_max_pool3d -> prod.
    Both convs reach the prod (wrong on the H200 with one TF32 product, norm rel err 0.0068)."""
    p = [q for q in synth.sample(30, level=10, seed=616, profile="gpu") if q.problem_id == "L10-c444753cfafead56"][0]
    src = lower(p).source
    assert src.count('input_precision="tf32x3"') == 2 and 'input_precision="tf32")' not in src


def test_a_conv_read_by_another_conv_takes_three_tf32_products_and_the_last_one():
    """Seed 1111's L5-f43f536ae7099524: conv3d -> conv_transpose3d, each with one TF32 product, was 1.5x
    past the elementwise bound on the H200 (an fp32 reference that agrees with fp64). The first conv's
    rounding is the one the second would compound: it takes tf32x3, the last conv keeps one product."""
    p = _conv_then("conv2d")[0]
    src = lower(p).source
    assert src.count('input_precision="tf32x3"') == 1 and src.count('input_precision="tf32")') == 1, src
    assert src.index('input_precision="tf32x3"') < src.index('input_precision="tf32")')
    res = check(p.source, src)
    assert res.ok, res.message
