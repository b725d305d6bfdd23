"""Peak host memory of the pool's parent during one verification, against the problem's bytes (issue 31,
"judge as you go"): a ReLU over N float32 elements (N in, N out), verified with T trials on the CPU lane.

Measured two ways over the job: the growth of the parent's resident-set high-water mark (VmHWM, reset
through /proc/self/clear_refs before the job), where anonymous memory, the reply arenas' shared pages
it read and the page cache of the spilled files it mapped and read all count; and, sampled every 2 ms,
the growth of its anonymous memory (RssAnon: its own heap) and of its shared memory (RssShmem: the
children's reply arenas, counted in their plans as their encoded copies, as far as the parent read
them).

    TRITON_INTERPRET=1 .venv/bin/python bench/bench_judge_memory.py [--n 8388608] [--trials 5 12]
                                         [--arena-mib M] [--max-memory-mb MB]

--arena-mib makes the children's reply arenas smaller than the outputs, as the 1 GiB arena is beside a
GPU-sized output (6 GiB: KernelBench's ReLU): what past the arena costs the parent.
"""
from __future__ import annotations

import argparse
import threading
from dataclasses import dataclass
from typing import Any


def _kib(*fields: str) -> int:
    got = 0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.split(":", 1)[0] in fields:
                got += int(line.split()[1])
    return got


@dataclass
class Peak:
    status: str
    hwm: int    # growth of VmHWM: every resident page, mapped spill files' page cache included
    anon: int   # growth of RssAnon, sampled every 2 ms: the parent's own heap
    shmem: int  # growth of RssShmem, sampled so: the children's reply arenas, as far as the parent read them


def parent_peak(pool: Any, problem: str, candidate: str) -> Peak:
    """The parent's resident memory's growth over one verification, both ways (Peak)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current resident size
    before, base = _kib("VmRSS"), [_kib("RssAnon"), _kib("RssShmem")]
    top, done = list(base), threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            top[0], top[1] = max(top[0], _kib("RssAnon")), max(top[1], _kib("RssShmem"))

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        v = pool.verify(problem, candidate)
    finally:
        done.set()
        watcher.join()
    return Peak(v.status, (_kib("VmHWM") - before) << 10, (top[0] - base[0]) << 10, (top[1] - base[1]) << 10)


PROBLEM = """
import torch
import torch.nn as nn

N = {n}


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
"""

RELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1 << 16),)](x, y, n, BLOCK=1 << 16)
        return y
'''


def main() -> None:
    from distill.verifier import VerifierPool

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 23)
    ap.add_argument("--trials", type=int, nargs="+", default=[5, 12])
    ap.add_argument("--arena-mib", type=int, default=None, help="the reply arenas' size (default: procs.ARENA_BYTES)")
    ap.add_argument("--max-memory-mb", type=int, default=4096, help="the worker's host cap (default: 4096)")
    args = ap.parse_args()
    if args.arena_mib is not None:
        from distill.verifier import procs

        procs.ARENA_BYTES = args.arena_mib << 20
    problem_bytes = 2 * 4 * args.n
    print(f"problem bytes {problem_bytes >> 20} MiB (N={args.n} float32 in and out)")
    print("trials | status | growth in MiB (x problem bytes): VmHWM | RssAnon | RssShmem")
    for trials in args.trials:
        with VerifierPool(workers=1, device="cpu", timeout=300, trials=trials, resized="off",
                          max_memory_mb=args.max_memory_mb) as pool:
            pool.verify(PROBLEM.format(n=1024), RELU)  # warm: imports and first-use costs outside the figure
            p = parent_peak(pool, PROBLEM.format(n=args.n), RELU)
        print(f"{trials:6d} | {p.status} | " + " | ".join(f"{b / (1 << 20):7.1f} ({b / problem_bytes:.2f})"
                                                       for b in (p.hwm, p.anon, p.shmem)))


if __name__ == "__main__":
    main()
