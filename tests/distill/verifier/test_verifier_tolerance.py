"""Each float32 output's bound follows its problem's measured honest error (precision.py,
tolerance.fitted): tight where the reference is exact, the dtype table where an honest kernel's own
error reaches it (tf32 dot products, rounding amplified by the problem). Screening (screen.py) sets
the bounds and refuses problems an answer that ignores an input would pass."""
from __future__ import annotations

import types

import pytest
import torch

from distill.verifier import precision, screen, tolerance
from distill.verifier.problemio import load_problem

CPU = torch.device("cpu")


def _module(body: str, inputs: str, init: str = "[]") -> types.ModuleType:
    return load_problem(f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n{body}\n"
                        f"def get_inputs():\n    return {inputs}\n\ndef get_init_inputs():\n    return {init}\n", {})


def _screen(body: str, inputs: str, init: str = "[]") -> screen.ScreenReport:
    return screen.screen_module(_module(body, inputs, init), CPU)


def _bound(report: screen.ScreenReport, k: int = 0) -> tolerance.Tolerance:
    rec = report.tolerances[k]
    return tolerance.Tolerance(rec["norm_rel"], rec["atol_rel"], rec["rtol"], rec["det_rel"])


def test_fitted_bounds_stay_between_the_floor_and_the_table():
    table = tolerance.TOLERANCES[torch.float32]
    exact = tolerance.fitted(torch.float32, 1e-9, 1e-9)
    assert exact == tolerance.FLOOR_FP32
    # up to half the table the bound is the table; past it the bound follows the honest error
    # (test_verifier_illconditioned.py), up to tolerance.CEILING
    loose = tolerance.fitted(torch.float32, table.norm_rel / tolerance.ILL_MARGIN, table.atol_rel / tolerance.ILL_MARGIN)
    assert (loose.norm_rel, loose.atol_rel, loose.rtol, loose.det_rel) == (table.norm_rel, table.atol_rel, table.rtol,
                                                                           table.det_rel)
    with pytest.raises(tolerance.IllConditioned):
        tolerance.fitted(torch.float32, 1.0, 1.0)
    mid = tolerance.fitted(torch.float32, 3e-5, 2e-4)
    assert mid.norm_rel == pytest.approx(3e-4) and mid.atol_rel == pytest.approx(2e-3)
    for dtype in (torch.bfloat16, torch.float16):  # measured against their own references
        assert tolerance.fitted(dtype, 1e-9, 1e-9) == tolerance.TOLERANCES[dtype]
    # float64 as float32, with its own floor: a float64 problem computed in float32 (6e-8) fails an exact one
    assert tolerance.fitted(torch.float64, 1e-20, 1e-20) == tolerance.FLOOR_FP64
    assert tolerance.fitted(torch.float64, 1.0, 1.0).norm_rel == tolerance.TOLERANCES[torch.float64].norm_rel
    assert tolerance.fitted(torch.int64, 0.0, 0.0) is None


def test_an_exact_problem_gets_a_tight_bound_and_a_dropped_term_fails_it():
    report = _screen("class Model(nn.Module):\n    def forward(self, a, b, c):\n        return a * b + 1e-3 * c\n",
                     "[torch.randn(1000), torch.randn(1000), torch.randn(1000)]")
    assert report.status == "ok" and report.tolerances[0]["basis"] == "measured"
    tol = _bound(report)
    assert tol.norm_rel == tolerance.FLOOR_FP32.norm_rel
    assert report.effects[2] >= screen.EFFECT_MARGIN  # c moves the output ~100x the bound
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(1000, generator=g) for _ in range(3))
    ref = a * b + 1e-3 * c
    assert not tolerance.compare(a * b, ref, tol=tol)[0]             # 1e-3 of the norm: the table passed it
    assert tolerance.compare(a * b, ref)[0]
    # an honest kernel: products and sums in another order, each a few units of rounding off
    honest = (a.double() * b.double() + 1e-3 * c.double()) * (1 + 4 * 2.0 ** -24 * (2 * torch.rand(1000, generator=g) - 1))
    assert tolerance.compare(honest.float(), ref, tol=tol)[0]


