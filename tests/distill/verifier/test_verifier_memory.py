"""The verifier's memory plan (memplan.py): trials streamed, a per-worker budget, problems too large
for it refused as the problem's fault (a ProblemError naming bytes), never the candidate's."""
from __future__ import annotations

import re
import time

import pytest
import torch

from distill.verifier import VerifierPool, memplan, reference
from distill.verifier.problemio import ProblemError, load_problem

from conftest import honest, problem
from tests.limits import CALL_LIMIT_S, wall_bound

# 2^22 floats in and out: 16 MiB each. Its plan needs far more than a 64 MiB budget (every call's
# outputs travel to the parent), far less than the default 2 GiB.
BIG = """
import torch
import torch.nn as nn

N = 1 << 22


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
"""

RELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
'''


def test_reference_streams_its_trials():
    """Seven trials of 16 MiB in + 16 MiB out: the trial tensors alive at once stay at about two
    sets (the input-sensitivity check mixes two), not seven."""
    mod = load_problem(BIG, {})
    out = reference.make_trials(mod, 1, list(range(2, 9)), torch.device("cpu"), calls=7)
    one = 2 * (4 << 22)  # one trial: input and output
    held = out["memory"]["reference_held_peak_bytes"]
    assert one <= held <= 2 * one, held
    assert out["memory"]["plan"]["problem_bytes"] == one
    assert len(out["trials"]) == 7 and all(t["outputs"][0].numel() == 1 << 22 for t in out["trials"])


def test_a_sent_trial_is_dropped_before_the_reference_waits_for_its_ack():
    """In step (the reference process's `send`), a trial's outputs are encoded, then dropped: none of
    their storage is alive while the reference waits for the parent's ack (which may last a worker's
    whole call, on a GPU the worker may need that memory)."""
    import weakref

    mod = load_problem(BIG, {})
    seen: list[weakref.ref] = []
    alive_at_wait: list[bool] = []

    def send(trial):
        seen.append(weakref.ref(trial["outputs"][0].untyped_storage()))

        def wait():
            alive_at_wait.append(seen[-1]() is not None)
        return wait

    out = reference.make_trials(mod, 1, [2, 3, 4], torch.device("cpu"), calls=3, send=send)
    assert len(seen) == 3 and out["trials"] == []
    assert alive_at_wait == [False, False, False]


def test_meta_plan_allocates_nothing_and_matches_the_measured_one():
    mod = load_problem(BIG, {})
    plan = memplan.meta_plan(mod, 1, 2, calls=7, sets=7)
    assert plan is not None and plan.source == "meta"
    assert (plan.input_bytes, plan.output_bytes, plan.param_bytes) == (4 << 22, 4 << 22, 0)


def test_over_budget_is_the_problems_error_and_streamed_sets_still_judge():
    """One pool (a pool start costs seconds) with a 64 MiB budget whose workers stream their input
    sets (made again from their seeds per call): a problem over the budget is a ProblemError naming
    the bytes, decided from meta tensors before the worker makes anything; an honest kernel still
    passes and an input changed during forward is still seen."""
    from conftest import MANIFEST, hostile

    case = next(c for c in MANIFEST["cases"] if c["status"] == "mutates_input")
    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, max_memory_mb=2048, device_memory_mb=64,
                      stream_inputs=True) as pool:
        t0 = time.monotonic()
        with pytest.raises(ProblemError) as err:
            pool.verify(BIG, RELU)
        msg = str(err.value)
        need, cap = (int(n) for n in re.findall(r"\((\d+) bytes\)", msg)[-2:])
        assert "too large for this verifier" in msg and need > cap and cap == (64 << 20) + (384 << 20), msg
        assert time.monotonic() - t0 < wall_bound(10)
        v = pool.verify(problem("add"), honest("add"))
        assert v.status == "pass", v.reason
        mem = v.checks["memory"]
        assert mem["streamed"] is True and mem["device_budget_bytes"] == 64 << 20
        assert mem["plan"]["problem_bytes"] == 12000 and mem["reference_held_peak_bytes"] <= 2 * 12000
        bad = pool.verify(problem(case["problem"]), hostile(case["name"]))
        assert bad.status == "mutates_input", bad.reason


def test_the_parents_landing_copies_judge_as_clones_did(monkeypatch):
    """Every tensor a worker or the reference sends lands in the parent's reused memory (codec.Arena.landing,
    its floor lowered to 1 KiB here; on a GPU only workload-sized outputs go there): honest kernels still
    pass and wrong ones are still wrong, so no judge reads a buffer a later message wrote over."""
    from distill.verifier import codec
    from conftest import MANIFEST, hostile

    monkeypatch.setattr(codec, "LANDING_MIN", 1 << 10)
    landed = []
    private = codec.Arena._private

    def counting(self, src):
        landed.append(src.numel() >= codec.LANDING_MIN)
        return private(self, src)

    monkeypatch.setattr(codec.Arena, "_private", counting)
    wrong = {c["name"]: c["problem"] for c in MANIFEST["cases"]
             if c["name"] in ("partial_grid", "nan_output", "ce_ignores_targets")}
    assert len(wrong) == 3
    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S) as pool:
        for name in ("softmax", "matmul", "cross_entropy"):
            v = pool.verify(problem(name), honest(name))
            assert v.status == "pass", (name, v.reason)
        for name, prob in wrong.items():
            v = pool.verify(problem(prob), hostile(name))
            assert v.status == "wrong_output", (name, v.status, v.reason)
    assert sum(landed) >= 10, landed
