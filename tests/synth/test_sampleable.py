"""Every op list stays sampleable at every profile: each computing catalog op alone, each view op beside
a computing one, and random level-2 and level-5 lists, build a checked program without SamplingError
(the gpu profile's targets are per op, not per program). Lists of views only are never drawn
(synth.sampler.computes; tests/synth/test_views.py)."""
import numpy as np
import pytest

import synth
from synth.sampler import build_problem, computes, draw_ops, problem_stream, resolve_ops
from tests.synth.views import COMPUTING, VIEWS, beside_relu

PROFILES = ["cpu", "gpu"]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_catalog_op_samples_at_level_1_or_beside_a_computing_op(profile):
    for op in COMPUTING:
        (p,) = synth.sample(1, level=1, seed=7, ops=[op], profile=profile)
        assert p.ops == [op] and p.profile == profile
    for op in VIEWS:
        with pytest.raises(ValueError, match="only view their input"):
            synth.sample(1, level=1, seed=7, ops=[op], profile=profile)
        p = beside_relu(op, seed=7, profile=profile)
        assert sorted(p.ops) == sorted([op, "relu"]) and p.profile == profile


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("level", [2, 5])
def test_200_random_op_lists_sample(profile, level):
    config, space = synth.load_profile(profile).config(), resolve_ops()
    lists = np.random.default_rng(2026 + level)
    skipped = 0
    for i in range(200):
        ops = draw_ops(lists, space, level)
        if not computes(ops):  # views only: never drawn (about 1 list in 450 at level 2)
            skipped += 1
            continue
        p = build_problem(ops, problem_stream(i, 77), config, seed=i)   # SamplingError would fail the test
        assert p.ops == [o.name for o in ops]
    assert skipped <= 2
