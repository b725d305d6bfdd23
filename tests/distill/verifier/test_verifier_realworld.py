"""Real-world Triton styles on the CPU lane: the interpreter shims and the GPU compile check.

Through a real verifier pool: autotune runs every config once on the real arguments with its hooks
and keeps each in turn; libdevice calls (in every import style) agree with torch; float and bool
scalars behave as on a GPU; kernels no GPU compiles are `compile_error`. In this process: every
numpy libdevice symbol against torch or an exact reference, and the GPU compile's cache. The honest
corpus itself (cases.json "honest") runs in test_verifier_pool.py.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from distill.verifier import Verdict
from distill.verifier.sandbox import gpu_compile, libdevice_np
from tests.distill.verifier.conftest import MANIFEST, honest, hostile, problem

RNG = np.random.default_rng(0)


# -- autotune --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,configs", [("tutorial_matmul", 3), ("splitk_matmul", 2), ("autotune_restore", 3),
                                          ("autotune_prehook", 2)])
def test_autotune_runs_every_config_once_then_only_the_kept_one(honest_verdict, name, configs):
    v = honest_verdict(name)  # the honest control's verification (test_verifier_pool.py), not a second one
    assert v.status == "pass", v.reason
    launches = [t["launches"] for t in v.checks["trials"]]
    assert launches[0] == configs + 1 and set(launches[1:]) == {1}, launches


@pytest.mark.parametrize("name,hook", [("autotune_restore", 'restore_value=["acc_ptr"],'),
                                       ("splitk_matmul", 'reset_to_zero=["c_ptr"],'),
                                       ("autotune_prehook", ", pre_hook=zero_output")])
def test_autotune_benchmarks_on_the_real_arguments_around_its_hooks(pool, name, hook):
    """Without the hook the benchmarked configs leave their writes in the output, as on a GPU."""
    source = honest(name)
    assert hook in source
    v = pool.verify(problem(name), source.replace(hook, ""))
    assert v.status == "wrong_output", v.reason


CONFIGS_SCALE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({{"SCALE": {first}}}), triton.Config({{"SCALE": {second}}})], key=["n"])
@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, (tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask)) * SCALE,
             mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 256),)](a, b, out, a.numel(), BLOCK=256)
        return out
'''


def test_every_autotune_config_is_kept_in_turn(pool):
    """A GPU's autotuner may keep either config: a wrong one fails wherever it is listed."""
    assert pool.verify(problem("add"), CONFIGS_SCALE.format(first=1, second=3)).status == "wrong_output"
    assert pool.verify(problem("add"), CONFIGS_SCALE.format(first=3, second=1)).status == "wrong_output"
    assert pool.verify(problem("add"), CONFIGS_SCALE.format(first=1, second=1)).status == "pass"


OVERSIZED = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BM": 128, "BN": 128, "BK": 128}, num_warps=4, num_stages=4),
                          triton.Config({"BM": 16, "BN": 16, "BK": 32}, num_warps=2, num_stages=2)],
                 key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))
        matmul_kernel[grid](a, b, c, M, N, K)
        return c
'''


def test_a_config_over_the_gpus_shared_memory_is_skipped_as_on_a_gpu(pool):
    """The first config needs 512 KiB of shared memory (an H100 block has 227): the GPU compile raises
    OutOfResources for it, as Triton's launcher does, so the autotuner skips it and only the second
    config runs, at the benchmark and in every trial."""
    v = pool.verify(problem("matmul"), OVERSIZED)
    assert v.status == "pass", v.reason
    assert [t["launches"] for t in v.checks["trials"]][:3] == [2, 1, 1]


# -- libdevice, end to end ---------------------------------------------------------------------------------
# (kernel expression on x, y in (0.1, 0.9), torch reference): the import styles of public kernels.
LIBDEVICE_CALLS = [
    ("libdevice.exp(x)", "torch.exp(x)"), ("libdevice.exp2(x)", "torch.exp2(x)"), ("libdevice.log(x)", "torch.log(x)"),
    ("libdevice.log2(x)", "torch.log2(x)"), ("libdevice.log1p(x)", "torch.log1p(x)"),
    ("libdevice.expm1(x)", "torch.expm1(x)"), ("libdevice.sqrt(x)", "torch.sqrt(x)"),
    ("libdevice.rsqrt(x)", "torch.rsqrt(x)"), ("ld_tanh(x * 4 - 2)", "torch.tanh(x * 4 - 2)"),
    ("cuda_libdevice.erf(x * 4 - 2)", "torch.erf(x * 4 - 2)"), ("libdevice.erfc(x)", "torch.erfc(x)"),
    ("libdevice.erfinv(x * 2 - 1)", "torch.erfinv(x * 2 - 1)"), ("libdevice.pow(x, y * 3)", "torch.pow(x, y * 3)"),
    ("libdevice.fma(x, y, x)", "x * y + x"), ("tl.extra.cuda.libdevice.sin(x * 6)", "torch.sin(x * 6)"),
    ("libdevice.cos(x * 6)", "torch.cos(x * 6)"), ("libdevice.tan(x)", "torch.tan(x)"),
    ("libdevice.asin(x)", "torch.asin(x)"), ("libdevice.acos(x)", "torch.acos(x)"), ("libdevice.atan(x)", "torch.atan(x)"),
    ("libdevice.atan2(x - 0.5, y - 0.5)", "torch.atan2(x - 0.5, y - 0.5)"), ("libdevice.sinh(x)", "torch.sinh(x)"),
    ("libdevice.cosh(x)", "torch.cosh(x)"), ("libdevice.lgamma(x * 5)", "torch.lgamma(x * 5)"),
    ("libdevice.floor(x * 7 - 3)", "torch.floor(x * 7 - 3)"), ("libdevice.ceil(x * 7 - 3)", "torch.ceil(x * 7 - 3)"),
    ("libdevice.trunc(x * 7 - 3)", "torch.trunc(x * 7 - 3)"),
    ("libdevice.round(x * 7 - 3)", "torch.sign(x * 7 - 3) * torch.floor(torch.abs(x * 7 - 3) + 0.5)"),
    ("libdevice.nearbyint(x * 7 - 3)", "torch.round(x * 7 - 3)"), ("libdevice.fmod(x * 7, y)", "torch.fmod(x * 7, y)"),
    ("libdevice.isnan(libdevice.log(x - 0.5)).to(tl.float32)", "torch.isnan(torch.log(x - 0.5)).float()"),
    ("libdevice.isinf(libdevice.log(libdevice.floor(x * 2))).to(tl.float32)",
     "torch.isinf(torch.log(torch.floor(x * 2))).float()"),
    ("libdevice.signbit(x - 0.5).to(tl.float32)", "torch.signbit(x - 0.5).float()"),
    ("libdevice.fast_expf(x)", "torch.exp(x)"), ("libdevice.fast_logf(x)", "torch.log(x)"),
    ("libdevice.copysign(x, y - 0.5)", "torch.copysign(x, y - 0.5)"), ("libdevice.hypot(x, y)", "torch.hypot(x, y)"),
]

LIBDEVICE_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return ({refs},)


def get_inputs():
    return [torch.rand(200) * 0.8 + 0.1, torch.rand(200) * 0.8 + 0.1]


def get_init_inputs():
    return []
'''