def test_fast_math_exp_and_another_summation_order_stay_within_the_bound():
    report = _screen("class Model(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=1)\n",
                     "[torch.randn(64, 512) * 3]")
    tol = _bound(report)
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(1)) * 3
    ref = torch.softmax(x, dim=1)
    # exp through exp2 with the argument rounded (PTX ex2.approx), a sum in fp64 then rounded: a GPU kernel's way
    z = (x - x.amax(dim=1, keepdim=True)) * 1.4426950408889634
    num = torch.exp2(z)
    fast = (num.double() / num.double().sum(dim=1, keepdim=True)).float()
    assert tolerance.compare(fast, ref, tol=tol)[0], tolerance.compare(fast, ref, tol=tol)[1]


def test_a_sum_that_cancels_is_bounded_by_its_terms_not_its_result():
    """A full mean of randn values is near zero on some draws, and an honest kernel's blocked sum then
    misses the reference's by far more units of the result than 4 (the lowering's drew 1.05e-5 against
    the 1e-5 floor): the bound follows the terms' absolute mass. A dropped term still fails it."""
    report = _screen("class Model(nn.Module):\n    def forward(self, x):\n        return torch.mean(x, dim=[0, 1, 2], keepdim=True)\n",
                     "[torch.randn(8, 127, 2)]")
    tol = _bound(report)
    assert report.status == "ok" and tol.norm_rel > 10 * tolerance.FLOOR_FP32.norm_rel
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        x = torch.randn(8, 127, 2, generator=g)
        ref = torch.mean(x, dim=[0, 1, 2], keepdim=True)
        acc = torch.zeros(64)  # a GPU kernel's way: 64 lanes accumulate blocks in order, then one tree sum
        for block in x.reshape(-1).split(64):
            acc[:block.numel()] += block
        honest = (acc.sum() / x.numel()).reshape(1, 1, 1)
        assert tolerance.compare(honest, ref, tol=tol)[0], tolerance.compare(honest, ref, tol=tol)[1]
        assert not tolerance.compare(ref - x.reshape(-1)[x.abs().argmax()] / x.numel(), ref, tol=tol)[0]  # its largest term dropped


def test_tf32_dot_products_keep_the_table_for_a_matmul():
    report = _screen("class Model(nn.Module):\n    def forward(self, a, b):\n        return a @ b\n",
                     "[torch.randn(128, 512), torch.randn(512, 96)]")
    tol = _bound(report)
    assert tol.norm_rel == tolerance.TOLERANCES[torch.float32].norm_rel
    assert report.tolerances[0]["measured"]["honest_norm"] > 1e-4  # tf32 rounding, measured
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(128, 512, generator=g), torch.randn(512, 96, generator=g)

    def truncate(t: torch.Tensor) -> torch.Tensor:  # tf32 by dropping bits: worse than rounding
        return (t.view(torch.int32) & -0x2000).view(torch.float32)

    assert tolerance.compare(truncate(a) @ truncate(b), a @ b, tol=tol)[0]
    assert not tolerance.compare(a.bfloat16().float() @ b.bfloat16().float(), a @ b, tol=tol)[0]


def test_a_small_matmul_term_tightens_the_bound_in_proportion():
    report = _screen("class Model(nn.Module):\n    def forward(self, x, w):\n        return torch.exp(x) + 0.01 * (x @ w)\n",
                     "[torch.randn(64, 256), torch.randn(256, 256) / 16]")
    tol = _bound(report)
    assert tolerance.FLOOR_FP32.norm_rel < tol.norm_rel < tolerance.TOLERANCES[torch.float32].norm_rel


