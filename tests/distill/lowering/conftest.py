"""Fixtures of the lowering tests: one CPU verifier pool (the real, sandboxed verifier) per session."""
from __future__ import annotations

import pytest
from tests.limits import CALL_LIMIT_S


@pytest.fixture(scope="session")
def vpool():
    from distill.verifier import VerifierPool

    # two workers: the interpreter is single-threaded, and CI machines have two cores
    # resized="off": these tests measure the lowering itself, and a twin run doubles each verification
    # (the slow lane took 17m54s with it); test_resized.py checks lowered modules on resized twins
    # trials=3 (the verifier's default is 5): these tests judge the lowering over hundreds of programs,
    # and each trial is a full interpreted run; 3 fresh input sets plus the two replays still catch a
    # wrong kernel, and the slow lane's 600 level-1/2/5 programs take ~28% less
    with VerifierPool(workers=2, device="cpu", timeout=CALL_LIMIT_S, resized="off", trials=3) as p:
        yield p


def verify_all(pool, problems, sources):
    """Verdicts for (problem, source) pairs; a failure message that names every non-pass."""
    verdicts = pool.verify_many(list(zip(problems, sources)))
    bad = [f"{p.problem_id} {p.ops}: {v.status}: {v.reason[:200]}" for p, v in zip(problems, verdicts)
           if v.status != "pass"]
    return verdicts, bad


def covering(problems: list, cost=None, ops=None) -> list:
    """The fewest of `problems` (greedily: each time the one holding most operators not yet held; on a tie
    the least `cost(problem)` when a cost is given, then the first in sample order) that together hold
    every operator `problems` holds (or every one of `ops` they hold); in sample order."""
    missing = {op for p in problems for op in p.ops}
    if ops is not None:
        missing &= set(ops)
    chosen: list[int] = []
    weigh = cost or (lambda p: 0)
    while missing:
        i = max((i for i in range(len(problems)) if i not in chosen),
                key=lambda i: (len(missing & set(problems[i].ops)), -weigh(problems[i]), -i))
        chosen.append(i)
        missing -= set(problems[i].ops)
    return [problems[i] for i in sorted(chosen)]


SDPA = """
import torch
import torch.nn as nn
import torch.nn.functional as F

B = {b}
H = {h}
L = {l}
E = {e}
S = {s}
V = {v}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x0, x1, x2):
        return {expr}


def get_inputs():
    return [torch.randn((B, H, L, E)), torch.randn((B, H, S, E)), torch.randn((B, H, S, V))]


def get_init_inputs():
    return []
"""

PLAIN = "F.scaled_dot_product_attention(x0, x1, x2, is_causal={causal})"


def sdpa_source(expr: str = PLAIN, causal: bool = False, **sizes: int) -> str:
    """A KernelBench-format program around `expr` (default: one sdpa) at the H200's slow level-1 sizes,
    unless `sizes` say otherwise (b, h, l, e, s, v)."""
    args = {"b": 1, "h": 2, "l": 19, "e": 152, "s": 38, "v": 256} | sizes
    return SDPA.format(expr=expr.format(causal=causal), **args)