LIBDEVICE_CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda import libdevice as cuda_libdevice
from triton.language.extra.libdevice import tanh as ld_tanh


@triton.jit
def libdevice_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.5)
    y = tl.load(y_ptr + offs, mask=m, other=0.5)
{stores}


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty(({count}, x.numel()), dtype=x.dtype, device=x.device)
        libdevice_kernel[(1,)](x, y, out, x.numel(), BLOCK=256)
        return tuple(out.unbind(0))
'''


def _libdevice_pair() -> tuple[str, str]:
    """A problem returning each torch reference and a candidate storing each libdevice call, in order."""
    refs = ", ".join(ref for _, ref in LIBDEVICE_CALLS)
    stores = "\n".join(f"    tl.store(out_ptr + {i} * n + offs, {call}, mask=m)" for i, (call, _) in enumerate(LIBDEVICE_CALLS))
    return LIBDEVICE_PROBLEM.format(refs=refs), LIBDEVICE_CANDIDATE.format(stores=stores, count=len(LIBDEVICE_CALLS))


def test_libdevice_calls_in_every_import_style_match_torch(pool):
    v = pool.verify(*_libdevice_pair())
    bad = re.search(r"output (\d+) differs", v.reason)
    assert v.status == "pass", (LIBDEVICE_CALLS[int(bad.group(1))] if bad else None, v.reason)


# -- scalar arguments ----------------------------------------------------------------------------------------
SCALARS = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, n, alpha, add_x, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    tl.static_assert(alpha.dtype == tl.float32)  # a Python float reaches a GPU kernel as an fp32 scalar
    out = y * alpha.to(tl.float32)
    tl.static_assert(out.dtype == tl.float32)  # and, not being a constant, it promotes the fp16 block
    if add_x:  # a Python bool: an i1 scalar
        out += tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        scaled_add[(triton.cdiv(x.numel(), 512),)](x, y, out, x.numel(), 0.5, True, BLOCK=512)
        return out
'''


def test_float_and_bool_scalars_are_what_a_gpu_passes(pool):
    v = pool.verify(problem("flaggems_add_alpha"), SCALARS)
    assert v.status == "pass", v.reason


OUTSIDE_A_KERNEL = honest("liger_swiglu").replace("        c = torch.empty_like(a2)\n",
                                                 "        c = torch.empty_like(a2)\n        silu(a2)\n")


def test_a_jit_function_called_outside_a_kernel_raises_as_on_a_gpu(pool):
    assert "silu(a2)" in OUTSIDE_A_KERNEL
    v = pool.verify(problem("liger_swiglu"), OUTSIDE_A_KERNEL)
    assert v.status == "runtime_error" and "outside of the scope of a kernel" in v.reason, v.reason
    after = pool.verify(problem("tutorial_matmul"), honest("tutorial_matmul"))  # compiles as before
    assert after.status == "pass", after.reason


# -- the GPU compile ---------------------------------------------------------------------------------------
GPU_IMPOSSIBLE = [c for c in MANIFEST["cases"] if c["family"] == "gpu_compile"]


@pytest.mark.parametrize("case", GPU_IMPOSSIBLE, ids=lambda c: c["name"])
def test_kernels_no_gpu_compiles_are_compile_errors(pool, case):
    v = pool.verify(problem(case["problem"]), hostile(case["name"]))
    assert v.status == "compile_error", v.reason
    assert "does not compile for a GPU" in v.reason and "add_kernel" in v.reason


