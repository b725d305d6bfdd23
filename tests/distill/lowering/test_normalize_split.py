"""Few long rows of a softmax-like or norm op are split across programs (kernels/split.py): a chunk
statistics kernel, then a write kernel that combines the chunks' statistics in a fixed order and
writes its own chunk. Each statistics kind is covered: (max, sum exp) for softmax, log_softmax and
softmin, the sum of squares for l2_normalize and rms_norm, (mean, M2) for layer, instance, group and
train-mode batch norm. The modules run in-process on chosen inputs (large magnitudes, -inf chunks,
resized tensors) against the reference, and through the real verifier."""
from __future__ import annotations

import dataclasses
import re
import types

import pytest
import torch

import synth
from distill.lowering import lower
from distill.lowering.selfcheck import build
from distill.lowering.trace import lower_source
from synth.profiles import load_profile
from tests.distill.lowering.conftest import verify_all

# 40000 > 2 * 16384 elements in a row: 3 chunks of CHUNK = 14336 (a multiple of BLOCK_R = 1024), the
# last one 11328 long, so its last tiles are wholly past the row's end
DIMS = (2, 3, 40000)
CHUNK = 14336
# (ops, dims, seed) -> the drawn program, pinned by the asserts on shapes below
CASES = {
    "softmax": (["softmax"], DIMS, 1),              # [3, 40000], dim=1: 3 rows, a 4-row block
    "log_softmax": (["log_softmax", "div"], DIMS, 2),  # [40000]: a div by 3.0 fused into the loads
    "softmin": (["softmin"], DIMS, 2),              # [2, 40000, 2], dim=1: strided rows
    "l2_normalize": (["l2_normalize"], DIMS, 1),    # [3, 40000]
    "layer_norm": (["layer_norm"], DIMS, 3),        # LayerNorm((3, 40000)): one row of 120000, weight, bias
    "instance_norm": (["instance_norm"], (1, 2, 40000), 5),  # [1, 2, 1, 40000]: 2 rows of 40000
}
MORE = {"rms_norm": (["rms_norm"], DIMS, 2), "group_norm": (["group_norm"], DIMS, 3),
        "batch_norm": (["batch_norm"], DIMS, 3)}
SHAPES = {"softmax": [3, 40000], "log_softmax": [40000], "softmin": [2, 40000, 2], "l2_normalize": [3, 40000],
          "layer_norm": [3, 40000], "instance_norm": [1, 2, 1, 40000]}
# what the bench measured: log_softmax over one 1-D tensor, then a div (the epilogue)
LOG_SOFTMAX_DIV = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log_softmax(x, dim=0) / 3.0


def get_inputs():
    return [torch.randn(40000)]


def get_init_inputs():
    return []
"""


def _problem(ops: list[str], dims: tuple[int, ...], seed: int):
    config = load_profile("cpu").config()
    config = dataclasses.replace(config, dims={"default": dims}, max_elements=max(config.max_elements, 4 * max(dims)))
    return synth.sample(1, level=len(ops), seed=seed, ops=ops, config=config)[0]


@pytest.fixture(scope="module")
def lowered() -> dict:
    out = {}
    for key, (ops, dims, seed) in {**CASES, **MORE}.items():
        p = _problem(ops, dims, seed)
        out[key] = (p, lower(p).source)
    traced = types.SimpleNamespace(source=LOG_SOFTMAX_DIV, problem_id="log_softmax_div")
    out["log_softmax_div"] = (traced, lower_source(traced).source)
    return out


def _split(src: str) -> bool:
    launches = re.findall(r"(\w+_kernel)\[", src)
    return len(launches) == 2 and launches[0].endswith("_partial_kernel")


def _run(case: tuple, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(reference, lowered) outputs on `inputs`, the modules built under one seed (same weights)."""
    p, src = case
    ref, new, _ = build(p.source, src, "cpu")
    with torch.no_grad():
        return ref(*inputs), new(*inputs)


def _close(got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5) -> None:
    torch.testing.assert_close(got, want, rtol=1e-4, atol=atol, equal_nan=True)


def test_split_taken_for_few_long_rows_only(lowered):
    for key, shape in SHAPES.items():
        p, src = lowered[key]
        assert p.input_shapes[0] == shape, (key, p.input_shapes)
        assert _split(src), key
        assert "SPLIT = " in src and "tl.atomic" not in src and "device.type" not in src, key
    assert all(_split(src) for _, src in (lowered[k] for k in (*MORE, "log_softmax_div")))
    # many short rows (the cpu profile's sizes): one kernel, each program owns whole rows
    for ops in (["softmax"], ["layer_norm"], ["l2_normalize"], ["softmin"]):
        src = lower(synth.sample(1, level=1, seed=1, ops=ops)[0]).source
        assert "_partial_kernel" not in src and "SPLIT" not in src, ops


