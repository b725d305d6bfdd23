"""GPU check of fp32 matrix-product forms for the lowering (issue 16): how fast each is and how close
to float64. The lowered matmul used `tl.dot(..., input_precision="tf32x3")` and ran a
(2435 x 4871) @ (4871 x 1722) product at about 13 TFLOP/s on an H100, a third of eager's fp32 rate.
This times, on the same tiles (128 x 128, K 32 at a time, 3 stages, 8 warps):

- tf32x3: Triton's three-TF32-product form (the operands split into high and low parts in registers);
- tf32: one TF32 product (the speed bound; about 3e-4 relative error, not fp32 accuracy);
- split_b: B split into high and low tensors beforehand (one elementwise pass), A split in registers,
  three `tl.dot`s with input_precision="tf32" on exactly representable parts, accumulated in place;
- split_b_step: the same, the three products of each K step summed in a fresh accumulator and added
  to the running sum by an fp32 add (the tensor core's own accumulation truncates: in place, the error
  grew to 3.5e-5 over K = 4871);
- split_ab: both operands split beforehand, four tile loads a step;
- ieee: fp32 FMA (no tensor cores);
- torch fp32 (eager's cuBLAS) and torch with TF32 allowed, for reference.

    python3 bench/matmul_precision_gpu.py      # on the GPU box
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

MASK = 0xFFFFE000  # fp32 bits a TF32 number keeps: sign, exponent, 10 mantissa bits


@triton.jit
def _hi(x):
    return (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def mm_kernel(a_ptr, a2_ptr, b_ptr, b2_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, FORM: tl.constexpr):
    m_tiles = tl.cdiv(M, BLOCK_M)
    n_tiles = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    group = GROUP_M * n_tiles
    first_m = (pid // group) * GROUP_M
    group_m = tl.minimum(m_tiles - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % group_m
    pid_n = (pid % group) // group_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a_off = rm[:, None] * K + rk[None, :]
        a_mask = (rm[:, None] < M) & (rk[None, :] < K)
        b_off = rk[:, None] * N + rn[None, :]
        b_mask = (rk[:, None] < K) & (rn[None, :] < N)
        a = tl.load(a_ptr + a_off, mask=a_mask, other=0.0)
        b = tl.load(b_ptr + b_off, mask=b_mask, other=0.0)
        if FORM == "tf32x3":
            acc = tl.dot(a, b, acc, input_precision="tf32x3")
        elif FORM == "tf32":
            acc = tl.dot(a, b, acc, input_precision="tf32")
        elif FORM == "ieee":
            acc = tl.dot(a, b, acc, input_precision="ieee")
        elif FORM == "split_b":
            b_lo = tl.load(b2_ptr + b_off, mask=b_mask, other=0.0)
            a_hi = _hi(a)
            a_lo = a - a_hi
            acc = tl.dot(a_lo, b, acc, input_precision="tf32")
            acc = tl.dot(a_hi, b_lo, acc, input_precision="tf32")
            acc = tl.dot(a_hi, b, acc, input_precision="tf32")
        elif FORM == "split_b_step":
            # the three products of a K step summed in a fresh accumulator, then added to acc by an
            # fp32 add: the tensor core's own accumulation truncates, and over a long K that bias grows
            b_lo = tl.load(b2_ptr + b_off, mask=b_mask, other=0.0)
            a_hi = _hi(a)
            step = tl.dot(a - a_hi, b, input_precision="tf32")
            step = tl.dot(a_hi, b_lo, step, input_precision="tf32")
            acc += tl.dot(a_hi, b, step, input_precision="tf32")
        else:  # split_ab: a, b are the high parts, a2, b2 the low ones
            a_lo = tl.load(a2_ptr + a_off, mask=a_mask, other=0.0)
            b_lo = tl.load(b2_ptr + b_off, mask=b_mask, other=0.0)
            acc = tl.dot(a_lo, b, acc, input_precision="tf32")
            acc = tl.dot(a, b_lo, acc, input_precision="tf32")
            acc = tl.dot(a, b, acc, input_precision="tf32")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    hi = (x.view(torch.int32) & torch.tensor(MASK, dtype=torch.int64).to(torch.int32)).view(torch.float32)
    return hi, x - hi


def run(form: str, a, b, bm=128, bn=128, bk=32, warps=8, stages=3):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    if form.startswith("split_b"):
        b_hi, b_lo = split(b)
        args = (a, a, b_hi, b_lo)
    elif form == "split_ab":
        a_hi, a_lo = split(a)
        b_hi, b_lo = split(b)
        args = (a_hi, a_lo, b_hi, b_lo)
    else:
        args = (a, a, b, b)
    mm_kernel[grid](*args, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, FORM=form,
                    num_warps=warps, num_stages=stages)
    return c


def forms(a: torch.Tensor, b: torch.Tensor) -> dict:
    out = {f: (lambda f=f: run(f, a, b)) for f in ("tf32x3", "tf32", "ieee")}
    out["split_b 128x64"] = lambda: run("split_b", a, b, bn=64, warps=4)
    out["split_b_step 128x64"] = lambda: run("split_b_step", a, b, bn=64, warps=4)
    out["split_b_step 128x64 bk64 s2"] = lambda: run("split_b_step", a, b, bn=64, warps=4, bk=64, stages=2)
    out["split_b_step 128x128 8w"] = lambda: run("split_b_step", a, b, warps=8)
    out["split_b_step 64x64"] = lambda: run("split_b_step", a, b, bm=64, bn=64, warps=4)
    out["torch fp32"] = lambda: a @ b
    return out


def main() -> None:
    torch.manual_seed(0)
    shapes = [(2435, 4871, 1722), (4096, 4096, 4096), (11585, 1722, 1722), (9742, 4096, 215)]
    print("| M x K x N | form | ms | TFLOP/s | rel err vs fp64 |")
    print("|---|---|---:|---:|---:|")
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        ref = a.double() @ b.double()
        flops = 2 * m * n * k
        for name, fn in forms(a, b).items():
            try:
                out = fn()
                err = ((out.double() - ref).norm() / ref.norm()).item()
                ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                print(f"| {m} x {k} x {n} | {name} | {ms:.3f} | {flops / ms / 1e9:.1f} | {err:.1e} |", flush=True)
            except Exception as exc:  # noqa: BLE001 - a form that does not compile is a row, not a stop
                print(f"| {m} x {k} x {n} | {name} | failed: {type(exc).__name__}: {str(exc)[:80]} | | |", flush=True)

if __name__ == "__main__":
    main()
