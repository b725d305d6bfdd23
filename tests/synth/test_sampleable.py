"""Every op list stays sampleable at every profile: each catalog op alone, and random level-2 and level-5
lists, build a checked program without SamplingError (the gpu profile's targets are per op, not per program),
except op lists whose programs only view their input (synth.check._not_a_view), which are never drawn."""
import numpy as np
import pytest
import torch

import synth
from synth.sampler import OnlyViews, SamplingError, build_problem, draw_ops, problem_stream, resolve_ops

PROFILES = ["cpu", "gpu"]
# Alone, each returns a view of its input: a program of one of them has no kernel to write.
VIEWS = {"flatten", "narrow", "permute", "reshape", "select", "transpose"}


@pytest.mark.parametrize("profile", PROFILES)
def test_every_catalog_op_samples_at_level_1(profile):
    for op in synth.operators():
        if op in VIEWS:
            with pytest.raises(SamplingError, match="only views of an input"):
                synth.sample(1, level=1, seed=7, ops=[op], profile=profile)
            continue
        (p,) = synth.sample(1, level=1, seed=7, ops=[op], profile=profile)
        assert p.ops == [op] and p.profile == profile


def test_no_drawn_program_returns_a_view_of_its_input_and_views_still_compose():
    problems = synth.sample(120, level=1, seed=5)
    assert not {p.ops[0] for p in problems} & VIEWS
    for p in problems[:40]:  # the twin's outputs share no memory with its inputs (the check that rejects views)
        ns: dict = {}
        exec(p.source, ns)  # noqa: S102 - synth's own text
        torch.manual_seed(0)
        inputs = ns["get_inputs"]()
        out = ns["Model"](*ns["get_init_inputs"]())(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        ptrs = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
        assert all(o.untyped_storage().data_ptr() not in ptrs for o in outs), p.ops
    (p,) = synth.sample(1, level=2, seed=3, ops=["transpose", "relu"])  # a view feeding compute is kept
    assert sorted(p.ops) == ["relu", "transpose"]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("level", [2, 5])
def test_200_random_op_lists_sample(profile, level):
    config, space = synth.load_profile(profile).config(), resolve_ops()
    lists = np.random.default_rng(2026 + level)
    for i in range(200):
        ops = draw_ops(lists, space, level)
        try:
            p = build_problem(ops, problem_stream(i, 77), config, seed=i)   # SamplingError would fail the test
        except OnlyViews:  # only where every op alone is a view (transpose then narrow: still a view)
            assert {o.name for o in ops} <= VIEWS, [o.name for o in ops]
            continue
        assert p.ops == [o.name for o in ops]
