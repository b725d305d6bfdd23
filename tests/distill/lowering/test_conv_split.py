"""Convs with few outputs and a long reduction (in-channels x taps) split it (kernels/conv.py): one
program per (output tile, reduction chunk) stores a partial tile, a second kernel adds them in order.
On an H100 nn.Conv1d(65536, 11, 11, ...) over a (2, 65536, L) input ran 19 programs, each walking a
reduction of 720,896 (38.7 ms vs eager 1.19 ms). Here the same shape of problem at interpreter sizes:
the split is taken, the module matches PyTorch, and it still does on an input of another length."""
from __future__ import annotations

import dataclasses
import re

import pytest

import synth
from distill.lowering import lower
from distill.lowering.selfcheck import check
from synth.profiles import OpTarget, load_profile

# C = 512 in-channels and at most 8 outputs of a few positions: RED = (C / groups) x taps (a transposed
# conv's taps of one stride phase) is 2560, 768 and 768 in these draws, two chunks of 512 (kernels/conv.py's
# MIN_R_CHUNK) or more, in one or two output tiles; each case has a bias and a relu after it (the combine
# kernel's epilogue). The interpreter's time grows with the reduction: at C = 1024 (the same draws, each
# reduction twice as long) the file took 45 CPU-s.
LONG = {
    "conv1d": ("C == 512", "out_channels <= 8", "groups == 1", "depthwise == 0", "kernel_size >= 3", "L <= 8"),
    "conv2d": ("C == 512", "out_channels == 8", "groups == 4", "depthwise == 0", "kernel_size_h * kernel_size_w >= 5",
               "H <= 5", "W <= 5"),
    "conv_transpose1d": ("C == 512", "out_channels <= 8", "groups == 2", "depthwise == 0", "stride >= 2",
                         "kernel_size >= 4", "L <= 6"),
}
DIMS = (1, 2, 3, 4, 5, 6, 7, 8, 512)
RESIZE = {"conv1d": ("L", 40), "conv2d": ("H", 9), "conv_transpose1d": ("L", 9)}


def _problem(op: str, constraints: tuple[str, ...], seed: int = 1):
    config = load_profile("cpu").config()
    config = dataclasses.replace(config, dims={"default": DIMS}, max_elements=1 << 16,
                                 op_targets={op: OpTarget(constraints=constraints + ("bias == 1",))})
    return synth.sample(1, level=2, seed=seed, ops=[op, "relu"], config=config, shape="anchor_epilogue")[0]


def _launches(source: str) -> list[str]:
    return re.findall(r"(\w+_kernel)\[", source)


def _resized(source: str, dim: str, size: int) -> str:
    """The reference with one module-level size changed (the lowered module reads sizes at run time)."""
    new, n = re.subn(rf"^{dim} = \d+$", f"{dim} = {size}", source, flags=re.M)
    assert n == 1, source
    return new


@pytest.fixture(scope="module")
def long_convs():
    return {op: _problem(op, cons) for op, cons in LONG.items()}


def test_long_reduction_is_split_and_an_ordinary_conv_is_not(long_convs):
    for op, p in long_convs.items():
        src = lower(p).source
        assert _launches(src) == [f"{op}_relu_partial_kernel", f"{op}_relu_kernel"], (op, _launches(src))
        assert "SPLIT = " in src and "tl.atomic" not in src
        # the combine kernel reads the partials, the bias and writes the output: no x or weight pointer
        combine = src.split(f"def {op}_relu_kernel(")[1].split(")")[0]
        assert combine.startswith("part_ptr, ") and "x0_ptr" not in combine and "weight_ptr" not in combine
        assert "bias_ptr" in combine
        partial = src.split(f"def {op}_relu_partial_kernel(")[1].split(")")[0]
        assert "x0_ptr" in partial and "weight_ptr" in partial and "bias_ptr" not in partial
    ordinary = synth.sample(1, level=2, seed=1, ops=["conv2d", "relu"])[0]
    src = lower(ordinary).source
    assert _launches(src) == ["conv2d_relu_kernel"] and "SPLIT" not in src


@pytest.mark.parametrize("op", list(LONG))
def test_split_conv_matches_torch_and_runs_at_another_length(long_convs, op):
    p = long_convs[op]
    src = lower(p).source
    res = check(p.source, src)
    assert res.ok, f"{op}: {res.message}"
    # a longer input: more output positions and tiles, so forward computes another SPLIT and CHUNK
    # than at the size the module was lowered at
    dim, size = RESIZE[op]
    res = check(_resized(p.source, dim, size), src)
    assert res.ok, f"{op} at {dim} = {size}: {res.message}"
