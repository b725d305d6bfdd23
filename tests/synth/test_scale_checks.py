"""Checks that scale: shapes at full size on meta tensors (nothing allocated), degeneracy on a small twin,
and run checks whose tolerances and perturbations hold for large reductions."""
import math
import re

import pytest
import torch

import synth
import synth.realize as realize
from synth.check import LARGE, CheckFailed, meta_check, run_checks

PROGRAM = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x0, x1):
        return {body}


def get_inputs():
    return [{x0}, {x1}]


def get_init_inputs():
    return []
"""


def _src(body: str, x0: str, x1: str = "torch.randn(4)") -> str:
    return PROGRAM.format(body=body, x0=x0, x1=x1)


def test_meta_check_runs_full_size_shapes_without_memory():
    # 2^40 elements (4 TiB) a tensor: only a check that allocates nothing can run this
    src = _src("torch.matmul(x0, x1).relu()", "torch.randn(1 << 20, 1 << 20)", "torch.randn(1 << 20, 3)")
    meta_check(src, [[1 << 20, 3]], ["f32"])
    with pytest.raises(CheckFailed, match="shape mismatch: output 0 has \\[1048576, 3\\], predicted \\[3, 1048576\\]"):
        meta_check(src, [[3, 1 << 20]], ["f32"])
    with pytest.raises(CheckFailed, match="dtype mismatch"):
        meta_check(src, [[1 << 20, 3]], ["i64"])
    with pytest.raises(CheckFailed) as err:
        meta_check(_src("torch.matmul(x0, x1)", "torch.randn(1 << 20, 5)", "torch.randn(4, 3)"), [[1 << 20, 3]], ["f32"])
    assert err.value.kind == "runtime error" and "on meta tensors" in str(err.value)


N = 1 << 22   # 64x the largest tensor of the cpu profile


@pytest.mark.parametrize("body, x0, x1", [
    ("x0.mean(dim=-1) + x1", f"torch.rand(4, {N // 4})", "torch.randn(4)"),        # concentrates: scaling moves it
    ("F.mse_loss(x0, x1)", f"torch.randn({N})", f"torch.randn({N})"),               # a loss over 4M elements
    ("F.l1_loss(x0, x1)", f"torch.rand({N})", f"torch.rand({N})"),
    ("torch.softmax(x0, dim=-1) * x1", f"torch.randn(2, {N // 2})", "torch.randn(2, 1)"),  # values ~1e-6
    ("torch.minimum(x0, x1).sum()", f"torch.randn({N})", f"torch.randn({N})"),
    ("x0.std(dim=0) * x1", f"torch.randn({N // 2}, 2)", "torch.randn(2)"),
])
def test_large_reductions_keep_their_inputs(body, x0, x1):
    src = _src(body, x0, x1)
    run_checks(src, 0, [list(_output(src).shape)], ["f32"])


@pytest.mark.parametrize("body, kind", [
    ("x0 + 0 * x1", "input ignored"),
    ("x1 + x0.mean() * 1e-9", "input ignored"),      # x0 moves the output by ~1e-9 of its size: invisible
    ("x0 * 0 + x1 * 0", "constant output"),
    ("torch.sigmoid(x0 + 1000.0) * (x1 * 0 + 1)", "constant output"),
    ("x1 * 1e-3 + 1.0 + x0 * 0", "constant output"),   # spread 1e-3 of its RMS: a constant passes the verifier
    ("x0.log() + x1", "not finite"),
])
def test_large_degenerate_programs_still_fail(body, kind):
    src = _src(body, f"torch.randn({N})", f"torch.randn({N})")
    with pytest.raises(CheckFailed) as err:
        run_checks(src, 0, [list(_output(src).shape)], ["f32"])
    assert err.value.kind == kind, err.value


def _output(src: str) -> torch.Tensor:
    ns: dict = {}
    exec(compile(src, "<p>", "exec"), ns)  # noqa: S102 - test program
    return ns["Model"]()(*ns["get_inputs"]())


@pytest.mark.parametrize("ops", [["l1_loss"], ["smooth_l1_loss"], ["huber_loss"], ["mean", "minimum"], ["softshrink", "cat"]])
def test_full_size_checks_keep_large_elementwise_lists_sampleable(ops):
    # KernelBench-scale sizes forced through a config: the losses failed with "input ignored" before
    # the scale-aware rules (every draw of the first three, with absolute tolerances)
    dims = {"default": (17, 32), "rank1": (1 << 21,), "rank2": (1024, 2048), "rank3": (64, 128)}  # every input > LARGE
    cfg = synth.load_profile("cpu").config(dims=dims, max_elements=1 << 23, max_bytes=1 << 31, max_attempts=8)
    (p,) = synth.sample(1, level=len(ops), seed=3, ops=ops, config=cfg)
    assert math.prod(p.input_shapes[0]) > LARGE, p.input_shapes


def test_gpu_draws_are_checked_on_a_cpu_twin_and_on_meta_at_full_size(monkeypatch):
    seen = {"run": [], "meta": []}
    run, meta = realize.run_checks, realize.meta_check
    monkeypatch.setattr(realize, "run_checks", lambda src, *a: (seen["run"].append(src), run(src, *a))[1])
    monkeypatch.setattr(realize, "meta_check", lambda src, *a: (seen["meta"].append(src), meta(src, *a))[1])
    ps = synth.sample(4, levels=[1, 2, 5], seed=8, profile="gpu")
    assert all(p.source in seen["meta"] for p in ps) and not set(seen["run"]) & set(seen["meta"])
    sizes = [int(v) for src in seen["run"] for v in re.findall(r"^\w+ = (\d+)$", src, re.M)]
    assert sizes and max(sizes) <= 256        # the degeneracy checks ran on cpu-sized twins
    assert max(int(v) for p in ps for v in re.findall(r"^\w+ = (\d+)$", p.source, re.M)) > 10_000