def test_rounding_the_problem_amplifies_loosens_the_bound():
    """x - tanh(x) cancels near 0: an honest kernel's few units of rounding come out larger, and so
    does the bound; 1 - cos(x) for tiny x is ill-conditioned enough that fast math's few units on cos
    (~1) put an honest kernel past the table: the bound follows it (tolerance.ILL_MARGIN)."""
    shrink = _bound(_screen("class Model(nn.Module):\n    def forward(self, x):\n        return x - torch.tanh(x)\n",
                            "[torch.randn(4096) * 0.05]"))
    assert shrink.norm_rel > 10 * tolerance.FLOOR_FP32.norm_rel
    report = _screen("class Model(nn.Module):\n    def forward(self, x):\n        return 1 - torch.cos(x)\n",
                     "[torch.randn(4096) * 1e-3 + 1e-2]")
    ill, honest = _bound(report), report.tolerances[0]["measured"]["honest_norm"]
    assert honest > tolerance.TOLERANCES[torch.float32].norm_rel / tolerance.ILL_MARGIN
    assert ill.norm_rel == pytest.approx(tolerance.ILL_MARGIN * honest)


def test_a_problem_that_computes_in_lower_precision_keeps_the_table():
    report = _screen("class Model(nn.Module):\n    def forward(self, x):\n        return torch.exp(x.half()).float()\n",
                     "[torch.randn(256)]")
    rec = report.tolerances[0]
    assert rec["basis"] == "table" and "lower precision" in rec["why"] and "float16" in rec["why"]
    assert rec["norm_rel"] == tolerance.TOLERANCES[torch.float32].norm_rel


def test_exact_and_low_precision_outputs_keep_their_comparisons():
    report = _screen("class Model(nn.Module):\n    def forward(self, x):\n"
                     "        return x.argmax(dim=1), (x * 2).bfloat16()\n", "[torch.randn(16, 32)]")
    assert report.status == "ok" and report.tolerances[0] is None
    assert report.tolerances[1]["basis"] == "table" and report.tolerances[1]["norm_rel"] == 2e-2


def test_screening_refuses_what_a_kernel_could_ignore():
    weak = _screen("class Model(nn.Module):\n    def forward(self, a, b):\n        return a + 1e-6 * b\n",
                   "[torch.randn(1000), torch.randn(1000)]")
    assert weak.status == "degenerate" and "input 1" in weak.reason
    flat = _screen("class Model(nn.Module):\n    def forward(self, x):\n        return 1.0 + 1e-3 * x.mean()\n",
                   "[torch.rand(4096)]")
    assert flat.status == "degenerate" and "constant" in flat.reason
    # a discrete output that agrees on two draws by chance is not constant over four
    ok = _screen("class Model(nn.Module):\n    def forward(self, x):\n        return x.sum(dim=1).argmax()\n",
                 "[torch.randn(3, 8)]")
    assert ok.status == "ok", ok.reason


def test_an_output_that_is_rounding_noise_is_refused_as_ill_conditioned():
    """A GroupNorm, then the mean over whole groups: its bias (0) in exact arithmetic, ~1e-8 of noise in
    float32 (KernelBench level 2 #23 and #27). No bound tells an honest kernel from a wrong one there,
    so the problem is refused: before, the table's bound judged the candidate against the noise."""
    noise = _screen("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.norm = nn.GroupNorm(4, 16)\n"
                    "    def forward(self, x):\n        return self.norm(x * 3.0 + 1.0).mean(dim=[1, 2])\n",
                    "[torch.randn(8, 16, 64)]")
    assert noise.status == "ill_conditioned", noise.reason
    assert "rounding noise" in noise.reason and "output 0" in noise.reason
    # the same norm, read where it is not cancelled: a well-conditioned output passes screening
    ok = _screen("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                 "        self.norm = nn.GroupNorm(4, 16)\n"
                 "    def forward(self, x):\n        return self.norm(x * 3.0 + 1.0).abs().mean(dim=[1, 2])\n",
                 "[torch.randn(8, 16, 64)]")
    assert ok.status == "ok", ok.reason


def test_tf32_cuts_toward_zero_as_a_tensor_core_reads_fp32():
    x = torch.tensor([1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, -1.0 - 3 * 2.0 ** -11, 1.0 + 2.0 ** -10 + 2.0 ** -12,
                      float("inf"), 2.0 ** -140])
    assert precision.tf32(x).tolist() == [1.0, 1.0 + 2.0 ** -10, -1.0 - 2.0 ** -10, 1.0 + 2.0 ** -10, float("inf"), 0.0]
    assert precision.tf32(torch.tensor([float("nan")])).isnan().all()


