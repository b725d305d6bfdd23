"""fp8 on the CPU lane: casts and dots as a GPU computes them, and guard bands an fp8 buffer can hold.

End to end an fp8 buffer still cannot be verified: the wire (codec.py) has no fp8 dtype, so a forward that
allocates one is a CodecError, and a problem whose output is fp8 fails screening (`isfinite` has no fp8
kernel). These are the sandbox's parts, ready for the day the wire carries fp8."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the CPU lane's interpreter")

FORMATS = [("float8e4nv", torch.float8_e4m3fn), ("float8e5", torch.float8_e5m2)]


@pytest.fixture()
def fp8_shim(monkeypatch):
    from triton.runtime import interpreter

    from distill.verifier.sandbox import interp_shims

    builder = interpreter.InterpreterBuilder
    for name in ("create_fp_to_fp", "create_dot"):
        monkeypatch.setattr(builder, name, getattr(builder, name))  # put back after the test
    interp_shims._install_fp8()


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def cast_kernel(x_ptr, q_ptr, y_ptr, N: tl.constexpr, FMT: tl.constexpr):
        o = tl.arange(0, N)
        tl.store(q_ptr + o, tl.load(x_ptr + o).to(FMT))
        tl.store(y_ptr + o, tl.load(q_ptr + o).to(tl.float32))

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
        o = tl.arange(0, N)
        a = tl.load(a_ptr + o[:, None] * N + o[None, :])
        b = tl.load(b_ptr + o[:, None] * N + o[None, :])
        tl.store(c_ptr + o[:, None] * N + o[None, :], tl.dot(a, b))

    return cast_kernel, dot_kernel


@pytest.mark.parametrize("fmt,torch_dtype", FORMATS)
def test_fp8_casts_round_to_nearest_even_keep_subnormals_and_saturate(fp8_shim, fmt, torch_dtype):
    """The interpreter's own conversion rounded a tie up (1.0625 -> 1.125 in e4m3), flushed subnormals (1e-3
    -> 0), and did not saturate; a GPU's `cvt.rn.satfinite` rounds to nearest even, keeps subnormals and
    clamps to the largest finite value."""
    import triton.language as tl

    cast_kernel, _ = _kernels()
    top = torch.finfo(torch_dtype).max
    special = [1.0625, 1.1875, 2.3, 1e-3, -1e-3, 2.0 ** -9, 3.0 * 2.0 ** -10, 1e-7, top * 0.999, top * 4, -1e9,
               float("nan"), 0.0, -0.0, 0.0123, 5.55]
    x = torch.cat([torch.tensor(special), torch.randn(240) * 40, torch.randn(256) * 1e-3]).float()
    n = x.numel()
    q = torch.empty(n, dtype=torch_dtype)
    y = torch.empty(n)
    cast_kernel[(1,)](x, q, y, N=n, FMT=getattr(tl, fmt))
    want = x.clamp(-top, top).to(torch_dtype)
    assert torch.equal(q.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(y.nan_to_num(7.0), want.float().nan_to_num(7.0))  # widening is exact


@pytest.mark.parametrize("fmt,torch_dtype", FORMATS)
def test_fp8_dots_multiply_the_exact_values(fp8_shim, fmt, torch_dtype):
    _, dot_kernel = _kernels()
    n = 16
    a = (torch.randn(n, n) * 3).to(torch_dtype)
    b = (torch.randn(n, n) * 1e-3).to(torch_dtype)  # e5m2's subnormals among them
    c = torch.empty(n, n)
    dot_kernel[(1,)](a, b, c, N=n)
    want = a.float().double() @ b.float().double()
    np.testing.assert_allclose(c.numpy(), want.float().numpy(), rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
                                   torch.float8_e5m2fnuz])
def test_guard_band_patterns_fit_fp8(dtype):
    """-777.25 and 1234.5 overflow e4m3 (largest 448): filling an fp8 buffer's bands raised, a
    runtime_error for any forward that allocated one."""
    from distill.verifier.sandbox import bands

    for inputs in (True, False):
        v = bands._pattern(dtype, inputs)
        t = torch.full((4,), v, dtype=dtype)
        assert torch.isfinite(t.float()).all() and abs(float(t[0].float()) - v) <= abs(v) / 8
    assert bands._pattern(dtype, True) != bands._pattern(dtype, False)
    assert bands._pattern(torch.float32, False) == -777.25  # wider floats keep theirs
