"""A traced module's sizes stay expressions of its inputs, whatever torch's own shape functions do.

KernelBench level 1 #10 (a (N, M, K) @ (K, L) matmul), lowered on the H200 (torch 2.11), wrote
`x0.view(16384, 2048)` and failed its resized twin (`shape '[16384, 2048]' is invalid for input of
size 9226240`): torch 2.11's folded matmul built its shapes from concrete sizes, pinning every dim to
the drawn value, so fxsizes read them all as literals. Here a torch function mode stands in for that
torch (a matmul or Linear of a 3-D or larger operand reads its sizes as ints, as 2.11's C++ did), under
which the lowering must still read every size from its inputs and run at other sizes.
"""
from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

from distill.lowering.selfcheck import build
from distill.lowering.trace import lower_source, trace_source

MATMUL = '''
import torch
import torch.nn as nn

N = 3
M = 5
K = 6
L = 7


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return {expr}


def get_inputs():
    return [torch.randn({a_shape}), torch.randn({b_shape})]


def get_init_inputs():
    return []
'''

LINEAR = '''
import torch
import torch.nn as nn

N = 3
M = 5


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(N, M, 6)]


def get_init_inputs():
    return []
'''


class _ConcreteFold(torch.overrides.TorchFunctionMode):
    """torch 2.11's folded product: its shapes read as ints (a guard pinning each symbolic dim)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, F.linear) \
                and all(isinstance(a, torch.Tensor) for a in args[:2]) and args[0].dim() >= 3:
            for a in args[:2]:
                [int(d) for d in a.shape]
        return func(*args, **kwargs)


CASES = {
    # (source, sizes of the traced draw, the same program at other sizes, the inputs there)
    "matmul_3d_2d": (MATMUL.format(expr="torch.matmul(A, B)", a_shape="N, M, K", b_shape="K, L"),
                     lambda: [torch.randn(4, 9, 5), torch.randn(5, 3)]),
    "matmul_4d_2d": (MATMUL.format(expr="A @ B", a_shape="2, N, M, K", b_shape="K, L"),
                     lambda: [torch.randn(3, 2, 4, 5), torch.randn(5, 9)]),
    "linear_3d": (LINEAR, lambda: [torch.randn(2, 9, 6)]),
}


@pytest.mark.parametrize("key", list(CASES))
def test_a_folded_product_keeps_its_sizes_symbolic_under_a_torch_that_pins_them(key):
    src, other = CASES[key]
    with _ConcreteFold():
        traced = trace_source(src)
        new_src = lower_source(types.SimpleNamespace(source=src, problem_id="t")).source
    assert traced.size_lines and traced.size_lines[0].endswith("= x0.shape"), traced.size_lines
    assert ".view(15, " not in new_src and ".view(30, " not in new_src, new_src
    ref, new, _ = build(src, new_src, "cpu")
    inputs = other()
    with torch.no_grad():
        got, want = new(*inputs), ref(*inputs)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


ROWS = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(3, 100)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("expr", ["torch.softmax(x, dim=-1)", "torch.sum(x, dim=-1)"])
def test_a_flat_row_tile_is_bounded_on_a_twin_with_many_rows(expr):
    """Issue 34: drawn with 3 rows of 100, the flat row tile's rows were `next_power_of_2(n_rows)`
    alone (Python's min over size expressions kept the branch the drawn sizes chose: 4 < 4096 // 128),
    so a twin with 5,000 rows took 8,192 rows of 128 lanes a program. Both bounds are written now."""
    import re

    import triton

    src = ROWS.format(expr=expr)
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id="t")).source
    launch = new_src[new_src.index("def forward"):]
    tile = re.search(r"BLOCK_ROWS = (.*)", launch).group(1)
    block_r = re.search(r"BLOCK_R = (.*)", launch).group(1)
    for rows, cols, want in ((3, 100, 4), (5000, 100, None)):
        env = {"triton": triton, "x0_size0": rows, "x0_size1": cols}
        r, c = eval(tile, env), eval(block_r, env)  # noqa: S307 - our own module's text
        assert r * c <= 4096 and (want is None or r == want), (rows, r, c, launch)
    ref, new, _ = build(src, new_src, "cpu")
    x = torch.randn(600, 100)
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), rtol=1e-5, atol=1e-5)
