"""Tile forms and launch settings of matrix products and attention (kernels/matmul.py, kernels/attention.py).

A product whose matrices fill a tile runs as 2-D tiles and a 2-D tl.dot, which Hopper runs as wgmma
(a batched 3-D dot compiles to mma.sync: a (32, 2048, 1448) @ (32, 1448, 64) bmm took 3.99 ms that
way against eager's 0.263 ms on an H100); many small matrices still share a program in 3-D tiles;
attention with a wide head keeps its tiles within shared memory (whole-head tiles of a 512-wide head
asked for 384 KiB, past the H100's 227 KiB). Each module runs on the CPU (TRITON_INTERPRET=1)
against PyTorch, at the size it was lowered at and resized: the tiles are computed in forward.
"""
from __future__ import annotations

import dataclasses
import re

import pytest
from triton.runtime.interpreter import InterpretedFunction

import synth
from distill.lowering import lower
from distill.lowering.kernels import attention
from distill.lowering.kernels.attention import HEAD_MAX, WIDE_V_MAX, Attention
from distill.lowering.selfcheck import check
from synth.profiles import OpTarget, load_profile

DIMS = (1, 2, 3, 4, 5, 6, 7, 8, 40, 64, 70, 200, 300, 1100)
SMEM_BUDGET = 160 * 1024  # bytes of operand tiles a program's pipelined loads may hold


def _problem(op: str, constraints: tuple[str, ...], epilogue: bool = False, seed: int = 1):
    config = load_profile("cpu").config()
    config = dataclasses.replace(config, dims={"default": DIMS}, max_elements=1 << 18, max_op_flops=1e9,
                                 op_targets={op: OpTarget(constraints=constraints)})
    if epilogue:
        return synth.sample(1, level=2, seed=seed, ops=[op, "relu"], config=config, shape="anchor_epilogue")[0]
    return synth.sample(1, level=1, seed=seed, ops=[op], config=config)[0]


def _resized(source: str, **sizes: int) -> str:
    """The reference with module-level sizes changed (the lowered module reads sizes at run time)."""
    for dim, size in sizes.items():
        source, n = re.subn(rf"^{dim} = \d+$", f"{dim} = {size}", source, flags=re.M)
        assert n == 1, (dim, source)
    return source