def test_a_large_problem_streams_its_draws_and_keeps_the_table(monkeypatch):
    """Past precision.MEASURE_BYTES nothing is measured (the fp64 copies would double the problem) and
    only draw 0 stays whole: the constant check reads a fixed sample of each other draw's outputs."""
    monkeypatch.setattr(precision, "MEASURE_BYTES", 0)
    monkeypatch.setattr(screen, "SAMPLE", 64)
    report = _screen("class Model(nn.Module):\n    def forward(self, a, b):\n        return a * b + 1e-3 * b\n",
                     "[torch.randn(1000), torch.randn(1000)]")
    assert report.status == "ok" and report.tolerances[0]["basis"] == "table"
    assert report.tolerances[0]["why"].startswith("not measured")
    flat = _screen("class Model(nn.Module):\n    def forward(self, x):\n        return 1.0 + 1e-5 * x\n",
                   "[torch.rand(4096)]")
    assert flat.status == "degenerate" and "constant" in flat.reason


@pytest.mark.parametrize("det", [False, True])
def test_a_large_comparison_in_slices_gives_the_whole_tensors_verdict_and_figures(monkeypatch, det):
    """Outputs past tolerance.CHUNK elements are compared slice by slice (bounded temporaries: 4 x 64 MiB
    at any size); the verdict and its figures are those of the whole-tensor comparison."""
    torch.manual_seed(0)
    r = torch.randn(30_011)
    nonfinite = r.clone()
    nonfinite[[7, 20_000]] = torch.tensor([float("nan"), float("inf")])
    spurious = nonfinite.clone()
    spurious[11] = float("nan")
    one_off = r.clone()
    one_off[29_999] += 1.0
    huge = r.clone()
    huge[5] = 3e38  # finite, its difference from -3e38 overflows float32
    flipped = huge.clone()
    flipped[5] = -3e38
    signs = nonfinite.clone()
    signs[20_000] = float("-inf")  # an infinity where the reference has one of the other sign
    cases = [(r + 1e-6 * torch.randn_like(r), r), (r + 1e-2 * torch.randn_like(r), r), (one_off, r),
             (huge + 1e-7, huge), (flipped, huge), (signs, nonfinite),
             (nonfinite + 1e-7, nonfinite), (spurious, nonfinite), (r.half(), r.half()),
             (torch.arange(30_011), torch.arange(30_011)), (torch.arange(30_011) // 2, torch.arange(30_011))]
    for out, ref in cases:
        whole = tolerance.compare(out, ref, det=det)
        monkeypatch.setattr(tolerance, "CHUNK", 1_000)
        sliced = tolerance.compare(out, ref, det=det)
        monkeypatch.setattr(tolerance, "CHUNK", 1 << 24)
        assert sliced[0] == whole[0]
        for key, value in whole[1].items():
            assert sliced[1][key] == (pytest.approx(value, rel=1e-5) if isinstance(value, float) else value), key


def test_the_sliced_comparisons_buffers_are_on_the_compared_tensors_device():
    """A reference on a GPU compares its own runs there: buffers on the host made every sliced comparison
    of a CUDA output a mixed-device error (the reference's `problem_error` for any 512 MiB+ output)."""
    scratch = tolerance._Scratch(8, torch.float32, torch.device("meta"))
    assert scratch.take("d", 5).device.type == "meta"
    assert scratch.cast("o", torch.zeros(5, dtype=torch.float16, device="meta")).device.type == "meta"


@pytest.mark.gpu
def test_a_sliced_comparison_on_a_gpu_agrees_with_the_whole(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch.manual_seed(0)
    r = torch.randn(30_011, device="cuda")
    for out in (r + 1e-6 * torch.randn_like(r), r.half().float(), r + 1.0):
        whole = tolerance.compare(out, r, det=False)
        monkeypatch.setattr(tolerance, "CHUNK", 1_000)
        sliced = tolerance.compare(out, r, det=False)
        monkeypatch.setattr(tolerance, "CHUNK", 1 << 24)
        assert sliced[0] == whole[0], (sliced, whole)
