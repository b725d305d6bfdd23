"""A passing candidate runs again on a secret resized twin of a synth problem (same graph, other
sizes): a size-generic kernel holds there, one with the problem's sizes baked in does not."""
from __future__ import annotations

import hashlib

import pytest

import synth
from distill.verifier import VerifierPool

GENERIC = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x0):
        x = x0.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 256),)](x, out, N_OR_NUMEL, BLOCK=256)
        return out
'''


@pytest.fixture(scope="module")
def relu_problem():
    return synth.sample(level=1, n=1, seed=3, ops=["relu"])[0]


@pytest.fixture(scope="module")
def pools():
    with VerifierPool(workers=1, device="cpu", timeout=30) as required, \
            VerifierPool(workers=1, device="cpu", timeout=30, resized="recorded") as recorded:
        yield required, recorded


def test_size_generic_kernel_passes_its_resized_twin(pools, relu_problem):
    v = pools[0].verify(relu_problem, GENERIC.replace("N_OR_NUMEL", "x.numel()"))
    assert v.status == "pass", v.reason
    assert v.checks["resized"]["status"] == "pass"
    assert v.checks["resized"]["problem_id"] != relu_problem.problem_id


def test_baked_in_sizes_fail_on_the_twin_when_required(pools, relu_problem):
    baked = GENERIC.replace("N_OR_NUMEL", str(_numel(relu_problem)))
    # A secret twin may happen to keep the element count (61x24 -> 24x61), where a baked count is
    # still right: most of three draws do not.
    runs = [pools[0].verify(relu_problem, baked) for _ in range(3)]
    failed = [v for v in runs if v.status != "pass"]
    assert len(failed) >= 2, [v.reason for v in runs]
    assert all(v.reason.startswith("on a resized twin") for v in failed), [v.reason for v in failed]
    kept = pools[1].verify(relu_problem, baked)  # recorded only: the verdict stands, the record says why
    assert kept.status == "pass" and kept.checks["resized"]["status"] in ("pass", "wrong_output", "runtime_error")


def test_lowered_linear_passes_a_twin_that_keeps_its_constructor(pools):
    # nn.Linear(K, F) bakes K and F into __init__: the twin keeps them and changes M, so a module
    # that reads M from its input passes and one that bakes M in cannot (the twin's M differs)
    from distill.lowering import lower

    assert pools[0].resized == "required"  # the default
    p = synth.sample(level=1, n=1, seed=3, ops=["linear"])[0]
    source = lower(p).source
    v = pools[0].verify(p, source)
    assert v.status == "pass", v.reason
    assert v.checks["resized"]["status"] == "pass" and v.checks["resized"]["problem_id"] != p.problem_id
    m, k = p.input_shapes[0]
    assert "M, K = x0.shape" in source
    baked = pools[0].verify(p, source.replace("M, K = x0.shape", f"M, K = {m}, {k}"))
    assert baked.status != "pass" and baked.reason.startswith("on a resized twin"), baked.reason


def test_module_text_has_no_twin_and_is_not_charged(pools, relu_problem):
    v = pools[0].verify(relu_problem.source, GENERIC.replace("N_OR_NUMEL", "x.numel()"))
    assert v.status == "pass" and v.checks["resized"]["status"] == "unavailable"


def test_bad_resized_setting_is_refused():
    with pytest.raises(ValueError, match="resized"):
        VerifierPool(device="cpu", resized="sometimes")


def _numel(problem) -> int:
    ns: dict = {}
    exec(problem.source.split("class Model")[0], ns)  # noqa: S102 - the problem's own size constants
    n = 1
    for k, v in ns.items():
        if k.isupper() and isinstance(v, int):
            n *= v
    return n


def test_cpu_lane_runs_a_gpu_problem_as_its_cpu_twin(pools):
    big = synth.sample(level=1, n=1, seed=5, ops=["relu"], profile="gpu")[0]
    generic = GENERIC.replace("N_OR_NUMEL", "x.numel()")
    first, again = (pools[1].verify(big, generic) for _ in range(2))
    assert first.status == "pass", first.reason
    twin = first.checks["cpu_twin"]
    assert twin["of"] == big.problem_id and twin["profile"] == "gpu"
    assert again.checks["cpu_twin"] == twin  # the same twin every time
    assert _numel(big) > 1 << 20  # the original is not CPU-sized


def test_cpu_lane_twin_is_the_plain_cpu_twin():
    # keeping the constructor is for the resized check only: a gpu problem's cpu twin redraws the
    # constructor's sizes too (nn.Linear(4096, ...) is no interpreter size), as it always did
    from distill.verifier.twins import lane_problem

    big = synth.sample(level=1, n=1, seed=2, ops=["linear"], profile="gpu")[0]
    twin, info = lane_problem(big, "cpu")
    assert twin.profile == "cpu" and info == {"of": big.problem_id, "profile": "gpu", "twin": twin.problem_id}
    assert twin.source.split("def forward")[0] != big.source.split("def forward")[0]
    seed = int(hashlib.sha256(big.problem_id.encode()).hexdigest()[:15], 16)  # fixed by the problem
    assert big.twin("cpu", seed).source == twin.source == lane_problem(big, "cpu")[0].source