def test_split_modules_match_pytorch(lowered):
    torch.manual_seed(0)
    for key in (*SHAPES, "log_softmax_div"):
        p, _ = lowered[key]
        inputs = [torch.randn(s) for s in p.input_shapes] if key in SHAPES else [torch.randn(40000)]
        want, got = _run(lowered[key], inputs)
        _close(got, want)


def test_split_softmax_family_large_values_and_inf_chunks(lowered):
    """Values near 100 (exp overflows without the max shift); in one row a whole chunk is -inf (its
    max is -inf: no exp(-inf + inf)), another row is -inf throughout (NaN, as in PyTorch); the
    softmax's fourth row slot is past n_rows, so each of its programs holds a masked row."""
    torch.manual_seed(1)
    x = 100.0 + torch.randn(3, 40000)
    x[1, CHUNK:2 * CHUNK] = float("-inf")
    x[2] = float("-inf")
    want, got = _run(lowered["softmax"], [x])
    assert torch.isfinite(got[:2]).all() and (got[1, CHUNK:2 * CHUNK] == 0).all()
    _close(got, want)
    # softmin negates: the values whose negation is large, and a chunk of +inf (exp(-inf) terms)
    x = -100.0 - torch.randn(2, 40000, 2)
    x[0, CHUNK:2 * CHUNK, 1] = float("inf")
    want, got = _run(lowered["softmin"], [x])
    assert torch.isfinite(got).all()
    _close(got, want)
    for key in ("log_softmax", "log_softmax_div"):
        x = 100.0 + torch.randn(40000)
        x[:CHUNK] = float("-inf")  # the first chunk: the row's max comes from a later one
        want, got = _run(lowered[key], [x])
        assert torch.isfinite(got[CHUNK:]).all()
        _close(got, want)


def test_split_norms_large_magnitude(lowered):
    """Means around 1000 with a step between chunks: E[x^2] - E[x]^2 would cancel, the chunks'
    two-pass (mean, M2) combined by Chan's formula does not."""
    torch.manual_seed(2)
    for key in ("layer_norm", "instance_norm"):
        p, _ = lowered[key]
        x = 1000.0 + torch.randn(p.input_shapes[0])
        x[..., CHUNK:] += 5.0
        want, got = _run(lowered[key], [x])
        _close(got, want, atol=2e-4)  # x itself carries 6e-5 of rounding at 1000
    x = 1e15 * torch.randn(3, 40000)  # squares near 1e30, their sum near 4e34: no overflow in fp32
    x[1, CHUNK:2 * CHUNK] = 0.0
    want, got = _run(lowered["l2_normalize"], [x])
    _close(got, want)


def test_split_module_correct_on_resized_inputs(lowered):
    """The chunk count is computed in forward from the sizes read at run time: more chunks (70001
    elements: 5), one chunk (1000 elements), more rows."""
    torch.manual_seed(3)
    resized = {"softmax": [(5, 70001), (2, 1000)], "softmin": [(3, 50001, 3)], "l2_normalize": [(4, 33000)],
               "log_softmax": [(90001,)], "instance_norm": [(2, 3, 1, 50000)]}
    for key, shapes in resized.items():
        for shape in shapes:
            want, got = _run(lowered[key], [torch.randn(shape)])
            assert got.shape == want.shape, (key, shape)
            _close(got, want)


def test_whole_rows_start_with_an_inf_tile():
    """Rows not split: a first BLOCK_R tile of -inf leaves the running max at -inf, and the online
    sum must stay 0 there, not exp(-inf + inf) = NaN."""
    p = _problem(["softmax"], (3, 4000), 1)
    src = lower(p).source
    assert not _split(src) and p.input_shapes == [[3, 4000]], p.input_shapes
    x = torch.randn(3, 4000)
    x[:, :2048] = float("-inf")
    want, got = _run((p, src), [x])
    assert torch.isfinite(got).all()
    _close(got, want)


def test_split_modules_verify(vpool, lowered):
    keys = [*CASES, *MORE]
    _, bad = verify_all(vpool, [lowered[k][0] for k in keys], [lowered[k][1] for k in keys])
    assert not bad, "\n".join(bad)
