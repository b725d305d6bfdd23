"""A bound per trial, measured when a candidate misses the screening's (reference.trial_bounds).

Screening fits each float32 output's bound on two draws of its own. A trial's secret draw can be one
where an honest kernel's error is larger than on those draws (every value small next to a constant
the reference adds and takes away again). A candidate that misses the screening's bound but holds
the dtype table's is judged again with each trial's bound measured on that trial's own inputs: an
honest kernel passes, a wrong one still fails, and a pass never asks for it.

The first problem below makes ordinary inputs on the screening's seeds and inputs 3,000 times smaller
on every other seed (the trials'), so the case is the same on every run.
"""
from __future__ import annotations

import pytest
import torch

from distill.verifier import VerifierPool, screen
from tests.distill.verifier.conftest import hostile, problem
from tests.limits import CALL_LIMIT_S

# y = (3x + 1) - 1: exact up to the rounding of 3x + 1 (units of 1, ~6e-8): 3e-5 of the output normwise
# on the trials' draws (x ~ 3e-4), over the screening's floor (1e-5), and ~3e-9 on the screening's.
def _first_draw(seed: int) -> float:
    torch.manual_seed(seed)
    return torch.rand(1).item()


# the problem tells the screening's seeds from the trials' by its first draw (the seed itself is not
# readable after seeding: problemio.seed_all)
SCREENING_DRAWS = {_first_draw(s) for s in screen.SEEDS}

PROBLEM = f'''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return (3.0 * x + 1.0) - 1.0


def get_inputs():
    scale = 1.0 if torch.rand(1, device="cpu").item() in {SCREENING_DRAWS!r} else 3e-4
    return [scale * torch.randn(4096)]


def get_init_inputs():
    return []
'''

KERNEL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def triple_kernel(x_ptr, out_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * FACTOR, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        triple_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), FACTOR={factor}, BLOCK=1024)
        return out
'''


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, resized="off") as p:
        yield p


def test_an_exact_kernel_passes_on_the_trials_own_bound(pool):
    """3x exactly: ~2e-5 from the fp32 reference on the trials, over the screening's floor of 1e-5."""
    v = pool.verify(PROBLEM, KERNEL.format(factor=3.0))
    assert v.status == "pass", v.reason
    assert v.checks.get("tolerance_per_trial") is True
    assert v.checks["phase_s"]["trial_bounds"] > 0


def test_a_dropped_term_still_fails_on_the_trials_own_bound(pool):
    """The fixture `drop_small_term` (a*b + 1e-3*c without c): a near miss by the table's measure, so
    each trial's bound is measured; it is as tight as the screening's, and the verdict stays wrong_output."""
    v = pool.verify(problem("small_term"), hostile("drop_small_term"))
    assert v.status == "wrong_output", v.reason
    assert v.checks.get("tolerance_per_trial") is True


def test_a_far_miss_is_judged_once(pool):
    """3.03x: 1e-2 off, past the dtype table: no trial's bound could admit it, so none is measured."""
    v = pool.verify(PROBLEM, KERNEL.format(factor=3.03))
    assert v.status == "wrong_output", v.reason
    assert "tolerance_per_trial" not in v.checks
