"""The sampler's bounds: levels up to MAX_LEVEL, seeds >= 0, and unique sampling that stops when the
space runs out instead of drawing forever."""
import time

import pytest

import synth
from synth.sampler import MAX_LEVEL, MAX_REPEATS, SpaceExhausted

# 14 distinct problems exist for triplet_margin_loss with every tensor under 64 elements (seed 0 finds
# the last of them at draw 113, after 81 repeats in a row).
TINY = dict(level=1, seed=0, ops=["triplet_margin_loss"], config=synth.SampleConfig(max_elements=64))


def test_levels_past_the_cap_are_refused_at_once():
    t0 = time.process_time()  # CPU s: how busy the box is does not count
    for bad in (dict(level=MAX_LEVEL + 1), dict(level=10_000), dict(levels=[1, MAX_LEVEL + 1]), dict(level=0)):
        with pytest.raises(ValueError, match=f"levels must be integers from 1 to {MAX_LEVEL}"):
            synth.sample(1, **bad)
    assert time.process_time() - t0 < 1
    with pytest.raises(ValueError, match="seed and start must be >= 0"):
        synth.sample(1, level=1, seed=-1)


def test_unique_sampling_finds_a_small_space_then_stops_when_it_runs_out():
    found = synth.sample(14, unique=True, **TINY)
    assert len({p.dag_hash for p in found}) == 14
    t0 = time.process_time()
    with pytest.raises(SpaceExhausted) as err:
        synth.sample(15, unique=True, **TINY)
    assert time.process_time() - t0 < 30
    msg = str(err.value)
    assert "found only 14 distinct problems for level 1 over ops triplet_margin_loss (max_elements 64)" in msg
    assert f"15 asked for: the last {MAX_REPEATS} draws were all repeats" in msg
