"""Twins: a problem rebuilt from its recipe is the same program; its twin at another profile (or seed)
has the same ops, wiring and attributes with sizes redrawn there, deterministically."""
import json

import pytest

import synth
from synth.catalog import default_catalog
from synth.profiles import ProfileError, load_profile
from synth.realize import TwinError, rebuild
from synth.render import materialize, render
from synth.shard import read_problems, write_problems


def _attrs(d):
    """A node's attributes but the sizes among them (`out_channels` of a conv is drawn as a dim)."""
    spec = default_catalog().get(d.get("op"))
    sizes = {k for k, dom in spec.attrs.items() if dom == ("dims",)} if spec else set()
    sizes.add("pshape")  # a parameter operand's shape: sizes, recorded beside the attributes for the renderer
    return json.dumps({k: v for k, v in (d.get("attrs") or {}).items() if k not in sizes}, sort_keys=True)


def _graph(p):
    """Everything of the graph but the sizes: node names, ops, attributes and structural choices, edges."""
    nodes = {(n, d["kind"], d.get("op"), _attrs(d), d.get("dtype"), d.get("range"))
             for n, d in p.graph.nodes(data=True)}
    return nodes, {(u, v, d["slot"]) for u, v, d in p.graph.edges(data=True)}


def _sizes(p):
    return [d["shape"] for _, d in sorted(p.graph.nodes(data=True))]


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    ps = synth.sample(6, levels=[1, 2, 5], seed=4, profile="gpu") + synth.sample(6, levels=[1, 2, 5, 10], seed=4)
    path = tmp_path_factory.mktemp("twins") / "p.parquet"
    write_problems(ps, path)
    return read_problems(path)   # twins are made from rows read back, as a later stage would


def test_recipe_rebuilds_the_same_program(problems):
    for p in problems:
        s, values = rebuild(p)
        assert render(s, materialize(s, values), f"Level {p.level}: {', '.join(p.ops)}.") == p.source


def test_twin_is_the_same_graph_at_the_other_profile(problems):
    cpu_caps = load_profile("cpu")
    for p in (p for p in problems if p.profile == "gpu"):
        t = p.twin("cpu", 7)
        assert t.profile == "cpu" and t.ops == p.ops and t.level == p.level
        assert _graph(t) == _graph(p) and _sizes(t) != _sizes(p)
        assert max(map(max, filter(None, t.input_shapes))) <= max(cpu_caps.dims["default"])
        assert t.source == p.twin("cpu", 7).source            # deterministic in (problem, profile, seed)
        assert t.twin("gpu", 1).ops == p.ops                   # and back up again
        # a resized twin: same profile, other sizes (a seed may redraw the same sizes where the profile's
        # element targets leave few choices, as for a lone 1-D reduction: a few seeds find another)
        other = next((o for o in (p.twin("gpu", s) for s in (8, 9, 10, 11)) if _sizes(o) != _sizes(p)), None)
        assert other is not None and other.profile == "gpu" and _graph(other) == _graph(p)
        assert other.recipe != p.recipe and json.loads(other.recipe)["tape"] == json.loads(p.recipe)["tape"]


def test_twin_seeds_give_different_sizes(problems):
    p = next(p for p in problems if p.profile == "gpu" and p.level == 5)
    assert len({tuple(map(tuple, p.twin("cpu", seed).input_shapes)) for seed in range(6)}) > 1


def test_cpu_problems_scale_up(problems):
    grown = 0
    for p in (p for p in problems if p.profile == "cpu"):
        try:
            t = p.twin("gpu", 0)
        except TwinError as exc:   # a wiring the gpu targets cannot hold (a product over a short fresh vector)
            assert p.problem_id in str(exc) and "profile gpu" in str(exc)
            continue
        assert _graph(t) == _graph(p) and t.profile == "gpu"
        grown += 1
    assert grown >= 4


def test_twin_errors_say_why(problems):
    p = problems[0]
    with pytest.raises(ProfileError, match="unknown profile 'tiny'"):
        p.twin("tiny", 0)
    old = synth.Problem.from_row({**p.to_row(), "recipe": None, "profile": None})   # a row from before twins
    assert old.profile == "cpu"
    with pytest.raises(TwinError, match="has no recipe .it was made before twins existed."):
        old.twin("cpu", 0)
    damaged = synth.Problem.from_row({**p.to_row(), "recipe": p.recipe.replace('"source"', '"dim"', 1)})
    with pytest.raises(TwinError, match="its recipe does not rebuild it .ReplayError: the recorded wiring does not fit"):
        damaged.twin("cpu", 0)
    no_floor = load_profile("cpu").config(flop_window=(0, 5e8))
    prod = next(q for q in synth.sample(40, level=1, seed=0, ops=["prod"], config=no_floor) if len(q.input_shapes[0]) == 1)
    with pytest.raises(TwinError, match="no sizes within profile gpu satisfy its constraints"):
        prod.twin("gpu", 0)   # the catalog caps a product's length at 8: a rank-1 one cannot reach 2^26 elements