@pytest.fixture
def launches(monkeypatch):
    """Every kernel launch as (kernel, grid, keyword arguments), num_warps and num_stages included."""
    seen: list[tuple[str, tuple, dict]] = []
    real = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        seen.append((self.fn.__name__, grid, dict(kwargs)))
        return real(self, *args, grid=grid, warmup=warmup, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", run)
    return seen


def _kernel(source: str, name: str) -> str:
    return source.split(f"def {name}(")[1].split("\n\n\n")[0]


# matrices of at least 64 x 64 outputs: 2-D tiles (M = 70 takes a 128-row tile)
LARGE = {
    "bmm": ("B == 2", "M == 70", "K == 40", "N == 64"),
    "matmul": ("M == 64", "K == 70", "N == 40"),
    "linear": ("M == 40", "K == 64", "out_features == 70", "bias == 1"),
    "addmm": ("M == 64", "K == 40", "N == 70"),
}


@pytest.mark.parametrize("op", list(LARGE))
def test_products_of_large_matrices_take_2d_tiles_and_match_torch(op, launches):
    p = _problem(op, LARGE[op], epilogue=op != "bmm")
    src = lower(p).source
    name = re.findall(r"(\w+_kernel)\[", src)[0]
    body = _kernel(src, name)
    assert "acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)" in body
    # under MIN_ROWS rows of A: B is not split beforehand, and the products are fp32 FMAs (on an H200
    # 1.8-2.8x faster than tf32x3 splitting both tiles in the loop)
    assert 'acc = tl.dot(a, b, acc, input_precision="ieee")' in body and "BLOCK_B" not in src
    assert "input_precision=\"tf32" not in body
    assert "_split_kernel" not in src
    # num_warps and num_stages are launch options, not kernel parameters
    assert "num_warps" not in body.split("\n")[0] and "num_stages=3" in src
    res = check(p.source, src)
    assert res.ok, f"{op}: {res.message}"
    kw = launches[0][2]
    m, n = p.output_shapes[0][-2:]
    assert (kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"]) == (min(128, 1 << (m - 1).bit_length()),
                                                            min(128, 1 << (n - 1).bit_length()), 32)
    assert kw["num_warps"] == (8 if kw["BLOCK_M"] * kw["BLOCK_N"] >= 128 * 64 else 4) and kw["num_stages"] == 3
    assert kw["GROUP_M"] == 8


# A with MIN_ROWS rows or more: B split once into TF32 parts (kernels/tf32split.py), three TF32 products
SPLIT_B = {
    "bmm": ("B == 2", "M == 1100", "K == 40", "N == 64"),  # B differs per matrix: parts [2, 1, K, N]
    "matmul": ("M == 1100", "K == 70", "N == 40"),
    "linear": ("M == 1100", "K == 64", "out_features == 70", "bias == 1"),  # B = weight.t(), K-contiguous
    "einsum_tensor_matrix": ("J == 1100", "L == 40", "K == 8"),  # B broadcast over the batch: parts [1, 1, K, N]
}


@pytest.mark.parametrize("op", list(SPLIT_B))
def test_products_with_many_rows_split_b_once_and_match_torch(op, launches):
    p = _problem(op, SPLIT_B[op], epilogue=op != "bmm")
    src = lower(p).source
    names = re.findall(r"(\w+_kernel)\[", src)
    assert len(names) == 2 and names[0].endswith("_split_kernel"), names
    body = _kernel(src, names[1])
    assert body.count('input_precision="tf32"') == 3 and "tf32x3" not in body
    assert "b_hi = tl.load(b_hi_ptr" in body and "b_lo = tl.load(b_lo_ptr" in body
    res = check(p.source, src)
    assert res.ok, f"{op}: {res.message}"
    split, main = launches[0][2], launches[1][2]
    assert (main["BLOCK_N"], main["num_warps"]) == (max(16, min(64, 1 << (p.output_shapes[0][-1] - 1).bit_length())), 8)
    assert split["BLOCK"] == 1024
    if op == "bmm":  # and at other sizes: a larger batch, fewer rows (the split form stays correct)
        res = check(_resized(p.source, B=3, M=7, N=100), src)
        assert res.ok, res.message


def test_split_b_parts_are_exact_tf32_numbers_and_sum_to_b():
    """The split kernel's hi keeps 10 mantissa bits (a TF32 number: the tensor core's product of two is
    exact) and hi + lo is B bit for bit. The module's file is gone once it is loaded (its lines stay in
    linecache, where the interpreter reads the kernel's source at the launch below)."""
    import os

    import torch

    from distill.lowering.selfcheck import load_module

    p = _problem("matmul", SPLIT_B["matmul"])
    mod = load_module(lower(p).source, "tf_split_check")
    assert not os.path.exists(mod.__file__)
    split = next(getattr(mod, n) for n in dir(mod) if n.endswith("_split_kernel"))
    torch.manual_seed(0)
    b = torch.randn(70, 40) * torch.logspace(-20, 20, 40)  # every scale of exponent
    hi, lo = torch.empty_like(b), torch.empty_like(b)
    split[(-(-b.numel() // 1024),)](hi, lo, b, n_elements=b.numel(), x1_stride2=40, x1_stride3=1, c_size3=40, BLOCK=1024)
    assert torch.equal(hi + lo, b)
    assert int((hi.view(torch.int32) & 0x1FFF).abs().max()) == 0
    assert bool((lo.abs() <= hi.abs() * 2.0**-10).all())


def test_2d_product_matches_torch_resized(launches):
    p = _problem("bmm", LARGE["bmm"])
    src = lower(p).source
    # smaller than one tile, then several tiles in both directions (the grouped order's edge group)
    for sizes in ({"M": 5, "N": 3}, {"M": 300, "N": 200, "B": 3}):
        res = check(_resized(p.source, **sizes), src)
        assert res.ok, f"{sizes}: {res.message}"
    assert {(kw["BLOCK_M"], kw["BLOCK_N"], kw["num_warps"]) for _, _, kw in launches} == {(16, 16, 4), (128, 128, 8)}


def test_many_small_matrices_share_a_program_in_3d_tiles(launches):
    p = _problem("bmm", ("B == 40", "M <= 8", "K <= 8", "N <= 8"))
    src = lower(p).source
    assert "acc = tl.zeros([BLOCK_B, BLOCK_M, BLOCK_N], dtype=tl.float32)" in src
    # 3-D dots keep tf32x3: FMAs were measured against it in 2-D tiles only
    assert 'input_precision="tf32x3"' in src and 'input_precision="ieee"' not in src
    res = check(p.source, src)
    assert res.ok, res.message
    assert launches[0][2]["BLOCK_B"] == 16  # 4096 outputs of 16 x 16 tiles
    # the 3-D form stays correct where a resized batch of large matrices leaves one per program
    res = check(_resized(p.source, B=2, M=70, N=64), src)
    assert res.ok, res.message
    assert launches[-1][2]["BLOCK_B"] == 1


@pytest.mark.parametrize("constraints,batched", [
    (("B == 2", "M == 64", "N == 64", "K == 1100"), False),
    (("B == 40", "M <= 8", "N <= 8", "K == 1100"), True),
])
def test_split_k_matches_torch_in_both_forms(constraints, batched, launches):
    p = _problem("bmm", constraints)
    src = lower(p).source
    assert re.findall(r"(\w+_kernel)\[", src) == ["bmm_partial_kernel", "bmm_kernel"]
    assert ("acc = tl.zeros([BLOCK_B, BLOCK_M, BLOCK_N]" in src) == batched
    assert ("acc = tl.zeros([BLOCK_M, BLOCK_N]" in src) == (not batched)
    res = check(p.source, src)
    assert res.ok, res.message
    partial, combine = launches[0][2], launches[1][2]
    assert "BLOCK_K" in partial and "BLOCK_K" not in combine
    res = check(_resized(p.source, K=1500), src)
    assert res.ok, f"K = 1500: {res.message}"


def test_split_k_with_many_rows_splits_b_once_and_matches_torch(launches):
    """A split-K product with MIN_ROWS rows of A or more takes B's TF32 parts too: three TF32 products a K
    step in the partial kernel, not tf32x3 (6.84 against 1.05 ms for one TF32 product on the H200)."""
    p = _problem("matmul", ("M == 200", "K == 1100", "N == 40"))
    src = lower(p).source
    names = re.findall(r"(\w+_kernel)\[", src)
    assert names == ["matmul_split_kernel", "matmul_partial_kernel", "matmul_kernel"], names
    body = _kernel(src, "matmul_partial_kernel")
    assert body.count('input_precision="tf32"') == 3 and "tf32x3" not in body
    res = check(p.source, src)
    assert res.ok, res.message
    split, partial, combine = (kw for _, _, kw in launches[:3])
    assert (partial["BLOCK_N"], partial["num_warps"]) == (64, 8) and combine["BLOCK_N"] == 64
    for sizes in ({"K": 1500}, {"M": 7, "N": 100}):
        res = check(_resized(p.source, **sizes), src)
        assert res.ok, f"{sizes}: {res.message}"


def _smem(kw: dict) -> int:
    return (kw["BLOCK_L"] * kw["BLOCK_E"] + kw["BLOCK_E"] * kw["BLOCK_S"] + kw["BLOCK_S"] * kw["BLOCK_V"]) \
        * 4 * kw["num_stages"]


def test_attention_tiles_stay_within_shared_memory_at_any_head_size():
    for e in (2, 16, 40, 64, 100, 128, 200, 256, 512, 2048):
        for ev in (1, 16, 64, 128, 300, 512, 2048):
            form, consts, _ = Attention.tiles(8, 4096, 4096, e, ev)
            assert not form.batched and consts["BLOCK_L"] == 64, (e, ev)
            assert consts["BLOCK_E"] <= HEAD_MAX and consts["BLOCK_V"] <= HEAD_MAX
            assert consts["E_CHUNKED"] == (e > HEAD_MAX), (e, consts)
            assert _smem(consts) <= SMEM_BUDGET, (e, ev, consts)
            # a single query block: the value dim is held whole up to WIDE_V_MAX, tiles still bounded
            form, consts, _ = Attention.tiles(8, 16, 4096, e, ev)
            assert consts["BLOCK_V"] <= (WIDE_V_MAX if ev > HEAD_MAX else HEAD_MAX), (e, ev, consts)
            assert _smem(consts) <= SMEM_BUDGET, (e, ev, consts)


@pytest.fixture
def flash_only(monkeypatch):
    """The flash forms at sizes where the scores form would be taken: it is for few queries times keys,
    and flash keeps every larger attention (L = S = 4096 at these heads), too large for the interpreter."""
    monkeypatch.setattr(attention, "scores_form", lambda *sizes: False)


def test_wide_head_attention_chunks_e_splits_the_value_dim_and_matches_torch(launches, flash_only):
    p = _problem("sdpa", ("E == 200", "V == 300", "L == 40", "S <= 8"))
    src = lower(p).source
    res = check(p.source, src)
    assert res.ok, res.message
    grid, kw = launches[0][1], launches[0][2]
    assert (kw["BLOCK_E"], kw["BLOCK_V"], kw["E_CHUNKED"], kw["num_stages"], kw["num_warps"]) == (128, 128, True, 2, 8)
    assert _smem(kw) <= SMEM_BUDGET
    b, h = p.input_shapes[0][:2]
    assert grid == (3 * b * h,)  # one query block, three 128-wide slices of the 300 value columns
    # the same module on a narrow head: q stays loaded across key blocks, one value slice
    res = check(_resized(p.source, E=40, V=64), src)
    assert res.ok, res.message
    assert (launches[-1][2]["E_CHUNKED"], launches[-1][2]["BLOCK_V"]) == (False, 64)


def test_short_queries_take_the_whole_value_dim_in_one_program(launches, flash_only):
    """L <= 16 with a value dim past HEAD_MAX: one program per (batch, head) holds all 300 value
    columns, so the scores are computed once; resized to more queries and a value dim past 1024 the
    same module runs several query blocks and two value slices, still correct."""
    p = _problem("sdpa", ("E == 200", "V == 300", "L <= 8", "S <= 8"))
    src = lower(p).source
    assert "Short queries, wide values" in src
    res = check(p.source, src)
    assert res.ok, res.message
    grid, kw = launches[0][1], launches[0][2]
    assert (kw["BLOCK_L"], kw["BLOCK_S"], kw["BLOCK_V"], kw["E_CHUNKED"]) == (16, 16, 512, True)
    assert _smem(kw) <= SMEM_BUDGET
    b, h = p.input_shapes[0][:2]
    assert grid == (b * h,)
    res = check(_resized(p.source, L=40, V=1100), src)
    assert res.ok, res.message
    assert launches[-1][1] == (3 * 2 * b * h,) and launches[-1][2]["BLOCK_V"] == WIDE_V_MAX


def test_causal_attention_over_several_query_blocks_matches_torch():
    # 70 queries: two 64-row blocks; the first stops at its own last key block. B == 2: 16 (batch, head)
    # pairs, where the unbounded draw held 49 (3.7 CPU-s under the interpreter against 1.3)
    p = _problem("sdpa", ("L == 70", "S == 70", "E <= 8", "V <= 8", "is_causal == 1", "B == 2"))
    src = lower(p).source
    assert "s_end = tl.minimum(S, (pid_l + 1) * BLOCK_L)" in src
    res = check(p.source, src)
    assert res.ok, res.message


def test_split_b_products_pass_the_verifier(vpool):
    """Through the sandboxed verifier, whose CPU lane also compiles every kernel for sm_90: the split
    kernel and the three-product loop must compile for a Hopper GPU, not only interpret."""
    from tests.distill.lowering.conftest import verify_all

    problems = [_problem(op, cons, epilogue=op != "bmm") for op, cons in SPLIT_B.items()]
    problems.append(_problem("matmul", ("M == 200", "K == 1100", "N == 40")))  # split K as well
    _, bad = verify_all(vpool, problems, [lower(p).source for p in problems])
    assert not bad, "\n".join(bad)
