"""KernelBench's reductions and norms (issue 15): reductions over several dims and over one element,
LayerNorm over several trailing dims, batch norm in train mode, GroupNorm with 512 groups. Drawn,
rendered as KernelBench writes them, and kept out where the op would be degenerate."""
from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np

import synth
from synth.catalog import default_catalog
from synth.profiles import load_profile
from synth.sampler import build_problem


def _node(p):
    return next(d for _, d in p.graph.nodes(data=True) if d.get("kind") == "op")


def _reduced(p) -> tuple[list[int], list[int]]:
    shape = p.input_shapes[0]
    dim = _node(p)["attrs"]["dim"]
    dims = dim if isinstance(dim, list) else [dim]
    return shape, dims


def test_reductions_draw_several_dims_and_single_elements_where_meaningful():
    sums = synth.sample(150, level=1, seed=4, ops=["sum"])
    several = [p for p in sums if isinstance(_node(p)["attrs"]["dim"], list)]
    assert several and len(several) < len(sums)
    for p in several:
        shape, dims = _reduced(p)
        assert len(dims) >= 2 and dims == sorted(set(dims))
        assert f"dim=({', '.join(map(str, dims))})" in p.source          # a tuple, as KernelBench writes it
        keep = _node(p)["attrs"]["keepdim"]
        want = [1 if i in dims else s for i, s in enumerate(shape)] if keep else [s for i, s in enumerate(shape) if i not in dims]
        assert p.output_shapes[0] == want
    assert {len(p.output_shapes[0]) for p in several} >= {0}        # some reduce every dim to a scalar
    assert any(math.prod(_reduced(p)[0][d] for d in _reduced(p)[1]) == 1 for p in sums)   # an identity sum
    # unbiased var over one element is 0/0 and argmax over one is constant 0: never drawn
    for op in ("var", "argmax"):
        for p in synth.sample(60, level=1, seed=4, ops=[op]):
            shape, dims = _reduced(p)
            assert math.prod(shape[d] for d in dims) >= 2
            assert op == "var" or isinstance(_node(p)["attrs"]["dim"], int)   # torch.argmax takes one dim


def test_layer_norm_over_several_trailing_dims():
    seen = set()
    for p in synth.sample(40, level=1, seed=6, ops=["layer_norm"]):
        k = _node(p)["attrs"]["norm_dims"]
        seen.add(k)
        shape = p.input_shapes[0]
        assert 1 <= k <= len(shape) and math.prod(shape[-k:]) >= 2
        line = re.search(r"nn\.LayerNorm\((.*)\)\n", p.source).group(1)
        assert line == (str(shape[-1]) if k == 1 else "(" + ", ".join(map(str, shape[-k:])) + ")")
    assert seen == {1, 2, 3}


def test_batch_norm_draws_train_mode_on_batch_statistics():
    modes = {}
    for p in synth.sample(30, level=1, seed=8, ops=["batch_norm"]):
        training = _node(p)["attrs"]["training"]
        modes[training] = p
        shape = p.input_shapes[0]
        if training:  # torch needs two values per channel; forward passes no running stats (no state change)
            assert shape[0] * math.prod(shape[2:]) >= 2
            assert "F.batch_norm(x0, None, None, " in p.source and "training=True" in p.source
        else:
            assert ".running_mean, " in p.source and "training=False" in p.source
    assert set(modes) == {True, False}


def test_anchor_epilogue_chains_keep_a_dim_no_reduction_took():
    """Several-dim reductions in a chain leave a dim for each later reduction and one after them all."""
    several = 0
    for p in synth.sample(40, level=4, seed=3, ops=["linear", "conv2d", "sum", "mean", "amax", "relu"],
                          shape="anchor_epilogue"):
        rank = len(p.output_shapes[0])
        taken: set[int] = set()
        for _, d in sorted(p.graph.nodes(data=True)):
            if d.get("kind") == "op" and d["op"] in ("sum", "mean", "amax"):
                dims = d["attrs"]["dim"] if isinstance(d["attrs"]["dim"], list) else [d["attrs"]["dim"]]
                assert d["attrs"]["keepdim"] and not taken & set(dims), (p.ops, taken, dims)
                several += len(dims) > 1
                taken |= set(dims)
        assert len(taken) < rank, (p.ops, taken)
    assert several


def group_norm_512(seed: int = 0):
    """A `gpu` GroupNorm(512, C) problem (KernelBench level 2 #62, #75) and its `cpu` twin."""
    spec = default_catalog()["group_norm"]
    spec = replace(spec, attrs={**spec.attrs, "groups": (512,)})
    big = build_problem([spec], np.random.default_rng(seed), load_profile("gpu").config(), seed)
    return big, big.twin("cpu", seed)


def test_group_norm_draws_512_groups_with_a_cpu_twin_of_512_channels():
    assert 512 in default_catalog()["group_norm"].attrs["groups"]
    big, small = group_norm_512()
    assert big.input_shapes[0][1] % 512 == 0 and f"nn.GroupNorm(512, {big.input_shapes[0][1]})" in big.source
    # no cpu size is a multiple of 512: the twin takes the cpu profile's twin_sizes, and only there
    assert small.profile == "cpu" and small.input_shapes[0][1] == 512 and "nn.GroupNorm(512, 512)" in small.source
    assert math.prod(small.input_shapes[0]) <= load_profile("cpu").max_tensor_elements
    other = synth.sample(6, level=1, seed=1, profile="gpu", ops=["relu", "sum"])
    assert all(max(max(s) for s in p.twin("cpu", 1).input_shapes) <= 256 for p in other)
