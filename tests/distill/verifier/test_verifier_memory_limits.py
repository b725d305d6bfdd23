"""The verifier's own memory limits are never the candidate's fault (issue 31, memfault.py): a worker
killed at its host cap in a harness step is a ResourceError naming the bytes, retried once with a
larger cap; a candidate whose own allocations pass its budget keeps its `crash`. One small pool (one
worker, a 640 MB cap, input sets kept resident against the plan's advice so that making them is the
step that trips the cap)."""
from __future__ import annotations

import re

import pytest

from distill.verifier import VerifierPool, memfault, sizing
from distill.verifier.problemio import ProblemError, ResourceError

from conftest import hostile, problem

# 16 x 2^20 floats in (64 MiB a set, 7 sets a job), 16 floats out: its plan fits 640 MB (one set and
# its banded copy beside the worker's base), its seven resident sets do not.
WIDE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(16, 1 << 20)]


def get_init_inputs():
    return []
"""

ROWSUM = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        rowsum_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=1 << 16)
        return y
'''

# The same kernel, and forward keeps 160 MB more of host memory on every call.
HOARDER = ROWSUM.replace("class ModelNew", "_KEPT = []\n\n\nclass ModelNew").replace(
    "        y = torch.empty(", "        _KEPT.append(b'x' * (160 << 20))\n        y = torch.empty(")

CAP_MB = 640  # over a worker's start-up peak (about 400 MB, cli.MIN_MEMORY_MB), under its seven sets


# The unit tests come first: the pool tests end with the pool's close, so no worker start (which cuts
# os.environ to the allow-list for a moment, environ.py) runs on while pytest edits os.environ.


def test_step_log_charges_growth_only_to_the_candidates_steps():
    """The parent's readings at each announced step: growth over construct and forward is the
    candidate's, growth over inputs/outputs steps the harness's."""
    mib = 1 << 20
    reads = iter([100 * mib, 100 * mib, 150 * mib, 150 * mib, 900 * mib, 950 * mib, 960 * mib])
    log = memfault.StepLog(lambda: next(reads))
    for step in ("construct", "inputs trial 0", "call trial 0", "outputs trial 0", "inputs trial 1", "call trial 1",
                 "outputs trial 1"):
        log(step)
    assert log.candidate_growth() == 10 * mib  # call trial 1; the 750 MiB of "outputs trial 0" is the harness's
    # What the plan gives the candidate: 2 outputs of 10 MiB + OWN_BASE (128 MiB) = 148 MiB.
    plan = {"worker_host_bytes": 800 * mib, "param_bytes": 0, "output_bytes": 10 * mib}
    err = memfault.host_kill(log, "construct", plan, 1000 * mib, 1001 * mib)
    assert err is not None and err.step == "outputs trial 1" and f"({1000 * mib} bytes)" in str(err)
    log.steps[-2] = ("call trial 1", 800 * mib)  # its own call grew it by 160 MiB, past its 148
    assert memfault.host_kill(log, "construct", plan, 1000 * mib, 1001 * mib) is None
    assert memfault.host_kill(memfault.StepLog(lambda: 0, [("call trial 0", 0)]), "construct", plan, 1000, 1) is None
    assert memfault.host_kill(memfault.StepLog(lambda: 0, [("replay secret", 0)]), "replay", None, 1000, 1) is not None
    slow = memfault.harness_timeout("inputs trial 3", 60, 30.0)  # the reference's trials took 30 s themselves
    assert slow is not None and slow.resource == "time" and memfault.harness_timeout("call trial 3", 60, 30.0) is None
    # an announced harness step where the reference made and ran every set in 0.5 s: not the verifier's
    assert memfault.harness_timeout("inputs trial 3", 60, 0.5) is None


def test_a_cuda_oom_within_the_candidates_own_budget_is_the_verifiers():
    """The worker's figures around a call that raised torch.OutOfMemoryError (GPU lane; checked here
    as data): its own allocations within what the plan leaves it -> the verifier's, past it -> its own."""
    plan = {"worker_device_bytes": 600, "param_bytes": 0, "output_bytes": 50}  # room under 1000: 400 + 100
    oom = {"type": "torch.OutOfMemoryError", "message": "CUDA out of memory"}
    mine = memfault.device_oom({"error": oom, "trial": 2, "device_memory": {"held_bytes": 500, "peak_bytes": 900}},
                               plan, 1000)
    assert mine is not None and mine.resource == "device" and "(400 bytes)" in str(mine) and mine.step == "call 2"
    assert memfault.device_oom({"error": oom, "device_memory": {"held_bytes": 100, "peak_bytes": 700}}, plan, 1000) is None
    other = {"type": "builtins.RuntimeError", "message": "boom"}
    assert memfault.device_oom({"error": other, "device_memory": {"held_bytes": 0, "peak_bytes": 1}}, plan, 1000) is None
    # on a shared GPU, own allocations past the plan's room that would fit the GPU alone: the verifier's
    # (retried alone, where the verdict is decided); past what the GPU alone gives: the candidate's
    big = {"error": oom, "trial": 0, "device_memory": {"held_bytes": 100, "peak_bytes": 700}}
    retry = memfault.device_oom(big, plan, 1000, alone=8000)
    assert retry is not None and retry.resource == "device" and "GPU alone" in str(retry) and "(600 bytes)" in str(retry)
    assert memfault.device_oom(big, plan, 1000, alone=650) is None
    assert memfault.device_oom({**big, "error": other}, plan, 1000, alone=8000) is None


