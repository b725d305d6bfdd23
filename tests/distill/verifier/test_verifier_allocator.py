"""A candidate's Triton allocator leaves with its job (issue 30: the worker's end-of-job hygiene).

`triton.set_allocator` is how an honest kernel gets the workspace of its device-side TMA descriptors, so a
candidate may call it in forward. The worker serves the next job in the same process: before, that job's
candidate found the allocator still set (a kernel needing one would pass there and fail anywhere else,
and the first candidate's function would run inside the second's launches). The worker now puts back the
allocators it started with at each job's end (seal.restore_triton_allocators).
"""
from __future__ import annotations

import os
import sys

from distill.verifier import VerifierPool

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
from bench_judge_memory import PROBLEM as RELU_OVER_N  # noqa: E402

PROBLEM = RELU_OVER_N.format(n=4096)

# Sets its own allocator in forward, as a TMA kernel does (tma_device_matmul's honest fixture).
SETS = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def alloc_fn(size, alignment, stream):
    return torch.empty(size, device="cpu", dtype=torch.int8)


class ModelNew(nn.Module):
    def forward(self, x):
        triton.set_allocator(alloc_fn)
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''

# Right only where no allocator is set: it adds 1 to every element when it finds one.
READS = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.runtime import _allocation


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0) + shift, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        unset = isinstance(_allocation._allocator.get(), _allocation.NullAllocator)
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), 0.0 if unset else 1.0, BLOCK=1024)
        return y
'''


def test_the_next_job_on_a_worker_finds_no_allocator_set():
    with VerifierPool(workers=1, device="cpu", timeout=120, resized="off") as pool:
        assert pool.verify(PROBLEM, READS, static_checks=False).status == "pass"  # a fresh worker: none set
        assert pool.verify(PROBLEM, SETS).status == "pass"
        worker = pool.fleet.slots[0].proc
        again = pool.verify(PROBLEM, READS, static_checks=False)
        assert pool.fleet.slots[0].proc is worker  # the same process served the three jobs
        assert again.status == "pass", again.reason