@pytest.mark.parametrize("name", ["tutorial_matmul", "welford_layernorm", "attorch_mish", "unsloth_softcap_ce"])
def test_honest_kernels_are_compiled_for_the_gpu_and_pass(honest_verdict, name):
    v = honest_verdict(name)  # the honest control's verification (test_verifier_pool.py), not a second one
    assert v.status == "pass", v.reason
    assert v.checks["phase_s"]["run.gpu_compile"] > 0


interpreting = pytest.mark.skipif(not triton.knobs.runtime.interpret, reason="needs TRITON_INTERPRET=1 at import")


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, _twice(tl.sigmoid(tl.load(x_ptr + offs, mask=mask))) + tl.sum(offs, axis=0), mask=mask)


def _halve(x):
    return x / 2


@triton.jit
def _plain_helper_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, _halve(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


_PAYS_ONCE = """
import pytest, torch
from distill.verifier.sandbox import gpu_compile
from tests.distill.verifier.test_verifier_realworld import _plain_helper_kernel, _scale_kernel

gpu_compile.prepare()
gpu_compile.forget()
x, out = torch.randn(64), torch.empty(64)
gpu_compile.check(_scale_kernel, (x, out, 64), {"BLOCK": 64})
gpu_compile.check(_scale_kernel, (x, out, 64), {"BLOCK": 64})
assert gpu_compile.spent()["gpu_compiles"] == 1
gpu_compile.check(_scale_kernel, (x, out, 64), {"BLOCK": 128})  # another constexpr, another kernel
gpu_compile.check(_scale_kernel, (x, out, 64), {"BLOCK": 64, "num_warps": 8})  # other options too
assert gpu_compile.spent()["gpu_compiles"] == 3
for _ in range(2):  # a failure is kept too, and raised again without compiling
    with pytest.raises(gpu_compile.GpuCompileError, match="_halve"):
        gpu_compile.check(_plain_helper_kernel, (x, out, 64), {"BLOCK": 64})
assert gpu_compile.spent()["gpu_compiles"] == 4
gpu_compile.forget()
assert gpu_compile.spent()["gpu_compiles"] == 0
"""


@interpreting
def test_the_gpu_compile_pays_once_per_kernel_and_specialization():
    # A fresh process, as a worker is: interpreted launches earlier in this one (other tests) may have
    # left triton.language patched, which only the worker's launch scope undoes.
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    r = subprocess.run([sys.executable, "-c", _PAYS_ONCE], cwd=repo, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


@interpreting
def test_the_gpu_compile_refuses_launches_the_gpu_launcher_refuses():
    gpu_compile.prepare()
    x, out = torch.randn(64), torch.empty(64)
    with pytest.raises(TypeError, match="dtype"):  # a dtype for a non-constexpr parameter
        gpu_compile.check(_scale_kernel, (x, out, tl.float32), {"BLOCK": 64})
    with pytest.raises(KeyError, match="BLOK"):  # a keyword the kernel does not have
        gpu_compile.check(_scale_kernel, (x, out, 64), {"BLOCK": 64, "BLOK": 3})
    gpu_compile.forget()


# -- libdevice's numpy table, symbol by symbol -------------------------------------------------------------
def _u(lo: float, hi: float) -> tuple[float, float]:
    """A float domain (a tuple of ints is an integer one)."""
    return (float(lo), float(hi))


# name: (torch reference on float64 tensors, domain of each argument); symbols __nv_<name>f and __nv_<name>.
FLOAT_REFS = {
    "acos": (torch.acos, [_u(-0.99, 0.99)]), "asin": (torch.asin, [_u(-0.99, 0.99)]), "atan": (torch.atan, [_u(-5, 5)]),
    "acosh": (torch.acosh, [_u(1.01, 9)]), "asinh": (torch.asinh, [_u(-5, 5)]), "atanh": (torch.atanh, [_u(-0.9, 0.9)]),
    "cos": (torch.cos, [_u(-6, 6)]), "sin": (torch.sin, [_u(-6, 6)]), "tan": (torch.tan, [_u(-1.4, 1.4)]),
    "cosh": (torch.cosh, [_u(-5, 5)]), "sinh": (torch.sinh, [_u(-5, 5)]), "tanh": (torch.tanh, [_u(-5, 5)]),
    "exp": (torch.exp, [_u(-20, 20)]), "exp2": (torch.exp2, [_u(-20, 20)]),
    "exp10": (lambda x: torch.pow(10.0, x), [_u(-5, 5)]), "expm1": (torch.expm1, [_u(-3, 3)]),
    "log": (torch.log, [_u(0.01, 100)]), "log2": (torch.log2, [_u(0.01, 100)]), "log10": (torch.log10, [_u(0.01, 100)]),
    "log1p": (torch.log1p, [_u(-0.9, 10)]), "sqrt": (torch.sqrt, [_u(0, 100)]), "rsqrt": (torch.rsqrt, [_u(0.01, 100)]),
    "cbrt": (lambda x: torch.sign(x) * x.abs().pow(1 / 3), [_u(-50, 50)]),
    "rcbrt": (lambda x: 1 / (torch.sign(x) * x.abs().pow(1 / 3)), [_u(0.1, 50)]),
    "ceil": (torch.ceil, [_u(-9, 9)]), "floor": (torch.floor, [_u(-9, 9)]), "trunc": (torch.trunc, [_u(-9, 9)]),
    "round": (lambda x: torch.sign(x) * torch.floor(x.abs() + 0.5), [_u(-9, 9)]), "rint": (torch.round, [_u(-9, 9)]),
    "nearbyint": (torch.round, [_u(-9, 9)]), "fabs": (torch.abs, [_u(-9, 9)]),
    "cospi": (lambda x: torch.cos(math.pi * x), [_u(-2, 2)]), "sinpi": (lambda x: torch.sin(math.pi * x), [_u(-2, 2)]),
    "erf": (torch.erf, [_u(-3, 3)]), "erfc": (torch.erfc, [_u(-3, 3)]), "erfinv": (torch.erfinv, [_u(-0.999, 0.999)]),
    "erfcinv": (lambda y: torch.erfinv(1 - y), [_u(0.001, 1.999)]), "erfcx": (torch.special.erfcx, [_u(-2, 30)]),
    "normcdf": (torch.special.ndtr, [_u(-5, 5)]), "normcdfinv": (torch.special.ndtri, [_u(0.001, 0.999)]),
    "lgamma": (torch.lgamma, [_u(0.05, 20)]), "tgamma": (lambda x: torch.exp(torch.lgamma(x)), [_u(0.05, 10)]),
    "logb": (lambda x: torch.floor(torch.log2(x.abs())), [_u(-1000, 1000)]),
    "ilogb": (lambda x: torch.floor(torch.log2(x.abs())), [_u(-1000, 1000)]),
    "cyl_bessel_i0": (torch.special.i0, [_u(-5, 5)]), "llrint": (torch.round, [_u(-9, 9)]),
    "llround": (lambda x: torch.sign(x) * torch.floor(x.abs() + 0.5), [_u(-9, 9)]),
    "fmod": (torch.fmod, [_u(-9, 9), _u(0.5, 3)]),
    "remainder": (lambda x, y: x - torch.round(x / y) * y, [_u(-9, 9), _u(0.5, 3)]),
    "pow": (torch.pow, [_u(0.1, 5), _u(-3, 3)]), "atan2": (torch.atan2, [_u(-5, 5), _u(-5, 5)]),
    "copysign": (torch.copysign, [_u(-5, 5), _u(-5, 5)]),
    "fdim": (lambda x, y: torch.clamp(x - y, min=0), [_u(-5, 5), _u(-5, 5)]),
    "hypot": (torch.hypot, [_u(-5, 5), _u(-5, 5)]), "rhypot": (lambda x, y: 1 / torch.hypot(x, y), [_u(0.1, 5), _u(0.1, 5)]),
    "nextafter": (torch.nextafter, [_u(-5, 5), _u(-5, 5)]),
    "ldexp": (lambda x, n: torch.ldexp(x, n), [_u(-5, 5), (-8, 8)]),
    "scalbn": (lambda x, n: torch.ldexp(x, n), [_u(-5, 5), (-8, 8)]),
    "powi": (lambda x, n: torch.pow(x, n), [_u(0.5, 2), (-4, 4)]),
    "fma": (lambda x, y, z: x * y + z, [_u(-5, 5)] * 3),
    "norm3d": (lambda a, b, c: torch.sqrt(a * a + b * b + c * c), [_u(-5, 5)] * 3),
    "rnorm3d": (lambda a, b, c: torch.rsqrt(a * a + b * b + c * c), [_u(0.1, 5)] * 3),
    "norm4d": (lambda a, b, c, d: torch.sqrt(a * a + b * b + c * c + d * d), [_u(-5, 5)] * 4),
    "rnorm4d": (lambda a, b, c, d: torch.rsqrt(a * a + b * b + c * c + d * d), [_u(0.1, 5)] * 4),
}
# Arguments that are integers (an int32 exponent or shift); the rest are floats of the symbol's width.
INT_ARGS = {"ldexp": {1}, "scalbn": {1}, "powi": {1}}
# Exact on both sides, so compared bit for bit.
EXACT = {"ceil", "floor", "trunc", "round", "rint", "nearbyint", "fabs", "copysign", "nextafter", "ldexp", "scalbn",
         "logb", "ilogb", "llrint", "llround", "fmod", "fdim"}


def _sample(domain: tuple, dtype: type, name: str, n: int = 257) -> np.ndarray:
    if isinstance(domain[0], int):
        return RNG.integers(domain[0], domain[1] + 1, n).astype(np.int32)
    x = RNG.uniform(domain[0], domain[1], n)
    if name in ("round", "rint", "nearbyint", "llrint", "llround"):
        x[:40] = np.arange(-20, 20) / 2.0  # exact halves: where the rounding rules differ
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(FLOAT_REFS))
def test_float_functions_match_torch(name, dtype):
    ref, domains = FLOAT_REFS[name]
    args = [_sample(d, dtype, name) for d in domains]
    symbol = f"__nv_{name}f" if dtype is np.float32 else f"__nv_{name}"
    got = np.asarray(libdevice_np.SYMBOLS[symbol](*args), dtype=np.float64)
    # Exact functions are compared in the symbol's own width, the others against float64.
    width = dtype if name in EXACT else np.float64
    want = ref(*[torch.from_numpy(a.astype(np.int64 if i in INT_ARGS.get(name, ()) else width))
                 for i, a in enumerate(args)]).double().numpy()
    if name in EXACT:
        np.testing.assert_array_equal(got, want)
    else:
        # float32: a few ulp of the result; float64: numpy, math or torch's own few-ulp differences
        rtol = 4e-6 if dtype is np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 10)


