"""Blocked rows (issue 34): a reduction, normalisation or scan along a dim that is not the last maps its
rows blocked (rowspace.Rows' `run_dims`). A program takes one index of the dims before the contiguous run
of rows (`row_outer`) and BLOCK_ROWS consecutive positions of the run (`inner`), and a leaf laid out
along the run is addressed by `inner` (or by `rows`, when no dim comes before the run), with no `%` on
it: Triton sees each reduced position's load as BLOCK_ROWS contiguous elements. The flat mapping's
`row1 = rows % row_size1` hid that, and Triton's coalescing pass laid the threads along the reduced dim
(std over dim 1 of [4871, 19, 3444]: 0.30x eager on an H200).

Every form matches PyTorch at odd sizes, at other sizes (the module reads its sizes), split or not,
with fused operands broadcast along the run; sampled problems pass the verifier and their mutants are
rejected."""
from __future__ import annotations

import re
import types

import pytest
import torch

import synth
from distill.lowering import lower
from distill.lowering.mutants import mutants
from distill.lowering.selfcheck import build
from distill.lowering.trace import lower_source
from tests.distill.lowering.conftest import verify_all

SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        return {expr}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
"""

# expression, input shapes, other sizes of the first input (the rest keep theirs), and how the rows map:
# "outer" (row_outer and inner), "run" (no dim before the run: the run's dims addressed by `rows`)
CASES = {
    "sum_dim1": ("torch.sum(x, dim=1)", ["5, 7, 37"], [(4, 9, 70), (1, 3, 17)], "outer"),
    "mean_dim1_keepdim": ("torch.mean(x, dim=1, keepdim=True)", ["5, 7, 37"], [(2, 20, 45)], "outer"),
    "std_dim1": ("torch.std(x, dim=1)", ["5, 7, 37"], [(4, 9, 70), (2, 100, 300)], "outer"),
    "var_dim0": ("torch.var(x, dim=0)", ["5, 7, 37"], [(9, 4, 70)], "run"),
    "amax_dim1": ("torch.amax(x, dim=1)", ["5, 7, 37"], [(3, 11, 19)], "outer"),
    "argmax_dim1": ("torch.argmax(x, dim=1)", ["5, 7, 37"], [(3, 11, 19)], "outer"),
    "argmin_dim0": ("torch.argmin(x, dim=0)", ["5, 7, 37"], [(9, 4, 70)], "run"),
    "prod_dim1": ("torch.prod(x, dim=1)", ["5, 7, 37"], [(3, 11, 19)], "outer"),
    "logsumexp_dim1": ("torch.logsumexp(x, dim=1)", ["5, 7, 37"], [(3, 11, 19)], "outer"),
    "sum_dim1_of_4d": ("torch.sum(x, dim=1)", ["3, 5, 6, 7"], [(2, 9, 5, 11)], "outer"),
    "softmax_dim1": ("torch.softmax(x, dim=1)", ["5, 7, 37"], [(4, 9, 70), (1, 3, 17)], "outer"),
    "softmax_dim0": ("torch.softmax(x, dim=0)", ["5, 7, 37"], [(9, 4, 70)], "run"),
    "log_softmax_dim1": ("torch.log_softmax(x, dim=1)", ["5, 7, 37"], [(3, 70, 19)], "outer"),
    "softmin_dim1_of_4d": ("F.softmin(x, dim=1)", ["3, 5, 6, 7"], [(2, 3, 9, 11)], "outer"),
    "cumsum_dim1": ("torch.cumsum(x, dim=1)", ["5, 7, 37"], [(4, 9, 70), (2, 100, 30)], "outer"),
    "cumsum_dim0": ("torch.cumsum(x, dim=0)", ["5, 7, 37"], [(9, 4, 70)], "run"),
    "cumprod_dim1": ("torch.cumprod(x, dim=1)", ["5, 7, 37"], [(3, 11, 19)], "outer"),
    "logcumsumexp_dim1": ("torch.logcumsumexp(x, dim=1)", ["5, 7, 37"], [(3, 11, 19)], "outer"),
    # fused operands broadcast along the run: per outer index, along one dim of the run only, a 1-D one
    "softmax_scaled_per_batch": ("torch.softmax(x * y, dim=1)", ["3, 5, 6, 7", "3, 1, 1, 1"], [(3, 9, 5, 11)],
                                 "outer"),
    "softmax_plus_row_bias": ("torch.softmax(x + y, dim=1)", ["3, 5, 6, 7", "6, 1"], [], "outer"),
    "softmax_plus_last_bias": ("torch.softmax(x + y, dim=1)", ["3, 5, 6, 7", "7"], [], "outer"),
    "sum_then_bias": ("torch.sum(x, dim=1) + y", ["5, 7, 37", "5, 1"], [], "outer"),
}


def _lowered(expr: str, shapes: list[str], key: str) -> tuple[str, str]:
    args = ", ".join(["x", "y"][:len(shapes)])
    src = SOURCE.format(expr=expr, args=args, inputs=", ".join(f"torch.randn({s})" for s in shapes))
    return src, lower_source(types.SimpleNamespace(source=src, problem_id=key)).source


def _kernels(src: str) -> list[str]:
    return [k.split("\n\n\n")[0] for k in src.split("@triton.jit")[1:]]


@pytest.mark.parametrize("key", list(CASES))
def test_blocked_rows_match_pytorch_at_any_size(key):
    expr, shapes, others, form = CASES[key]
    src, new_src = _lowered(expr, shapes, key)
    kernel = _kernels(new_src)[-1]
    if form == "outer":
        assert "row_outer = tl.program_id(0) // row_blocks" in kernel, kernel
        assert "inner = (tl.program_id(0) % row_blocks) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)" in kernel
        assert "row_mask = inner < n_inner" in kernel
    ref, new, mod = build(src, new_src, "cpu")
    inputs = mod.get_inputs()
    sizes = [tuple(x.shape) for x in inputs[:1]] + [tuple(o) for o in others]
    for size in sizes:
        xs = [torch.randn(size) * 2 + 0.5] + inputs[1:]
        with torch.no_grad():
            got, want = new(*xs), ref(*xs)
        torch.testing.assert_close(got.float(), want.float(), rtol=1e-5, atol=1e-5, equal_nan=True,
                                   msg=lambda m, size=size: f"{key} at {size}: {m}")


@pytest.mark.parametrize("key", ["std_dim1", "softmax_dim1", "cumsum_dim1", "sum_dim1_of_4d", "var_dim0",
                                 "softmax_dim0", "cumsum_dim0", "softmin_dim1_of_4d"])
def test_the_run_is_addressed_contiguously(key):
    """The main operand's load and a strided store walk the run through one contiguous coordinate
    (`inner`, or `rows` when no dim comes before the run), never through `%` or `//` of it."""
    expr, shapes, _, form = CASES[key]
    _, new_src = _lowered(expr, shapes, key)
    kernel = _kernels(new_src)[-1]
    run = "inner" if form == "outer" else "rows"
    assert not re.search(rf"\b{run} (%|//)", kernel), kernel
    assert not re.search(r"\brows (%|//)", kernel), kernel
    assert re.search(rf"tl\.load\(x0_ptr \+ (row_outer \* x0_stride0 \+ )?{run}\[:, None\] \* x0_stride\d\b", kernel), kernel
    if "cumsum" in key or "soft" in key:  # the output has the input's layout: stored along the run too
        assert re.search(rf"tl\.store\(out_ptr \+ (row_outer \* out_stride0 \+ )?{run}\[:, None\] \* out_stride\d\b",
                         kernel), kernel


def test_an_operand_not_laid_out_along_the_run_keeps_its_coordinates():
    """y (one value per last dim, broadcast over the rest) is not one run over (H, W): it is read through
    the W coordinate (`inner % row_size2`), while x is read through `inner`."""
    expr, shapes, _, _ = CASES["softmax_plus_last_bias"]
    _, new_src = _lowered(expr, shapes, "bias")
    kernel = _kernels(new_src)[-1]
    assert "row2 = inner % row_size2" in kernel
    assert "x0_ptr + row_outer * x0_stride0 + inner[:, None] * x0_stride2" in kernel
    assert "x1_ptr + tl.broadcast_to(row2[:, None] * x1_stride2, (BLOCK_ROWS, BLOCK_R))" in kernel


def test_last_dim_and_one_row_dim_keep_the_flat_rows():
    """Rows already contiguous as one dim, and reductions over the last dim, are not remapped."""
    for expr, shape in (("torch.sum(x, dim=0)", "300, 40"), ("torch.softmax(x, dim=-1)", "5, 7, 37"),
                        ("torch.cumsum(x, dim=2)", "5, 7, 37")):
        _, new_src = _lowered(expr, [shape], "flat")
        assert "row_outer" not in new_src and "n_inner" not in new_src, new_src


@pytest.mark.parametrize("expr", ["torch.sum(x, dim=1)", "torch.std(x, dim=1)", "torch.cumsum(x, dim=1)"])
def test_blocked_rows_split_few_long_rows(expr):
    """Few long rows of a reduction or scan split (a chunk kernel, then a combining or scanning one), the
    chunk kernel over the input mapped blocked, and match PyTorch at their size and another. (A
    normalisation's split form keeps the [4, 1024] tile and flat rows: rowspace.outer_tiles.) Sizes: the
    fewest values that split (a reduced dim past split.MIN_CHUNK, 2 chunks, the last one masked) over a
    run of rowspace.OUTER_MIN_RUN; at [2, 33000, 20] and [3, 34000, 17] the cumsum took 38 s of a CI lane."""
    src, new_src = _lowered(expr, ["2, 16500, 16"], "split")
    assert "_partial_kernel" in new_src
    first = _kernels(new_src)[0]
    assert "row_outer" in first and "SPLIT)" in new_src, first
    ref, new, _ = build(src, new_src, "cpu")
    for size in ((2, 16500, 16), (3, 17000, 17)):
        x = torch.randn(size) + 1
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def sampled():
    # level-1 problems whose op runs along an inner dim, each lowered to blocked rows
    chosen = [synth.sample(1, level=1, seed=s, ops=[op])[0]
              for op, s in (("std", 27), ("log_softmax", 0), ("cumsum", 5), ("argmax", 2))]
    for p in chosen:
        assert "row_outer" in lower(p).source, p.ops
    return chosen


def test_sampled_blocked_problems_pass_the_verifier(vpool, sampled):
    _, bad = verify_all(vpool, sampled, [lower(p).source for p in sampled])
    assert not bad, bad


def test_mutants_of_blocked_kernels_are_rejected(vpool, sampled):
    items = [(p, m) for p in sampled for m in mutants(p, lower(p))]
    assert {"drop_mask", "off_by_one", "first_block"} <= {m.kind for _, m in items}
    verdicts = vpool.verify_many([(p, m.source) for p, m in items])
    wrong = [f"{m.kind} on {p.ops}: {v.status}" for (p, m), v in zip(items, verdicts)
             if v.status not in (m.expected, *m.also_ok)]
    assert not wrong, wrong
