"""The parent's own CPU per verification of a GPU-sized problem, on the CPU lane.

On a GPU the pool's parent process ran at 106% of one core while 12 workers waited on it (RESULTS,
2026-11-29 third session): it receives, compares, keeps and judges every output, the same code on
both lanes. This verifies an elementwise sum over N float32 values (4M: the bench_verifier's GPU size)
with an honest kernel of large blocks (the interpreter runs it in a few numpy steps), K times after one
warm-up, and prints the parent's user and system CPU seconds per verification (children excluded).

    TRITON_INTERPRET=1 OMP_NUM_THREADS=1 python bench/bench_parent_cpu.py --n 4194304 --k 6
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROBLEM = '''import torch
import torch.nn as nn
N = {n}
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, a, b):
        return a + b
def get_inputs():
    return [torch.randn(N), torch.randn(N)]
def get_init_inputs():
    return []
'''
CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=m) + tl.load(b_ptr + offs, mask=m), mask=m)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 1 << 16),)](a, b, out, a.numel(), BLOCK=1 << 16)
        return out
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1 << 22, help="elements of each input and of the output")
    ap.add_argument("--k", type=int, default=6, help="verifications measured after the warm-up one")
    args = ap.parse_args()
    from distill.verifier import VerifierPool

    problem = PROBLEM.format(n=args.n)
    with VerifierPool(workers=1, device="cpu", timeout=300) as pool:
        v = pool.verify(problem, CANDIDATE)
        if v.status != "pass":
            sys.exit(f"warm-up: {v.status}: {v.reason}")
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(args.k):
            v = pool.verify(problem, CANDIDATE)
            if v.status != "pass":
                sys.exit(f"{v.status}: {v.reason}")
        r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    user, system = (r1.ru_utime - r0.ru_utime) / args.k, (r1.ru_stime - r0.ru_stime) / args.k
    print("| N | parent CPU s / verification | user | system | wall s / verification |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {args.n} | {user + system:.3f} | {user:.3f} | {system:.3f} | {(t1 - t0) / args.k:.2f} |")


if __name__ == "__main__":
    main()