def test_special_values_and_fast_math():
    x = np.array([-np.inf, -2.5, -0.0, 0.0, 0.5, 1.5, np.inf, np.nan], dtype=np.float32)
    s = libdevice_np.SYMBOLS
    for width in ("f", "d"):
        nan, inf = f"__nv_isnan{width}", f"__nv_isinf{width}"
        np.testing.assert_array_equal(s[nan](x), np.isnan(x))
        np.testing.assert_array_equal(s[inf](x), np.isinf(x))
        np.testing.assert_array_equal(s[f"__nv_signbit{width}"](x), torch.signbit(torch.from_numpy(x)).numpy())
    np.testing.assert_array_equal(s["__nv_finitef"](x), np.isfinite(x))
    np.testing.assert_array_equal(s["__nv_isfinited"](x), np.isfinite(x))
    np.testing.assert_array_equal(s["__nv_saturatef"](x), np.array([0, 0, 0, 0, 0.5, 1, 1, 0], dtype=np.float32))
    y = RNG.uniform(0.1, 4, 100).astype(np.float32)
    t = torch.from_numpy(y.astype(np.float64))
    fast = {"sinf": torch.sin, "cosf": torch.cos, "tanf": torch.tan, "expf": torch.exp, "exp10f": lambda v: 10 ** v,
            "logf": torch.log, "log2f": torch.log2, "log10f": torch.log10}
    for name, ref in fast.items():
        np.testing.assert_allclose(s[f"__nv_fast_{name}"](y), ref(t).numpy(), rtol=4e-6)
    np.testing.assert_allclose(s["__nv_fast_powf"](y, y), (t ** t).numpy(), rtol=4e-6)
    np.testing.assert_allclose(s["__nv_fast_fdividef"](y, y + 1), (t / (t + 1)).numpy(), rtol=4e-6)
    np.testing.assert_allclose(s["__nv_frsqrt_rn"](y), torch.rsqrt(t).numpy(), rtol=4e-6)
    np.testing.assert_array_equal(s["__nv_lgammaf"](np.array([0.0, -1.0], dtype=np.float32)), [np.inf, np.inf])
    assert np.isnan(s["__nv_tgammaf"](np.array([-1.0], dtype=np.float32))[0])


