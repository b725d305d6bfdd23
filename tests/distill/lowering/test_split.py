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


@pytest.mark.parametrize("op", ["l1_norm", "var", "argmax"])
def test_a_whole_tensor_reduced_to_one_value_walks_4096_values_a_step(op):
    """A split reduction of a whole tensor gives every program one row: its tile is 4,096 of that row's
    values at 8 warps, not [1, 1024] at 4 (an amin of 94.9M values ran 0.72x eager on the H200). Right at
    the drawn 40,000 values (not a multiple of 4,096) and at other lengths, from the same module."""
    from distill.lowering.selfcheck import check

    p = _problem([op], (40000,))
    src = lower(p).source
    launch = src[src.index("def forward"):]
    first = next(ln for ln in launch.splitlines() if "_partial_kernel[" in ln)
    assert "num_warps=8" in first and "4096)" in launch, launch
    for n in (40000, 70001, 5000):
        res = check(p.source.replace(f"D = {p.input_shapes[0][0]}", f"D = {n}"), src)
        assert res.ok, f"{op} at {n}: {res.message}"
