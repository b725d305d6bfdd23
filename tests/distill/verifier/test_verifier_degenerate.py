"""Degenerate shortcuts: an answer that ignores its inputs is wrong (the problem's own bound,
judge.follows_reference), and a problem that a fixed answer, or one that ignores an input, passes is
the problem's fault: screening refuses it (screen.py, in the reference process) with a ProblemError,
never a verdict charged to a candidate."""
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


WEAK_INPUT = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a * 2.0 + 1e-7 * b


def get_inputs():
    return [torch.randn(1000), torch.randn(1000)]


def get_init_inputs():
    return []
'''

BARELY_MOVES = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return 1.0 + 1e-3 * x.mean(dim=1)


def get_inputs():
    return [torch.rand(8, 4096)]


def get_init_inputs():
    return []
'''


def test_a_fixed_answer_within_the_dtype_table_is_wrong_and_the_real_computation_passes(pool, honest_verdict):
    v = pool.verify(problem("mean_square"), hostile("constant_statistic"))
    assert v.status == "wrong_output", v.reason
    # the mean of squares is exact in fp32: its bound is far under the table's 2e-3, and a fixed 1.0 misses it
    assert v.checks["tolerance"][0]["basis"] == "measured" and v.checks["tolerance"][0]["norm_rel"] < 1e-4
    assert honest_verdict("mean_square").status == "pass"  # the honest control's verification (4M elements: ~18 s)


def test_follows_reference_catches_a_fixed_answer_that_each_trial_accepts():
    """Where the bound is wide next to the reference's movement (the table, a low-precision output), a
    fixed answer placed between the draws passes every trial: its error reaches half their spread."""
    import torch

    from distill.verifier import judge

    refs = [torch.full((64,), 1.0) + 1e-3 * torch.randn(64) for _ in range(3)]
    trials = [{"outputs": [r], "sequence": False} for r in refs]
    fixed = {t: {"outputs": [{"data": torch.full((64,), 1.0)}]} for t in range(3)}
    found = judge.follows_reference(fixed, trials)
    assert found.status == "wrong_output" and "does not follow its inputs" in found.reason
    f = found.checks["follows_reference"]
    assert f["error"] >= f["half_spread"] > 0
    computed = {t: {"outputs": [{"data": refs[t] + 1e-7}]} for t in range(3)}
    assert judge.follows_reference(computed, trials) is None


def test_a_problem_whose_reference_ignores_its_inputs_is_flagged(pool):
    with pytest.raises(ProblemError, match="constant"):
        pool.verify(CONSTANT_PROBLEM, ZEROS)


def test_a_problem_whose_output_barely_moves_is_refused_before_any_candidate_is_judged(pool):
    with pytest.raises(ProblemError, match=r"screening \(degenerate\): output 0 is \(near\) constant"):
        pool.verify(BARELY_MOVES, ZEROS)
    # softmax rows sum to one: the shortcut (ones, and a kernel launched for show) is not the candidate's fault
    for candidate in (hostile("shortcut_ones"), honest("softmax_rowsum")):
        with pytest.raises(ProblemError, match="constant"):
            pool.verify(problem("softmax_rowsum"), candidate)


def test_every_input_must_move_the_output_well_over_the_bound(pool):
    with pytest.raises(ProblemError, match="input 1 does not move any output well over"):
        pool.verify(problem("ignores_input"), honest("ignores_input"))
    with pytest.raises(ProblemError, match="input 1 does not move any output well over"):
        pool.verify(WEAK_INPUT, honest("ignores_input"))
    plain = pool.verify(problem("small_term"), honest("small_term"))  # 1e-3 * c: ~100x its bound, kept
    assert plain.status == "pass", plain.reason
