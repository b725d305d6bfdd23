"""Users' KernelBench modules: traced into synth's operator graph, lowered, verified on the CPU."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from distill.external import load_external
from distill.lowering.trace import TraceError, lower_source, trace_source
from distill.teacher import TeacherRequest, make_teacher

FIXTURES = Path(__file__).parents[2] / "fixtures" / "external"

# conv, a (C, 1, 1) parameter added, relu, a mean over two dims (a chain of two one-dim means)
CONV_BIAS_MEAN = '''
import torch
import torch.nn as nn

batch_size, in_channels, out_channels, size = 2, 3, 4, 8


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = torch.relu(self.conv(x) + self.bias)
        return torch.mean(x, dim=[2, 3], keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels, 3, (out_channels, 1, 1)]
'''

# (3-D @ 2-D) matmul, `1 - x`, `x ** 2`, softmax, torch.max(...).values: calls with no single catalog op
BATCHED_SCORES = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        s = torch.softmax(1.0 - torch.matmul(a, b) ** 2, dim=-1)
        return torch.max(s, dim=1).values * 0.5


def get_inputs():
    return [torch.randn(2, 5, 6), torch.randn(6, 7)]


def get_init_inputs():
    return []
'''

# torch.einsum in one of the catalog's patterns, then LayerNorm over the last two dims
EINSUM_LAYERNORM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, j, k):
        super().__init__()
        self.norm = nn.LayerNorm((j, k))

    def forward(self, a, b):
        return self.norm(torch.einsum("bij,bjk->bik", a, b))


def get_inputs():
    return [torch.randn(2, 4, 3), torch.randn(2, 3, 5)]


def get_init_inputs():
    return [4, 5]
'''

UNMAPPABLE = BATCHED_SCORES.replace("torch.softmax(", "torch.lgamma(").replace(", dim=-1)", ")")


def test_a_module_traces_into_synths_graph_with_its_own_parameters():
    traced = trace_source(CONV_BIAS_MEAN)
    assert traced.ops == ["conv2d", "add", "relu", "mean", "mean"]
    g = traced.graph
    conv = g.nodes["y0"]["attrs"]
    assert g.nodes["x0"]["shape"] == [2, 3, 8, 8] and conv["out_channels"] == 4
    assert conv.get("padding", conv.get("padding_h")) == 1  # one value, or one per axis
    assert g.nodes["y1"]["attrs"] == {"operand": "param", "pshape": [4, 1, 1]}
    assert [g.nodes["y3"]["attrs"]["dim"], g.nodes["y4"]["attrs"]["dim"]] == [3, 2]
    assert traced.outputs == ["y4"] and g.nodes["y4"]["output"] and g.nodes["y4"]["shape"] == [2, 4, 1, 1]
    assert traced.params == {"y0": {"weight": "self.conv.weight", "bias": "self.conv.bias"},
                             "y1": {"operand": "self.bias"}}
    assert trace_source(BATCHED_SCORES).ops == ["reshape", "matmul", "reshape", "square", "neg", "add",
                                                "softmax", "amax", "mul"]
    traced = trace_source(EINSUM_LAYERNORM)
    assert traced.ops == ["einsum_bmm", "layer_norm"] and traced.graph.nodes["y1"]["attrs"] == {"norm_dims": 2}
    with pytest.raises(TraceError, match="bij,bjk->bik"):   # an equation no catalog op computes names the ones that do
        trace_source("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                     "    def forward(self, a, b):\n        return torch.einsum('ij,kj->ik', a, b)\n\n"
                     "def get_inputs():\n    return [torch.randn(3, 4), torch.randn(5, 4)]\n\n"
                     "def get_init_inputs():\n    return []\n")


def test_traced_modules_lower_and_verify(vpool):
    sources = [CONV_BIAS_MEAN, BATCHED_SCORES, EINSUM_LAYERNORM, (FIXTURES / "gelu_scale.py").read_text()]
    candidates = [lower_source(dataclasses.make_dataclass("P", ["source"])(s)).source for s in sources]
    assert "def __init__(self, in_channels, out_channels, kernel_size, bias_shape):" in candidates[0]
    assert "self.conv.weight" in candidates[0] and "@triton.jit" in candidates[0]
    verdicts = vpool.verify_many(list(zip(sources, candidates)))
    assert [v.status for v in verdicts] == ["pass"] * 4, [v.reason[:300] for v in verdicts]


def test_traced_modules_read_their_sizes_and_pass_at_other_sizes(vpool):
    """A user's module has no recipe, yet its lowering reads its sizes from the inputs (fxsizes), so
    the same candidate passes on the verifier's module twin and on other sizes of the same program;
    a size the constructor fixes (the conv's 3 input channels) stays literal."""
    import random

    from distill.verifier.twins import module_twin

    traced = trace_source(CONV_BIAS_MEAN)
    assert traced.size_lines == ["x0_size0, _, x0_size2, x0_size3 = x0.shape"]
    assert traced.sizes["y0"] == (2, 4, 8, 8) and str(traced.sizes["y0"][2]) == "x0_size2"
    assert traced.graph.nodes["y0"]["shape"] == [2, 4, 8, 8] and "x0_size" not in traced.graph.nodes["y0"]["label"]
    conv = lower_source(dataclasses.make_dataclass("P", ["source"])(CONV_BIAS_MEAN)).source
    twin, changed = module_twin(CONV_BIAS_MEAN, random.Random(3))
    assert list(changed) == ["size"]  # batch_size 2 is kept (broadcasting); in_channels feeds the constructor
    scores = lower_source(dataclasses.make_dataclass("P", ["source"])(BATCHED_SCORES)).source
    other = BATCHED_SCORES.replace("torch.randn(2, 5, 6), torch.randn(6, 7)", "torch.randn(3, 9, 4), torch.randn(4, 11)")
    verdicts = vpool.verify_many([(twin, conv), (other, scores)])
    assert [v.status for v in verdicts] == ["pass"] * 2, [v.reason[:300] for v in verdicts]


MAXPOOL1D = '''
import torch
import torch.nn as nn

batch_size, features, length = 4, 6, 32


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding, dilation):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride, padding, dilation)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, features, length)]


def get_init_inputs():
    return [8, 1, 4, 3]
'''


def test_a_1d_max_pool_reads_its_length(vpool):
    """torch.max_pool1d's shape function pins the length it was traced at (KernelBench level 1 #41):
    fxsizes follows it as a 2-D pool of unit height, so the pooled length is an expression of the
    input's and the lowered kernel passes at another length."""
    traced = trace_source(MAXPOOL1D)
    assert traced.size_lines == ["x0_size0, x0_size1, x0_size2 = x0.shape"]
    assert traced.sizes["y0"][2] == traced.sizes["x0"][2] - 13 and str(traced.sizes["x0"][2]) == "x0_size2"
    pool = lower_source(dataclasses.make_dataclass("P", ["source"])(MAXPOOL1D)).source
    other = MAXPOOL1D.replace("4, 6, 32", "3, 5, 21")
    verdicts = vpool.verify_many([(MAXPOOL1D, pool), (other, pool)])
    assert [v.status for v in verdicts] == ["pass"] * 2, [v.reason[:300] for v in verdicts]


def test_an_unmappable_call_is_an_error_naming_it():
    with pytest.raises(TraceError, match="lgamma"):
        trace_source(UNMAPPABLE)
    with pytest.raises(TraceError, match="defines no Model"):
        trace_source("import torch\n")


def test_the_lowering_teacher_answers_a_users_problem(tmp_path):
    (tmp_path / "scores.py").write_text(BATCHED_SCORES)
    (tmp_path / "odd.py").write_text(UNMAPPABLE)
    odd, good = load_external(tmp_path)  # sorted by file name
    out = make_teacher("lowering").generate([TeacherRequest(good, [], 0, (0,), 1), TeacherRequest(odd, [], 0, (0,), 2)])
    assert out[0].finish_reason == "stop" and "class ModelNew" in out[0].text
    assert out[1].finish_reason == "error" and "lowering failed" in out[1].error and "lgamma" in out[1].error


@pytest.mark.slow  # screens and verifies in sandboxed processes
def test_distill_lowers_and_verifies_a_folder_of_user_problems(tmp_path):
    import pyarrow.parquet as pq

    from pipelines.cli import main

    src = tmp_path / "mine"
    src.mkdir()
    (src / "conv_bias_mean.py").write_text(CONV_BIAS_MEAN)
    code = main(["distill", "--problems", str(src), "--teacher", "lowering", "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 0
    rows = pq.read_table(tmp_path / "run" / "samples.parquet").to_pylist()
    assert [(r["problem_name"], r["data_source"], r["status"]) for r in rows] == [("conv_bias_mean", "mine", "pass")], \
        [r.get("reason") for r in rows]
