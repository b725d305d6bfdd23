"""Exact uniformity: op sequences over M^k, and sizes/attributes over the feasible set."""
import itertools
from collections import Counter

import pytest

import synth
from synth import csp
from synth.catalog import default_catalog
from synth.sampler import Attempts, SampleConfig, computes, draw_ops, problem_stream, resolve_ops
from tests.synth.stats import chi2_expected, chi2_uniform
from tests.synth.views import COMPUTING, VIEWS


def _assert_ops_never_redrawn(problems, seed, level, space):
    # the op list of problem i is exactly the first draw of its stream that computes (a list of views
    # only is redrawn whole, before anything runs), whatever repairs followed
    for i, p in enumerate(problems):
        rng = problem_stream(i, seed)
        expected = draw_ops(rng, space, level)
        while not computes(expected):
            expected = draw_ops(rng, space, level)
        assert p.ops == [o.name for o in expected], (i, p.ops, expected)


# the gpu profile's op sequences must be exactly as uniform; it draws ~5x slower here (twin checks)
PROFILES = ["cpu", pytest.param("gpu", marks=pytest.mark.slow)]


@pytest.mark.parametrize("profile", PROFILES)
def test_level1_op_marginals_uniform(profile):
    space = resolve_ops()
    n = 25 * len(space)
    stats = Attempts()
    problems = synth.sample(n, level=1, seed=11, stats=stats, profile=profile)
    counts = Counter(p.ops[0] for p in problems)
    assert not set(counts) & set(VIEWS)  # a view alone computes nothing: outside the support
    stat, crit = chi2_uniform(counts, COMPUTING)  # uniform over the 121 ops that compute
    assert stat < crit, (stat, crit)
    assert stats.counts.pop("op list of views") > 0  # lists redrawn whole (~6 in 127 at level 1)
    assert sum(stats.counts.values()) > 0  # repairs happened, and did not move the marginals
    _assert_ops_never_redrawn(problems, 11, 1, space)


@pytest.mark.parametrize("profile", PROFILES)
def test_level3_op_marginals_uniform_per_position(profile):
    space = resolve_ops()
    n = 10 * len(space)
    problems = synth.sample(n, level=3, seed=12, profile=profile)
    # uniform over the M^3 - V^3 lists that compute: at one position a computing op heads M^2 of them,
    # a view op the M^2 - V^2 whose other two ops are not both views
    m, v = len(space), len(VIEWS)
    weights = Counter({o.name: m * m - (v * v if o.view else 0) for o in space})
    for pos in range(3):
        stat, crit = chi2_expected(Counter(p.ops[pos] for p in problems), weights)
        assert stat < crit, (pos, stat, crit)
    assert not any(set(p.ops) <= set(VIEWS) for p in problems)
    _assert_ops_never_redrawn(problems, 12, 3, space)


def test_heavy_rejection_does_not_bias_ops():
    # tiny sizes make many programs degenerate (size-1 reductions, constant outputs): lots of repairs
    ops = ["sum", "softmax", "std", "relu", "exp", "cumsum", "l2_normalize", "mean", "argmax", "layer_norm"]
    cfg = SampleConfig(dims=(1, 2, 3), max_elements=64, flop_window=(0, 1e9))
    stats = Attempts()
    problems = synth.sample(600, level=2, seed=5, ops=ops, config=cfg, stats=stats)
    repairs = sum(stats.counts.values())
    assert repairs > 100, stats.counts
    for pos in range(2):
        stat, crit = chi2_uniform(Counter(p.ops[pos] for p in problems), sorted(ops))
        assert stat < crit, (pos, stat, crit)
    _assert_ops_never_redrawn(problems, 5, 2, resolve_ops(ops))


def _matmul_feasible(dims, cap):
    return [(m, k, n) for m, k, n in itertools.product(dims, repeat=3) if m * k <= cap and k * n <= cap and m * n <= cap]


@pytest.mark.parametrize("path", ["rejection", "enumeration"])
def test_shape_assignment_exactly_uniform_on_small_case(path, monkeypatch):
    if path == "enumeration":  # force python-constraint enumeration for every component
        monkeypatch.setattr(csp, "_reject", lambda *a, **k: None)
        csp._SOLUTION_CACHE.clear()
    dims, cap = (1, 2, 3, 4, 5, 6), 12
    feasible = _matmul_feasible(dims, cap)
    cfg = SampleConfig(dims=dims, max_elements=cap, flop_window=(0, 1e12), check=False)
    n = 40 * len(feasible)
    counts = Counter()
    for p in synth.sample(n, level=1, seed=3, ops=["matmul"], config=cfg):
        if len(p.input_shapes) != 2:
            continue  # x0 @ x0 is another structure (one input); uniformity is per structure
        (m, k), (k2, nn) = p.input_shapes
        assert k == k2
        counts[(m, k, nn)] += 1
    assert set(counts) <= set(feasible)
    stat, crit = chi2_uniform(counts, feasible)
    assert stat < crit, (stat, crit, len(feasible))


def test_attribute_and_shape_joint_uniform_conv1d():
    # conv1d: sizes N, C, L and out_channels plus seven attributes, with divisibility and output-size
    # rules: 69,008 feasible points, too many to count each (8 draws a point would take minutes). A
    # uniform law over them projects onto any coarser key with each key weighing its number of points,
    # so three projections that cut the space different ways are tested on one run of 3,000 draws.
    cat = default_catalog()["conv1d"]
    dims, cap = (1, 2, 4), 8
    a = cat.attrs
    projections = {"sizes": lambda t: t[:4], "padding/dilation/groups": lambda t: t[6:9],
                   "kernel/depthwise/bias": lambda t: (t[4], t[9], t[10])}
    weights = {k: Counter() for k in projections}
    feasible = set()
    for n, c, length, o, k, s, p, d, g, dw, b in itertools.product(
            dims, dims, dims, dims, a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["groups"],
            a["depthwise"], a["bias"]):
        groups = c if dw else g
        lo = (length + 2 * p - d * (k - 1) - 1) // s + 1
        if lo < 1 or c % groups or o % groups:
            continue
        if max(n * c * length, n * o * lo, o * (c // groups) * k, o) > cap:
            continue
        point = (n, c, length, o, k, s, p, d, g, dw, b)
        feasible.add(point)
        for key, f in projections.items():
            weights[key][f(point)] += 1
    cfg = SampleConfig(dims=dims, max_elements=cap, flop_window=(0, 1e12), max_op_flops=1e12, check=False)
    drawn = []
    for pr in synth.sample(3000, level=1, seed=4, ops=["conv1d"], config=cfg):
        node = pr.graph.nodes["y0"]
        at = node["attrs"]
        (n, c, length), = pr.input_shapes
        drawn.append((n, c, length, node["shape"][1], at["kernel_size"], at["stride"], at["padding"], at["dilation"],
                      at["groups"], at["depthwise"], at["bias"]))
    assert set(drawn) <= feasible, sorted(set(drawn) - feasible)[:3]
    for key, f in projections.items():
        stat, crit = chi2_expected(Counter(f(t) for t in drawn), weights[key])
        assert stat < crit, (key, stat, crit)
