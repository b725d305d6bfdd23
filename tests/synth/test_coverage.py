"""Every ordered op pair (a -> b) the catalog's rules allow to be joined by an edge appears at level 2.

`tests/synth/feasible.py` derives the feasible pairs from the catalog (dtype, value range, rank); the
sampler must produce each within a stated N, and must never produce an edge outside that set.
"""
from concurrent.futures import ProcessPoolExecutor

import pytest

import synth
from synth.csp import solve
from synth.exprs import flops_function
from synth.sampler import SampleConfig, draw_ops, problem_stream, resolve_ops
from synth.wiring import wire
from tests.synth.feasible import feasible

SUBSET = ["relu", "exp", "log", "add", "sum", "softmax", "cumsum", "matmul", "linear", "conv2d", "max_pool2d",
          "layer_norm", "mse_loss", "transpose", "cat", "sdpa"]
SUBSET_N = 8_000         # 215 feasible pairs of 256; all seen by 5,000 with seed 77
FULL_N = 600_000         # full catalog: 10,381 feasible pairs of 13,225; all seen by 297,541 with seed 5


def _feasible_pairs(space):
    return {(a.name, b.name) for a in space for b in space if feasible(a, b)}


def test_edge_coverage_level2_subset_full_pipeline():
    space = resolve_ops(SUBSET)
    want = _feasible_pairs(space)
    assert len(want) == 215
    seen = set()
    for start in range(0, SUBSET_N, 500):
        for p in synth.sample(500, level=2, seed=77, ops=SUBSET, start=start):
            if p.graph.has_edge("y0", "y1"):
                seen.add(tuple(p.ops))
        if want <= seen:
            break
    assert seen <= want, sorted(seen - want)
    assert want <= seen, sorted(want - seen)


def _edges(start: int, stop: int, seed: int) -> set:
    cfg = SampleConfig()
    space = resolve_ops()
    out = set()
    for i in range(start, stop):
        rng = problem_stream(i, seed)
        ops = draw_ops(rng, space, 2)
        s = wire(ops, rng, cfg.dims)
        if solve(s, rng, cfg, flops_function(s)) is None:
            continue
        if any(t is s.ops[0].out for t in s.ops[1].inputs):
            out.add((ops[0].name, ops[1].name))
    return out


@pytest.mark.slow
def test_edge_coverage_level2_full_catalog():
    # wiring + constraint solving (the structure of sampled programs), in two processes
    want = _feasible_pairs(resolve_ops())
    step = 50_000
    seen: set = set()
    with ProcessPoolExecutor(2) as pool:
        for start in range(0, FULL_N, 2 * step):
            for part in pool.map(_edges, [start, start + step], [start + step, start + 2 * step], [5, 5]):
                seen |= part
            if want <= seen:
                break
    assert seen <= want, sorted(seen - want)[:20]
    assert want <= seen, (len(want - seen), sorted(want - seen)[:20])
