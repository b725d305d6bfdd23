"""Every ordered op pair (a -> b) the catalog's rules allow to be joined by an edge appears at level 2.

`tests/synth/feasible.py` derives the feasible pairs from the catalog (dtype, value range, rank); the
sampler must produce each within a stated N, and must never produce an edge outside that set.
"""
from concurrent.futures import ProcessPoolExecutor

import pytest

import synth
from synth.csp import solve
from synth.exprs import flops_function
from synth.sampler import SampleConfig, problem_stream, resolve_ops
from synth.wiring import WiringError, wire
from tests.synth.feasible import feasible

SUBSET = ["relu", "exp", "log", "add", "sum", "softmax", "cumsum", "matmul", "linear", "conv2d", "max_pool2d",
          "layer_norm", "mse_loss", "transpose", "cat", "sdpa"]
SUBSET_N = 8_000         # 215 feasible pairs of 256; all seen by 5,000 with seed 77
FEASIBLE_TRIES = 1024    # wire-and-solve attempts for a pair the rules allow (the rarest, logsumexp -> sdpa: ~3%)
OTHER_TRIES = 24         # ... and for one they forbid (random draws gave each ~20 in the old 300,000-draw test)


def _feasible_pairs(space):
    return {(a.name, b.name) for a in space for b in space if feasible(a, b)}


def test_edge_coverage_level2_subset_full_pipeline():
    space = resolve_ops(SUBSET)
    want = _feasible_pairs(space)
    assert len(want) == 215
    # [transpose, transpose] is a list of views only (catalog `view`): never drawn (synth.sampler.computes)
    want.remove(("transpose", "transpose"))
    seen = set()
    for start in range(0, SUBSET_N, 500):
        for p in synth.sample(500, level=2, seed=77, ops=SUBSET, start=start):
            if p.graph.has_edge("y0", "y1"):
                seen.add(tuple(p.ops))
        if want <= seen:
            break
    assert seen <= want, sorted(seen - want)
    assert want <= seen, sorted(want - seen)


def _pair_edges(pairs: list[tuple[str, str, int, int]], seed: int) -> tuple[set, dict]:
    """Wire and solve each ordered pair (a, b) as the sampler does after drawing it, up to `tries` times,
    and record the pairs that came out joined by an edge a -> b (and how many tries that took)."""
    cfg = SampleConfig()
    space = {o.name: o for o in resolve_ops()}
    out, took = set(), {}
    for a, b, base, tries in pairs:
        ops = [space[a], space[b]]
        for t in range(tries):
            rng = problem_stream(base + t, seed)
            try:
                s = wire(ops, rng, cfg.dims)
            except WiringError:
                continue
            if any(x is s.ops[0].out for x in s.ops[1].inputs) and solve(s, rng, cfg, flops_function(s)) is not None:
                out.add((a, b))
                took[(a, b)] = t + 1
                break
    return out, took


@pytest.mark.slow
def test_edge_coverage_level2_full_catalog():
    # Each ordered pair of the whole catalog goes through wiring and constraint solving (the structure
    # of a sampled level-2 program) directly: which pairs the sampler draws is uniform (chi-square
    # tests), so what this checks is that every feasible pair can come out joined and no other can.
    # Drawing programs at random instead needs ~300,000 draws to meet the rarest of ~16,000 pairs.
    names = [o.name for o in resolve_ops()]
    want = _feasible_pairs(resolve_ops())
    pairs = [(a, b, i * FEASIBLE_TRIES, FEASIBLE_TRIES if (a, b) in want else OTHER_TRIES)
             for i, (a, b) in enumerate((a, b) for a in names for b in names)]
    seen: set = set()
    took: dict = {}
    with ProcessPoolExecutor(2) as pool:
        for part, t in pool.map(_pair_edges, [pairs[0::2], pairs[1::2]], [5, 5]):
            seen |= part
            took.update(t)
    assert seen <= want, sorted(seen - want)[:20]
    assert want <= seen, (len(want - seen), sorted(want - seen)[:20])
    print(f"{len(seen)} feasible pairs, tries to join: max {max(took.values())}, "
          f"mean {sum(took.values()) / len(took):.2f}")
