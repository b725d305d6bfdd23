"""dag_hash: invariant to node names and statement order, sensitive to every shape and attribute."""
import copy
import random

import networkx as nx
import numpy as np

import synth
from synth.catalog import default_catalog
from synth.csp import solve
from synth.dag_hash import build_graph, dag_hash
from synth.exprs import flops_function
from synth.render import materialize
from synth.sampler import SampleConfig
from synth.wiring import wire


def _program(names, seed, fresh_bias=0.0):
    cat = default_catalog()
    cfg = SampleConfig()
    for attempt in range(50):
        rng = np.random.default_rng(seed + attempt)
        s = wire([cat[n] for n in names], rng, cfg.dims, fresh_bias)
        a = solve(s, rng, cfg, flops_function(s))
        if a is not None:
            return materialize(s, a)
    raise AssertionError("no program")


def test_relabelling_nodes_keeps_hash():
    for p in synth.sample(10, level=5, seed=3):
        names = list(p.graph.nodes)
        shuffled = names[:]
        random.Random(0).shuffle(shuffled)
        relabelled = nx.relabel_nodes(p.graph, {a: f"n{b}" for a, b in zip(names, shuffled)})
        assert dag_hash(relabelled) == p.dag_hash


def test_reordering_independent_statements_keeps_hash():
    prog = _program(["relu", "exp", "tanh"], seed=1, fresh_bias=1.0)  # three independent ops
    h = dag_hash(build_graph(prog))
    swapped = copy.deepcopy(prog)
    swapped.ops.reverse()
    # rename so the statement order and the output variables differ too
    rename = {o.out: f"y{i}" for i, o in enumerate(swapped.ops)}
    for o in swapped.ops:
        o.out = rename[o.out]
    swapped.outputs = [rename[x] for x in swapped.outputs][::-1]
    swapped.shapes = {rename.get(k, k): v for k, v in swapped.shapes.items()}
    swapped.dtypes = {rename.get(k, k): v for k, v in swapped.dtypes.items()}
    assert dag_hash(build_graph(swapped)) == h


def test_any_shape_or_attribute_change_moves_hash():
    prog = _program(["conv2d", "leaky_relu", "sum"], seed=2)
    base = dag_hash(build_graph(prog))
    seen = {base}
    changed = copy.deepcopy(prog)
    changed.inputs[0]["shape"][-1] += 1
    seen.add(dag_hash(build_graph(changed)))
    for op in prog.ops:
        for name, value in list(op.attrs.items()) + list(op.structural.items()):
            c = copy.deepcopy(prog)
            target = next(o for o in c.ops if o.index == op.index)
            bag = target.attrs if name in target.attrs else target.structural
            if isinstance(value, tuple):  # a reduction over several dims: drop one of them
                bag[name] = value[:-1]
            else:
                bag[name] = (not value) if isinstance(value, bool) else value + 1
            seen.add(dag_hash(build_graph(c)))
    n_changes = 1 + sum(len(o.attrs) + len(o.structural) for o in prog.ops)
    assert len(seen) == 1 + n_changes


def test_operand_order_matters():
    # sub(exp(x0), x1) and sub(x1, exp(x0)) are different programs
    for seed in range(200):
        prog = _program(["exp", "sub"], seed=seed)
        sub = prog.ops[1]
        if sorted(sub.inputs) == ["x1", "y0"] or sorted(sub.inputs) == ["x0", "y0"]:
            break
    else:
        raise AssertionError("no sub(y0, fresh) wiring found")
    swapped = copy.deepcopy(prog)
    swapped.ops[1].inputs.reverse()
    assert dag_hash(build_graph(swapped)) != dag_hash(build_graph(prog))


def test_dedup_keeps_first_of_each_hash():
    ps = synth.sample(8, level=1, seed=0, ops=["relu"],
                      config=SampleConfig(dims=(2, 3), max_elements=16, flop_window=(0, 1e9)))
    kept = synth.dedup(ps + ps)
    assert len(kept) == len({p.dag_hash for p in ps}) < 16
    assert kept[0] is ps[0]
    uniq = synth.sample(8, level=1, seed=0, ops=["relu"], unique=True,
                        config=SampleConfig(dims=(2, 3, 4), max_elements=64, flop_window=(0, 1e9)))
    assert len({p.dag_hash for p in uniq}) == 8
