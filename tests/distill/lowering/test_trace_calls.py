"""KernelBench calls the tracer maps onto catalog ops (each refused with a TraceError before).

- `torch.matmul(x, self.weight.T)` with a raw nn.Parameter (level 2 #14 Gemm_Divide_Sum_Scaling:
  "transpose: operand weight is not a tensor of the program") is F.linear(x, self.weight).
"""
from __future__ import annotations

import types

import pytest
import torch

from distill.lowering.selfcheck import build
from distill.lowering.trace import lower_source, trace_source

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