def test_an_out_of_memory_error_after_the_calls_is_placed_by_who_ran_it():
    """Timing or replay past the correctness calls (memfault.later_oom): on a shared GPU the verifier's
    (retried alone); with the GPU alone a replayer's is still the verifier's (none of the candidate's
    Python runs there), a worker's is the candidate's (its Python could raise one)."""
    oom = {"type": "torch.OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 1.97 GiB"}
    shared = memfault.later_oom(oom, "timing", in_replayer=False, shared=True)
    assert shared is not None and shared.resource == "device" and shared.step == "timing" and "1.97 GiB" in str(shared)
    assert memfault.later_oom(oom, "timing", in_replayer=False, shared=False) is None
    alone = memfault.later_oom(oom, "timing", in_replayer=True, shared=False)
    assert alone is not None and "a replayer" in str(alone)
    assert memfault.later_oom({"type": "builtins.RuntimeError", "message": "boom"}, "timing", True, True) is None
    assert memfault.later_oom(None, "timing", True, True) is None


@pytest.fixture(scope="module")
def small():
    with VerifierPool(workers=1, device="cpu", timeout=60, max_memory_mb=CAP_MB, stream_inputs=False,
                      resized="off") as p:
        yield p


def _bytes(msg: str) -> list[int]:
    return [int(n) for n in re.findall(r"\((\d+) bytes\)", msg)]


def test_a_harness_step_over_the_cap_is_retried_with_a_larger_one(small):
    """Making the resident input sets (before any candidate code) trips the 640 MB cap: the verifier's
    limit, retried at twice the cap, where the honest kernel passes."""
    v = small.verify(WIDE, ROWSUM)
    assert v.status == "pass", v.reason
    retry = v.checks["memory_retry"]
    assert "inputs load" in retry["first_attempt"] and "verifier's own memory limit" in retry["first_attempt"]
    assert CAP_MB << 20 in _bytes(retry["first_attempt"]), retry
    assert retry["host_budget_bytes"] > CAP_MB << 20


def test_without_a_larger_cap_it_is_a_resource_error_naming_the_bytes(small, monkeypatch):
    monkeypatch.setattr(sizing, "larger_host_mb", lambda mb: None)
    with pytest.raises(ResourceError) as err:
        small.verify(WIDE, ROWSUM)
    assert isinstance(err.value, ProblemError)  # every caller's "not the candidate's" path
    msg = str(err.value)
    assert err.value.step == "inputs load" and err.value.limit_bytes == CAP_MB << 20, msg
    held = err.value.used_bytes
    assert held is None or held > CAP_MB << 20, msg
    assert CAP_MB << 20 in _bytes(msg) and "not retried" in msg, msg


def test_a_candidate_over_its_own_budget_keeps_its_crash(small):
    """Forward allocating 16 GB is killed in the candidate's own step: `crash`, as before."""
    v = small.verify(problem("add"), hostile("memory_bomb"))
    assert v.status == "crash" and "memory limit" in v.reason, v.reason


def test_a_candidate_that_hoards_memory_keeps_its_crash_in_a_harness_step(small):
    """Forward keeping 160 MB a call passes what the plan gives it (2 outputs and 128 MiB): wherever the
    cap strikes (its call, or the harness's copies after it), the parent's own readings charge it."""
    v = small.verify(WIDE, HOARDER)
    assert v.status == "crash" and "memory limit" in v.reason, v.reason
