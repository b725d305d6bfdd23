"""GPU check of the pointwise kernels' block size (issue 16): the lowered elementwise kernel (one program
per BLOCK elements, flat index, masked tail) at several BLOCK and num_warps, against eager torch, on
tensors far larger than L2. Bandwidth counts one read and one write of fp32 per element.

    python3 bench/pointwise_block_gpu.py      # on the GPU box
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def log2_kernel(out_ptr, x_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.log2(x), mask=mask)


def _size(n: int) -> None:
    x = torch.rand(n, device="cuda") + 0.1
    out = torch.empty_like(x)
    ref = torch.log2(x)
    eager = triton.testing.do_bench(lambda: torch.log2(x), warmup=25, rep=200, return_mode="median")
    print(f"| {n} | torch.log2 | {eager:.3f} | {8 * n / eager / 1e6:.0f} | 1.00 |", flush=True)
    for block in (1024, 2048, 4096, 8192):
        for warps in (4, 8):
            def run(block=block, warps=warps):
                log2_kernel[(triton.cdiv(n, block),)](out, x, n, BLOCK=block, num_warps=warps)
            run()
            assert float((out - ref).abs().max()) < 1e-6
            ms = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")
            print(f"| {n} | BLOCK {block}, {warps} warps | {ms:.3f} | {8 * n / ms / 1e6:.0f} | {eager / ms:.2f} |",
                  flush=True)


def main() -> None:
    print("| n | form | ms | GB/s | vs eager |")
    print("|---:|---|---:|---:|---:|")
    for n in (79806339, 159638528):
        _size(n)

if __name__ == "__main__":
    main()
