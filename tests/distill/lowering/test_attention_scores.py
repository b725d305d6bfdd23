"""Issue 34: attention with a head or value dim past 128 as two kernels, the scores written once.

On an H200 the flash forms at such heads ran far behind eager: sdpa at L 19, S 38, E 152, V 256 took
5.5 ms against 1.22 (one program holding the whole value dim), and a problem with L 304, S 108, E 2048,
V 1722 8.8 ms against 1.1 (14 value slices, each computing every score again). The scores form
(kernels/attention.py `scores_form`) writes the scaled scores and each row's max and exp-sum, then
reads them back through the softmax into the product with the values. Checked here against torch
under the interpreter, at the drawn sizes' twins and resized, causal or not, with an epilogue and a
fused operand; the flash forms keep attentions whose scores outgrow their inputs."""
from __future__ import annotations

import re
import types

import pytest

from distill.lowering.kernels.attention import HEAD_MAX, scores_form
from distill.lowering.selfcheck import check
from distill.lowering.trace import lower_source
from tests.distill.lowering.conftest import sdpa_source as _src

def _lower(src: str) -> str:
    return lower_source(types.SimpleNamespace(source=src, problem_id="issue34")).source


def test_the_rule_takes_wide_heads_whose_scores_are_no_larger_than_the_inputs():
    assert scores_form(19, 38, 152, 256)  # the H200's slow level-1 row
    assert scores_form(304, 108, 2048, 1722)  # 14 value slices in the flash form
    assert not scores_form(19, 38, 64, 64)  # within HEAD_MAX: flash
    assert not scores_form(4096, 4096, 200, 300)  # scores 16M a pair against 4.1M of inputs
    assert scores_form(4, 4, HEAD_MAX + 1, 8) and not scores_form(4, 4, HEAD_MAX, HEAD_MAX)


@pytest.mark.parametrize("causal", [False, True])
def test_issue_shape_takes_two_kernels_and_matches_torch_at_other_sizes(causal):
    src = _src(causal=causal)
    new = _lower(src)
    assert re.findall(r"(\w+_kernel)\[", new) == ["sdpa_scores_kernel", "sdpa_kernel"]
    # the scores and the row statistics are forward's own buffers, float32, sized from the inputs
    assert re.search(r"y0_scores = torch\.empty\(\(\(1\) \* \(\w+\), \w+, \w+\), device=x0\.device, dtype=torch\.float32\)", new)
    assert "num_warps=8" in new and "Short queries, wide values" not in new
    res = check(src, new)
    assert res.ok, res.message
    # one query block or several, several key blocks, a value dim of one slice or many, a narrow head
    for sizes in ({"l": 7, "v": 1100}, {"l": 70, "s": 100}, {"e": 40, "v": 64}, {"l": 5, "s": 3}):
        res = check(_src(causal=causal, **sizes), new)
        assert res.ok, (sizes, res.message)


def test_an_epilogue_and_a_fused_operand_ride_along():
    expr = "torch.sign(F.scaled_dot_product_attention(torch.sin(x0), x1, x2 * 2.0)) + 1.0"
    src = _src(expr, l=9, s=21, e=130, v=40)
    new = _lower(src)
    # sign and + 1 are the values kernel's epilogue: the output is stored once
    assert re.findall(r"(\w+_kernel)\[", new)[-2:] == ["sdpa_sign_add_scores_kernel", "sdpa_sign_add_kernel"]
    res = check(src, new)
    assert res.ok, res.message
