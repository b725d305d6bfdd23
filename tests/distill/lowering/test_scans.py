"""Exclusive and reverse cumsum (issue 15), as KernelBench writes them: render, run, lower, verify."""
from __future__ import annotations

import torch

import synth
from distill.lowering import lower
from synth.check import load_module
from tests.distill.lowering.conftest import verify_all


def test_exclusive_and_reverse_cumsum_mean_what_they_say():
    for op, want in [("cumsum_exclusive", lambda x, d: torch.cumsum(x, d) - x),
                     ("cumsum_reverse", lambda x, d: x.sum(d, keepdim=True) - torch.cumsum(x, d) + x)]:
        p = synth.sample(1, level=1, seed=1, ops=[op])[0]
        ns = load_module(p.source)
        x, = ns["get_inputs"]()
        got = ns["Model"](*ns["get_init_inputs"]())(x)
        assert torch.allclose(got, want(x, p.graph.nodes["y0"]["attrs"]["dim"]), atol=1e-4), op


def test_scans_lower_and_verify_along_the_first_and_last_dim(vpool):
    problems = []
    for op in ("cumsum_exclusive", "cumsum_reverse"):
        ends = {}
        for p in synth.sample(12, level=1, seed=5, ops=[op]):
            d, rank = p.graph.nodes["y0"]["attrs"]["dim"], len(p.input_shapes[0])
            ends.setdefault("first" if d == 0 else "last" if d == rank - 1 else "inner", p)
        assert {"first", "last"} <= set(ends), (op, set(ends))
        problems += list(ends.values()) + synth.sample(1, level=3, seed=6, ops=[op, "relu", "narrow"])
    _, bad = verify_all(vpool, problems, [lower(p).source for p in problems])
    assert not bad, "\n".join(bad)
