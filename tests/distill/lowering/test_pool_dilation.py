"""Dilated max pools (KernelBench level 1 #41 and #43): drawn with a dilation, lowered with window taps
that far apart, and a user's dilated MaxPool traced; each checked by the real CPU verifier."""
from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np

from distill.lowering import lower
from distill.lowering.trace import lower_source, trace_source
from synth.catalog import default_catalog
from synth.profiles import load_profile
from synth.sampler import build_problem
from tests.distill.lowering.conftest import verify_all

# a module MaxPool1d with dilation 3 (as #41 has it, padding 4 > the undilated kernel's half), then
# the functional max_pool3d with dilation 2
DILATED = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding, dilation):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x, v):
        return self.pool(x), F.max_pool3d(v, 3, stride=2, padding=1, dilation=2)


def get_inputs():
    return [torch.randn(2, 3, 40), torch.randn(1, 2, 9, 7, 8)]


def get_init_inputs():
    return [8, 1, 4, 3]
'''


def _dilated(op: str, dilation: int, seed: int = 0):
    spec = default_catalog()[op]
    spec = replace(spec, attrs={**spec.attrs, "dilation": (dilation,)})
    return build_problem([spec], np.random.default_rng(seed), load_profile("cpu").config(), seed)


def test_dilated_max_pools_lower_and_verify(vpool):
    problems = [_dilated("max_pool1d", 3), _dilated("max_pool3d", 3), _dilated("max_pool2d", 2)]
    for p in problems:
        node = next(d for _, d in p.graph.nodes(data=True) if d.get("kind") == "op")
        d = node["attrs"]["dilation"]
        assert f"dilation={d})" in p.source, p.source
        k, s, pad = (node["attrs"][a] for a in ("kernel_size", "stride", "padding"))
        want = [(n + 2 * pad - d * (k - 1) - 1) // s + 1 for n in p.input_shapes[0][2:]]
        assert p.output_shapes[0][2:] == want
        assert min(p.input_shapes[0][2:]) >= d          # no window of padding only
    _, bad = verify_all(vpool, problems, [lower(p).source for p in problems])
    assert not bad, "\n".join(bad)


def test_a_users_dilated_max_pools_trace_lower_and_verify(vpool):
    traced = trace_source(DILATED)
    assert traced.ops == ["max_pool1d", "max_pool3d"]
    assert traced.graph.nodes["y0"]["attrs"] == {"kernel_size": 8, "stride": 1, "padding": 4, "dilation": 3}
    assert traced.graph.nodes["y1"]["attrs"] == {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}
    candidate = lower_source(dataclasses.make_dataclass("P", ["source"])(DILATED)).source
    assert "DIL_L" in candidate and "DIL_D" in candidate
    verdict = vpool.verify_many([(DILATED, candidate)])[0]
    assert verdict.status == "pass", verdict.reason[:300]
