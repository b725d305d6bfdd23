"""Fixed pool windows of up to TAPS_MAX taps are walked one tap at a time (issue 16): unrolled
`tl.static_range` loops, one [BLOCK_P] load per tap, instead of a [BLOCK_P, BLOCK_W] gather tile
(5.8x slower on an H100 for an avg_pool1d of 11 taps). Padding, dilation, a fused prologue, an output
dim of size 1 and a NaN inside a window must all behave as in PyTorch; longer windows and adaptive
pools keep the tile form."""
from __future__ import annotations

import types

import pytest
import torch

from distill.lowering.kernels.spatial import TAPS_MAX
from distill.lowering.selfcheck import build
from distill.lowering.trace import lower_source
from tests.distill.lowering.test_pool_windows import SOURCE

CASES = {
    "avg1d_padded": ("F.avg_pool1d(x, 11, stride=3, padding=3)", "3, 5, 23"),
    "max2d_dilated": ("F.max_pool2d(x, 3, stride=2, padding=1, dilation=2)", "2, 3, 17, 14"),
    "avg3d_relu": ("F.avg_pool3d(torch.relu(x), 3, stride=2, padding=1)", "2, 3, 9, 10, 11"),
    "max1d_one_output": ("F.max_pool1d(x, 4, stride=4, padding=1)", "2, 3, 4"),
    "avg2d_unpadded": ("F.avg_pool2d(x, 4, stride=3)", "2, 4, 13, 16"),
    "max3d_strided": ("F.max_pool3d(x, 2, stride=3, padding=1)", "2, 3, 5, 9, 8"),
    "avg2d_one_tap": ("F.avg_pool2d(x, 1, stride=2)", "2, 3, 7, 6"),
}


def _lower(expr: str, shape: str) -> tuple[str, str]:
    src = SOURCE.format(expr=expr, shape=shape)
    return src, lower_source(types.SimpleNamespace(source=src, problem_id="taps")).source


@pytest.mark.parametrize("key", list(CASES))
def test_fixed_windows_are_walked_tap_by_tap_and_match_pytorch(key):
    src, new_src = _lower(*CASES[key])
    assert "BLOCK_W" not in new_src, new_src
    assert ("tl.static_range(" in new_src) == (key != "avg2d_one_tap")  # a one-tap window has no loop
    ref, new, mod = build(src, new_src, "cpu")
    x = mod.get_inputs()[0]
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5)
        # a NaN inside a window reaches the output, as in PyTorch (max and mean alike)
        x = x.clone()
        x.view(-1)[x.numel() // 3] = float("nan")
        x.view(-1)[-1] = float("-inf")
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5, equal_nan=True)


def test_long_fixed_windows_and_adaptive_pools_keep_the_tile():
    assert TAPS_MAX == 128
    for expr, shape in (("F.avg_pool2d(x, 12, stride=4)", "2, 3, 30, 30"),  # 144 taps
                        ("F.adaptive_avg_pool2d(x, 3)", "2, 3, 14, 13")):
        src, new_src = _lower(expr, shape)
        assert "tl.static_range(" not in new_src and "BLOCK_W" in new_src
        ref, new, mod = build(src, new_src, "cpu")
        x = mod.get_inputs()[0]
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5)
