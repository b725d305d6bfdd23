"""The GPU side of issue 31's memory rules (`-m gpu`, run through the device tool): a problem over one
worker's device share runs alone with the GPU's whole instead of being refused (admission.py), and a
candidate whose own allocations pass its budget keeps its verdict (memfault.device_oom).

The CPU lane checks the same rules with host memory (test_verifier_admission.py,
test_verifier_memory_limits.py); these run them where the budget is CUDA memory.
"""
from __future__ import annotations

import math

import pytest

from tests.distill.verifier.test_verifier_admission import RELU, RELU_PROBLEM

pytestmark = pytest.mark.gpu

HOARD = RELU.replace("        y = torch.empty_like(x)\n",
                     "        self.hoard = torch.empty(1 << 40, dtype=torch.uint8, device=x.device)  # 1 TiB\n"
                     "        y = torch.empty_like(x)\n")


@pytest.fixture(scope="module")
def pool():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from distill.verifier import VerifierPool

    # 16 workers of 4 GiB each, given: the same shares on any GPU (a share of the GPU's own has a floor
    # of 0.1, 14 GB of an H200, over which a problem took minutes to verify)
    with VerifierPool(workers=16, device="cuda", timeout=300, timing="eager", resized="off", device_memory_mb=4096) as p:
        yield p


def test_a_problem_over_a_workers_device_share_runs_alone(pool):
    """A ReLU whose input is a quarter of one worker's device share, rounded up to a power of two: the
    timed worker's plan (3 input sets and 4 outputs on the device, ~7x the input) is over the share and
    within what the pool holds altogether: the job holds the GPU alone and passes. (Sized from the pool: a
    fixed 1 GiB problem fit an H200 worker's 14 GB share of its own and ran shared.)"""
    share = pool.fleet.budget.device_bytes()
    n = 1 << max(20, math.ceil(math.log2(share / 16)))  # float32: 4n bytes >= share / 4
    v = pool.verify(RELU_PROBLEM.format(n=n), RELU)
    assert v.status == "pass", v.reason
    mem = v.checks["memory"]
    assert mem["alone"] is True, mem
    assert mem["plan"]["worker_device_bytes"] > pool.fleet.budget.device_bytes(), mem
    after = pool.verify(RELU_PROBLEM.format(n=1 << 20), RELU)  # the pool shares its GPU again
    assert after.status == "pass" and after.checks["memory"]["alone"] is False, after.reason


FAKE_OOM = RELU.replace("        y = torch.empty_like(x)\n",
                        "        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 MiB')\n")


@pytest.mark.parametrize("kernel", [HOARD, FAKE_OOM], ids=["hoard", "fake_oom"])
def test_an_out_of_memory_error_the_candidate_caused_keeps_its_verdict(pool, kernel):
    """1 TiB asked for in one request (the failed request is in no peak), or an OutOfMemoryError the
    candidate raises itself: the first run's figures look like the verifier's fault, so the job runs
    again alone with the GPU's whole budget, and an OOM there is the candidate's (runtime_error), never
    a ResourceError that would drop the sample instead of judging it."""
    v = pool.verify(RELU_PROBLEM.format(n=1 << 20), kernel)
    assert v.status == "runtime_error", v.reason
    assert "memory" in v.reason.lower(), v.reason


MUTATES = RELU.replace("    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)\n",
                       "    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)\n"
                       "    tl.store(x_ptr + offs, x * 0.5, mask=mask)\n")


@pytest.mark.parametrize("kernel,status", [(RELU, "pass"), (MUTATES, "mutates_input")], ids=["honest", "mutates"])
def test_a_large_resident_input_set_is_checked_on_the_gpu(pool, kernel, status):
    """Inputs of inputsets.DEVICE_COMPARE_BYTES are compared on the device, not through host copies before
    and after each call: an honest kernel passes, one that also writes its input is still `mutates_input`."""
    from distill.verifier.sandbox import inputsets

    assert MUTATES != RELU
    v = pool.verify(RELU_PROBLEM.format(n=inputsets.DEVICE_COMPARE_BYTES // 4), kernel)
    assert v.status == status, v.reason
    assert v.checks["memory"]["streamed"] is False, v.checks["memory"]  # the resident path, not the streamed one
