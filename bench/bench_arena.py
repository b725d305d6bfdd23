"""What one output costs through a reply arena, per GiB: the child's `put`, the parent's `take`, the `drop`.

A workload-sized output (over the 1 GiB shared-memory arena, procs.ARENA_BYTES) goes through the
overflow (codec.Arena: a sparse file in the temp dir); smaller ones through the arena in /dev/shm. On
the H200, KernelBench's 2-4 GB problems spent 12-27 s of a run waiting for the parent's
acknowledgements (`run.reply`, seven 1-2 GiB outputs): this splits one output's trip into its steps,
in one process (the pages and their faults are the same as across two), so a change to the arena can be
judged on the machine it is for. Each variant runs `--reps` times; the table gives the least and the
median seconds per GiB (the least is the cost on a quiet machine, the median what a busy one adds).

Variants: a clone into a fresh allocation (`take (clone)`: the parent's copy before Arena.landing), the same bytes
copied into a destination that asks for transparent huge pages (`MADV_HUGEPAGE`), where the page
faults of a fresh allocation are 512x fewer, and `resident`: one arena for every trip, nothing dropped
between them, and its `take` landing where the last trip's dropped copy was (Arena.landing), so after the
first trip no page is faulted in (the least is that cost; the median, of three or more trips, too). The gap between `take (clone)` and `resident` is what
page faults cost on the machine: the question for a gVisor GPU box, where each fault is a trip
through its kernel in user space.

    OMP_NUM_THREADS=1 python bench/bench_arena.py --gib 1 --reps 5
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from distill.verifier import codec  # noqa: E402


def huge_empty(nbytes: int) -> torch.Tensor:
    """A uint8 host tensor over an anonymous mapping that asks for transparent huge pages."""
    m = mmap.mmap(-1, nbytes)
    m.madvise(mmap.MADV_HUGEPAGE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # frombuffer warns that the buffer is writable; it is ours
        return torch.frombuffer(m, dtype=torch.uint8)


def trip(folder: str, src: torch.Tensor, huge: bool) -> tuple[float, float, float]:
    """Seconds of put, take (or the huge-page copy) and drop of `src` through an arena's overflow in `folder`."""
    n = src.numel() * src.element_size()
    path = os.path.join(folder, f"bench-arena-{os.getpid()}-{os.urandom(4).hex()}")
    arena = codec.Arena(path, 2 * n + (1 << 20), create=True, align=codec.Arena.PAGE)
    try:
        t0 = time.perf_counter()
        off = arena.put(src)
        t1 = time.perf_counter()
        if huge:
            got = huge_empty(n)
            got.copy_(arena.buf[off:off + n])
        else:  # what `take` did before its landing (Arena.landing), and still does for a first call
            got = arena.buf[off:off + n].clone()
        t2 = time.perf_counter()
        arena.drop(off, n)
        t3 = time.perf_counter()
        assert torch.equal(got[:4096], codec.raw_u8(src)[:4096])
        del got
        return t1 - t0, t2 - t1, t3 - t2
    finally:
        os.unlink(path)


def trips_resident(folder: str, src: torch.Tensor, reps: int) -> list[tuple[float, float, float]]:
    """`reps` trips of `src` through one arena's overflow, no drop between, each taken with `Arena.take` (the
    parent's landing: the last trip's copy, dropped, is where the next one lands) as one command's calls are."""
    n = src.numel() * src.element_size()
    path = os.path.join(folder, f"bench-arena-{os.getpid()}-{os.urandom(4).hex()}")
    arena = codec.Arena(path, 2 * n + (1 << 20), create=True, align=codec.Arena.PAGE)
    out, got = [], None
    try:
        for _ in range(reps):
            arena.reset()
            got = None
            t0 = time.perf_counter()
            off = arena.put(src)
            t1 = time.perf_counter()
            got = arena.take(off, n)
            t2 = time.perf_counter()
            out.append((t1 - t0, t2 - t1, 0.0))
        assert torch.equal(got[:4096], codec.raw_u8(src)[:4096])
        return out
    finally:
        arena.release()
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="size of the output (float32), GiB")
    ap.add_argument("--reps", type=int, default=5, help="trips per variant")
    ap.add_argument("--device", default="cpu", help="where the output lives before `put` (cuda: a D2H copy inside put)")
    args = ap.parse_args()
    if args.gib <= 0 or args.reps < 1:
        print("--gib must be > 0 and --reps >= 1", file=sys.stderr)
        sys.exit(2)
    src = torch.ones(int(args.gib * (1 << 30)) // 4, device=args.device)
    folders = [("temp dir (the overflow's)", tempfile.gettempdir())]
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        folders.append(("/dev/shm", "/dev/shm"))
    print(f"| folder | destination | put s/GiB (least / median) | take s/GiB | drop s/GiB |  ({args.reps} trips, "
          f"{args.gib} GiB from {args.device})")
    print("|---|---|---:|---:|---:|")
    for label, folder in folders:
        for dest in ("take (clone)", "huge pages", "resident"):
            runs = trips_resident(folder, src, args.reps) if dest == "resident" else \
                [trip(folder, src, dest == "huge pages") for _ in range(args.reps)]
            cols = []
            for k in range(3):
                xs = [r[k] / args.gib for r in runs]
                cols.append(f"{min(xs):.3f} / {statistics.median(xs):.3f}")
            print(f"| {label} | {dest} | " + " | ".join(cols) + " |", flush=True)


if __name__ == "__main__":
    main()