_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
        "rcp": lambda a: 1 / a, "sqrt": np.sqrt, "fma": lambda a, b, c: a * b + c}


@pytest.mark.parametrize("op", sorted(_OPS))
def test_explicitly_rounded_arithmetic_rounds_in_its_mode(op):
    arity = {"rcp": 1, "sqrt": 1, "fma": 3}.get(op, 2)
    args = [RNG.uniform(0.1, 10, 2000).astype(np.float32) for _ in range(arity)]
    exact = _OPS[op](*[a.astype(np.float64) for a in args])  # exact or within a float64 rounding of it
    name = "fmaf" if op == "fma" else f"f{op}"
    got = {mode: libdevice_np.SYMBOLS[f"__nv_{name}_{mode}"](*args) for mode in ("rn", "rz", "rd", "ru")}
    np.testing.assert_array_equal(got["rn"], exact.astype(np.float32))
    assert (got["rd"] <= exact).all() and (np.nextafter(got["rd"], np.float32(np.inf)) > exact).all()
    assert (got["ru"] >= exact).all() and (np.nextafter(got["ru"], np.float32(-np.inf)) < exact).all()
    np.testing.assert_array_equal(got["rz"], np.where(exact >= 0, got["rd"], got["ru"]))
    assert (got["ru"] > got["rd"]).any()
    wide = [a.astype(np.float64) for a in args]
    dname = "fma" if op == "fma" else f"d{op}"
    np.testing.assert_array_equal(libdevice_np.SYMBOLS[f"__nv_{dname}_rn"](*wide), _OPS[op](*wide))
    for mode in ("rz", "rd", "ru"):  # within one ulp of the float64 result
        np.testing.assert_allclose(libdevice_np.SYMBOLS[f"__nv_{dname}_{mode}"](*wide), _OPS[op](*wide), rtol=3e-16)


def test_conversions_round_and_saturate_like_the_hardware():
    s = libdevice_np.SYMBOLS
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.7, 3e9, -3e9, np.nan], dtype=np.float32)
    t = torch.from_numpy(x.astype(np.float64)).nan_to_num(0.0)
    rules = {"rn": torch.round, "rz": torch.trunc, "rd": torch.floor, "ru": torch.ceil}
    for mode, rule in rules.items():
        for src, values in (("float", x), ("double", x.astype(np.float64))):
            np.testing.assert_array_equal(s[f"__nv_{src}2int_{mode}"](values),
                                          rule(t).clamp(-2**31, 2**31 - 1).long().numpy())
            np.testing.assert_array_equal(s[f"__nv_{src}2ll_{mode}"](values), rule(t).long().numpy())
            np.testing.assert_array_equal(s[f"__nv_{src}2uint_{mode}"](values), rule(t).clamp(0, 2**32 - 1).long().numpy())
            np.testing.assert_array_equal(s[f"__nv_{src}2ull_{mode}"](values).astype(np.float64),
                                          rule(t).clamp(min=0).numpy())
    ints = {"int": np.array([2**24 + 1, -(2**24 + 3), 2**30 + 3], dtype=np.int32),
            "uint": np.array([2**24 + 1, 2**31 + 5, 2**30 + 3], dtype=np.uint32),
            "ll": np.array([2**24 + 1, -(2**53 + 1), 2**62 + 3], dtype=np.int64),
            "ull": np.array([2**24 + 1, 2**53 + 1, 2**63 + 3], dtype=np.uint64)}
    for src, values in ints.items():
        exact = [int(v) for v in values]
        targets = [("float", np.float32)] + ([("double", np.float64)] if src in ("ll", "ull") else [])
        for name, ftype in targets:
            got = {m: [int(v) for v in s[f"__nv_{src}2{name}_{m}"](values)] for m in ("rn", "rz", "rd", "ru")}
            assert got["rn"] == [int(v) for v in values.astype(ftype)], (src, name)
            assert all(g <= e for g, e in zip(got["rd"], exact)) and all(g >= e for g, e in zip(got["ru"], exact))
            assert all(abs(g) <= abs(e) for g, e in zip(got["rz"], exact))
            assert got["rd"] != got["ru"], (src, name)  # these values are not representable
        np.testing.assert_array_equal(s[f"__nv_{src}2double_rn"](values), values.astype(np.float64))
    d = np.array([1 + 2**-30, -(1 + 2**-30)], dtype=np.float64)
    assert (s["__nv_double2float_rd"](d) <= d).all() and (s["__nv_double2float_ru"](d) >= d).all()
    np.testing.assert_array_equal(s["__nv_double2float_rz"](d), np.float32([1, -1]))
    np.testing.assert_array_equal(s["__nv_double2float_rn"](d), d.astype(np.float32))


