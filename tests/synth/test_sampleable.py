"""Every op list stays sampleable at every profile: each catalog op alone, and random level-2 and level-5
lists, build a checked program without SamplingError (the gpu profile's targets are per op, not per program)."""
import numpy as np
import pytest

import synth
from synth.sampler import build_problem, draw_ops, problem_stream, resolve_ops

PROFILES = ["cpu", "gpu"]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_catalog_op_samples_at_level_1(profile):
    for op in synth.operators():
        (p,) = synth.sample(1, level=1, seed=7, ops=[op], profile=profile)
        assert p.ops == [op] and p.profile == profile


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("level", [2, 5])
def test_200_random_op_lists_sample(profile, level):
    config, space = synth.load_profile(profile).config(), resolve_ops()
    lists = np.random.default_rng(2026 + level)
    for i in range(200):
        ops = draw_ops(lists, space, level)
        p = build_problem(ops, problem_stream(i, 77), config, seed=i)   # SamplingError would fail the test
        assert p.ops == [o.name for o in ops]
