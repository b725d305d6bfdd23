"""Triton's builtins and the habits of written answers, each in a small honest kernel: the CPU lane
passes every one, as a GPU does (issue 30, family 5: an honest kernel the GPU passes passes here too).

Probed 2026-12-02 at b320b85 (bench/RESULTS.md, "Twenty-first session, CPU box"): all passed; these keep
them so. Not covered: builtins that exist only as PTX (`tl.inline_asm_elementwise`), which the
interpreter cannot run.
"""
from __future__ import annotations

import pytest

HEAD = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


def _problem(expr: str, inputs: str = "[torch.randn(8, 64)]") -> str:
    return HEAD + f"""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return {expr}
def get_inputs():
    return {inputs}
def get_init_inputs():
    return []
"""


def _rowwise(body: str, out: str = "torch.empty_like(x)") -> str:
    """One program per row of N elements; `body` computes `y` from `x` (and stores it when it says so)."""
    store = "" if "tl.store" in body or "atomic" in body else "\n    tl.store(y_ptr + row * N + offs, y)"
    return HEAD + f"""
@triton.jit
def k(x_ptr, y_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + row * N + offs)
{body}{store}

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        x = x.contiguous()
        y = {out}
        k[(x.shape[0],)](x, y, N=x.shape[1])
        return y
"""


BUILTINS = {
    "exp2_log2": ("torch.exp(x) + torch.log(x.abs() + 1)",
                  "    y = tl.exp2(x * 1.4426950408889634) + tl.log2(tl.abs(x) + 1) * 0.6931471805599453"),
    "div_rn_sqrt_rn": ("torch.sqrt(x.abs()) / (x.abs() + 1)", "    y = tl.div_rn(tl.sqrt_rn(tl.abs(x)), tl.abs(x) + 1)"),
    "fdiv_ieee": ("x / 3.0", "    y = tl.fdiv(x, tl.full(x.shape, 3.0, tl.float32), ieee_rounding=True)"),
    "clamp_propagate_nan": ("torch.clamp(x, -0.5, 0.5)", "    y = tl.clamp(x, -0.5, 0.5, propagate_nan=tl.PropagateNan.ALL)"),
    "minimum_propagate_nan": ("torch.minimum(x, torch.zeros_like(x))",
                              "    y = tl.minimum(x, tl.zeros_like(x), propagate_nan=tl.PropagateNan.ALL)"),
    "libdevice_erf_pow": ("torch.erf(x) + torch.pow(x.abs(), 1.5)",
                          "    y = tl.extra.cuda.libdevice.erf(x) + tl.extra.cuda.libdevice.pow(tl.abs(x), 1.5)"),
    "sort_descending": ("torch.sort(x, dim=1, descending=True)[0]", "    y = tl.sort(x, descending=True)"),
    "flip": ("torch.flip(x, [1])", "    y = tl.flip(x, 0)"),
    "cumsum_reverse": ("torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])", "    y = tl.cumsum(x, 0, reverse=True)"),
    "gather": ("torch.flip(x, [1])", "    y = tl.gather(x, N - 1 - offs, 0)"),
    "bitcast_roundtrip": ("x * 2", "    y = x.to(tl.int32, bitcast=True).to(tl.float32, bitcast=True) * 2"),
    "expand_broadcast": ("x - x.mean(1, keepdim=True)",
                         "    m = tl.sum(x, 0) / N\n    y = x - tl.broadcast_to(tl.expand_dims(m, 0), (N,))"),
    "permute_trans_reshape": ("x * 1.5", "    t = tl.permute(tl.reshape(x, (N // 8, 8)), (1, 0))\n"
                                         "    y = tl.reshape(tl.trans(t), (N,)) * 1.5"),
    "assume_debug_barrier": ("x + 1", "    tl.assume(N > 0)\n    tl.debug_barrier()\n    y = x + 1"),
    "hints_static_assert": ("x + 1", "    o = tl.max_contiguous(tl.multiple_of(offs, N), N)\n    tl.static_assert(N >= 16)\n"
                                     "    y = tl.load(x_ptr + row * N + o) + 1"),
    "rand_seeded": ("x + 1", "    r = tl.rand(1234, row * N + offs)\n    y = tl.where(r >= 0.0, 1.0, 0.0) + x"),
    "umulhi_swizzle": ("x + 2", "    h = tl.umulhi(offs.to(tl.uint32), offs.to(tl.uint32))\n"
                                "    i, j = tl.swizzle2d(row, 0, 8, 1, 4)\n    y = x + 2 + (h * 0).to(tl.float32) + (i * 0 + j * 0)"),
    "device_print": ("x + 1", '    tl.device_print("row", row)\n    y = x + 1'),
}
OTHER_OUTPUTS = {
    "cumprod": (_problem("torch.cumprod(x, 1)", "[torch.rand(8, 64) + 0.5]"), _rowwise("    y = tl.cumprod(x, 0)")),
    "argmin": (_problem("torch.argmin(x, 1)"),
               _rowwise("    tl.store(y_ptr + row, tl.argmin(x, 0).to(tl.int64))",
                        "torch.empty(x.shape[0], dtype=torch.int64, device=x.device)")),
    "atomic_max": (_problem("x.amax(1)"), _rowwise("    tl.atomic_max(y_ptr + row, tl.max(x, 0))",
                                                   "torch.full((x.shape[0],), float('-inf'), device=x.device)")),
    "range_stages_unroll": (_problem("x.sum(1)"), HEAD + """
@triton.jit
def k(x_ptr, y_ptr, N: tl.constexpr, B: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((B,), tl.float32)
    for s in tl.range(0, N, B, num_stages=2, loop_unroll_factor=2):
        acc += tl.load(x_ptr + row * N + s + tl.arange(0, B))
    tl.store(y_ptr + row, tl.sum(acc, 0))

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        y = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        k[(x.shape[0],)](x, y, N=x.shape[1], B=16)
        return y
"""),
}
# Habits of written answers in forward: a debugging print, a warning, shape asserts, a cached helper of
# `math`, `torch.no_grad` around the launch, `num_stages`/`num_warps` given with a positional constexpr.
ADD_KERNEL = """
@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs, mask=mask), mask=mask)
"""
HABITS = {
    "print_and_warn": 'import warnings\n{k}\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n'
                      '        print("add", a.shape)\n        warnings.warn("a slow path")\n        {launch}',
    "asserts_math_lru": 'import functools\nimport math\n{k}\n@functools.lru_cache(maxsize=None)\ndef block(n):\n'
                        '    return max(16, min(1024, triton.next_power_of_2(int(math.sqrt(n)))))\n'
                        'class ModelNew(nn.Module):\n    def forward(self, a, b):\n'
                        '        assert a.shape == b.shape, "shape mismatch"\n        {launch}',
    "no_grad_positional": '{k}\nclass ModelNew(nn.Module):\n    @torch.no_grad()\n    def forward(self, a, b):\n'
                          '        out = torch.empty(a.shape, dtype=a.dtype, device=a.device)\n'
                          '        add_kernel[(triton.cdiv(a.numel(), 512),)](a, b, out, a.numel(), 512, num_warps=4, num_stages=2)\n'
                          '        return out',
}
LAUNCH = ("out = torch.empty_like(a)\n        add_kernel[(triton.cdiv(out.numel(), 1024),)](a, b, out, out.numel(), "
          "BLOCK=1024)\n        return out")


