"""The init seed stays unreadable after seeding (issue 30, family secrets): a constructor that read it
back (`torch.initial_seed()`, numpy's state) replayed torch's CPU generator in plain Python, knew every
weight without reading a tensor, and passed a host-folded weight product through fills
(hostile seed_fold_fills, seed_fold_scalars). The sequences stay the seed's: every process of a job
still builds the same weights and inputs."""
from __future__ import annotations

import random
import subprocess
import sys

import numpy
import torch

from distill.verifier.problemio import seed_all

SEED = 1234567


def test_seeding_keeps_the_cpu_sequence_and_hides_the_seed():
    torch.manual_seed(SEED)
    plain = torch.rand(8)
    seed_all(SEED)
    assert torch.equal(torch.rand(8), plain)  # the weights a constructor draws are the reference's
    seed_all(SEED)
    assert torch.initial_seed() != SEED and torch.initial_seed() & 0xFFFFFFFF != SEED
    assert int(numpy.random.get_state()[1][0]) != SEED  # numpy's first state word was the seed itself
    r = random.getstate()
    random.seed(SEED)
    assert random.getstate() != r


def test_every_process_draws_the_same_values_for_a_seed():
    code = ("import random, numpy, torch; from distill.verifier.problemio import seed_all; "
            f"seed_all({SEED}); print(torch.rand(3).tolist(), random.random(), numpy.random.rand(), torch.initial_seed())")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
            for _ in range(2)]
    assert runs[0][:-1] == runs[1][:-1]  # torch, random and numpy agree across processes
    assert runs[0][-1] != runs[1][-1]  # the reported initial seed is a fresh decoy each time
