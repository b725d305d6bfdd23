"""KernelBench calls the tracer maps onto catalog ops (each refused with a TraceError before).

- `torch.matmul(x, self.weight.T)` with a raw nn.Parameter (level 2 #14 Gemm_Divide_Sum_Scaling:
  "transpose: operand weight is not a tensor of the program") is F.linear(x, self.weight).
- a Python number from get_inputs (level 1 #5 Matrix_scalar_multiplication: "input s is not a tensor")
  is read by forward at run time as a one-value tensor, not baked in at its drawn value.
- a bool input read only as a factor of a float tensor (level 1 #93 masked_cumsum: "dtype torch.bool is
  not lowerable") is loaded in place, as Triton's int1, which promotes to 0.0/1.0 as torch's bool does.
"""
from __future__ import annotations

import types

import pytest
import torch

from distill.lowering.selfcheck import build
from distill.lowering.trace import TraceError, lower_source, trace_source

PARAM_GEMM = '''
import torch
import torch.nn as nn

batch_size = 6
input_size = 20
hidden_size = 12


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))

    def forward(self, x):
        x = {expr}
        return torch.sum(x / 2, dim=-1, keepdim=True) * 1.5


def get_inputs():
    return [torch.rand({shape})]


def get_init_inputs():
    return [input_size, hidden_size]
'''


@pytest.mark.parametrize("expr,shape,other", [
    ("torch.matmul(x, self.weight.T)", "batch_size, input_size", (9, 20)),
    ("x @ self.weight.t()", "2, batch_size, input_size", (3, 5, 20)),
    ("torch.matmul(x, torch.transpose(self.weight, 0, 1))", "batch_size, input_size", (4, 20)),
])
def test_a_matmul_with_a_transposed_parameter_is_a_linear(expr, shape, other):
    src = PARAM_GEMM.format(expr=expr, shape=shape)
    traced = trace_source(src)
    assert traced.ops[0] == "linear" and traced.params["y0"] == {"weight": "self.weight"}, (traced.ops, traced.params)
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id="t")).source
    ref, new, mod = build(src, new_src, "cpu")
    for x in (mod.get_inputs()[0], torch.rand(*other)):
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), rtol=1e-4, atol=1e-4)


NUMBER_INPUT = '''
import torch
import torch.nn as nn

M = 7
N = 33


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        return torch.relu(A * s) - s


def get_inputs():
    return [torch.randn(M, N), 3.14]


def get_init_inputs():
    return []
'''


def test_a_python_number_input_is_read_at_run_time():
    traced = trace_source(NUMBER_INPUT)
    assert traced.graph.nodes["x1"].get("number") and traced.graph.nodes["x1"]["shape"] == [1]
    new_src = lower_source(types.SimpleNamespace(source=NUMBER_INPUT, problem_id="t")).source
    assert "3.14" not in new_src, new_src
    ref, new, mod = build(NUMBER_INPUT, new_src, "cpu")
    for x, s in ((mod.get_inputs()[0], 3.14), (torch.randn(5, 130), -2.5), (torch.randn(3, 4), 7)):
        with torch.no_grad():
            torch.testing.assert_close(new(x, s), ref(x, s), rtol=1e-5, atol=1e-5)


MASKED = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, mask):
        return {expr}


def get_inputs():
    x = torch.rand(4, 37)
    return [x, torch.randint(0, 2, x.shape).bool()]


def get_init_inputs():
    return [1]
'''


def test_a_bool_mask_factor_is_read_in_place():
    src = MASKED.format(expr="torch.cumsum(x * mask, dim=self.dim)")
    new_src = lower_source(types.SimpleNamespace(source=src, problem_id="t")).source
    assert "x1 = x1.contiguous()" in new_src and "x1.to(" not in new_src, new_src
    ref, new, _ = build(src, new_src, "cpu")
    for shape in ((4, 37), (3, 1500)):
        x = torch.randn(*shape)
        x[0, :3] = float("nan")  # NaN * False is NaN in both
        mask = torch.randint(0, 2, shape).bool()
        with torch.no_grad():
            torch.testing.assert_close(new(x, mask), ref(x, mask), rtol=1e-5, atol=1e-5, equal_nan=True)
    for other in ("torch.where(mask, x, 0.0)", "mask.sum(dim=1) + x[:, 0]", "(x * mask) * mask.logical_not()"):
        with pytest.raises(TraceError, match="bool"):
            trace_source(MASKED.format(expr=other))
