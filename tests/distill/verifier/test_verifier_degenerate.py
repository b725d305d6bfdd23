"""Degenerate shortcuts: an answer that ignores its inputs is wrong, and a problem that any fixed
answer passes is the problem's fault (judge.follows_reference)."""
from __future__ import annotations

import pytest

from distill.verifier import ProblemError
from tests.distill.verifier.conftest import honest, hostile, problem

CONSTANT_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 0.0


def get_inputs():
    return [torch.rand(1000)]


def get_init_inputs():
    return []
'''

ZEROS = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        zero_kernel[(triton.cdiv(x.numel(), 256),)](out, x.numel(), BLOCK=256)
        return out
'''


def test_a_fixed_answer_within_tolerance_is_wrong_and_the_real_computation_passes(pool):
    v = pool.verify(problem("mean_square"), hostile("constant_statistic"))
    assert v.status == "wrong_output" and "does not follow its inputs" in v.reason
    f = v.checks["follows_reference"]
    assert f["error"] >= f["half_spread"] > 0
    assert pool.verify(problem("mean_square"), honest("mean_square")).status == "pass"


def test_a_problem_whose_reference_ignores_its_inputs_is_flagged(pool):
    with pytest.raises(ProblemError, match="degenerate"):
        pool.verify(CONSTANT_PROBLEM, ZEROS)


def test_an_input_the_reference_ignores_is_flagged_on_the_problem(pool):
    v = pool.verify(problem("ignores_input"), honest("ignores_input"))
    assert v.status == "pass", v.reason  # the kernel is right to ignore it too
    assert v.checks["problem"] == {"insensitive_inputs": [1]}
    plain = pool.verify(problem("add"), honest("add"))
    assert "problem" not in plain.checks
