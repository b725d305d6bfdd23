"""The einsum patterns (issue 15): batched matmul, outer product, 4-D tensor times matrix, bilinear
form. They are anchors of the anchor_epilogue shape, and lower to the matmul family (the bilinear
form to its own family; the outer product, a[:, None] * b[None, :], to a pointwise multiply)."""
from __future__ import annotations

import pytest

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


def _bilinear(constraints: tuple[str, ...], seed: int, big: bool = False):
    """A bilinear form and a relu; `big` allows sizes up to 600 (a batch of SPLIT_MIN_B rows or more)."""
    import dataclasses

    from synth.profiles import OpTarget, load_profile

    config = load_profile("cpu").config()
    config = dataclasses.replace(config, op_targets={"einsum_bilinear": OpTarget(constraints=constraints)})
    if big:
        config = dataclasses.replace(config, dims={"default": (1, 2, 3, 4, 8, 16, 20, 24, 40, 600)},
                                     max_elements=1 << 18, max_op_flops=1e9)
    return synth.sample(1, level=2, seed=seed, ops=["einsum_bilinear", "relu"], config=config,
                        shape="anchor_epilogue")[0]


def test_bilinear_contracts_first_when_both_sides_fill_a_tile_and_forms_pairs_otherwise(vpool):
    """I and J >= 16: a GEMM over the longer of them per o, the row dot with the other operand as its
    epilogue, the column tiles' partial sums added in order by a second kernel. A short side keeps
    the pairs GEMM. Both forms pass the verifier (the CPU lane compiles each kernel for sm_90 too),
    the contract-first one also with O = 1 and with I and J swapped in length."""
    import re

    wide = [_bilinear(("I >= 16", "J >= 16", "J > I"), 1), _bilinear(("I >= 16", "J >= 16", "I > J"), 2),
            _bilinear(("I >= 16", "J >= 16", "O == 1"), 3)]
    short = _bilinear(("J < 16",), 4)
    sources = [lower(p).source for p in wide + [short]]
    for p, src in zip(wide, sources):
        assert re.findall(r"(\w+_kernel)\[", src) == ["einsum_bilinear_relu_partial_kernel",
                                                      "einsum_bilinear_relu_kernel"], p.source
        assert "PARTS = " in src and "tl.atomic" not in src
    assert "(x1 @ W[o])" not in sources[0] and "x2 @ W[o]^T" in sources[0]  # J longer: contracts j
    assert "x1 @ W[o]" in sources[1]
    assert "O = 1" in wide[2].source
    assert re.findall(r"(\w+_kernel)\[", sources[3]) == ["einsum_bilinear_relu_kernel"]
    assert "ri = rk // J" in sources[3] or "i = t // n_j" in sources[3]
    _, bad = verify_all(vpool, wide + [short], sources)
    assert not bad, "\n".join(bad)


def test_contract_first_bilinear_runs_at_other_sizes():
    """The tiles, the column-tile count PARTS and the partial buffer are computed in forward from the
    sizes it reads: the module lowered at one size matches PyTorch at another."""
    import re

    from distill.lowering.selfcheck import check

    p = _bilinear(("I >= 16", "J >= 16", "J > I"), 1)
    src = lower(p).source
    for dim, size in (("B", 37), ("J", 200)):
        resized, n = re.subn(rf"^{dim} = \d+$", f"{dim} = {size}", p.source, flags=re.M)
        assert n == 1
        res = check(resized, src)
        assert res.ok, f"{dim} = {size}: {res.message}"


def test_contract_first_bilinear_with_many_rows_splits_w_into_tf32_parts_once(vpool):
    """A batch of SPLIT_MIN_B rows or more re-reads W from every row tile: W is split into TF32 parts by a
    kernel of its own, and the GEMM runs three TF32 products; contracted over i and over j."""
    import re

    problems = [_bilinear(("I >= 16", "J >= 16", "B >= 512", "J > I"), 1, big=True),
                _bilinear(("I >= 16", "J >= 16", "B >= 512", "I > J"), 2, big=True)]
    sources = [lower(p).source for p in problems]
    for src in sources:
        assert re.findall(r"(\w+_kernel)\[", src) == ["einsum_bilinear_relu_split_kernel",
                                                      "einsum_bilinear_relu_partial_kernel",
                                                      "einsum_bilinear_relu_kernel"]
        assert src.count('input_precision="tf32"') == 3 and "w_hi = tl.load(w_hi_ptr" in src
    _, bad = verify_all(vpool, problems, sources)
    assert not bad, "\n".join(bad)


def test_tensor_times_matrix_folds_its_batch_into_one_gemm(vpool):
    """einsum("bijl,lk->bijk") multiplies every [J, L] matrix of x by the same [L, K]: one
    [(B I J), L] @ [L, K] GEMM in 2-D tiles, through views of x and of the output (a permuted x that
    cannot be viewed so is stored once first)."""
    problems = [synth.sample(1, level=2, seed=0, ops=["einsum_tensor_matrix", "relu"], shape="anchor_epilogue")[0],
                synth.sample(1, level=3, seed=3, ops=["permute", "einsum_tensor_matrix", "relu"])[0]]
    sources = [lower(p).source for p in problems]
    for src in sources:
        assert "acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)" in src and "BLOCK_B" not in src
        assert ".view(B * I * J, L)" in src
    assert "permute" in problems[1].source and "permute_copy_kernel" in sources[1]
    _, bad = verify_all(vpool, problems, sources)
    assert not bad, "\n".join(bad)


