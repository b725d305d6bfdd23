"""Issue 15's norms and reductions through the reference lowering and the real CPU verifier: batch
norm in train mode (batch statistics: the normalize family, not eval mode's pointwise map), reductions
over several dims (to a scalar too) and over one element, LayerNorm over several trailing dims, a
user's module with BatchNorm2d in train mode (traced), and GroupNorm with 512 groups."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import replace

import numpy as np

from distill.lowering import lower
from distill.lowering.trace import lower_source, trace_source
from synth.catalog import default_catalog
from synth.profiles import load_profile
from synth.sampler import build_problem
from tests.distill.lowering.conftest import verify_all
from tests.synth.test_reduce_norm_attrs import group_norm_512


def _problem(op: str, seed: int = 0, **fields):
    spec = default_catalog()[op]
    spec = replace(spec, **{k: ({**getattr(spec, k), **v} if isinstance(v, dict) else v) for k, v in fields.items()})
    return build_problem([spec], np.random.default_rng(seed), load_profile("cpu").config(), seed)


def _attrs(p) -> dict:
    return next(d for _, d in p.graph.nodes(data=True) if d.get("kind") == "op")["attrs"]


TRAIN_BN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        x = self.bn(self.conv(x))
        return x - torch.mean(x, dim=(2, 3), keepdim=True)


def get_inputs():
    return [torch.randn(4, 3, 9, 9)]


def get_init_inputs():
    return []
"""


def test_train_batch_norm_multi_dim_and_single_element_reductions_and_layer_norm_verify(vpool):
    problems = [
        _problem("batch_norm", 1, attrs={"training": (True,)}, ranks=(4,)),
        _problem("batch_norm", 2, attrs={"training": (True,)}, ranks=(2,)),
        _problem("sum", 0, structural={"reduce_dims": (2,), "keepdim": (True,)}, ranks=(4,)),
        _problem("var", 1, structural={"reduce_dims": (3,), "keepdim": (False,)}, ranks=(3,)),
        _problem("amax", 2, structural={"reduce_dims": (4,), "keepdim": (False,)}, ranks=(4,)),  # to a scalar
        _problem("logsumexp", 0, constraints=("R == 1",), ranks=(3,)),
        _problem("layer_norm", 0, structural={"norm_dims": (3,)}, ranks=(4,)),
        _problem("layer_norm", 1, structural={"norm_dims": (2,)}, ranks=(3,)),
    ]
    bn = problems[0]
    assert _attrs(bn)["training"] and bn.input_shapes[0][0] > 1 and "training=True" in bn.source
    assert isinstance(_attrs(problems[2])["dim"], list) and problems[4].output_shapes == [[]]
    assert math.prod(problems[5].input_shapes[0][d] for d in [_attrs(problems[5])["dim"]]) == 1
    assert _attrs(problems[6])["norm_dims"] == 3 and "nn.LayerNorm((" in problems[6].source
    sources = [lower(p).source for p in problems]
    assert "x0.movedim(1, 0)" in sources[0]   # each channel a row of N x H x W values
    _, bad = verify_all(vpool, problems, sources)
    assert not bad, "\n".join(bad)


def test_train_batch_norm_is_not_eval_mode(vpool):
    """Eval mode's lowering (running statistics) of the same module fails against train mode."""
    train = _problem("batch_norm", 1, attrs={"training": (True,)}, ranks=(4,))
    g = train.graph.copy()
    node = next(n for n, d in g.nodes(data=True) if d.get("kind") == "op")
    g.nodes[node]["attrs"] = {**g.nodes[node]["attrs"], "training": False}
    m = "self.batch_norm_0"
    as_eval = dataclasses.replace(train, graph=g, source=train.source.replace(
        "None, None, ", f"{m}.running_mean, {m}.running_var, ").replace("training=True", "training=False"))
    verdicts = vpool.verify_many([(train, lower(train).source), (train, lower(as_eval).source)])
    assert [v.status for v in verdicts] == ["pass", "wrong_output"], [v.reason[:200] for v in verdicts]


def test_a_users_train_mode_batch_norm_traces_and_verifies(vpool):
    traced = trace_source(TRAIN_BN)
    assert traced.ops[:2] == ["conv2d", "batch_norm"] and traced.graph.nodes["y1"]["attrs"] == {"training": True}
    candidate = lower_source(dataclasses.make_dataclass("P", ["source"])(TRAIN_BN)).source
    verdict = vpool.verify_many([(TRAIN_BN, candidate)])[0]
    assert verdict.status == "pass", verdict.reason[:300]


def test_group_norm_with_512_groups_lowers_and_verifies(vpool):
    # the cpu twin of a gpu GroupNorm(512, C) draw: 512 channels, one per group
    _, small = group_norm_512(seed=1)
    assert _attrs(small) == {"groups": 512} and small.input_shapes[0][1] == 512
    _, bad = verify_all(vpool, [small], [lower(small).source])
    assert not bad, "\n".join(bad)