def test_bit_casts_match_torch_views():
    s = libdevice_np.SYMBOLS
    f = torch.randn(50)
    d = torch.randn(50, dtype=torch.float64)
    np.testing.assert_array_equal(s["__nv_float_as_int"](f.numpy()), f.view(torch.int32).numpy())
    np.testing.assert_array_equal(s["__nv_float_as_uint"](f.numpy()), f.view(torch.int32).numpy().view(np.uint32))
    np.testing.assert_array_equal(s["__nv_int_as_float"](f.view(torch.int32).numpy()), f.numpy())
    np.testing.assert_array_equal(s["__nv_uint_as_float"](f.view(torch.int32).numpy().view(np.uint32)), f.numpy())
    np.testing.assert_array_equal(s["__nv_double_as_longlong"](d.numpy()), d.view(torch.int64).numpy())
    np.testing.assert_array_equal(s["__nv_longlong_as_double"](d.view(torch.int64).numpy()), d.numpy())
    hi, lo = s["__nv_double2hiint"](d.numpy()), s["__nv_double2loint"](d.numpy())
    np.testing.assert_array_equal(s["__nv_hiloint2double"](hi, lo), d.numpy())
    np.testing.assert_array_equal(hi, (d.view(torch.int64) >> 32).int().numpy())