@pytest.mark.parametrize("name", list(BUILTINS))
def test_a_builtin_runs_on_the_cpu_lane_as_on_a_gpu(pool, name):
    expr, body = BUILTINS[name]
    verdict = pool.verify(_problem(expr), _rowwise(body))
    assert verdict.status == "pass", verdict.reason


@pytest.mark.parametrize("name", list(OTHER_OUTPUTS))
def test_a_builtin_with_its_own_output_shape_passes(pool, name):
    verdict = pool.verify(*OTHER_OUTPUTS[name])
    assert verdict.status == "pass", verdict.reason


@pytest.mark.parametrize("name", list(HABITS))
def test_a_written_answers_habits_in_forward_pass(pool, name):
    from tests.distill.verifier.conftest import problem

    source = HEAD + HABITS[name].format(k=ADD_KERNEL, launch=LAUNCH)
    verdict = pool.verify(problem("add"), source)
    assert verdict.status == "pass", verdict.reason


def test_a_builtin_this_triton_lacks_fails_to_compile_as_on_a_gpu(pool):
    """`tl.math.fast_expf` is not in Triton 3.6's math module (libdevice has it): a GPU's compile fails."""
    verdict = pool.verify(_problem("torch.exp(x)"), _rowwise("    y = tl.math.fast_expf(x)"))
    assert verdict.status == "compile_error", verdict.reason
