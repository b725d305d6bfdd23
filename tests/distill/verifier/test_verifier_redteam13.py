"""Red-team pass 13's mechanisms, unit by unit, and its fixtures (cases.d/redteam13.json, realworld4.json) end to end."""
from __future__ import annotations

import json

import pytest
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from distill.verifier import policy, record
from tests.distill.verifier.conftest import FIXTURES, honest, hostile, problem

PASS13 = json.loads((FIXTURES / "cases.d" / "redteam13.json").read_text())


def test_complex_views_are_layout_both_ways():
    """The replay asks policy whether bytes keep their values read as another type: complex pairs do."""
    for real, cplx in ((torch.float32, torch.complex64), (torch.float64, torch.complex128),
                       (torch.float16, torch.complex32)):
        assert policy._keeps(real, cplx, True) and policy._keeps(cplx, real, True)
        assert policy.op_name("aten::view", (torch.empty(0, 2, dtype=real), cplx), {}) == "aten::view"
    # merging or splitting other types stays compute, and so do casts to and from complex
    for a, b in ((torch.float64, torch.complex64), (torch.complex64, torch.float64), (torch.int32, torch.complex64),
                 (torch.bfloat16, torch.complex32)):
        assert not policy._keeps(a, b, True), (a, b)
    assert not policy._keeps(torch.float32, torch.complex64, False)


def test_complex_arithmetic_and_conjugated_copies_stay_compute():
    x = torch.view_as_complex(torch.randn(4, 2))
    with policy.OpCount() as count:
        torch.view_as_real(x * x)
        torch.view_as_complex(torch.empty(4, 2)).conj().copy_(x)
    assert "aten::mul.Tensor" in count.counts or "aten::mul" in count.counts
    assert "aten::copy_(into_conj)" in count.counts


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    pass


class _Duck:
    def data_ptr(self):
        return 0


def test_one_launch_rule_for_worker_and_record():
    """record.launch_refusal: what the guard refuses before Triton runs and what the record cannot write."""
    t = torch.empty(4)
    assert record.launch_refusal(_k, (t,), {"BLOCK": 4}, (1,)) is None
    assert record.launch_refusal(_k, (t, (1, 2.0, None)), {"BLOCK": tl.constexpr(4), "dt": tl.float32},
                                 lambda meta: (1,)) is None
    assert record.launch_refusal(_k, (_Duck(),), {}, (1,))[0] == "argument__Duck"
    assert record.launch_refusal(_k, ((t, _Duck()),), {}, (1,))[0] == "argument__Duck"
    assert record.launch_refusal(_k, (t,), {}, (True,))[0] == "grid"

    class Grid(tuple):
        pass

    class Name(str):
        pass

    assert record.launch_refusal(_k, (t,), {}, Grid((1,)))[0] == "grid"
    assert record.launch_refusal(_k, (t,), {Name("BLOCK"): 4}, (1,))[0] == "argument_name"
    desc = TensorDescriptor.from_tensor(torch.empty(4, 4), [2, 2])
    assert record.launch_refusal(_k, (desc,), {}, (1,)) is None
    desc.base = _Duck()
    assert record.launch_refusal(_k, (desc,), {}, (1,))[0] == "argument__Duck"
    _k.add_pre_run_hook(lambda *a, **k: None)
    try:
        assert record.launch_refusal(_k, (t,), {}, (1,))[0] == "pre_run_hook"
    finally:
        _k.pre_run_hooks.clear()


@pytest.mark.parametrize("name", ["duck_arg_cast", "pre_run_hook_cast", "descriptor_duck_base"])
def test_the_worker_refuses_what_runs_inside_a_launch(pool, name):
    """Pass 12's two and pass 13's descriptor: the replay alone refused them; now the worker's first trial does
    (`triton.launch(...)`)."""
    for static in (True, False)[name == "descriptor_duck_base":]:  # its static verdict is the getattr's
        verdict = pool.verify(problem("low_byte_sum"), hostile(name), static_checks=static)
        assert verdict.status == "not_triton", f"{name}: {verdict.status}: {verdict.reason}"
        assert "triton.launch(" in verdict.reason, verdict.reason


@pytest.mark.parametrize("case", PASS13["cases"], ids=lambda c: c["name"])
def test_pass13_case(pool, case):
    for static, expected in ((True, case["status"]), (False, case.get("runtime"))):
        if expected is None:
            continue
        verdict = pool.verify(problem(case["problem"]), hostile(case["name"]), static_checks=static)
        assert verdict.status == expected, f"{case['name']} (static {static}): {verdict.status}: {verdict.reason}"
    after = pool.verify(problem("add"), honest("add"))
    assert after.status == "pass", f"honest add after {case['name']}: {after.status}: {after.reason}"


@pytest.mark.parametrize("name", [*PASS13["honest"], "rope_complex_view", "autotune_prehook", "splitk_matmul",
                                  "tutorial_warmup_softmax", "direct_conv_relu", "tma_host_matmul", "tma_device_matmul"])
def test_pass13_honest_control(pool, name):
    verdict = pool.verify(problem(name), honest(name))
    assert verdict.status == "pass", f"{name}: {verdict.status}: {verdict.reason}"