def test_integer_helpers_match_python():
    s = libdevice_np.SYMBOLS
    a = RNG.integers(-2**31, 2**31, 300).astype(np.int32)
    b = RNG.integers(-2**31, 2**31, 300).astype(np.int32)
    c = RNG.integers(0, 2**31, 300).astype(np.int32)
    a64 = RNG.integers(-2**63, 2**63, 300, dtype=np.int64)
    b64 = RNG.integers(-2**63, 2**63, 300, dtype=np.int64)
    u = lambda v, bits: int(v) & ((1 << bits) - 1)  # noqa: E731
    wrap32 = lambda v: (v + 2**31) % 2**32 - 2**31  # noqa: E731
    sext24 = lambda v: (u(v, 24) ^ 0x800000) - 0x800000  # noqa: E731
    checks = {
        "__nv_popc": ([a], lambda x: bin(u(x, 32)).count("1")), "__nv_popcll": ([a64], lambda x: bin(u(x, 64)).count("1")),
        "__nv_clz": ([a], lambda x: 32 - u(x, 32).bit_length()), "__nv_clzll": ([a64], lambda x: 64 - u(x, 64).bit_length()),
        "__nv_ffs": ([a], lambda x: (u(x, 32) & -u(x, 32)).bit_length()),
        "__nv_ffsll": ([a64], lambda x: (u(x, 64) & -u(x, 64)).bit_length()),
        "__nv_brev": ([a], lambda x: wrap32(int(format(u(x, 32), "032b")[::-1], 2))),
        "__nv_brevll": ([a64], lambda x: (int(format(u(x, 64), "064b")[::-1], 2) + 2**63) % 2**64 - 2**63),
        "__nv_mulhi": ([a, b], lambda x, y: (int(x) * int(y)) >> 32),
        "__nv_umulhi": ([a.view(np.uint32), b.view(np.uint32)], lambda x, y: (int(x) * int(y)) >> 32),
        "__nv_mul64hi": ([a64, b64], lambda x, y: (int(x) * int(y)) >> 64),
        "__nv_umul64hi": ([a64.view(np.uint64), b64.view(np.uint64)], lambda x, y: (int(x) * int(y)) >> 64),
        "__nv_mul24": ([a, b], lambda x, y: wrap32(sext24(x) * sext24(y))),
        "__nv_umul24": ([a.view(np.uint32), b.view(np.uint32)], lambda x, y: (u(x, 24) * u(y, 24)) % 2**32),
        "__nv_hadd": ([a, b], lambda x, y: (int(x) + int(y)) >> 1),
        "__nv_rhadd": ([a, b], lambda x, y: (int(x) + int(y) + 1) >> 1),
        "__nv_uhadd": ([a.view(np.uint32), b.view(np.uint32)], lambda x, y: (int(x) + int(y)) >> 1),
        "__nv_urhadd": ([a.view(np.uint32), b.view(np.uint32)], lambda x, y: (int(x) + int(y) + 1) >> 1),
        "__nv_sad": ([a >> 2, b >> 2, c >> 2], lambda x, y, z: (abs(int(x) - int(y)) + int(z)) % 2**32),
        "__nv_usad": ([c, c[::-1].copy(), c >> 2], lambda x, y, z: (abs(int(x) - int(y)) + int(z)) % 2**32),
        "__nv_abs": ([a[a > -2**31]], abs), "__nv_llabs": ([a64[a64 > -2**63]], abs),
        "__nv_byte_perm": ([a, b, c & 0x7777], lambda x, y, sel: wrap32(sum(
            (((u(x, 32) | u(y, 32) << 32) >> (8 * ((int(sel) >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4)))),
    }
    for symbol, (args, ref) in checks.items():
        got = [int(v) for v in s[symbol](*args)]
        want = [int(ref(*vals)) for vals in zip(*args)]
        assert got == want, symbol


def test_every_mapped_symbol_is_checked_here_and_every_libdevice_symbol_is_mapped_or_documented():
    import triton.language.extra.cuda.libdevice as cuda_libdevice

    checked = {f"__nv_{n}{w}" for n in FLOAT_REFS for w in ("f", "")}
    checked |= {f"__nv_{p}{w}" for p in ("isnan", "isinf", "signbit") for w in ("f", "d")}
    checked |= {"__nv_finitef", "__nv_isfinited", "__nv_saturatef", "__nv_frsqrt_rn", "__nv_fast_powf",
                "__nv_fast_fdividef"} | {f"__nv_fast_{n}f" for n in ("sin", "cos", "tan", "exp", "exp10", "log", "log2",
                                                                    "log10")}
    checked |= {f"__nv_{p}{op}_{m}" for p in ("f", "d") for op in ("add", "sub", "mul", "div", "rcp", "sqrt")
                for m in ("rn", "rz", "rd", "ru")} | {f"__nv_fma{w}_{m}" for w in ("f", "") for m in ("rn", "rz", "rd", "ru")}
    checked |= {f"__nv_{f}2{i}_{m}" for f in ("float", "double") for i in ("int", "uint", "ll", "ull")
                for m in ("rn", "rz", "rd", "ru")}
    checked |= {f"__nv_{i}2float_{m}" for i in ("int", "uint", "ll", "ull") for m in ("rn", "rz", "rd", "ru")}
    checked |= {f"__nv_{i}2double_rn" for i in ("int", "uint", "ll", "ull")}
    checked |= {f"__nv_{i}2double_{m}" for i in ("ll", "ull") for m in ("rz", "rd", "ru")}
    checked |= {f"__nv_double2float_{m}" for m in ("rn", "rz", "rd", "ru")}
    checked |= {"__nv_float_as_int", "__nv_float_as_uint", "__nv_int_as_float", "__nv_uint_as_float",
                "__nv_double_as_longlong", "__nv_longlong_as_double", "__nv_double2hiint", "__nv_double2loint",
                "__nv_hiloint2double"}
    checked |= {"__nv_popc", "__nv_popcll", "__nv_clz", "__nv_clzll", "__nv_ffs", "__nv_ffsll", "__nv_brev",
                "__nv_brevll", "__nv_mulhi", "__nv_umulhi", "__nv_mul64hi", "__nv_umul64hi", "__nv_mul24", "__nv_umul24",
                "__nv_hadd", "__nv_rhadd", "__nv_uhadd", "__nv_urhadd", "__nv_sad", "__nv_usad", "__nv_abs",
                "__nv_llabs", "__nv_byte_perm"}
    assert checked == set(libdevice_np.SYMBOLS)
    with open(cuda_libdevice.__file__) as fh:
        in_triton = set(re.findall(r'"(__nv_\w+)"', fh.read()))
    uncovered = {f"__nv_{n}{w}" for n in ("j0", "j1", "y0", "y1", "jn", "yn", "cyl_bessel_i1") for w in ("f", "")}
    assert in_triton - set(libdevice_np.SYMBOLS) == uncovered | {"__nv_rcp64h"}
    assert set(libdevice_np.SYMBOLS) <= in_triton


def test_an_unknown_symbol_is_named():
    with pytest.raises(NotImplementedError, match="__nv_j0f"):
        libdevice_np.evaluate("__nv_j0f", [np.zeros(3, dtype=np.float32)], np.dtype(np.float32))


def test_patching_a_shim_is_forbidden(pool):
    source = honest("liger_geglu") + "\nfrom triton.language.extra import libdevice as ld\nld.tanh = ld.exp\n"
    v = pool.verify(problem("liger_geglu"), source, static_checks=False)
    assert v.status == "forbidden" and "triton.language.extra.libdevice.tanh" in v.reason, v.reason


# -- the same candidates on a GPU (`-m gpu`, run through the device tool; never collected in CI) -------------
def _both_lanes() -> list[tuple[str, str, str, str]]:
    """(id, problem, candidate, status): what the CPU tests above expect, which a GPU must agree with
    (where the lanes reject differently, the manifest's `gpu` status)."""
    cases = [("oversized_config", problem("matmul"), OVERSIZED, "pass"), ("scalars", problem("flaggems_add_alpha"),
                                                                          SCALARS, "pass")]
    cases.append(("libdevice", *_libdevice_pair(), "pass"))
    for name, hook in (("autotune_restore", 'restore_value=["acc_ptr"],'), ("splitk_matmul", 'reset_to_zero=["c_ptr"],'),
                       ("autotune_prehook", ", pre_hook=zero_output")):
        cases.append((f"{name}_without_hook", problem(name), honest(name).replace(hook, ""), "wrong_output"))
    # 'gpu': a GPU's own status where the lanes reject differently (class_global_own: Triton calls the
    # candidate's class at compile time on a GPU, which stores the unchanged block; the CPU lane refuses it)
    cases += [(c["name"], problem(c["problem"]), hostile(c["name"]), c.get("gpu", c["status"])) for c in GPU_IMPOSSIBLE]
    cases.append(("jit_call_outside_a_kernel", problem("liger_swiglu"), OUTSIDE_A_KERNEL, "runtime_error"))
    return cases


@pytest.fixture(scope="module")
def gpu_verdicts():
    """Every GPU case of this module verified once, side by side (verify_many), by id: one at a time
    the corpus took ~15 s a case, most of it waiting on torch.compile of the reference, which no test
    here reads (timing "eager": every candidate is still timed, and judged on its timing)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from distill.verifier import VerifierPool

    pairs = {f"honest:{n}": (problem(n), honest(n)) for n in MANIFEST["honest"]}
    pairs.update({f"lanes:{c[0]}": (c[1], c[2]) for c in _both_lanes()})
    with VerifierPool(workers=8, device="cuda", timeout=120, timing_trials=20, timing="eager") as p:
        return dict(zip(pairs, p.verify_many(pairs.values())))


# References whose tensors `.to("cuda")` leaves on the CPU (a plain tensor attribute, a layer in a plain
# list): their forward raises on a GPU, as it does in KernelBench's own harness, so there the problem fails
# screening, a problem-side error naming the devices (H200, 2026-11-30); the CPU lane passes the honest kernel.
CPU_ONLY_REFERENCES = ("plain_attr_scale", "list_linear")


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n in MANIFEST["honest"] if n not in CPU_ONLY_REFERENCES])
def test_the_honest_corpus_passes_on_a_gpu(gpu_verdicts, name):
    v = gpu_verdicts[f"honest:{name}"]
    assert isinstance(v, Verdict) and v.status == "pass", getattr(v, "reason", v)


@pytest.mark.gpu
@pytest.mark.parametrize("name", CPU_ONLY_REFERENCES)
def test_a_reference_that_cannot_run_on_a_gpu_is_the_problems_error_there(gpu_verdicts, name):
    from distill.verifier.reference import ScreenFailed

    v = gpu_verdicts[f"honest:{name}"]
    assert isinstance(v, ScreenFailed) and v.report.status == "broken", v
    assert "cuda:0" in str(v) and "cpu" in str(v), v


@pytest.mark.gpu
@pytest.mark.parametrize("case", _both_lanes(), ids=lambda c: c[0])
def test_a_gpu_gives_the_cpu_lanes_verdicts(gpu_verdicts, case):
    v = gpu_verdicts[f"lanes:{case[0]}"]
    assert isinstance(v, Verdict) and v.status == case[3], getattr(v, "reason", v)


def test_a_gpu_refusing_a_plain_python_function_is_a_compile_error():
    """On a GPU, Triton refuses such a kernel while hashing its dependencies, before its code generator."""
    from distill.verifier.sandbox import calls

    assert calls.describe_error(RuntimeError("Unsupported function referenced: <function f at 0x1>"))["compile"]
    assert not calls.describe_error(RuntimeError("something else"))["compile"]


def _jit_body(x_ptr):  # a JITFunction is built from this source below, whatever the lane
    pass


def test_a_sandbox_launches_wrap_triton_kernels_without_the_higher_order_operator():
    """On a GPU `wrap_triton(k)[grid](...)` goes through torch's `triton_kernel_wrapper_mutation`
    operator, which the audit's dispatch mode cannot serve (the GPU run of `wrap_triton_colsum` was
    `runtime_error`: NotImplementedError). A sandbox switches that routing off before any candidate code:
    `wrap_triton` hands back the kernel itself, whose launches the guard sees like any other."""
    import torch._library.triton as library_triton
    from triton.runtime.jit import JITFunction

    from distill.verifier.sandbox import provenance

    kernel = JITFunction(_jit_body)
    before = getattr(library_triton.wrap_triton_enabled, "value", None)
    try:
        library_triton.wrap_triton_enabled.value = True
        assert torch.library.wrap_triton(kernel) is not kernel  # the operator's wrapper: what failed on the GPU
        provenance._eager_wrap_triton()
        assert torch.library.wrap_triton(kernel) is kernel
    finally:
        if before is None:
            del library_triton.wrap_triton_enabled.value
        else:
            library_triton.wrap_triton_enabled.value = before


def test_a_warmed_up_kernel_reports_its_shared_memory_and_launches_under_the_guard(pool):
    """The fused-softmax tutorial's occupancy code on the CPU lane: `warmup` returns the GPU compile's
    shared memory (a softmax's reductions need some) and registers to divide by, and the compiled
    kernel's launch is seen like any other (else the verdict would be `not_triton`)."""
    name = "tutorial_warmup_softmax"
    strict = honest(name).replace("    if size_smem > 0:\n", "    assert size_smem > 0 and n_regs > 0, (size_smem, n_regs)\n"
                                  "    if True:\n")
    assert strict != honest(name)
    v = pool.verify(problem(name), strict)
    assert v.status == "pass", v.reason
