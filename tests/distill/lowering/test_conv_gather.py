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
