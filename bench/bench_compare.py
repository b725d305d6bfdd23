"""Seconds the parent's comparison of one float32 output takes (tolerance.compare, the sliced path past
tolerance.CHUNK elements), and of one call's report judged as it arrives (callstream.CallStream.add).

    OMP_NUM_THREADS=1 python bench/bench_compare.py [--gib 1.0] [--threads 1 2]

The output is the reference plus 1e-5 noise (an honest kernel's: no element past the bound), seed 0.
Run it through bench/module_ab.py to time another commit's tolerance.py in the same way.
"""
from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="the output's size in GiB (float32)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch CPU threads, one row each")
    args = ap.parse_args()
    from distill.verifier import tolerance
    from distill.verifier.callstream import CallStream

    n = int(args.gib * (1 << 28))
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(n, generator=g)
    out = ref + 1e-5 * torch.randn(n, generator=g)
    print("| GiB | threads | compare s | CallStream.add s | passed |")
    print("|---:|---:|---:|---:|---|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        ok, _ = tolerance.compare(out, ref)
        compare_s = time.perf_counter() - t0
        stream = CallStream([{"outputs": [ref], "sequence": False}], "cpu")
        call = {"kind": "trial", "trial": 0, "launches": 1, "sequence": False,
                "outputs": [{"dtype": "float32", "device": "cpu", "shape": [n], "data": out}]}
        t0 = time.perf_counter()
        stream.add(call)
        add_s = time.perf_counter() - t0
        print(f"| {args.gib:g} | {threads} | {compare_s:.2f} | {add_s:.2f} | {ok and stream.compared[0] is None} |")


if __name__ == "__main__":
    main()