def test_contract_first_bilinear_with_few_tiles_splits_k():
    """Few GEMM tiles and a long K (B=304, I=38, O=6, J=262144 ran 18 programs on 132 SMs): K is cut
    into chunks, each chunk's row sums one more partial sum that the second kernel adds in order; the
    module matches PyTorch here and at a resized K."""
    import re

    from distill.lowering.selfcheck import check

    p = _bilinear(("I >= 16", "J >= 513", "O <= 4"), 1, big=True)
    src = lower(p).source
    assert "kc = tl.program_id(0) // (n_b * n_n * O)" in src and "range(kc * CHUNK, kc * CHUNK + CHUNK, BLOCK_K)" in src
    assert re.search(r"PARTS = triton\.cdiv\(\w+, \w+\) \* SPLIT", src), src
    res = check(p.source, src)
    assert res.ok, res.message
    resized, n = re.subn(r"^J = \d+$", "J = 1100", p.source, flags=re.M)
    assert n == 1, p.source
    res = check(resized, src)
    assert res.ok, f"J = 1100: {res.message}"


def test_pairs_bilinear_with_a_long_j_walks_j_blocks_within_each_i():
    """Short I, long J: the pairs GEMM takes j blocks within one i, so x2 and W tiles are contiguous
    runs (flattened, k // J and k % J hid that from Triton), on 8 warps (4 spilled). Correct at an
    awkward J and at a resized one."""
    import re

    from distill.lowering.selfcheck import check

    p = _bilinear(("I < 16", "J >= 17"), 5)
    src = lower(p).source
    assert "i = t // n_j" in src and "ri = rk // J" not in src and "num_warps=8" in src, src
    for j in (None, 45):
        resized = p.source if j is None else re.sub(r"^J = \d+$", f"J = {j}", p.source, flags=re.M)
        res = check(resized, src)
        assert res.ok, f"J = {j}: {res.message}"


@pytest.mark.parametrize("constraints,inner_j", [(("J <= 4", "I >= 513", "O <= 4"), False),
                                                  (("I < 16", "J >= 16", "I * J >= 1100", "O <= 4"), True)])
def test_pairs_bilinear_with_few_tiles_splits_its_pairs(constraints, inner_j):
    """Few [BLOCK_B, BLOCK_O] tiles and a long I*J (B=1024, I=38968, O=76, J=4 ran 16 programs on 132 SMs:
    29 ms against eager's 2.9): the pairs are cut into chunks (of i's when j is the inner loop), each
    chunk's tile a partial that the second kernel adds in order before the epilogue; right here and at a
    resized I."""
    import re

    from distill.lowering.selfcheck import check

    p = _bilinear(constraints, 1, big=True)
    src = lower(p).source
    assert re.findall(r"(\w+_kernel)\[", src) == ["einsum_bilinear_relu_partial_kernel", "einsum_bilinear_relu_kernel"], \
        p.source + src
    assert "kc = tl.program_id(0) // n_t" in src and "tl.atomic" not in src
    assert ("range(kc * CHUNK * n_j, tl.minimum(kc * CHUNK + CHUNK, I) * n_j)" in src) == inner_j, src
    assert ("range(kc * CHUNK, kc * CHUNK + CHUNK, BLOCK_K)" in src) == (not inner_j), src
    res = check(p.source, src)
    assert res.ok, res.message
    resized, n = re.subn(r"^I = \d+$", "I = 77", p.source, flags=re.M)
    assert n == 1, p.source
    res = check(resized, src)
    assert res.ok, f"I = 77: {res.message}"


def test_split_k_bilinear_names_no_block_its_launch_inlined():
    """A literal batch of 1 (a `select` of a [1, D, D] tensor) gets a literal BLOCK_B inlined into the
    launch; the host lines that size the K chunks must not name it (NameError on the H200, seed 404's
    L10-d71792ea68a57735). Run at small sizes of the same program: the host lines are size-generic."""
    import re

    from distill.lowering.selfcheck import check

    p = [q for q in synth.sample(30, level=10, seed=414, profile="gpu") if q.problem_id == "L10-d71792ea68a57735"][0]
    src = lower(p).source
    assert "BLOCK_B=16" in src and "SPLIT = max(1" in src, src
    text = p.source
    for k, v in {"D": 600, "O": 2, "J": 20, "N": 2, "C": 3, "H": 5, "W": 4}.items():
        text, n = re.subn(rf"^{k} = \d+$", f"{k} = {v}", text, flags=re.M)
        assert n == 1, k
    res = check(text, src)
    assert res.ok, res.message


def test_the_outer_product_is_a_pointwise_multiply_fused_with_its_neighbours():
    """einsum("i,j->ij") as a [M, 1] @ [1, N] product padded K = 1 to a 16-wide tf32x3 dot and M = 3 to 16
    rows (1.40 ms on the H200, eager 0.484, seed 606's L1-f7d7b2aa): it is one multiply per output, exact
    as eager's, and a pointwise op fuses into its consumers (here a row sum reads it without a store)."""
    from distill.lowering.selfcheck import check

    alone = synth.sample(1, level=1, seed=1, ops=["einsum_outer"])[0]
    src = lower(alone).source
    assert "tl.dot" not in src and "y0 = x0 * x1" in src and ".unsqueeze(-1).expand(" in src, src
    res = check(alone.source, src)
    assert res.ok, res.message
    fused = synth.sample(1, level=3, seed=2, ops=["einsum_outer", "sum", "exp"])[0]
    src = lower(fused).source
    assert "einsum_outer_kernel" not in src and "x0 * x1" in src, src
    res = check(fused.source, src)
    assert res.ok, res.message
