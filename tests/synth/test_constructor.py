"""The twin a fixed candidate can run: `twin(..., keep_constructor=True)` keeps every size the
reference's `Model.__init__` reads and redraws the others (synth.constructor)."""
from __future__ import annotations

import itertools
import re

import pytest

import synth
from synth.realize import NothingToResize


def _init(source: str) -> str:
    return source.split("def __init__")[1].split("def forward")[0]


@pytest.mark.parametrize("op", ["linear", "conv2d", "group_norm"])
def test_constructor_sizes_stay_and_the_others_change(op):
    p = synth.sample(1, level=1, seed=3, ops=[op])[0]
    assert re.search(r"nn\.(Linear|Conv2d|GroupNorm)\(\d+, \d+", _init(p.source)), _init(p.source)
    twins = [p.twin("cpu", seed, keep_constructor=True) for seed in (1, 2, 3)]
    for t in twins:
        assert _init(t.source) == _init(p.source)
        assert t.input_shapes != p.input_shapes and t.ops == p.ops and t.profile == "cpu"
    assert len({str(t.input_shapes) for t in twins}) > 1  # the seed decides
    assert p.twin("cpu", 1, keep_constructor=True).source == twins[0].source  # deterministically
    # the plain twin still redraws every size, constructor's included (the CPU lane's cpu twin)
    assert _init(p.twin("cpu", 1).source) != _init(p.source)


def test_layer_norm_keeps_only_the_normalised_dim():
    p = synth.sample(1, level=1, seed=0, ops=["layer_norm"])[0]
    t = p.twin("cpu", 1, keep_constructor=True)
    assert t.input_shapes[0][-1] == p.input_shapes[0][-1]
    assert t.input_shapes[0][:-1] != p.input_shapes[0][:-1]


def test_a_parameter_as_large_as_its_input_leaves_nothing_to_resize():
    # x + nn.Parameter(randn(*x.shape)): every size is the parameter's; found by reading the source
    for seed in itertools.chain([49], range(200)):
        p = synth.sample(1, level=1, seed=seed, ops=["add"])[0]
        m = re.search(r"nn\.Parameter\(torch\.randn\(([\d, ]+)\)\)", p.source)
        if m and [int(d) for d in m.group(1).split(",")] == p.input_shapes[0] and 1 not in p.input_shapes[0]:
            break
    else:
        pytest.fail("no add with a full-size parameter operand in 200 draws")
    with pytest.raises(NothingToResize, match="nothing to resize"):
        p.twin("cpu", 1, keep_constructor=True)
    assert p.twin("cpu", 1).input_shapes != p.input_shapes  # a plain twin may still change them
