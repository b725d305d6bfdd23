"""Few long rows are split across programs (kernels/split.py): a whole-vector norm, a loss over a
whole tensor, a scan along a long dim and a matrix-vector product with a long K each lower to a
chunk kernel plus a combining kernel, and pass the real verifier."""
from __future__ import annotations

import dataclasses
import re

import pytest

import synth
from distill.lowering import lower
from synth.profiles import load_profile
from tests.distill.lowering.conftest import verify_all

# (ops, dims to draw from): 40000 > 2 * 16384 elements in one row, the smallest split (mv's K too: it is
# a row reduction, kernels/gemv.py)
CASES = [(["l1_norm"], (40000,)), (["var"], (40000,)), (["argmax"], (40000,)), (["cumsum_reverse"], (40000,)),
         (["hinge_embedding_loss"], (40000,)), (["mv"], (3, 40000))]
# tl.associative_scan over 40000 elements takes the interpreter 3-9 s per forward
SLOW = [(["logcumsumexp"], (40000,)), (["cummax"], (40000,))]


def _problem(ops: list[str], dims: tuple[int, ...]):
    config = load_profile("cpu").config()
    config = dataclasses.replace(config, dims={"default": dims}, max_elements=max(config.max_elements, 4 * max(dims)))
    return synth.sample(1, level=len(ops), seed=1, ops=ops, config=config)[0]


def _check(vpool, cases) -> None:
    problems = [_problem(*c) for c in cases]
    sources = [lower(p).source for p in problems]
    for p, src in zip(problems, sources):
        launches = re.findall(r"(\w+_kernel)\[", src)
        assert any(k.endswith("_partial_kernel") for k in launches) and len(launches) == 2, (p.ops, launches)
        assert "SPLIT = " in src and "tl.atomic" not in src, p.ops
    _, bad = verify_all(vpool, problems, sources)
    assert not bad, "\n".join(bad)


def test_long_rows_split_and_verify(vpool):
    _check(vpool, CASES)


@pytest.mark.slow
def test_long_scans_with_a_combine_split_and_verify(vpool):
    _check(vpool, SLOW)


def test_mv_runs_at_other_sizes():
    """mv's row reduction (kernels/gemv.py) computes its tiles, SPLIT and CHUNK in forward: lowered with a
    split K, the same module matches PyTorch with fewer columns (SPLIT = 1) and with more rows."""
    from distill.lowering.selfcheck import check

    p = _problem(["mv"], (3, 40000))
    src = lower(p).source
    assert "mv_partial_kernel[" in src
    m, k = p.input_shapes[0]
    for rows, cols in ((m, 500), (70, k // 2)):
        resized = p.source
        for name, size in (("M", rows), ("K", cols)):
            resized = re.sub(rf"^{name} = \d+$", f"{name} = {size}", resized, flags=re.M)
        assert resized != p.source
        res = check(resized, src)
        assert res.ok, f"({rows}, {cols}): {res.message}"
