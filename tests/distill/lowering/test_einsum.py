"""The einsum patterns (issue 15): batched matmul, outer product, 4-D tensor times matrix, bilinear
form. They are anchors of the anchor_epilogue shape, and lower to the matmul family (the bilinear
form to its own one-kernel family)."""
from __future__ import annotations

import synth
from distill.lowering import lower
from synth.sampler import resolve_ops
from synth.shapes import split_space
from tests.distill.lowering.conftest import verify_all

EINSUM = ["einsum_bmm", "einsum_outer", "einsum_tensor_matrix", "einsum_bilinear"]


def test_einsum_ops_render_lower_and_verify_alone_and_with_an_epilogue(vpool):
    assert set(EINSUM) <= {a.name for a in split_space(resolve_ops())[0]}
    problems = [synth.sample(1, level=1, seed=3, ops=[op])[0] for op in EINSUM]
    assert [p.source.count("torch.einsum(") for p in problems] == [1, 1, 1, 1]
    assert 'torch.einsum("bi,oij,bj->bo", x0, x1, x0)' in problems[3].source  # x^T W x: one tensor on both sides
    # a contracted dim of 1 (an outer product in disguise) is the smallest case the kernel meets
    k1 = [p for p in synth.sample(8, level=1, seed=2, ops=["einsum_tensor_matrix"]) if p.input_shapes[-1][0] == 1]
    assert k1
    problems += k1[:1]
    problems += synth.sample(2, level=3, seed=5, ops=[*EINSUM, "relu", "add", "sum"], shape="anchor_epilogue")
    _, bad = verify_all(vpool, problems, [lower(p).source for p in problems])
    assert not bad, "\n".join(bad)
